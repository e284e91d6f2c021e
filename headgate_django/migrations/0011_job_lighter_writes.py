"""Less work for PostgreSQL on every statement that writes a job.

PostgreSQL reads each CHECK constraint and each generated column's expression back from
the catalog for every statement that writes the table: a one-row enqueue paid it on every
call, and every claim and ack once per statement. Two sources go:

- the ``>= 0`` checks that ``PositiveIntegerField`` gave ``schema_version``, ``attempt``,
  ``crash_attempt`` and ``max_attempts``. Only the store writes them, and enqueue validates
  them; the fields keep validators for forms and the admin.
- the stored generated column ``unique_live`` (the unique key while the job is live), on
  the databases with partial indexes. A partial unique index over ``unique_key`` for live
  jobs enforces the same rule with no column. It is created before the old index goes, so
  unique keys are enforced throughout.

MySQL/MariaDB have no partial indexes, so they keep the generated column and the plain
unique index of migration 0009; only Django's view of the model loses the field there.
"""

from django.core.validators import MinValueValidator
from django.db import migrations, models

_OLD = "headgate_job_unique_live"
_NEW = models.UniqueConstraint(
    fields=["unique_key"],
    condition=models.Q(
        ("state__in", ["available", "pending", "retryable", "running", "scheduled"]),
        ("unique_key__isnull", False),
    ),
    name="headgate_job_unique_key_live",
)


def _old_parts(apps):
    job = apps.get_model("headgate_django", "Job")
    [old] = [c for c in job._meta.constraints if c.name == _OLD]
    return job, old, job._meta.get_field("unique_live")


def swap_forward(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        return
    job, old, column = _old_parts(apps)
    schema_editor.add_constraint(job, _NEW)
    schema_editor.remove_constraint(job, old)
    schema_editor.remove_field(job, column)


def swap_backward(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        return
    job, old, column = _old_parts(apps)
    schema_editor.add_field(job, column)
    # SQLite cannot add a stored generated column in place: it rebuilds the table from the
    # old model, which brings the old constraint back with it.
    with schema_editor.connection.cursor() as cursor:
        existing = schema_editor.connection.introspection.get_constraints(cursor, "headgate_job")
    if old.name not in existing:
        schema_editor.add_constraint(job, old)
    if _NEW.name in existing:
        schema_editor.remove_constraint(job, _NEW)


def _counter(help_text):
    return models.IntegerField(
        default=0,
        help_text=help_text,
        validators=[MinValueValidator(0)],
    )


def _at_least_one(default):
    return models.IntegerField(default=default, validators=[MinValueValidator(1)])


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0010_postgres_claim_function")]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="schema_version",
            field=_at_least_one(1),
        ),
        migrations.AlterField(
            model_name="job",
            name="attempt",
            field=_counter("Failed attempts so far."),
        ),
        migrations.AlterField(
            model_name="job",
            name="crash_attempt",
            field=_counter("Lost leases so far."),
        ),
        migrations.AlterField(
            model_name="job",
            name="max_attempts",
            field=_at_least_one(25),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="job", name=_OLD),
                migrations.RemoveField(model_name="job", name="unique_live"),
                migrations.AddConstraint(model_name="job", constraint=_NEW),
            ],
            database_operations=[
                # Not atomic: MySQL cannot roll DDL back (there it does nothing anyway).
                migrations.RunPython(swap_forward, swap_backward, atomic=False),
            ],
        ),
    ]
