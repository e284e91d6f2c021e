"""Indexes for a job table of millions of rows: lists and counts that never read every row,
and MySQL/MariaDB indexes no larger than they need to be.

- ``headgate_job_evict`` becomes ``(state, expires_at)`` over the same finished rows: the
  eviction range as before, and a count of one finished state read from the index alone.
- ``headgate_job_state_id``: the rarely-held states by ``(state, id)``, so a list of
  archived or scheduled jobs, newest first, reads one page off the index.
- ``headgate_durable_created``: the executions admin list, newest first.

MySQL/MariaDB have no partial indexes: Django creates the model's partial indexes there as
plain indexes of every row, which made twelve secondary indexes on ``headgate_job``, most
of them twins of migration 0002's. This migration drops the twins (the claim, due, lease,
eviction and fingerprint indexes without ``state`` in front, which no query names, and the
second index on ``workflow_id``), drops ``headgate_job_state_queue`` (a prefix of
``headgate_job_claim_my``), and adds ``headgate_job_state_my`` on ``state``, whose InnoDB
entries end with the primary key: the ``(state, id)`` order the lists want.
"""

from django.db import migrations, models

_EVICTABLE = ["archived", "cancelled", "completed", "undecodable"]
_OLD_EVICT = models.Index(
    condition=models.Q(("state__in", _EVICTABLE)), fields=["expires_at"], name="headgate_job_evict"
)
_NEW_EVICT = models.Index(
    condition=models.Q(("state__in", _EVICTABLE)),
    fields=["state", "expires_at"],
    name="headgate_job_evict",
)
_STATE_ID = models.Index(
    condition=models.Q(("state__in", ["available", "completed", "running"]), _negated=True),
    fields=["state", "id"],
    name="headgate_job_state_id",
)
_MYSQL_TWINS = [
    "headgate_job_claim",
    "headgate_job_claim_all",
    "headgate_job_due",
    "headgate_job_lease",
    "headgate_job_evict",
    "headgate_job_fp_waiting",
    "headgate_job_coordinators",
    "headgate_job_state_queue",
]
_MYSQL_TWIN_COLUMNS = {
    "headgate_job_claim": "(queue, priority DESC, scheduled_at, id)",
    "headgate_job_claim_all": "(priority DESC, scheduled_at, id)",
    "headgate_job_due": "(scheduled_at)",
    "headgate_job_lease": "(lease_expires_at)",
    "headgate_job_evict": "(expires_at)",
    "headgate_job_fp_waiting": "(fingerprint)",
    "headgate_job_coordinators": "(workflow_id)",
    "headgate_job_state_queue": "(state, queue)",
}


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        # The new index first, so the state lists always have one.
        schema_editor.execute("CREATE INDEX headgate_job_state_my ON headgate_job (state)")
        for name in _MYSQL_TWINS:
            schema_editor.execute(f"DROP INDEX IF EXISTS {name} ON headgate_job")
        return
    job = apps.get_model("headgate_django", "Job")
    schema_editor.add_index(job, _STATE_ID)
    schema_editor.remove_index(job, _OLD_EVICT)
    schema_editor.add_index(job, _NEW_EVICT)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        for name in _MYSQL_TWINS:
            columns = _MYSQL_TWIN_COLUMNS[name]
            schema_editor.execute(f"CREATE INDEX {name} ON headgate_job {columns}")
        schema_editor.execute("DROP INDEX headgate_job_state_my ON headgate_job")
        return
    job = apps.get_model("headgate_django", "Job")
    schema_editor.remove_index(job, _NEW_EVICT)
    schema_editor.add_index(job, _OLD_EVICT)
    schema_editor.remove_index(job, _STATE_ID)


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0014_job_one_row_costs")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="job", name="headgate_job_evict"),
                migrations.AddIndex(model_name="job", index=_NEW_EVICT),
                migrations.AddIndex(model_name="job", index=_STATE_ID),
            ],
            database_operations=[migrations.RunPython(forward, backward, atomic=False)],
        ),
        migrations.AddIndex(
            model_name="execution",
            index=models.Index(fields=["created_at", "id"], name="headgate_durable_created"),
        ),
    ]
