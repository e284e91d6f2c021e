"""Tenant fairness and queue weights (``headgate_django.admission``).

- ``headgate_fairness``: a fair queue's quantum, credit cap and where its round-robin
  stands; ``headgate_partition_deficit``: the credit partitions carry between visits.
- ``headgate_queue_state.weight`` / ``.dispatched``: a queue's weight and its ledger for
  weighted-fair selection between queues.
- ``headgate_job_fair``: waiting jobs by (queue, partition, claim order), the index a fair
  claim walks (its partitions in key order, then each one's jobs). Partial on PostgreSQL
  and SQLite, so only waiting rows enter it. MySQL/MariaDB have no partial indexes: the
  stored generated column ``fair_queue`` is the queue while the job is available and NULL
  after, and ``headgate_job_fair_my`` indexes it, so a claimed or finished job's entry sits
  under NULL and later state changes do not move it.

The PostgreSQL claim function is unchanged: fair and weighted queues are governed
(``headgate_queue_state.admission``), which it already leaves out.
"""

import django.core.validators
import headgate_django.models
from django.db import migrations, models


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    schema_editor.execute(
        "ALTER TABLE headgate_job ADD COLUMN fair_queue varchar(128) GENERATED ALWAYS AS "
        "(CASE WHEN state = 'available' THEN queue ELSE NULL END) STORED, "
        "ADD INDEX headgate_job_fair_my "
        "(fair_queue, partition_key, priority DESC, scheduled_at, id)"
    )


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    schema_editor.execute(
        "ALTER TABLE headgate_job DROP INDEX headgate_job_fair_my, DROP COLUMN fair_queue"
    )


class Migration(migrations.Migration):

    dependencies = [
        ('headgate_django', '0022_claim_by_tid'),
    ]

    operations = [
        migrations.CreateModel(
            name='Fairness',
            fields=[
                ('queue', models.CharField(max_length=128, primary_key=True, serialize=False)),
                ('quantum', models.IntegerField(default=10, validators=[django.core.validators.MinValueValidator(1)])),
                ('credit_cap', models.IntegerField(default=40, validators=[django.core.validators.MinValueValidator(0)])),
                ('turn', headgate_django.models.BytewiseCharField(blank=True, max_length=128, null=True)),
                ('credit', models.IntegerField(default=0)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'verbose_name_plural': 'fairness',
                'db_table': 'headgate_fairness',
                'ordering': ['queue'],
            },
        ),
        migrations.CreateModel(
            name='PartitionDeficit',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('queue', headgate_django.models.BytewiseCharField(max_length=128)),
                ('partition_key', headgate_django.models.BytewiseCharField(max_length=128)),
                ('deficit', models.IntegerField(validators=[django.core.validators.MinValueValidator(1)])),
            ],
            options={
                'db_table': 'headgate_partition_deficit',
                'ordering': ['queue', 'partition_key'],
            },
        ),
        migrations.AddField(
            model_name='queuestate',
            name='dispatched',
            field=models.BigIntegerField(db_default=0, default=0, help_text='Jobs claimed under the weighted ledger.'),
        ),
        migrations.AddField(
            model_name='queuestate',
            name='weight',
            field=models.IntegerField(blank=True, null=True, validators=[django.core.validators.MinValueValidator(1)]),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('state', 'available')), fields=['queue', 'partition_key', '-priority', 'scheduled_at', 'id'], name='headgate_job_fair'),
        ),
        migrations.AddConstraint(
            model_name='partitiondeficit',
            constraint=models.UniqueConstraint(fields=('queue', 'partition_key'), name='headgate_deficit_partition'),
        ),
        # Not atomic: MySQL cannot roll DDL back (elsewhere it does nothing).
        migrations.RunPython(forward, backward, atomic=False),
    ]
