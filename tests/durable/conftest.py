from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from headgate_django.durable import registry


@pytest.fixture
def fast_retries(settings: Any) -> None:
    """Job backoff in milliseconds, so retry paths run without waiting."""
    settings.HEADGATE = {
        "BACKOFF_BASE": timedelta(milliseconds=1),
        "BACKOFF_CAP": timedelta(milliseconds=5),
    }


@pytest.fixture
def swap_code() -> Iterator[Callable[..., None]]:
    """Replace (or, with ``None``, remove) the code registered for a (name, version), as a
    deploy would; everything is put back afterwards."""
    saved: list[tuple[dict[Any, Any], Any, Any]] = []

    def swap(kind: str, name: str, version: str, definition: Any) -> None:
        table = registry._WORKFLOWS if kind == "workflow" else registry._OPERATIONS
        saved.append((table, (name, version), table.get((name, version))))
        if definition is None:
            table.pop((name, version), None)
        else:
            table[(name, version)] = definition

    yield swap
    for table, key, old in reversed(saved):
        if old is None:
            table.pop(key, None)
        else:
            table[key] = old
