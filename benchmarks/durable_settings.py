"""Settings for ``benchmarks/durable.py``: the benchmark settings plus the durable bench app."""

from __future__ import annotations

from benchmarks.settings import *  # noqa: F403
from benchmarks.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "benchmarks.durableapp"]
