"""What a one-row write to ``headgate_job`` costs PostgreSQL on every statement.

- ``running_has_lease`` becomes one comparison of two truths, ``(state = 'running') =
  (lease_id IS NOT NULL)``: the same rule (``state`` is never NULL), half the expression
  tree PostgreSQL reads back and compiles for each statement that writes a job.
- The wake-up trigger fires on ``UPDATE OF state`` only. Inserts announce an available job
  themselves, from their ``RETURNING`` (see ``store/insert.py``), which costs the server a
  fraction of a per-row trigger call.
"""

import django.db.models.lookups
from django.db import migrations, models

_TRIGGER = """
DROP TRIGGER IF EXISTS headgate_job_available ON headgate_job;
CREATE TRIGGER headgate_job_available
    AFTER {events} ON headgate_job
    FOR EACH ROW WHEN (NEW.state = 'available')
    EXECUTE FUNCTION headgate_notify_available();
"""


def _trigger(events):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(_TRIGGER.format(events=events))

    return run


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0013_job_bytewise_names")]

    operations = [
        migrations.RemoveConstraint(model_name="job", name="headgate_job_running_has_lease"),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=django.db.models.lookups.Exact(
                    django.db.models.lookups.Exact(models.F("state"), "running"),
                    django.db.models.lookups.IsNull(models.F("lease_id"), False),
                ),
                name="headgate_job_running_has_lease",
            ),
        ),
        migrations.RunPython(
            _trigger("UPDATE OF state"), _trigger("INSERT OR UPDATE OF state")
        ),
    ]
