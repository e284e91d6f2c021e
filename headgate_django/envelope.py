"""What one job will be before it is stored: the :class:`Envelope`.

An envelope is a frozen value, so a workflow builder or a test can hold one, compare it,
and ``dataclasses.replace(env, id=...)`` it without surprising anyone else holding it.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from headgate_django.exceptions import (
    DefinitionError,
    PayloadError,
    PayloadNotJSONError,
    PayloadTooLargeError,
    ResultTooLargeError,
)
from headgate_django.kernel.backoff import MAX_WAIT
from headgate_django.kernel.names import (
    check_not_reserved,
    internal_kind_error,
    is_internal_kind,
    validate_job_id,
    validate_kind,
    validate_partition_key,
    validate_queue,
    validate_rate_class,
)
from headgate_django.kernel.storable import MAX_JSON_DEPTH, nested_deeper_than, storable_json

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


# Every pair of Crockford characters, indexed by the ten bits they encode.
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]

# A random byte → one Crockford character, from its low five bits. 256 is a multiple of 32,
# so each character is equally likely and sixteen bytes give a ULID's 80 random bits.
_RANDOM_CHAR = bytes.maketrans(
    bytes(range(256)), bytes(_CROCKFORD.encode()[b & 31] for b in range(256))
)

# The last millisecond an id was made in, and its ten characters: ids come many to a
# millisecond, and spelling the time is most of the work of making one.
_clock: tuple[int, str] = (-1, "")


def _time_part() -> str:
    """The current millisecond as a ULID's first ten characters (48 bits in 50, top first)."""
    global _clock
    ms = int(time.time() * 1000)
    last, text = _clock
    if ms != last:
        text = id_prefix(ms)
        _clock = (ms, text)
    return text


def id_prefix(ms: int) -> str:
    """The first ten characters of every ULID made in millisecond ``ms`` (of the epoch):
    generated ids sort by creation, so ids made since an instant form one key range."""
    p = _PAIRS
    return (
        p[ms >> 40 & 1023]
        + p[ms >> 30 & 1023]
        + p[ms >> 20 & 1023]
        + p[ms >> 10 & 1023]
        + p[ms & 1023]
    )


# Random parts made ahead, many per system call: a ``getrandom`` call per id cost as much as
# the rest of making one. ``deque.popleft`` and ``extend`` are atomic, so threads share the
# pool without a lock (two refilling at once just add two distinct batches). A forked child
# must not hand out the parent's unused parts, so it starts with an empty pool.
_RANDOM_PARTS: deque[str] = deque()
_RANDOM_BATCH = 256
os.register_at_fork(after_in_child=_RANDOM_PARTS.clear)


def _random_part() -> str:
    try:
        return _RANDOM_PARTS.popleft()
    except IndexError:
        _RANDOM_PARTS.extend(_random_parts(_RANDOM_BATCH))
        return _RANDOM_PARTS.popleft()


def _random_parts(n: int) -> list[str]:
    """``n`` ULID random parts: sixteen bytes from ``os.urandom`` each, mapped to characters
    in one C call (``bytes.translate``); encoding 80 bits as an integer, five at a time,
    cost a single enqueue more Python than validating its envelope."""
    randoms = os.urandom(16 * n).translate(_RANDOM_CHAR).decode()
    return [randoms[i : i + 16] for i in range(0, 16 * n, 16)]


def new_id() -> str:
    """A ULID: 48 bits of milliseconds then 80 random bits, so ids sort by creation."""
    return _time_part() + _random_part()


def new_ids(n: int) -> list[str]:
    """``n`` ULIDs of the current millisecond, their random parts made in one pass."""
    prefix = _time_part()
    return [prefix + part for part in _random_parts(n)]


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes: the same value always hashes the same."""
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode()
    except (TypeError, ValueError) as exc:
        raise PayloadNotJSONError(f"payload is not JSON-serialisable: {exc}") from exc


def check_result(result: Any) -> int:
    """The size of ``result`` as the store keeps it (UTF-8 JSON), refusing a value it cannot
    keep: ``TypeError`` or ``ValueError`` when it is not JSON, :class:`ResultTooLargeError`
    over ``HEADGATE["MAX_RESULT_BYTES"]``. One rule for the worker, which checks before it
    reports success, and for the store's fenced writes."""
    from headgate_django.conf import headgate_settings

    if nested_deeper_than(result, MAX_JSON_DEPTH):
        raise ValueError(f"result nests lists and objects deeper than {MAX_JSON_DEPTH} levels")
    try:
        text = json.dumps(result, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"result is not JSON-serialisable: {exc}") from exc
    if not storable_json(text):
        raise ValueError(
            "result holds a string with a NUL character (U+0000) or an unpaired surrogate, "
            "which the database cannot store"
        )
    size = len(text.encode())
    limit = headgate_settings.MAX_RESULT_BYTES
    if size > limit:
        raise ResultTooLargeError(
            f"result is {size} bytes, over the {limit}-byte limit (HEADGATE['MAX_RESULT_BYTES'])",
            size=size,
            limit=limit,
        )
    return size


