"""``headgate_job.awaited`` (and on PostgreSQL a notification when an awaited job
finishes), and ``output``/``output_updated_at`` for ``ctx.set_output``.

``enqueue_and_wait`` sets the flag in the enqueue's transaction and listens on channel
``headgate_finished`` (payload: the job id). The triggers' ``WHEN`` reads the flag before
any function runs, so a job nobody waits for costs its ack one boolean test per row and
sends nothing. A finish that the trigger cannot see is found by the waiter's periodic read.
"""

from django.db import migrations, models

_TERMINAL = "'archived', 'cancelled', 'completed', 'quarantined', 'undecodable'"

CREATE = f"""
CREATE OR REPLACE FUNCTION headgate_notify_finished() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('headgate_finished', OLD.id);
    ELSE
        PERFORM pg_notify('headgate_finished', NEW.id);
    END IF;
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER headgate_job_finished
    AFTER UPDATE OF state ON headgate_job
    FOR EACH ROW WHEN (NEW.awaited AND NEW.state IN ({_TERMINAL}))
    EXECUTE FUNCTION headgate_notify_finished();
CREATE TRIGGER headgate_job_finished_deleted
    AFTER DELETE ON headgate_job
    FOR EACH ROW WHEN (OLD.awaited)
    EXECUTE FUNCTION headgate_notify_finished();
"""
DROP = """
DROP TRIGGER IF EXISTS headgate_job_finished ON headgate_job;
DROP TRIGGER IF EXISTS headgate_job_finished_deleted ON headgate_job;
DROP FUNCTION IF EXISTS headgate_notify_finished();
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0020_job_kind_index")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="awaited",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="A caller waits for this job to finish.",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="output",
            field=models.BinaryField(
                blank=True, help_text="The handler's latest ctx.set_output().", null=True
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="output_updated_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(create, drop),
    ]
