"""Workflow checkpoints by ``updated_at``: the ``workflows-prune`` duty reads the lapsed
ones, oldest first, off this index instead of the whole table (checkpoints, signal
emissions and graft records of evicted workflows were never deleted before). An index
only: the table is not rewritten.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('headgate_django', '0031_mysql_effect_name_bytewise'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='workflowcheckpoint',
            index=models.Index(fields=['updated_at'], name='headgate_wf_cp_updated'),
        ),
    ]