def check_payload(value: Any, what: str) -> bytes:
    """``value`` as the store keeps it (canonical JSON), refusing what it must not keep:
    :class:`PayloadError` when it nests deeper than :data:`MAX_JSON_DEPTH`,
    :class:`PayloadNotJSONError` when it is not JSON, :class:`PayloadError` when a string
    holds a NUL character, :class:`PayloadTooLargeError` over
    ``HEADGATE["MAX_PAYLOAD_BYTES"]``.

    The store checks a job's payload at enqueue; every other value a caller hands over to be
    kept (a durable start's input and meta, a signal's or an update's payload, a query's
    arguments, a child's or a new run's input, a schedule's target) is checked here, so the
    limit is one rule wherever the value comes from. ``what`` names the value in the error.
    """
    if nested_deeper_than(value, MAX_JSON_DEPTH):
        raise PayloadError(
            f"the {what} nests lists and objects deeper than {MAX_JSON_DEPTH} levels"
        )
    data = canonical_json(value)
    # An unpaired surrogate already failed to encode; a NUL is valid JSON, yet PostgreSQL
    # refuses it in jsonb while SQLite and MariaDB keep it: refused on every database.
    if b"\\u0000" in data and not storable_json(data.decode()):
        raise PayloadError(
            f"the {what} holds a string with a NUL character (U+0000), which the database "
            "cannot store"
        )
    check_payload_size(len(data), what)
    return data


def check_payload_size(size: int, what: str) -> None:
    """Refuse ``size`` bytes of ``what`` over ``HEADGATE["MAX_PAYLOAD_BYTES"]``: the
    :func:`check_payload` rule, for a value already encoded (an envelope's payload)."""
    from headgate_django.conf import headgate_settings

    limit = headgate_settings.MAX_PAYLOAD_BYTES
    if size > limit:
        raise PayloadTooLargeError(
            f"the {what} is {size} bytes, over the {limit}-byte limit "
            "(HEADGATE['MAX_PAYLOAD_BYTES'])",
            size=size,
            limit=limit,
        )


#: What :func:`encode_call` writes for a call without arguments.
NO_ARGUMENTS = b'{"args":[],"kwargs":{}}'


def encode_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    if not args and not kwargs:  # what canonical_json would write, without the encoder
        return NO_ARGUMENTS
    return canonical_json({"args": list(args), "kwargs": kwargs})


def decode_call(payload: bytes) -> tuple[list[Any], dict[str, Any]]:
    """Inverse of :func:`encode_call`; raises ``ValueError`` on anything else.

    A JSON object that is not exactly ``{"args": …, "kwargs": …}`` is read as keyword
    arguments, so that a payload written by hand (an operator's repair, an HTTP enqueue:
    ``{"email": "new@example.com"}``) needs no wrapper. ``encode_call`` always writes the
    full form, so nothing it produced is read differently.
    """
    if payload == NO_ARGUMENTS:  # most jobs: skip the parser (a fresh list and dict each time)
        return [], {}
    try:
        data = json.loads(bytes(payload))
    except RecursionError:
        # Valid JSON may nest deeper than the parser recurses: a payload no handler can
        # take, not a crash of the thread that decodes it.
        raise ValueError("payload JSON is nested too deeply to parse") from None
    if not isinstance(data, dict):
        raise ValueError("payload is not a JSON object")
    if set(data) != {"args", "kwargs"}:
        return [], data
    if not isinstance(data["args"], list) or not isinstance(data["kwargs"], dict):
        raise ValueError("payload args must be a list and kwargs an object")
    return data["args"], data["kwargs"]


_LENGTH = struct.Struct("<I").pack


