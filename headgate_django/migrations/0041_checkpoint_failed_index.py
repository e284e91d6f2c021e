"""An index on the checkpoints' failed flag and workflow id: the console's list of failed
workflows, in workflow-id order, read every checkpoint to find the few that failed."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0040_schedule_revision")]

    operations = [
        migrations.AddIndex(
            model_name="workflowcheckpoint",
            index=models.Index(fields=["failed", "workflow_id"], name="headgate_wf_cp_failed"),
        ),
    ]
