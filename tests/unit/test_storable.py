"""The rule for text every database stores alike (``kernel.storable``)."""

from __future__ import annotations

import json

import pytest

from headgate_django.kernel.storable import storable_json, storable_text


def test_storable_text_replaces_nul_and_lone_surrogates_only():
    assert storable_text("a\x00b\ud800c\udfff") == "a\ufffdb\ufffdc\ufffd"
    assert storable_text("plain 😀 \\u0000") == "plain 😀 \\u0000"


@pytest.mark.parametrize(
    ("value", "storable"),
    [
        ({"k": "a\x00"}, False),
        ({"a\x00": 1}, False),
        (["\ud800"], False),
        ("\\\x00", False),  # a backslash, then a NUL
        ("\\u0000", True),  # a backslash, then text
        ("\\\\u0000", True),
        ("😀", True),
    ],
)
def test_storable_json_reads_escapes_as_json_writes_them(value, storable):
    assert storable_json(json.dumps(value, ensure_ascii=False)) is storable
