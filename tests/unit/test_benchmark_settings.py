"""The benchmarks' settings modules load and pass Django's checks.

They build on the sample project's settings, so a change there can break every benchmark
without any test of the library noticing (the sample project once dropped its ``LOGGING``,
which ``benchmarks/settings.py`` imported).
"""

from __future__ import annotations

import pytest

from tests.conftest import manage


@pytest.mark.parametrize(
    "module", ["benchmarks.settings", "benchmarks.durable_settings", "benchmarks.defaults_settings"]
)
def test_benchmark_settings_pass_checks(module: str) -> None:
    done = manage("check", settings=module)
    assert done.returncode == 0, done.stderr