# Each kind's length-prefixed bytes, the start of its fingerprints' input.
_KIND_PREFIX: dict[str, bytes] = {}
_KIND_PREFIX_MAX = 4096


def fingerprint(kind: str, payload: bytes) -> str:
    """Headgate's fingerprint: the crash-quarantine unit (kind and payload, not the job).

    SHA-256 of the length-prefixed kind and payload, its first 16 bytes in hex.
    """
    prefix = _KIND_PREFIX.get(kind)
    if prefix is None:
        k = kind.encode()
        prefix = _LENGTH(len(k)) + k
        if len(_KIND_PREFIX) < _KIND_PREFIX_MAX:
            _KIND_PREFIX[kind] = prefix
    return hashlib.sha256(prefix + _LENGTH(len(payload)) + payload).digest()[:16].hex()


@dataclass(frozen=True)
class Envelope:
    """One job, ready to be enqueued.

    ``id`` is generated at enqueue time when left ``None``. ``scheduled_at`` (an absolute
    instant) and ``delay`` (relative to the store clock) are mutually exclusive; so are
    either of them and ``pending`` (a pending job waits for an explicit promotion).

    ``partition_key`` (the tenant), ``rate_class`` and ``weight`` (the job's cost against
    its rate class) are what admission control reads (:mod:`headgate_django.admission`).
    """

    kind: str
    payload: bytes = NO_ARGUMENTS
    id: str | None = None
    queue: str = "default"
    priority: int = 0
    schema_version: int = 1
    max_attempts: int | None = None
    retention: timedelta | None = None
    timeout: timedelta | None = None
    scheduled_at: datetime | None = None
    delay: timedelta | None = None
    pending: bool = False
    unique_key: str | None = None
    workflow_id: str | None = None
    partition_key: str = ""
    rate_class: str | None = None
    weight: int = 1
    #: Throttle: the ``unique_key`` is held for this long from enqueue (store clock), whatever
    #: becomes of the job, instead of while the job is live.
    unique_window: timedelta | None = None
    #: Replace on conflict: a waiting holder of the ``unique_key`` takes these of this
    #: envelope's values (:data:`UNIQUE_REPLACE_FIELDS`) instead of refusing it.
    unique_replace: frozenset[str] | None = None
    #: Debounce: run this long after the last enqueue of the ``unique_key`` (trailing edge);
    #: a conflict gives the waiting holder this payload and pushes its run time forward.
    unique_debounce: timedelta | None = None
    #: When the job stops being worth running: an aware instant, or a span from enqueue.
    deadline: datetime | timedelta | None = None
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def unique_mode(self) -> str | None:
        """``throttle``, ``replace`` or ``debounce``; None for a lifecycle key or none."""
        if self.unique_window is not None:
            return "throttle"
        if self.unique_replace is not None:
            return "replace"
        if self.unique_debounce is not None:
            return "debounce"
        return None

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.kind, self.payload)


_INT32 = 2**31 - 1
#: What ``unique_replace`` may name: the holder takes the new payload (with its schema version
#: and fingerprint), run time (only a scheduled holder), priority or attempt limit.
UNIQUE_REPLACE_FIELDS = frozenset({"payload", "scheduled_at", "priority", "max_attempts"})
#: Set in an envelope's ``__dict__`` once :func:`check_fields` has passed it. An envelope is
#: frozen, so the verdict cannot go stale. :func:`with_payload` copies it from the template
#: (every ``task.envelope()``), while ``dataclasses.replace`` builds a new envelope through
#: ``__init__``, which is checked again.
_FIELDS_CHECKED = "_headgate_fields_checked"
#: Set in an envelope's ``__dict__`` by :func:`internal`: the library built it. Never a
#: field, so neither ``dataclasses.replace`` nor a serializer can carry it over: a changed
#: copy of an internal envelope must be marked again by the code that changed it.
_INTERNAL = "_headgate_internal"
# (kind, queue) pairs already found valid, for envelopes built one by one: validity depends
# on the two strings alone. Bounded for a project that makes queue names up.
_VALID_NAMES: set[tuple[str, str]] = set()
_VALID_NAMES_MAX = 4096


def check_not_too_long(what: str, value: timedelta | None) -> None:
    """Refuse a delay or retention the store cannot add to its clock, which stops at the
    year 9999: a longer one failed with a database error (or, on PostgreSQL, stored an
    instant nobody could read back). The limit is that of every other wait."""
    if value is not None and value > MAX_WAIT:
        raise DefinitionError(f"{what} is at most {MAX_WAIT.days} days, not {value}")


