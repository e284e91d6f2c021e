"""PostgreSQL only: notify ``headgate_wakeup`` (payload: the queue) whenever a job becomes
available, so idle workers start it at once instead of at their next poll. Notifications
are sent at commit and de-duplicated per transaction, so a batch of 1,000 jobs in one queue
sends one."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION headgate_notify_available() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('headgate_wakeup', NEW.queue);
    RETURN NULL;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER headgate_job_available
    AFTER INSERT OR UPDATE OF state ON headgate_job
    FOR EACH ROW WHEN (NEW.state = 'available')
    EXECUTE FUNCTION headgate_notify_available();
"""
DROP = """
DROP TRIGGER IF EXISTS headgate_job_available ON headgate_job;
DROP FUNCTION IF EXISTS headgate_notify_available();
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0002_mysql_indexes")]
    operations = [migrations.RunPython(create, drop)]
