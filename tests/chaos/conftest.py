"""The chaos tests run only when asked for (``pytest -m chaos``): they start private
database servers and take minutes. Any other run — ``make test``, tox, a bare ``pytest`` —
skips them, whatever its command line."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "chaos" in (config.option.markexpr or "").replace("not chaos", ""):
        return
    skip = pytest.mark.skip(reason="chaos run: select it with -m chaos (make chaos-ci)")
    for item in items:
        if item.get_closest_marker("chaos"):
            item.add_marker(skip)
