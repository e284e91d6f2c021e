"""Parked schedules: ``plan_error`` says why the scheduler could not compute a schedule's
ticks (a zone gone from the tz database, a spec written by hand), and an event of outcome
``parked`` records it.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('headgate_django', '0032_workflow_checkpoint_updated_index'),
    ]

    operations = [
        migrations.AddField(
            model_name='schedule',
            name='plan_error',
            field=models.CharField(blank=True, default='', help_text='Why the scheduler parked it (its ticks cannot be computed); empty if not.', max_length=255),
        ),
        migrations.AlterField(
            model_name='scheduleevent',
            name='outcome',
            field=models.CharField(choices=[('enqueued', 'enqueued'), ('deduplicated', 'deduplicated'), ('failed', 'failed'), ('skipped', 'skipped'), ('parked', 'parked')], max_length=16),
        ),
    ]
