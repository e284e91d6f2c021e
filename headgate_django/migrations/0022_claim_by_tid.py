"""PostgreSQL only: the claim function updates the rows it locked by their row address.

The function (migration 0010, with migration 0018's admission filters) found its
candidates in claim order and then updated them with ``WHERE id = ANY(ids)``, counting on
the primary key for that update. Since migration 0020 ``headgate_job_kind`` on
``(kind, id)`` holds the id too, and a plan made while the table was empty (the function's
plans are generic, made once per session, and a worker often starts on an empty queue)
could take that index instead: a scan of every entry of it, testing the id of each, on
every claim of the session. Nothing in PostgreSQL can name the index a statement must use.

The candidates' row addresses (``ctid``) leave the planner nothing to choose: the update is
a TID scan, reading exactly the rows the candidate query locked and no index at all. The
address of a row cannot change under us: the candidate query locked it (``FOR UPDATE``) in
this transaction, so no other session can update or delete it, and only ``VACUUM FULL`` and
``CLUSTER``, which take an exclusive lock on the table, move live rows. The update names
the address alone: any other condition (even ``state = 'available'``, which the partial
index on waiting jobs implies) would hand the planner an index to scan instead.
"""

from importlib import import_module

from django.db import migrations

_BEFORE = import_module("headgate_django.migrations.0018_admission").CREATE
_EDITS = [  # (text of the function before, after, how many times it occurs)
    ("SELECT j.id FROM headgate_job j", "SELECT j.ctid FROM headgate_job j", 3),
    ("    ids varchar[];", "    tids tid[];", 1),
    ("ids := ARRAY(", "tids := ARRAY(", 3),
    ("WHERE id = ANY(ids)", "WHERE ctid = ANY(tids)", 1),
]
CREATE = _BEFORE
for _old, _new, _count in _EDITS:
    assert CREATE.count(_old) == _count, _old
    CREATE = CREATE.replace(_old, _new)


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_BEFORE)


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0021_job_runtime")]
    operations = [migrations.RunPython(forward, backward)]
