"""A schedule's pause count becomes its edit count: every edit that pauses or resumes it
or changes its spec, zone, target or next run counts, so a scheduler pass that lost its
tick to a spec changed and changed back before its commit says so (not "fired by another
pass"), as it already did for a pause and a resume. The pauses counted so far carry over:
a pass only compares the count with the one it read."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0039_schedule_pauses")]

    operations = [
        migrations.RenameField(model_name="schedule", old_name="pauses", new_name="revision"),
        migrations.AlterField(
            model_name="schedule",
            name="revision",
            field=models.PositiveBigIntegerField(
                default=0,
                help_text="How many times an edit paused it, resumed it or changed its spec, "
                "zone, target or next run: a scheduler pass that read another count lost its "
                "ticks to an edit, even one undone before its commit.",
            ),
        ),
    ]
