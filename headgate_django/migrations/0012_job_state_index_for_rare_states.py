"""Fewer index entries per job: the (state, queue) index leaves out the bulk states.

Every insert, claim and ack writes a new row version whose state changed, so each full
index takes an entry on every one of them. ``headgate_job_state_queue`` served the lists
and counts of jobs by state, which matter for the states few jobs are in (scheduled,
retryable, archived, quarantined, …); available, running and completed jobs, nearly every
row, are found through the claim, lease and eviction indexes. The new index is partial, so
a job that is enqueued, run and completed writes no entry into it. In a drain on
PostgreSQL that was two of the six index entries each job cost.

MySQL/MariaDB have no partial indexes: Django would skip the new one there, so they keep
the plain index, and only Django's view of the model changes.
"""

from django.db import migrations, models

_OLD = "headgate_job_state_queue"
_NEW = models.Index(
    condition=models.Q(("state__in", ["available", "completed", "running"]), _negated=True),
    fields=["state", "queue"],
    name="headgate_job_state_rare",
)


def _swap(forward):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "mysql":
            return
        job = apps.get_model("headgate_django", "Job")
        [old] = [index for index in job._meta.indexes if index.name == _OLD]
        add, remove = (_NEW, old) if forward else (old, _NEW)
        schema_editor.add_index(job, add)  # first, so the queries always have an index
        schema_editor.remove_index(job, remove)

    return run


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0011_job_lighter_writes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="job", name=_OLD),
                migrations.AddIndex(model_name="job", index=_NEW),
            ],
            database_operations=[
                migrations.RunPython(_swap(True), _swap(False), atomic=False),
            ],
        ),
    ]
