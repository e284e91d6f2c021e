"""Signal emissions by ``emitted_at`` and graft records by ``decided_at``: the
``workflows-prune`` duty reads the lapsed records of workflows that never wrote a
checkpoint (cancelled before their coordinator's first tick) off these indexes, oldest
first, instead of reading the tables. Indexes only: the tables are not rewritten.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0033_schedule_plan_error")]

    operations = [
        migrations.AddIndex(
            model_name="signalemission",
            index=models.Index(fields=["emitted_at"], name="headgate_signal_emitted"),
        ),
        migrations.AddIndex(
            model_name="graft",
            index=models.Index(fields=["decided_at"], name="headgate_graft_decided"),
        ),
    ]
