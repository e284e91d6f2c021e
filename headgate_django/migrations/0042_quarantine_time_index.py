"""An index on when a fingerprint was quarantined: the console's quarantine list, newest
first, sorted every row, and its window (a searched list) needs the order's index."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0041_checkpoint_failed_index")]

    operations = [
        migrations.AddIndex(
            model_name="quarantine",
            index=models.Index(fields=["quarantined_at"], name="headgate_quarantine_at"),
        ),
    ]
