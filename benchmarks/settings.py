"""Settings for benchmark runs: the sample project plus the no-op bench app.

``DATABASE_URL`` selects the database exactly as for the sample project. ``DEBUG`` is off
(Django keeps a log of every query while it is on) and the worker's status lines are
quietened, because both would be measured otherwise.
"""

from __future__ import annotations

from sampleproject.settings import *  # noqa: F403
from sampleproject.settings import INSTALLED_APPS

DEBUG = False
INSTALLED_APPS = [*INSTALLED_APPS, "benchmarks.benchapp"]
# A configured handler, so `runworkers` adds none of its own: warnings and errors only.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"headgate_django": {"handlers": ["console"], "level": "WARNING"}},
}

import os  # noqa: E402

# benchmarks/workflows.py measures dependent-start latency with and without the wake-up.
HEADGATE = {"WORKFLOW_EVENT_WAKE": os.environ.get("HEADGATE_BENCH_EVENT_WAKE", "1") == "1"}
