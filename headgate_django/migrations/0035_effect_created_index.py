"""Effect records by ``created_at``: the ``effects-prune`` duty reads them oldest first
off this index (the records of evicted jobs come first) instead of reading the table, or
MySQL/MariaDB the whole ``(job_id, name)`` index, in no order. An index only: the table
is not rewritten.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0034_workflow_records_time_indexes")]

    operations = [
        migrations.AddIndex(
            model_name="effect",
            index=models.Index(fields=["created_at"], name="headgate_effect_created"),
        ),
    ]
