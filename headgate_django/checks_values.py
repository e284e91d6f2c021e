"""The system checks of single settings' values: durations, counts, switches and names.

Every key of ``HEADGATE`` has a rule here or in :mod:`headgate_django.checks` (a test
sets each to a value of no type it takes and expects an error). A value the check lets
through is read by a duty, a request or an enqueue much later, where a wrong type or a
zero fails far from its cause: a ``RETENTION`` of ``None`` failed every enqueue on the
column's NOT NULL, an ``EVICT_BATCH`` of 0 ran the eviction duty on every tick for
nothing, and ``API_READ_ONLY = "false"`` made the API read-only.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.checks import Error

from headgate_django.kernel.backoff import MAX_WAIT

#: Durations that must be above zero.
POSITIVE = (
    "LEASE_TTL",
    "BACKOFF_BASE",
    "BACKOFF_CAP",
    "COORDINATOR_POLL",
    "SHUTDOWN_TIMEOUT",
    "WORKER_HEARTBEAT",
    "WORKER_RETENTION",
    "DUTY_INTERVAL",
    "IDLE_BACKOFF_MIN",
    "IDLE_BACKOFF_MAX",
    "STATUS_INTERVAL",
    "IDEMPOTENCY_TTL",
)
#: Durations that are positive or None (None: derived, or off).
OPTIONAL = ("SQLITE_WAKE_INTERVAL", "RENEW_INTERVAL")
#: Durations where zero means something: delete at acknowledgement, requeue at once, one
#: batch per eviction pass.
NON_NEGATIVE = ("RETENTION", "CRASH_BACKOFF", "EVICT_BUDGET")
#: Integers ≥ 1.
COUNTS = (
    "CRASH_LIMIT",
    "MAX_ATTEMPTS",
    "CLAIM_BATCH",
    "MAX_BATCH",
    "SCHEDULE_BATCH",
    "BULK_MAX_JOBS",
    "BULK_SYNC_LIMIT",
    "DURABLE_HISTORY_WARN_EVENTS",
    "DURABLE_HISTORY_WARN_BYTES",
    "DURABLE_TASK_ATTEMPTS",
    "EVICT_BATCH",
    "MAX_PAYLOAD_BYTES",
    "MAX_RESULT_BYTES",
    "API_MAX_BODY_BYTES",
    "CONSOLE_MAX_SOCKETS_PER_USER",
    "METRICS_MAX_QUEUES",
)
#: The counts with a ceiling: MySQL/MariaDB delete an eviction batch by its ids, one bound
#: value each, and a statement takes at most 65,535 (every pass past it failed); a batch
#: that large also holds its row locks for as long as it takes.
MOST = {"EVICT_BATCH": 50_000}
#: Plain booleans: any other value is a typo, and a string such as "false" is true.
SWITCHES = ("LISTEN_NOTIFY", "WORKFLOW_EVENT_WAKE", "API_READ_ONLY", "API_PUBLIC_HEALTH")

_ONE_MS = timedelta(milliseconds=1)


def _duration_at_least(value: Any, least: timedelta, *, strictly: bool) -> bool:
    """A timedelta from ``least`` (above it when ``strictly``) up to the longest span the
    store adds to its clock (past it the year 9999 is passed and the write fails)."""
    if not isinstance(value, timedelta) or value > MAX_WAIT:
        return False
    return value > least if strictly else value >= least


def durations(s: Any) -> list[Any]:
    """Each duration setting by its rule (headgate.E002)."""
    most = f"at most {MAX_WAIT.days} days"
    zero = timedelta(0)
    rules: list[tuple[str, bool, str]] = [
        (key, _duration_at_least(getattr(s, key), zero, strictly=True), "a positive timedelta")
        for key in POSITIVE
    ]
    rules += [
        (
            key,
            getattr(s, key) is None or _duration_at_least(getattr(s, key), zero, strictly=True),
            "a positive timedelta or None",
        )
        for key in OPTIONAL
    ]
    rules += [
        (key, _duration_at_least(getattr(s, key), zero, strictly=False), "a timedelta ≥ 0")
        for key in NON_NEGATIVE
    ]
    rules.append(
        (
            "WORKFLOW_RETENTION",
            _duration_at_least(s.WORKFLOW_RETENTION, _ONE_MS, strictly=False),
            "a timedelta of at least 1 ms (as Workflow.retention() takes)",
        )
    )
    durable = s.DURABLE_RETENTION
    rules.append(
        (
            "DURABLE_RETENTION",
            durable is None
            or (durable == 0 and not isinstance(durable, bool))
            or _duration_at_least(durable, zero, strictly=False),
            "a timedelta ≥ 0, or None or 0 to keep finished executions for ever",
        )
    )
    return [
        Error(
            f"HEADGATE[{key!r}] is {getattr(s, key)!r}; it must be {what}, {most}",
            id="headgate.E002",
        )
        for key, ok, what in rules
        if not ok
    ]


def counts(s: Any) -> list[Any]:
    """Each count setting is an integer ≥ 1, and at most its ceiling (headgate.E005)."""
    return [
        Error(
            f"HEADGATE[{key!r}] is {getattr(s, key)!r}; it must be an integer ≥ 1"
            + (f" and ≤ {MOST[key]:,}" if key in MOST else ""),
            id="headgate.E005",
        )
        for key in COUNTS
        if not is_count(getattr(s, key)) or getattr(s, key) > MOST.get(key, getattr(s, key))
    ]


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def switches(s: Any) -> list[Any]:
    """Each switch is True or False (headgate.E017)."""
    return [
        Error(
            f"HEADGATE[{key!r}] is {getattr(s, key)!r}; it must be True or False",
            id="headgate.E017",
        )
        for key in SWITCHES
        if not isinstance(getattr(s, key), bool)
    ]


def workflow_queue(s: Any) -> list[Any]:
    """``WORKFLOW_QUEUE`` is a queue name (headgate.E018): every workflow built without
    ``coordinator_queue(...)`` would otherwise be refused at enqueue."""
    from headgate_django.exceptions import DefinitionError
    from headgate_django.kernel.names import validate_queue

    try:
        validate_queue(s.WORKFLOW_QUEUE)
    except DefinitionError as exc:
        return [Error(f"HEADGATE['WORKFLOW_QUEUE']: {exc}", id="headgate.E018")]
    return []


def authentication_classes(s: Any) -> list[Any]:
    """``API_AUTHENTICATION_CLASSES`` is None or a list of dotted paths (headgate.E019): a
    bare string would be read letter by letter, on the API's first request."""
    value = s.API_AUTHENTICATION_CLASSES
    if value is None or (
        isinstance(value, list | tuple) and all(isinstance(p, str) and p for p in value)
    ):
        return []
    return [
        Error(
            f"HEADGATE['API_AUTHENTICATION_CLASSES'] is {value!r}; it must be None or a list "
            "of dotted paths of DRF authentication classes",
            id="headgate.E019",
        )
    ]
