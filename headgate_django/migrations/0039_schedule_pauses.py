"""A schedule's pause count: a scheduler pass compares it at commit, so a tick lost to a
pause and a resume between the pass's read and its commit says so (not "fired by another
pass")."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0038_drop_effect_created_index")]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="pauses",
            field=models.PositiveBigIntegerField(
                default=0,
                help_text="How many times it was paused: a scheduler pass that read fewer "
                "lost its ticks to a pause, even when a resume came before its commit.",
            ),
        ),
    ]
