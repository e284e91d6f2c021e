"""Effect records lose their ``created_at`` index (0035): the ``effects-prune`` duty read
records oldest first off it, and now walks the table by primary key instead (a job's
records go with the job; the duty only finds those left behind), so the index only cost
a write per record. An index only: the table is not rewritten.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0037_durable_run_finished_index")]

    operations = [
        migrations.RemoveIndex(model_name="effect", name="headgate_effect_created"),
    ]
