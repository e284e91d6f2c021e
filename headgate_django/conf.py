"""The ``HEADGATE`` settings dict, read through one table of defaults.

Unknown keys are an error (a typo must not silently fall back to a default); values are
re-read when a test changes settings. Cross-field rules are system checks (``checks.py``).
"""

from __future__ import annotations

import difflib
from datetime import timedelta
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed

from headgate_django.exceptions import ConfigurationError

DEFAULTS: dict[str, Any] = {
    # Leases: how long a claim lives without renewal, and how often workers renew.
    "LEASE_TTL": timedelta(seconds=30),
    "RENEW_INTERVAL": None,  # None: LEASE_TTL / 3
    # Crashes (expired leases) before a fingerprint is quarantined.
    "CRASH_LIMIT": 3,
    "MAX_ATTEMPTS": 25,
    # Backoff: min(BACKOFF_CAP, BACKOFF_BASE * 2**attempt) + jitter in [0, BACKOFF_BASE).
    "BACKOFF_BASE": timedelta(seconds=1),
    "BACKOFF_CAP": timedelta(hours=1),
    # Crash backoff: a reclaimed job goes to the back of its queue by this much.
    "CRASH_BACKOFF": timedelta(seconds=1),
    "RETENTION": timedelta(days=7),
    "MAX_PAYLOAD_BYTES": 1024 * 1024,
    "MAX_RESULT_BYTES": 32 * 1024 * 1024,
    "MAX_BATCH": 1000,
    # Worker loop. A claim and an ack each cost a statement and a commit whatever their size,
    # so short jobs are claimed in large batches; a worker never claims more than its free
    # handler slots plus about 0.1 s of their work (worker.claim_size).
    "CLAIM_BATCH": 500,
    "IDLE_BACKOFF_MIN": timedelta(milliseconds=50),
    "IDLE_BACKOFF_MAX": timedelta(seconds=2),
    "SHUTDOWN_TIMEOUT": timedelta(seconds=25),
    "STATUS_INTERVAL": timedelta(seconds=5),
    "DUTY_INTERVAL": timedelta(seconds=1),
    # Worker registry: each worker upserts its row this often; one that misses 3 beats is
    # shown as gone, and rows not refreshed for WORKER_RETENTION are deleted.
    "WORKER_HEARTBEAT": timedelta(seconds=5),
    "WORKER_RETENTION": timedelta(hours=1),
    "EVICT_BATCH": 1000,
    # One eviction pass deletes batch after batch while they come back full, for at most
    # this long; with rows still left it runs again on the worker's next duty tick.
    "EVICT_BUDGET": timedelta(seconds=1),
    # While jobs wait to be claimed, an eviction pass keeps to this share of its time and
    # pauses for the rest after each batch (1: never pause). See store.job_evict_pass.
    "EVICT_BUSY_SHARE": 0.1,
    "LISTEN_NOTIFY": True,
    # PostgreSQL: prepare the store's hot statements on the server (psycopg's prepared
    # statements). None: yes, unless the alias says it sits behind a transaction pooler
    # (DISABLE_SERVER_SIDE_CURSORS, or LISTEN_USING naming another alias) or sets
    # OPTIONS["prepare_threshold"] or "server_side_binding" itself. True / False: always / never.
    "PREPARE_STATEMENTS": None,
    # The DATABASES alias the LISTEN sessions connect through (None: the worker's own). Behind
    # a transaction-pooling proxy, an alias that reaches PostgreSQL directly keeps wake-ups.
    "LISTEN_USING": None,
    # The DATABASES alias of a read replica for the console's and API's list and detail
    # reads (headgate_django.replicas: its middleware and router must be installed).
    "READ_REPLICA": None,
    # SQLite has no NOTIFY: an idle worker checks PRAGMA data_version this often (None: poll).
    "SQLITE_WAKE_INTERVAL": timedelta(milliseconds=5),
    # Queues a worker serves when --queue is not given: None means every queue.
    "QUEUES": None,
    # Workflows.
    "WORKFLOW_QUEUE": "headgate-workflow",
    "COORDINATOR_POLL": timedelta(seconds=1),
    # A finishing child wakes its coordinator in the same transaction (off: poll only).
    "WORKFLOW_EVENT_WAKE": True,
    "WORKFLOW_RETENTION": timedelta(days=7),
    # Durable executions.
    "DURABLE_RETENTION": timedelta(days=30),
    # Attempts of a workflow task whose pass fails (a replay error, a crash) before its
    # execution is suspended for an operator.
    "DURABLE_TASK_ATTEMPTS": 5,
    # A run whose history passes either threshold logs one warning and shows it on the
    # execution, suggesting ctx.continue_as_new.
    "DURABLE_HISTORY_WARN_EVENTS": 10_000,
    "DURABLE_HISTORY_WARN_BYTES": 10 * 1024 * 1024,
    # Modules named like this in each installed app are imported so @task runs.
    "AUTODISCOVER_MODULES": ["tasks"],
    # Periodic schedules (headgate_django.schedules). Declared schedules, synced by every
    # starting worker: name → {"task"|"workflow"|"durable": …, "spec": …, …}.
    "SCHEDULES": {},
    # A due tick older than this when the scheduler reaches it was missed (its on_missed
    # applies); younger ones always fire. Covers a scheduler takeover (a duty lease).
    "SCHEDULE_GRACE": timedelta(seconds=60),
    # Due schedules one scheduler batch reads and fires.
    "SCHEDULE_BATCH": 500,
    # A task tick's job is written up to this long before its instant, as a job scheduled
    # for the tick: the scheduler's work is done before the tick, not after (0: at the tick).
    "SCHEDULE_LOOKAHEAD": timedelta(seconds=5),
    # Admission policies (headgate_django.admission), applied by every starting worker over
    # whatever the store holds for the same names; runtime changes may follow.
    # Rate classes: name → {"limit": n, "window": timedelta or seconds, "burst"?, "paused"?}.
    "RATE_CLASSES": {},
    # Concurrency ceilings: queue → n, or {"max_concurrent": n, "on_saturated": …}.
    "CONCURRENCY_LIMITS": {},
    # Producer backpressure: queue → max unfinished jobs (0 closes intake).
    "BACKPRESSURE": {},
    # Tenant fairness: queue → True, or {"quantum": n, "credit_cap": n} (10 and 40).
    "FAIRNESS": {},
    # Queue weights between the queues a worker serves: queue → integer ≥ 1.
    "QUEUE_WEIGHTS": {},
    # Death handler for every kind without its own @task(on_death=...): a callable or its
    # dotted path, called with a DeathNotice once per archive (headgate_django.deaths).
    "ON_DEATH": None,
    # Bulk operator actions (headgate_django.bulk): never more jobs than BULK_MAX_JOBS in
    # one action; above BULK_SYNC_LIMIT it runs as an internal job on BULK_QUEUE.
    "BULK_MAX_JOBS": 10_000,
    "BULK_SYNC_LIMIT": 1000,
    "BULK_QUEUE": "headgate-bulk",
    # Payload encryption (headgate_django.kernel.sealed; the [encryption] extra): key id →
    # 32-byte key (bytes or base64 text), and the id new payloads are sealed with (None:
    # off). Old ids stay in the ring for the jobs sealed with them.
    "ENCRYPTION_KEYS": {},
    "ENCRYPTION_KEY_ID": None,
    # Console: live sockets one user may hold open in one ASGI process (each polls the
    # database); more are closed with code 4429.
    "CONSOLE_MAX_SOCKETS_PER_USER": 20,
    # Prometheus (headgate_django.metrics): the queues a scrape reports per queue, the
    # first ones by name; headgate_queues_omitted counts the rest.
    "METRICS_MAX_QUEUES": 100,
    # HTTP control API (headgate_django.api).
    # Answer every mutation 403 "read_only" (reads keep working).
    "API_READ_ONLY": False,
    # Dotted paths of DRF authentication classes for the API; None: DRF's
    # REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"].
    "API_AUTHENTICATION_CLASSES": None,
    # Let unauthenticated callers (load balancers, probes) reach healthz and readyz.
    "API_PUBLIC_HEALTH": False,
    # Request bodies larger than this are refused with 413 before they are read.
    "API_MAX_BODY_BYTES": 2 * 1024 * 1024,
    # How long a mutation's response is replayed for the same Idempotency-Key.
    "IDEMPOTENCY_TTL": timedelta(hours=24),
}


