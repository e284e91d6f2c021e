"""Ended runs by ``finished_at``: ``durable-vacuum`` prunes the runs an execution that
continues as new leaves behind, oldest first, off this index. An index only."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0036_mysql_job_id_bytewise")]

    operations = [
        migrations.AddIndex(
            model_name="executionrun",
            index=models.Index(fields=["finished_at"], name="headgate_durable_run_done"),
        ),
    ]
