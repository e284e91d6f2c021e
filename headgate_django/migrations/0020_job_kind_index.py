"""Jobs by kind, and a MySQL/MariaDB fingerprint index that holds only waiting jobs.

- ``headgate_job_kind`` on ``(kind, id)``: the lists filtered by kind (``?kind=``, the
  console's kind filter) read their page, newest first, off this index. Without it they
  walk the primary key backwards and test every row, so a rare kind on a table of
  millions reads them all. On PostgreSQL ``kind`` first becomes byte-ordered
  (``COLLATE "C"``, as migration 0013 made the id, queue and fingerprint), so the same
  index serves the prefix search on kind (``LIKE 'x%'``), its order and its ranges
  whatever the database's collation. Only the collation changes: the table is not
  rewritten.
- MySQL/MariaDB: ``headgate_job_fp_my`` held ``(fingerprint, state)`` for every row,
  the largest secondary index there (a 32-character hash in each of millions of entries
  that no query reads: only waiting jobs are looked up by fingerprint, when one is
  quarantined). It becomes an index on the stored generated column ``fp_waiting``, the
  fingerprint while the job waits and NULL after, as ``unique_live`` emulates a partial
  unique index. PostgreSQL and SQLite keep their partial ``headgate_job_fp_waiting``.
"""

import headgate_django.models
from django.db import migrations, models

_WAITING = "'available', 'pending', 'retryable', 'scheduled'"


def _kind_collation(collation):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(
                f'ALTER TABLE "headgate_job" ALTER COLUMN "kind" TYPE varchar(128) '
                f'COLLATE "{collation}"'
            )

    return run


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    schema_editor.execute(
        "ALTER TABLE headgate_job ADD COLUMN fp_waiting varchar(32) GENERATED ALWAYS AS "
        f"(CASE WHEN state IN ({_WAITING}) THEN fingerprint ELSE NULL END) STORED, "
        "ADD INDEX headgate_job_fp_waiting_my (fp_waiting), "
        "DROP INDEX headgate_job_fp_my"
    )


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    schema_editor.execute(
        "ALTER TABLE headgate_job ADD INDEX headgate_job_fp_my (fingerprint, state), "
        "DROP INDEX headgate_job_fp_waiting_my, DROP COLUMN fp_waiting"
    )


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0019_workers")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="job",
                    name="kind",
                    field=headgate_django.models.BytewiseCharField(max_length=128),
                ),
            ],
            database_operations=[
                migrations.RunPython(_kind_collation("C"), _kind_collation("default"))
            ],
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["kind", "id"], name="headgate_job_kind"),
        ),
        # Not atomic: MySQL cannot roll DDL back (elsewhere it does nothing).
        migrations.RunPython(forward, backward, atomic=False),
    ]
