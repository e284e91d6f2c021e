"""Validation of the names users give (job kinds, queues and ids), and the reserved kinds.

Every job kind that starts with ``headgate:`` belongs to the library: coordinators, the
node jobs a workflow's coordinator drives, graft and retry receipts, the durable runtime's
workflow tasks and Operations. Their payloads are trusted (a coordinator's graph and CEL
conditions, an Operation's input) and their owners have verbs of their own, so
:func:`is_internal_kind` is the one rule that keeps them out of the public ways in:
``enqueue`` of a hand-made envelope, ``@task``, the HTTP API and the generic job verbs.

Likewise every id that starts with ``sched:`` belongs to the scheduler (a tick's job,
workflow or durable execution, ``kernel.schedule_origin``): a taken tick id means the tick
fired, and ``ctx.periodic_origin`` is read back from it, so :func:`check_not_reserved`
refuses it from callers, and :func:`writing_ticks` lets the scheduler write its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from headgate_django.exceptions import (
    DefinitionError,
    InternalKindError,
    InvalidKindError,
    ReservedIdError,
)

MAX_KIND_BYTES = 128
MAX_QUEUE_BYTES = 128
MAX_ID_BYTES = 255
MAX_PARTITION_BYTES = 128
MAX_RATE_CLASS_BYTES = 128
#: The prefix of every internal kind; ``@task`` refuses it, and its ":" keeps it out of the
#: dotted-path kinds that ``@task`` and ``django.tasks`` derive.
INTERNAL_PREFIX = "headgate:"
#: The kind of every workflow's coordinator job.
COORDINATOR_KIND = "headgate:workflow"
#: The node jobs a coordinator drives (signal, timer, condition and child-workflow nodes).
SIGNAL_KIND = "headgate:signal"
TIMER_KIND = "headgate:timer"
CONDITION_KIND = "headgate:condition"
CHILD_KIND = "headgate:workflow-child"
#: The receipts of a graft and of a failed-subgraph retry, settled by the coordinator.
GRAFT_KIND = "headgate:graft"
RETRY_KIND = "headgate:workflow-retry"
#: The durable runtime's workflow task and Operation jobs.
DURABLE_TASK_KIND = "headgate:durable-task"
DURABLE_OP_KIND = "headgate:durable-op"
#: ``Job.workflow_id`` of an execution's jobs: prefixed so it never meets a DAG workflow id.
DURABLE_GROUP_PREFIX = "durable:"
#: A bulk operator action too large to run in its request (``headgate_django.bulk``).
BULK_KIND = "headgate:bulk-action"
#: The prefix of a schedule's tick ids (job id, workflow id, durable execution id and key).
SCHEDULE_ID_PREFIX = "sched:"
# The tick ids the scheduler is writing now: each, and the ids under it (``<id>:…``, a
# workflow's coordinator and nodes), pass :func:`check_not_reserved`.
_WRITING: ContextVar[frozenset[str]] = ContextVar("headgate_writing_ticks", default=frozenset())


def is_internal_kind(kind: object) -> bool:
    """Whether ``kind`` is reserved for the library's own jobs (the ``headgate:`` prefix)."""
    return isinstance(kind, str) and kind.startswith(INTERNAL_PREFIX)


def internal_kind_error(
    kind: str, why: str, *, node: str | None = None, **details: Any
) -> InternalKindError:
    """The refusal of a public way in for an internal kind; ``why`` says what was refused."""
    return InternalKindError(
        f"{kind!r} is an internal job kind (the {INTERNAL_PREFIX!r} prefix is reserved for "
        f"headgate-django's own jobs): {why}",
        node=node,
        kind=kind,
        **details,
    )


@contextmanager
def writing_ticks(tick_ids: Iterable[str]) -> Iterator[None]:
    """Let the scheduler (or a graft onto a workflow a tick started) write ``tick_ids`` and
    the ids under them, for the duration of the block. A context rather than a flag on
    each call: a tick's workflow id reaches ``Workflow(...)`` through the user's factory.
    Only reserved ids are taken: a workflow called ``sched`` opens nothing under ``sched:``."""
    reserved = frozenset(t for t in tick_ids if t.startswith(SCHEDULE_ID_PREFIX))
    token = _WRITING.set(_WRITING.get() | reserved)
    try:
        yield
    finally:
        _WRITING.reset(token)


