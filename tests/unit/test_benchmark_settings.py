"""The benchmarks' settings modules load and pass Django's checks.

They build on the sample project's settings, so a change there can break every benchmark
without any test of the library noticing (the sample project once dropped its ``LOGGING``,
which ``benchmarks/settings.py`` imported).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "module", ["benchmarks.settings", "benchmarks.durable_settings", "benchmarks.defaults_settings"]
)
def test_benchmark_settings_pass_checks(module: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(DJANGO_SETTINGS_MODULE=module, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
