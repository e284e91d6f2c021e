"""MySQL and MariaDB have no partial indexes, so Django skips the conditional ones declared
on ``Job``. This migration gives them plain composite equivalents; on other databases it
does nothing."""

from django.db import migrations

_INDEXES = {
    # Claims order by priority DESC, scheduled_at, id: an index in that order lets each
    # claim read (and lock) only the rows it takes, instead of sorting and locking every
    # available row, which starves concurrent claimers.
    "headgate_job_claim_my": "(state, queue, priority DESC, scheduled_at, id)",
    "headgate_job_claim_all_my": "(state, priority DESC, scheduled_at, id)",
    "headgate_job_due_my": "(state, scheduled_at)",
    "headgate_job_lease_my": "(state, lease_expires_at)",
    "headgate_job_evict_my": "(state, expires_at)",
    "headgate_job_fp_my": "(fingerprint, state)",
}


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    for name, columns in _INDEXES.items():
        schema_editor.execute(f"CREATE INDEX {name} ON headgate_job {columns}")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    for name in _INDEXES:
        schema_editor.execute(f"DROP INDEX {name} ON headgate_job")


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("headgate_django", "0001_initial")]
    operations = [migrations.RunPython(create, drop)]