def check_fields(env: Envelope) -> None:
    """Refuse an envelope whose fields, all but the payload, cannot be stored.

    The payload's own rules (bytes, under the configured size) are the store's, checked on
    every enqueue; these are checked once per envelope, which costs a task's enqueue nothing
    after its template passed.
    """
    if _FIELDS_CHECKED in env.__dict__:
        return
    names = (env.kind, env.queue)
    if names not in _VALID_NAMES:
        validate_kind(env.kind)
        validate_queue(env.queue)
        if len(_VALID_NAMES) < _VALID_NAMES_MAX:
            _VALID_NAMES.add(names)
    # Outside the cache of valid names: a trusted internal envelope puts its names there too.
    if is_internal_kind(env.kind) and _INTERNAL not in env.__dict__:
        raise internal_kind_error(
            env.kind, "its jobs are made only by workflows, grafts, retries and durable runs"
        )
    if env.id is not None:
        validate_job_id(env.id)
    if env.workflow_id is not None:
        _admission_field(env.kind, _validate_workflow_id, env.workflow_id)
    if _INTERNAL not in env.__dict__:  # the library's own ids derive from accepted ones
        check_not_reserved("job id", env.id)
        check_not_reserved("workflow id", env.workflow_id)
    _check_integer(env.kind, "priority", env.priority, -_INT32)
    _check_integer(env.kind, "schema_version", env.schema_version, 1)
    if env.max_attempts is not None:
        _check_integer(env.kind, "max_attempts", env.max_attempts, 1)
    for name in ("retention", "delay", "timeout"):
        if getattr(env, name) is not None and not isinstance(getattr(env, name), timedelta):
            raise DefinitionError(f"{env.kind}: {name} is a timedelta, not {getattr(env, name)!r}")
    if env.retention is not None and env.retention < timedelta(0):
        raise DefinitionError(f"{env.kind}: retention cannot be negative")
    check_not_too_long(f"{env.kind}: retention", env.retention)
    timing = [env.scheduled_at is not None, env.delay is not None, env.pending]
    if sum(timing) > 1:
        raise DefinitionError(f"{env.kind}: scheduled_at, delay and pending are exclusive")
    if env.delay is not None and env.delay < timedelta(0):
        raise DefinitionError(f"{env.kind}: delay cannot be negative")
    check_not_too_long(f"{env.kind}: delay", env.delay)
    if env.timeout is not None and env.timeout <= timedelta(0):
        raise DefinitionError(f"{env.kind}: timeout must be positive")
    check_not_too_long(f"{env.kind}: timeout", env.timeout)
    if env.scheduled_at is not None:
        check_instant(env.kind, "scheduled_at", env.scheduled_at)
    if env.unique_key is not None and not (
        isinstance(env.unique_key, str) and 0 < len(env.unique_key) <= 255
    ):
        raise DefinitionError(f"{env.kind}: unique_key must be 1–255 characters")
    if env.partition_key != "":  # a falsy one that is not a string (None, 0) is refused too
        _admission_field(env.kind, validate_partition_key, env.partition_key)
    if env.rate_class is not None:
        _admission_field(env.kind, validate_rate_class, env.rate_class)
    if type(env.weight) is not int or not 1 <= env.weight <= _INT32:
        raise DefinitionError(f"{env.kind}: weight must be an integer from 1, got {env.weight!r}")
    if not (
        env.unique_window is None and env.unique_replace is None and env.unique_debounce is None
    ):
        check_unique_mode(env)
    if env.deadline is not None:
        check_deadline(env.kind, env.deadline)
    env.__dict__[_FIELDS_CHECKED] = True


