"""``headgate_job.logs``: what handlers logged with ``ctx.log``, per attempt, saved with
the attempt's outcome (see ``store/attempt_logs.py``); ``headgate_job.trace_context``: the
enqueuing span's W3C headers (``headgate_django.tracing``). Both nullable with no default,
so adding them rewrites no row and an insert that does not name them costs nothing more."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0024_runtime_a")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="trace_context",
            field=models.JSONField(
                blank=True, help_text="W3C trace context of the enqueue (traceparent).", null=True
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="logs",
            field=models.JSONField(
                blank=True,
                help_text="ctx.log entries of the newest attempts that logged.",
                null=True,
            ),
        ),
    ]
