"""Kind aliases: ``@task(kind=..., aliases=[...])`` runs jobs stored under a former kind,
and registration refuses an alias that clashes with another kind or alias."""

from __future__ import annotations

from typing import Any

import pytest

from headgate_django import DefinitionError, Envelope, InternalKindError, enqueue, task, testing
from headgate_django.envelope import encode_call
from headgate_django.exceptions import InvalidKindError
from headgate_django.models import Job
from headgate_django.registry import find_task, get_task, registered_kinds
from headgate_django.signals import job_finished
from tests.app import runtime_tasks as rt
from tests.app import tasks

pytestmark = pytest.mark.django_db


def _old(kind: str, **kwargs: Any) -> str:
    """A job stored under ``kind`` by an earlier deploy (no handler of that name here)."""
    [job_id] = enqueue(Envelope(kind=kind, payload=encode_call((), kwargs)))
    return job_id


def test_jobs_stored_under_an_alias_are_claimed_and_run_by_the_new_handler():
    old = _old("test.alias.old", value=1)
    older = _old("test.alias.older", value=2)
    new = rt.renamed.enqueue(value=3)
    report = testing.run_jobs()
    assert report.completed == 3
    assert Job.objects.get(pk=old).result == {"kind": "test.alias.old", "value": 1}
    assert Job.objects.get(pk=older).result == {"kind": "test.alias.older", "value": 2}
    assert Job.objects.get(pk=new).result == {"kind": "test.alias.new", "value": 3}
    # The stored kind is left as it was.
    assert Job.objects.get(pk=old).kind == "test.alias.old"


def test_the_registry_resolves_aliases_and_claims_ask_for_them():
    assert find_task("test.alias.old") is rt.renamed
    assert get_task("test.alias.older") is rt.renamed
    assert {"test.alias.new", "test.alias.old", "test.alias.older"} <= set(registered_kinds())
    # Enqueueing through an alias (e.g. the HTTP API) stores the new kind.
    assert get_task("test.alias.old").envelope().kind == "test.alias.new"


def test_signals_of_an_alias_job_name_the_new_task_and_the_stored_kind():
    heard: list[tuple[Any, str]] = []

    def hear(sender: Any, **kwargs: Any) -> None:
        heard.append((sender, kwargs["kind"]))

    job_finished.connect(hear, sender=rt.renamed, weak=False)
    try:
        _old("test.alias.old")
        testing.run_jobs()
    finally:
        job_finished.disconnect(hear, sender=rt.renamed)
    assert heard == [(rt.renamed, "test.alias.old")]


def _handler(ctx):
    return None


CLASHES = {
    "alias is another task's kind": (
        {"kind": "test.alias.clash-1", "aliases": ["test.echo"]},
        r"alias 'test.echo' of .* is already registered as the kind by tests\.app\.tasks\.echo",
    ),
    "alias is another task's alias": (
        {"kind": "test.alias.clash-2", "aliases": ["test.alias.old"]},
        r"alias 'test.alias.old' .* as the alias of 'test.alias.new' by "
        r"tests\.app\.runtime_tasks\.renamed",
    ),
    "kind is another task's alias": (
        {"kind": "test.alias.older"},
        r"kind 'test.alias.older' .* as the alias of 'test.alias.new'",
    ),
}


@pytest.mark.parametrize(("options", "message"), CLASHES.values(), ids=CLASHES.keys())
def test_a_clashing_alias_or_kind_is_refused_naming_both(options, message):
    before = (dict(vars(rt.renamed)), set(registered_kinds()))
    with pytest.raises(DefinitionError, match=message):
        task(**options)(_handler)
    assert find_task(options["kind"]) in (None, rt.renamed)
    assert find_task("test.echo") is tasks.echo
    assert find_task("test.alias.old") is rt.renamed
    assert set(registered_kinds()) == before[1]


BAD = {
    "the kind itself": (
        {"kind": "test.alias.bad-1", "aliases": ["test.alias.bad-1"]},
        DefinitionError,
    ),
    "given twice": ({"kind": "test.alias.bad-2", "aliases": ["a.b", "a.b"]}, DefinitionError),
    "one string": ({"kind": "test.alias.bad-3", "aliases": "a.b"}, DefinitionError),
    "invalid name": ({"kind": "test.alias.bad-4", "aliases": ["-no"]}, InvalidKindError),
    "internal": ({"kind": "test.alias.bad-5", "aliases": ["headgate:workflow"]}, InternalKindError),
}


@pytest.mark.parametrize(("options", "error"), BAD.values(), ids=BAD.keys())
def test_bad_aliases_are_refused_and_nothing_is_registered(options, error):
    before = set(registered_kinds())
    with pytest.raises(error):
        task(**options)(_handler)
    assert set(registered_kinds()) == before
