"""MySQL/MariaDB: drop ``headgate_job_fair``, a full copy of what ``headgate_job_fair_my`` holds.

Django creates a partial index as a plain index of every row where the database has no
partial indexes, so migration 0023 left MySQL/MariaDB with two fairness indexes: the
model's ``headgate_job_fair`` on ``(queue, partition_key, priority, scheduled_at, id)``
for every job, and ``headgate_job_fair_my`` on the generated column that is the queue
only while a job waits. The fair claim names the second (``store.fairness``); nothing reads
the first, which took 146 MB of 1.2 GB of indexes on a table of 2.5 million jobs and an
entry to write on every claim and acknowledgement. The model keeps the index, as
PostgreSQL and SQLite have it (partial there).
"""

from django.db import migrations

_COLUMNS = "(queue, partition_key, priority DESC, scheduled_at, id)"


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute("DROP INDEX IF EXISTS headgate_job_fair ON headgate_job")


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute(f"CREATE INDEX headgate_job_fair ON headgate_job {_COLUMNS}")


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0028_governed_claim_function")]

    # Not atomic: MySQL cannot roll DDL back (elsewhere it does nothing).
    operations = [migrations.RunPython(forward, backward, atomic=False)]
