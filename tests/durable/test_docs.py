"""The runnable example of ``docs/durable.md`` runs as written."""

from __future__ import annotations

from typing import Any

import pytest

from headgate_django import durable
from tests.docs.markdown import DOCS, blocks

pytestmark = pytest.mark.django_db


def test_the_checkout_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    python = [b for b in blocks(DOCS / "durable.md") if b.lang == "python"]
    definitions = next(b for b in python if b.module_name == "shop.tasks")
    usage = next(b for b in python if "Client().start(" in b.code)
    namespace: dict[str, Any] = {"__name__": "shop.tasks"}
    exec(compile(definitions.code, definitions.where, "exec"), namespace)
    exec(compile(usage.code, usage.where, "exec"), namespace)
    view = namespace["view"]
    assert view.state == "succeeded"
    assert view.result["status"] == "shipped" and view.result["by"] == "ops"
    printed = capsys.readouterr().out  # PostgreSQL's jsonb keeps its own key order
    assert printed.startswith("succeeded {") and "'status': 'shipped'" in printed
    again = durable.Client().start("checkout", "1", {"id": 42}, business_idempotency_key="order:42")
    assert again.deduplicated is False  # the first one finished: the key is free
