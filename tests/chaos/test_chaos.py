"""The chaos run and the outage scenario in their CI form (``make chaos-ci``).

Each runs as its own process against its own private database server (see
``tests/chaos/run.py``), which exits non-zero when an invariant fails; its report is
printed whatever the outcome. ``make chaos`` runs the full form by hand.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.chaos.fleet import ROOT

pytestmark = pytest.mark.chaos

#: Bounded so the whole chaos step stays within its CI budget (PostgreSQL ≤ 2.5 min,
#: MariaDB ≤ 1.5 min, wall clock, on two cores).
CI_RUNS = {
    "postgres": ["--minutes", "1", "--jobs", "2000", "--workflows", "40", "--durable", "40"],
    "mariadb": ["--minutes", "0.5", "--jobs", "600", "--workflows", "15", "--durable", "15"],
}


def run(module: str, *args: str, timeout: float) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM, not SIGKILL: the run stops its workers and its private server on the way out.
        proc.terminate()
        output, _ = proc.communicate(timeout=120)
    print(output)  # the report, shown by `pytest -s` (and on failure in any case)
    assert proc.returncode == 0, f"{module} {' '.join(args)} failed:\n{output[-4000:]}"


@pytest.mark.parametrize("database", ["postgres", "mariadb"])
def test_chaos_run(database: str) -> None:
    run("tests.chaos.run", "--database", database, *CI_RUNS[database], timeout=600)


@pytest.mark.parametrize("database", ["postgres", "mariadb"])
def test_workers_ride_out_a_database_outage(database: str) -> None:
    run("tests.chaos.outage", "--database", database, timeout=300)
