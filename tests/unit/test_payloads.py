"""Call payloads: the canonical JSON that fingerprints hash, and its fast paths."""

from __future__ import annotations

import dataclasses

import pytest

from headgate_django.envelope import (
    NO_ARGUMENTS,
    Envelope,
    canonical_json,
    decode_call,
    encode_call,
    fingerprint,
)
from headgate_django.exceptions import PayloadError


def test_a_call_without_arguments_is_exactly_what_the_encoder_writes() -> None:
    assert encode_call((), {}) == NO_ARGUMENTS == canonical_json({"args": [], "kwargs": {}})
    assert decode_call(encode_call((), {})) == ([], {})


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((1, "a"), {}), ((), {"b": [1, 2], "a": None}), ((), {"é": "ü"}), (([],), {"": {}})],
)
def test_calls_round_trip_and_encode_canonically(args, kwargs) -> None:
    payload = encode_call(args, kwargs)
    assert decode_call(payload) == (list(args), kwargs)
    assert payload == encode_call(args, dict(reversed(list(kwargs.items()))))


def test_the_fingerprint_covers_kind_and_payload_unambiguously() -> None:
    assert fingerprint("a", b"bc") != fingerprint("ab", b"c")
    assert fingerprint("a", NO_ARGUMENTS) == fingerprint("a", encode_call((), {}))
    assert len(fingerprint("a", b"")) == 32


@pytest.mark.parametrize(
    ("kind", "payload", "expected"),
    [
        ("noop", NO_ARGUMENTS, "1a24b8d726005c8d9590bfab21ef6dea"),
        (
            "app.tasks.send_email",
            b'{"args":[],"kwargs":{"to":"a@example.com"}}',
            "a798b98c76c2335a9ba9342815ec197b",
        ),
        ("k", bytearray(b"\x00\xff"), "11bcb38f6ae86801f93f19b637f5863f"),
        ("k", memoryview(b"xyz"), "59dd9bdd445a7605ca0a368d7514015b"),
    ],
)
def test_fingerprints_stay_what_earlier_releases_stored(kind, payload, expected) -> None:
    """A quarantine row holds a fingerprint written by whichever release quarantined it; a
    new release must compute the same one, or the quarantined job would run again."""
    assert fingerprint(kind, payload) == expected


def test_a_tasks_envelope_is_the_envelope_its_fields_describe() -> None:
    from tests.app import tasks

    definition = tasks.echo
    for args, kwargs in [((), {}), ((1,), {"b": None})]:
        env = definition.envelope(*args, **kwargs)
        assert env == Envelope(
            kind=definition.kind,
            payload=encode_call(args, kwargs),
            queue=definition.queue,
            priority=definition.priority,
            schema_version=definition.schema_version,
            max_attempts=definition.max_attempts,
            retention=definition.retention,
            timeout=definition.timeout,
        )
        assert repr(env) == repr(dataclasses.replace(env))
    first, second = definition.envelope(), definition.envelope()
    assert first.meta is not second.meta
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.payload = b"{}"  # type: ignore[misc]


def test_arguments_json_cannot_hold_are_refused() -> None:
    with pytest.raises(PayloadError):
        encode_call((object(),), {})
    with pytest.raises(PayloadError):
        encode_call((float("nan"),), {})
