"""Validation of the names users give: job kinds, queues and ids."""

from __future__ import annotations

import re

from headgate_django.exceptions import DefinitionError, InvalidKindError

MAX_KIND_BYTES = 128
MAX_QUEUE_BYTES = 128
MAX_ID_BYTES = 255
# The kind of every workflow's coordinator job; its ":" keeps it out of the dotted-path
# kinds that ``@task`` derives, so no user task can take it.
COORDINATOR_KIND = "headgate:workflow"

# First character a word character, then also the punctuation used by dotted paths,
# namespaces and generics (Headgate's kind grammar).
_KIND = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-\[\]<>/.:+]*\Z")
_QUEUE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-.:]*\Z")


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
    if any(ord(c) < 32 for c in job_id):
        raise DefinitionError(f"job id {job_id!r} contains control characters")
    return job_id