def check_unique_mode(env: Envelope) -> None:
    """Refuse a uniqueness mode the store cannot honour; a ``unique_replace`` given as any
    collection of names is kept as a frozenset (the envelope stays hashable).

    A mode without a ``unique_key`` is a task's template, whose calls add the key: the
    store refuses such an envelope when it is enqueued."""
    modes = [env.unique_window, env.unique_replace, env.unique_debounce]
    if sum(m is not None for m in modes) > 1:
        raise DefinitionError(
            f"{env.kind}: unique_window, unique_replace and unique_debounce are exclusive"
        )
    for name in ("unique_window", "unique_debounce"):
        span = getattr(env, name)
        if span is not None and (
            not isinstance(span, timedelta) or span < timedelta(milliseconds=1)
        ):
            raise DefinitionError(f"{env.kind}: {name} must be a timedelta of at least 1 ms")
        check_not_too_long(f"{env.kind}: {name}", span)
    if env.unique_debounce is not None and (
        env.scheduled_at is not None or env.delay is not None or env.pending
    ):
        raise DefinitionError(
            f"{env.kind}: unique_debounce sets the run time; it excludes scheduled_at, "
            "delay and pending"
        )
    if env.unique_replace is not None:
        names = env.unique_replace
        if isinstance(names, str) or not isinstance(names, set | frozenset | list | tuple):
            raise DefinitionError(
                f"{env.kind}: unique_replace is a set of field names, not {names!r}"
            )
        unknown = set(names) - UNIQUE_REPLACE_FIELDS
        if unknown or not names:
            raise DefinitionError(
                f"{env.kind}: unique_replace names one or more of "
                f"{sorted(UNIQUE_REPLACE_FIELDS)}, got {sorted(map(str, names))}"
            )
        object.__setattr__(env, "unique_replace", frozenset(names))


def _check_integer(kind: str, name: str, value: object, low: int) -> None:
    """Refuse a value of an integer column that is not an integer from ``low`` to the
    column's largest (a signed 32-bit integer): SQLite stored a float as given, and
    PostgreSQL and MariaDB failed with a database error past the column's range."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _INT32:
        raise DefinitionError(
            f"{kind}: {name} must be an integer from {low} to {_INT32}, not {value!r}"
        )


def check_instant(kind: str, name: str, value: object) -> None:
    """An instant the store can keep: an aware ``datetime`` that is one in UTC too (an
    instant of 9999-12-31 behind UTC is in the year 10000 there, past every database)."""
    if not isinstance(value, datetime):
        raise DefinitionError(f"{kind}: {name} is a datetime, not {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise DefinitionError(f"{kind}: {name} must be timezone-aware")
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise DefinitionError(
            f"{kind}: {name} {value.isoformat()} is outside the years 1 to 9999 in UTC"
        ) from None


def check_deadline(kind: str, deadline: object) -> None:
    """A deadline is an aware instant or a positive span (counted from enqueue)."""
    if isinstance(deadline, datetime):
        check_instant(kind, "deadline", deadline)
    elif isinstance(deadline, timedelta):
        if deadline < timedelta(milliseconds=1):
            raise DefinitionError(f"{kind}: a deadline span must be at least 1 ms")
        check_not_too_long(f"{kind}: deadline", deadline)
    else:
        raise DefinitionError(f"{kind}: deadline is a datetime or a timedelta, not {deadline!r}")


def _validate_workflow_id(workflow_id: object) -> None:
    """The column's rule for a job id (a string of 1-255 bytes without control characters),
    named for the workflow id: a longer one or one with a NUL failed with a database error."""
    try:
        validate_job_id(workflow_id)
    except DefinitionError as exc:
        raise DefinitionError(f"workflow_id: {exc}") from None


def _admission_field(kind: str, validate: Any, value: object) -> None:
    """Run one of the admission fields' validators, naming the job kind in its error."""
    try:
        validate(value)
    except DefinitionError as exc:
        raise DefinitionError(f"{kind}: {exc}") from None


def internal(env: Envelope) -> Envelope:
    """Mark ``env``, of an internal kind, as built by the library itself, and return it.

    For headgate-django's own builders only (workflow prepare, graft, failed-subgraph retry,
    the durable runtime): every other envelope of a ``headgate:`` kind is refused by
    :func:`check_fields`, which every enqueue runs.
    """
    env.__dict__[_INTERNAL] = True
    return env


def with_payload(template: Envelope, payload: bytes) -> Envelope:
    """``dataclasses.replace(template, payload=payload)`` at a fraction of its cost.

    A frozen dataclass's generated ``__init__`` sets each of its eighteen fields through
    ``object.__setattr__``, which made building the envelope one of the largest parts of
    ``task.enqueue()``'s own Python. ``Envelope`` has no ``__post_init__``, so copying the
    template's fields is the same object ``replace`` would build; ``meta`` is a fresh dict,
    so the copy shares nothing mutable with the template.
    """
    env = object.__new__(Envelope)
    env.__dict__.update(template.__dict__, payload=payload, meta={})
    return env
