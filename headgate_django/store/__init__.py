"""The only code that talks to the database.

Entity-first verbs, one per state change (``job_insert_many``, ``job_claim``,
``job_complete_many``, ``job_renew_leases``, ``job_reclaim_expired`` …). Every write a
worker makes is fenced on ``(id, lease_id, fence, state='running')``; every deciding
instant comes from the database clock. Vendor differences live in :mod:`.vendor`.
"""

from headgate_django.store.admission import rate_bucket_reconcile
from headgate_django.store.admitted import configured_rate_classes
from headgate_django.store.claim import ClaimedJob, job_available, job_claim
from headgate_django.store.duties import duty_acquire, duty_release
from headgate_django.store.fenced import (
    LeaseRef,
    Renewal,
    job_complete_many,
    job_mark_undecodable,
    job_release_many,
    job_renew_free_leases,
    job_renew_leases,
    job_retry,
    job_revoke,
    job_save_checkpoint,
    job_save_progress,
    job_save_result,
    job_set_cursor,
    job_skip,
    job_snooze,
)
from headgate_django.store.insert import job_insert_many
from headgate_django.store.maintenance import (
    UNKNOWN_COUNTED_UP_TO,
    EvictionPass,
    job_evict_pass,
    job_evict_retained,
    job_eviction_backlog,
    job_promote_due,
    job_reclaim_expired,
    unknown_kinds_waiting,
)
from headgate_django.store.operator import (
    job_cancel,
    job_delete,
    job_operator_retry,
    job_promote,
    job_replace_payload,
    job_reschedule,
    quarantine_release,
    queue_set_paused,
)
from headgate_django.store.schema import schema_problem
from headgate_django.store.unique_modes import Inserted, job_insert_one, unique_window_evict
from headgate_django.store.vendor import db_now

__all__ = [
    "UNKNOWN_COUNTED_UP_TO",
    "ClaimedJob",
    "EvictionPass",
    "Inserted",
    "LeaseRef",
    "Renewal",
    "configured_rate_classes",
    "db_now",
    "duty_acquire",
    "duty_release",
    "job_available",
    "job_cancel",
    "job_claim",
    "job_complete_many",
    "job_delete",
    "job_evict_pass",
    "job_evict_retained",
    "job_eviction_backlog",
    "job_insert_many",
    "job_insert_one",
    "job_mark_undecodable",
    "job_operator_retry",
    "job_promote",
    "job_promote_due",
    "job_reclaim_expired",
    "job_release_many",
    "job_renew_free_leases",
    "job_renew_leases",
    "job_replace_payload",
    "job_reschedule",
    "job_retry",
    "job_revoke",
    "job_save_checkpoint",
    "job_save_progress",
    "job_save_result",
    "job_set_cursor",
    "job_skip",
    "job_snooze",
    "quarantine_release",
    "queue_set_paused",
    "rate_bucket_reconcile",
    "schema_problem",
    "unique_window_evict",
    "unknown_kinds_waiting",
]
