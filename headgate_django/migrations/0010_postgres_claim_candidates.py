"""PostgreSQL only: the claim's candidates come from a function that walks the claim index.

A claim wants the first ``limit`` available jobs in claim order, which the partial claim
indexes hold in that order. Left to itself the planner picks that plan only when its
statistics say there are many available jobs. When they say there are few (a table last
analyzed while its queue was empty, which is a healthy queue's usual state, then a burst
arrives), it reads every available row and sorts them, on every claim: a claim's cost grows
with the backlog (13 ms per claim of 100 at 20,000 jobs), and a bitmap scan never marks the
index entries of claimed rows dead, so they are read again by each claim until a vacuum.
Autovacuum's next ``ANALYZE`` may be long in coming on a large table (by default it waits
for a tenth of the rows to change).

The function runs the candidate query with index scans on and bitmap scans and sorts off,
which leaves the ordered index scan as the plan whatever the statistics (or the session's
own planner settings) say, and it reads only as far into the index as the claim needs. A function's ``SET`` clause applies to the queries it runs
and to nothing else, so no other query of the session is affected. JIT is off because the
penalty the planner adds to a disabled plan shape would otherwise cross its cost threshold.
The plan is generic, made once per session: replanning each call cost a claim 0.05 ms.
One worker queue gets its own query: ``queue = ANY(array)`` cannot read an index in order.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION headgate_claim_candidates(
    p_limit integer, p_queues varchar[], p_kinds varchar[]
) RETURNS SETOF varchar
LANGUAGE plpgsql VOLATILE
SET enable_indexscan = on
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF p_queues IS NULL THEN
        RETURN QUERY SELECT j.id FROM headgate_job j
            WHERE j.state = 'available'
              AND (p_kinds IS NULL OR j.kind = ANY(p_kinds))
              AND j.queue NOT IN (SELECT q.name FROM headgate_queue_state q WHERE q.paused)
            ORDER BY j.priority DESC, j.scheduled_at, j.id
            LIMIT p_limit FOR UPDATE SKIP LOCKED;
    ELSIF cardinality(p_queues) = 1 THEN
        RETURN QUERY SELECT j.id FROM headgate_job j
            WHERE j.state = 'available' AND j.queue = p_queues[1]
              AND (p_kinds IS NULL OR j.kind = ANY(p_kinds))
              AND j.queue NOT IN (SELECT q.name FROM headgate_queue_state q WHERE q.paused)
            ORDER BY j.priority DESC, j.scheduled_at, j.id
            LIMIT p_limit FOR UPDATE SKIP LOCKED;
    ELSE
        RETURN QUERY SELECT j.id FROM headgate_job j
            WHERE j.state = 'available' AND j.queue = ANY(p_queues)
              AND (p_kinds IS NULL OR j.kind = ANY(p_kinds))
              AND j.queue NOT IN (SELECT q.name FROM headgate_queue_state q WHERE q.paused)
            ORDER BY j.priority DESC, j.scheduled_at, j.id
            LIMIT p_limit FOR UPDATE SKIP LOCKED;
    END IF;
END
$$;
"""
DROP = "DROP FUNCTION IF EXISTS headgate_claim_candidates(integer, varchar[], varchar[]);"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("headgate_django", "0009_job_index_diet")]
    operations = [migrations.RunPython(create, drop)]