def check_not_reserved(what: str, value: object) -> None:
    """Refuse a caller's id under :data:`SCHEDULE_ID_PREFIX`: taking a future tick's id
    would make the schedule skip that tick as fired, and forge its ``periodic_origin``."""
    if not isinstance(value, str) or not value.startswith(SCHEDULE_ID_PREFIX):
        return
    writing = _WRITING.get()
    if value in writing or any(value.startswith(f"{tick}:") for tick in writing):
        return
    raise ReservedIdError(
        f"{what} {value[:60]!r} starts with {SCHEDULE_ID_PREFIX!r}, which is reserved for "
        "the ids of schedules' ticks; choose another id",
        id=value,
    )


# First character a word character, then also the punctuation used by dotted paths,
# namespaces and generics (Headgate's kind grammar).
_KIND = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-\[\]<>/.:+]*\Z")
#: Queue and rate class names (also stated as the API schema's pattern for them).
NAME_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_\-.:]*\Z"
_QUEUE = re.compile(NAME_PATTERN)
#: One search in C instead of a Python loop over the characters: every enqueue checks an id.
_CONTROL = re.compile(r"[\x00-\x1f]")


#: The whitespace ``str.strip`` removes beyond the control characters: a durable name
#: (``durable.registry.check_name``) may neither start nor end with one.
OUTER_SPACE = " \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"


def trimmed_name_pattern(also_refused: str = "") -> str:
    """What ``check_name`` takes, as a regex the API schema can state: non-empty, no
    control characters (nor ``also_refused``), no whitespace at either end."""
    inner = f"[^{also_refused}\\x00-\\x1f]"
    edge = f"[^{OUTER_SPACE}{also_refused}\\x00-\\x1f]"
    return f"{edge}(?:{inner}*{edge})?\\Z"


def has_control_characters(text: str) -> bool:
    return _CONTROL.search(text) is not None


def validate_kind(kind: object) -> str:
    if not isinstance(kind, str) or not kind:
        raise InvalidKindError(f"a job kind must be a non-empty string, got {kind!r}")
    if len(kind.encode()) > MAX_KIND_BYTES:
        raise InvalidKindError(f"job kind {kind[:40]!r}… is longer than {MAX_KIND_BYTES} bytes")
    if not _KIND.match(kind):
        raise InvalidKindError(
            f"invalid job kind {kind!r}: start with a letter, digit or '_', then use only "
            "letters, digits and _-[]<>/.:+"
        )
    return kind


def validate_queue(queue: object) -> str:
    if not isinstance(queue, str) or not queue:
        raise DefinitionError(f"a queue name must be a non-empty string, got {queue!r}")
    if len(queue.encode()) > MAX_QUEUE_BYTES or not _QUEUE.match(queue):
        raise DefinitionError(
            f"invalid queue name {queue!r}: up to {MAX_QUEUE_BYTES} bytes of letters, digits "
            "and _-.: , starting with a letter, digit or '_'"
        )
    return queue


def validate_job_id(job_id: object) -> str:
    if not isinstance(job_id, str) or not job_id:
        raise DefinitionError(f"a job id must be a non-empty string, got {job_id!r}")
    if len(job_id.encode()) > MAX_ID_BYTES:
        raise DefinitionError(f"job id {job_id[:40]!r}… is longer than {MAX_ID_BYTES} bytes")
    if has_control_characters(job_id):
        raise DefinitionError(f"job id {job_id!r} contains control characters")
    return job_id


def validate_partition_key(key: object) -> str:
    """A job's partition (its tenant, for fairness and per-partition ceilings): any text
    without control characters, up to :data:`MAX_PARTITION_BYTES` bytes; ``""`` is the
    partition of jobs that name none."""
    if not isinstance(key, str):
        raise DefinitionError(f"a partition key must be a string, got {key!r}")
    if len(key.encode()) > MAX_PARTITION_BYTES:
        raise DefinitionError(
            f"partition key {key[:40]!r}… is longer than {MAX_PARTITION_BYTES} bytes"
        )
    if has_control_characters(key):
        raise DefinitionError(f"partition key {key!r} contains control characters")
    return key


def validate_rate_class(name: object) -> str:
    """A rate class's name: the grammar of a queue name, up to
    :data:`MAX_RATE_CLASS_BYTES` bytes."""
    if not isinstance(name, str) or not name:
        raise DefinitionError(f"a rate class must be a non-empty string, got {name!r}")
    if len(name.encode()) > MAX_RATE_CLASS_BYTES or not _QUEUE.match(name):
        raise DefinitionError(
            f"invalid rate class {name!r}: up to {MAX_RATE_CLASS_BYTES} bytes of letters, "
            "digits and _-.: , starting with a letter, digit or '_'"
        )
    return name