def _with_guess(key: object) -> str:
    """``key``, and the known setting it is most likely a misspelling of, if any."""
    guess = difflib.get_close_matches(str(key).upper(), DEFAULTS, n=1)
    return f"{key} (did you mean {guess[0]}?)" if guess else str(key)


class HeadgateSettings:
    """Attribute access to ``settings.HEADGATE`` merged over :data:`DEFAULTS`."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        user = getattr(django_settings, "HEADGATE", {}) or {}
        if not isinstance(user, dict):
            raise ConfigurationError("settings.HEADGATE must be a dict")
        unknown = sorted(set(user) - set(DEFAULTS), key=str)
        if unknown:
            raise ConfigurationError(
                f"Unknown HEADGATE setting(s): {', '.join(map(_with_guess, unknown))}. "
                f"Known settings: {', '.join(sorted(DEFAULTS))}."
            )
        return {**DEFAULTS, **user}

    def __getattr__(self, name: str) -> Any:
        """Called only for a setting not read since the last reload: the value is then kept
        as an instance attribute, so the hot paths (every enqueue and claim reads a few)
        find it without coming here."""
        if name.startswith("_"):
            raise AttributeError(name)
        if self._cache is None:
            self._cache = self._load()
        try:
            value = self._cache[name]
        except KeyError:
            raise AttributeError(f"No HEADGATE setting {name!r}") from None
        self.__dict__[name] = value
        return value

    @property
    def renew_interval(self) -> timedelta:
        return self.RENEW_INTERVAL or self.LEASE_TTL / 3

    def reload(self) -> None:
        self.__dict__.clear()
        self._cache = None


headgate_settings = HeadgateSettings()


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "HEADGATE":
        headgate_settings.reload()


setting_changed.connect(_on_setting_changed)
