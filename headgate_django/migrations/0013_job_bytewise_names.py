"""PostgreSQL compares job ids, queues and fingerprints byte by byte (``COLLATE "C"``).

Those columns lead the primary key, the claim index and the fingerprint index, and with
any collation but "C" PostgreSQL calls the C library's ``strcoll`` for each comparison
on the way down them. Only the collation changes, so the table is not rewritten; the
indexes on the three columns are rebuilt. Other databases are left as they are (see
``BytewiseCharField``).
"""

import headgate_django.models
from django.db import migrations

_COLUMNS = (("id", 255), ("queue", 128), ("fingerprint", 32))


def _collate(collation):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            changes = ", ".join(
                f'ALTER COLUMN "{name}" TYPE varchar({length}) COLLATE "{collation}"'
                for name, length in _COLUMNS
            )
            schema_editor.execute(f'ALTER TABLE "headgate_job" {changes}')

    return run


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0012_job_state_index_for_rare_states")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="job",
                    name="fingerprint",
                    field=headgate_django.models.BytewiseCharField(max_length=32),
                ),
                migrations.AlterField(
                    model_name="job",
                    name="id",
                    field=headgate_django.models.BytewiseCharField(
                        max_length=255, primary_key=True, serialize=False
                    ),
                ),
                migrations.AlterField(
                    model_name="job",
                    name="queue",
                    field=headgate_django.models.BytewiseCharField(
                        default="default", max_length=128
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(_collate("C"), _collate("default"))],
        ),
    ]
