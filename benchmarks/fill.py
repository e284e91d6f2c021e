"""Fill ``headgate_job`` with synthetic rows in SQL, as fast as the database allows.

Used by ``benchmarks/large_tables.py`` and by the query-plan test, which both need a table
of production size in seconds, not the hours enqueueing it job by job would take. Rows are
what production leaves behind: finished jobs with ~200-byte payloads (archived ones with a
~1 KB error), future scheduled jobs, and optionally finished jobs already past their
retention (an eviction backlog). Their ids sort before every generated ULID (they start
``00``), so they are older than any job a run enqueues. PostgreSQL builds the rows with
``generate_series``, MariaDB with its sequence engine (``seq_1_to_N``).
"""

from __future__ import annotations

from typing import Any

QUEUES = 5  # default, q1 … q4
KINDS = 10  # bench.k0 … bench.k9

_PG = """
INSERT INTO headgate_job (id, kind, queue, priority, schema_version, payload, fingerprint,
    state, attempt, crash_attempt, max_attempts, scheduled_at, fence, claimed_by,
    enqueued_at, claimed_at, finalized_at, retention, expires_at, errors, checkpoint)
SELECT
    '00' || %(tag)s || lpad(to_hex(i), 16, '0'),
    'bench.k' || (i %% {kinds}),
    CASE WHEN i %% {queues} = 0 THEN 'default' ELSE 'q' || (i %% {queues}) END,
    0, 1,
    convert_to(rpad('{{"args":[],"kwargs":{{"n":' || i || ',"pad":"', 190, 'x') || '"}}}}', 'UTF8'),
    md5(i::text),
    s.state,
    CASE WHEN s.state = 'archived' THEN 25 ELSE 0 END, 0, 25,
    now() - interval '1 day' + s.sched,
    1, '',
    now() - interval '1 day', now() - interval '1 day',
    CASE WHEN s.state = 'scheduled' THEN NULL ELSE now() - interval '1 day' END,
    interval '7 days',
    CASE WHEN s.state = 'scheduled' THEN NULL ELSE now() + s.expiry END,
    CASE WHEN s.state = 'archived'
        THEN jsonb_build_array(jsonb_build_object('attempt', 25, 'kind', 'error',
            'error', 'boom', 'traceback', repeat('Traceback line ', 64)))
        ELSE '[]'::jsonb END,
    '{{}}'::jsonb
FROM generate_series(%(start)s, %(stop)s) AS i,
LATERAL (SELECT {state} AS state, {sched} AS sched, {expiry} AS expiry) AS s
"""

_MY = """
INSERT INTO headgate_job (id, kind, queue, priority, schema_version, payload, fingerprint,
    state, attempt, crash_attempt, max_attempts, scheduled_at, fence, claimed_by,
    enqueued_at, claimed_at, finalized_at, retention, expires_at, errors, checkpoint)
SELECT
    CONCAT('00', %(tag)s, LPAD(HEX(seq), 16, '0')),
    CONCAT('bench.k', seq %% {kinds}),
    IF(seq %% {queues} = 0, 'default', CONCAT('q', seq %% {queues})),
    0, 1,
    CONCAT(RPAD(CONCAT('{{"args":[],"kwargs":{{"n":', seq, ',"pad":"'), 190, 'x'), '"}}}}'),
    MD5(seq),
    st,
    IF(st = 'archived', 25, 0), 0, 25,
    UTC_TIMESTAMP(6) - INTERVAL 1 DAY + INTERVAL sched SECOND,
    1, '',
    UTC_TIMESTAMP(6) - INTERVAL 1 DAY, UTC_TIMESTAMP(6) - INTERVAL 1 DAY,
    IF(st = 'scheduled', NULL, UTC_TIMESTAMP(6) - INTERVAL 1 DAY),
    604800000000,
    IF(st = 'scheduled', NULL, UTC_TIMESTAMP(6) + INTERVAL expiry SECOND),
    IF(st = 'archived', JSON_ARRAY(JSON_OBJECT('attempt', 25, 'kind', 'error',
        'error', 'boom', 'traceback', REPEAT('Traceback line ', 64))), '[]'),
    '{{}}'
FROM (SELECT seq, {state} AS st, {sched} AS sched, {expiry} AS expiry
      FROM seq_%(start)s_to_%(stop)s) AS s
"""

# Finished rows: 90% completed, 5% archived, 5% cancelled, expiring in 6 days.
_TERMINAL = {
    "postgresql": (
        "CASE WHEN i %% 20 = 1 THEN 'archived' WHEN i %% 20 = 2 THEN 'cancelled' "
        "ELSE 'completed' END",
        "interval '0'",
        "interval '6 days'",
    ),
    "mysql": (
        "CASE WHEN seq %% 20 = 1 THEN 'archived' WHEN seq %% 20 = 2 THEN 'cancelled' "
        "ELSE 'completed' END",
        "0",
        "518400",
    ),
}
_SCHEDULED = {
    "postgresql": ("'scheduled'", "interval '2 days' + i * interval '1 second'", "interval '0'"),
    "mysql": ("'scheduled'", "172800 + seq", "0"),
}
_EXPIRED = {
    "postgresql": ("'completed'", "interval '0'", "- interval '1 hour'"),
    "mysql": ("'completed'", "0", "-3600"),
}
_CHUNK = 250_000


def fill(cursor: Any, vendor: str, *, terminal: int, scheduled: int = 0, expired: int = 0) -> None:
    """Insert the rows, in chunks of 250,000 per statement; ``vendor`` is Django's name."""
    for tag, n, shape in (
        ("t", terminal, _TERMINAL),
        ("s", scheduled, _SCHEDULED),
        ("e", expired, _EXPIRED),
    ):
        state, sched, expiry = shape[vendor]
        template = _PG if vendor == "postgresql" else _MY
        sql = template.format(kinds=KINDS, queues=QUEUES, state=state, sched=sched, expiry=expiry)
        for start in range(1, n + 1, _CHUNK):
            stop = min(n, start + _CHUNK - 1)
            params = {"tag": tag, "start": start, "stop": stop}
            if vendor == "mysql":  # a table name cannot be a parameter
                sql_n = sql.replace("%(start)s", str(start)).replace("%(stop)s", str(stop))
                cursor.execute(sql_n, {"tag": tag})
            else:
                cursor.execute(sql, params)


def analyze(cursor: Any, vendor: str) -> None:
    """Fresh planner statistics, as autovacuum / InnoDB would keep after such a fill."""
    cursor.execute(
        "ANALYZE headgate_job" if vendor == "postgresql" else "ANALYZE TABLE headgate_job"
    )
    if vendor == "mysql":
        cursor.fetchall()
