"""PostgreSQL only: a claim is one function that reads the claim index in order and updates
the rows it found by primary key, whatever the planner's statistics say.

A claim wants the first ``limit`` available jobs in claim order, which the partial claim
indexes hold in that order. Left to itself the planner picks that plan only when its
statistics say there are many available jobs. When they say there are few (a table last
analyzed while its queue was empty, which is a healthy queue's usual state, then a burst
arrives), it reads every available row and sorts them, on every claim: a claim of 100
took 13-25 ms at a 20,000-job backlog, and a bitmap scan never marks the index entries of
claimed rows dead, so each claim reads them again until a vacuum. Autovacuum's next
``ANALYZE`` may be long in coming on a large table (by default it waits for a tenth of the
rows to change). The update had its own trap: a prepared claim keeps the plan it was given
while the table was empty, a sequential scan, and used it at 100,000 rows (44 ms a claim).

The function's ``SET`` clauses apply to its own queries and to nothing else in the
session: index scans on; bitmap scans, sequential scans and sorts off, which leaves the
ordered index scan for the candidates and the primary key for the update, so a claim reads
only as far into the index as it needs. JIT is off because the penalty the planner adds to a
disabled plan shape would otherwise cross its cost threshold. Plans are generic, made once
per session: replanning on each call cost a claim 0.05 ms. One worker queue gets its own
query, because ``queue = ANY(array)`` cannot read an index in order. The rows come back as
the table's own row type, so the function follows the table's columns.
"""

from django.db import migrations

_CANDIDATES = """
        SELECT j.id FROM headgate_job j
        WHERE j.state = 'available'{queue}
          AND (p_kinds IS NULL OR j.kind = ANY(p_kinds))
          AND j.queue NOT IN (SELECT q.name FROM headgate_queue_state q WHERE q.paused)
        ORDER BY j.priority DESC, j.scheduled_at, j.id
        LIMIT p_limit FOR UPDATE SKIP LOCKED"""

CREATE = f"""
CREATE OR REPLACE FUNCTION headgate_claim(
    p_limit integer, p_queues varchar[], p_kinds varchar[],
    p_lease_id varchar, p_worker varchar, p_ttl_ms bigint
) RETURNS SETOF headgate_job
LANGUAGE plpgsql VOLATILE
SET enable_indexscan = on
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    ids varchar[];
BEGIN
    IF p_queues IS NULL THEN
        ids := ARRAY({_CANDIDATES.format(queue="")});
    ELSIF cardinality(p_queues) = 1 THEN
        ids := ARRAY({_CANDIDATES.format(queue=" AND j.queue = p_queues[1]")});
    ELSE
        ids := ARRAY({_CANDIDATES.format(queue=" AND j.queue = ANY(p_queues)")});
    END IF;
    RETURN QUERY
        UPDATE headgate_job SET
            state = 'running', lease_id = p_lease_id, fence = fence + 1,
            claimed_by = p_worker, claimed_at = clock_timestamp(),
            lease_expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
        WHERE id = ANY(ids)
        RETURNING *;
END
$$;
"""
DROP = "DROP FUNCTION IF EXISTS headgate_claim(integer, varchar[], varchar[], varchar, varchar, bigint);"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0009_job_index_diet")]
    operations = [migrations.RunPython(create, drop)]
