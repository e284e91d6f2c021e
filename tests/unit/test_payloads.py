"""Call payloads: the canonical JSON that fingerprints hash, and its fast paths."""

from __future__ import annotations

import pytest

from headgate_django.envelope import (
    NO_ARGUMENTS,
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


def test_arguments_json_cannot_hold_are_refused() -> None:
    with pytest.raises(PayloadError):
        encode_call((object(),), {})
    with pytest.raises(PayloadError):
        encode_call((float("nan"),), {})
