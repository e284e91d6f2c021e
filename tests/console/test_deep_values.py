"""Values nested deeper than the console shows: the API stores a durable input nested
almost as deep as Python can recurse, and the pages that pretty-print it must still load."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.db import connection
from django.test import Client
from django.urls import reverse

from headgate_django import durable
from headgate_django.console.readonly import MAX_SHOWN_DEPTH, pretty_bytes, pretty_json
from headgate_django.models import Execution

PLACEHOLDER = f"(too deeply nested to display: more than {MAX_SHOWN_DEPTH} levels)"


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.django_db
@pytest.mark.skipif(
    connection.vendor == "mysql", reason="MariaDB stores no JSON nested 32 levels or more"
)
# 890: deep enough that the indenting encoder ran out of stack on this page (a 500), not
# so deep that the ORM's own json.loads of the row does (past about 910 under pytest).
@pytest.mark.parametrize("depth", [MAX_SHOWN_DEPTH + 1, 890])
def test_the_change_page_of_a_deeply_nested_input_loads(reader: Any, depth: int) -> None:
    # Stored before the store refused inputs nested deeper than 24 levels (or written by
    # another client of the table): the page must still load.
    workflow_id = durable.Client().start("console-ship", "1", {"order": 1}).workflow_id
    Execution.objects.filter(pk=workflow_id).update(input=nested(depth))
    client = Client()
    client.force_login(reader)
    url = reverse("admin:headgate_django_execution_change", args=[quote(workflow_id)])
    response = client.get(url)
    assert response.status_code == 200
    assert PLACEHOLDER in response.content.decode()


def test_pretty_json_shows_up_to_its_depth_and_never_recurses_deeper() -> None:
    assert pretty_json(nested(MAX_SHOWN_DEPTH)).startswith('<pre class="hg-json">[')
    assert pretty_json({"input": nested(MAX_SHOWN_DEPTH)}) == PLACEHOLDER
    assert pretty_json(nested(100_000)) == PLACEHOLDER


def test_pretty_bytes_of_json_too_deep_to_parse() -> None:
    raw = b"[" * 100_000 + b"]" * 100_000
    assert pretty_bytes(raw) == "200000 bytes (too deeply nested to display)"
