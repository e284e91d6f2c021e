"""Runs of durable executions (continue-as-new): the header's current run, its history size
and what its last pass parked on, and the archive of finished runs with their histories. The
new header columns are nullable or have database defaults, so adding them rewrites nothing
and every existing execution is in its first run."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('headgate_django', '0025_runtime_b'),
    ]

    operations = [
        migrations.AddField(
            model_name='execution',
            name='history_bytes',
            field=models.BigIntegerField(db_default=0, default=0, help_text="JSON size of the current run's event payloads."),
        ),
        migrations.AddField(
            model_name='execution',
            name='history_warning',
            field=models.CharField(blank=True, db_default='', default='', help_text='Set once per run when its history passes the size thresholds.', max_length=500),
        ),
        migrations.AddField(
            model_name='execution',
            name='run_id',
            field=models.CharField(blank=True, db_default='', default='', help_text="Id of the current run; empty for the first run, whose id is the execution's.", max_length=200),
        ),
        migrations.AddField(
            model_name='execution',
            name='run_number',
            field=models.PositiveIntegerField(db_default=1, default=1, help_text='1 for the first run, one more per continue-as-new.'),
        ),
        migrations.AddField(
            model_name='execution',
            name='waiting_on',
            field=models.JSONField(blank=True, help_text='What the last pass parked on: {"select": id or null, "futures": [ids]}.', null=True),
        ),
        migrations.CreateModel(
            name='ExecutionRun',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('number', models.PositiveIntegerField()),
                ('run_id', models.CharField(max_length=200)),
                ('input', models.JSONField(blank=True, null=True)),
                ('events', models.BigIntegerField(help_text='Events in its history.')),
                ('history_bytes', models.BigIntegerField(default=0)),
                ('started_at', models.DateTimeField()),
                ('finished_at', models.DateTimeField()),
                ('execution', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='headgate_django.execution')),
            ],
            options={
                'db_table': 'headgate_durable_run',
                'ordering': ['execution_id', 'number'],
            },
        ),
        migrations.CreateModel(
            name='RunHistoryEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('seq', models.BigIntegerField()),
                ('type', models.CharField(max_length=32)),
                ('payload', models.JSONField(default=dict)),
                ('at', models.DateTimeField()),
                ('run', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='history', to='headgate_django.executionrun')),
            ],
            options={
                'db_table': 'headgate_durable_run_history',
                'ordering': ['run_id', 'seq'],
            },
        ),
        migrations.AddConstraint(
            model_name='executionrun',
            constraint=models.UniqueConstraint(fields=('execution', 'number'), name='headgate_durable_run_n'),
        ),
        migrations.AddConstraint(
            model_name='executionrun',
            constraint=models.UniqueConstraint(fields=('execution', 'run_id'), name='headgate_durable_run_id'),
        ),
        migrations.AddConstraint(
            model_name='runhistoryevent',
            constraint=models.UniqueConstraint(fields=('run', 'seq'), name='headgate_durable_run_seq'),
        ),
    ]
