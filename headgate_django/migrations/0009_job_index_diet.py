"""Fewer index entries per job write.

A claim or an ack changes ``state``, so it is never a HOT update: every full index of
``headgate_job`` takes a new entry on every insert, claim and ack. Four of them served
almost no job: the unique-key index (NULL for most jobs), the two ``workflow_id`` indexes
(NULL for plain jobs) and PostgreSQL's ``varchar_pattern_ops`` twin of the primary key
(the only prefix search on ids, the API's ``search``, also matches kinds, which no index
serves, so it never used it). They become partial indexes that only rows with a value
enter, plus a small index of coordinators for the workflow lists. MySQL/MariaDB have no
partial indexes: Django creates the two new indexes there without their conditions, and
skips the conditional unique constraint, so this migration gives them a plain unique index
(it admits any number of NULLs), created before the old one goes so that unique keys are
enforced throughout.
"""

from django.db import migrations, models

_MYSQL_UNIQUE = "headgate_job_unique_live_my"
_PG_ID_LIKE = "headgate_job_id_f71849f3_like"  # the name Django gave it in 0001


def mysql_create(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute(f"CREATE UNIQUE INDEX {_MYSQL_UNIQUE} ON headgate_job (unique_live)")


def mysql_drop(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute(f"DROP INDEX {_MYSQL_UNIQUE} ON headgate_job")


def pg_drop_id_like(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {_PG_ID_LIKE}")


def pg_create_id_like(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {_PG_ID_LIKE} ON headgate_job (id varchar_pattern_ops)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("headgate_django", "0008_claim_index_all_queues"),
    ]

    operations = [
        # Not atomic: MySQL cannot roll DDL back, and Django refuses DDL inside a transaction.
        migrations.RunPython(mysql_create, mysql_drop, atomic=False),
        migrations.RunPython(pg_drop_id_like, pg_create_id_like),
        migrations.RemoveConstraint(
            model_name="job",
            name="headgate_job_unique_live",
        ),
        migrations.AlterField(
            model_name="job",
            name="workflow_id",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("workflow_id__isnull", False)),
                fields=["workflow_id"],
                name="headgate_job_workflow",
                opclasses=["varchar_pattern_ops"],
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("kind", "headgate:workflow")),
                fields=["workflow_id"],
                name="headgate_job_coordinators",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(("unique_live__isnull", False)),
                fields=("unique_live",),
                name="headgate_job_unique_live",
            ),
        ),
    ]
