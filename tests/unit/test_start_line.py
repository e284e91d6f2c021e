"""The command's first line counts its processes and threads in plain English."""

from __future__ import annotations

import logging

import pytest

from headgate_django.worker.logs import announce


@pytest.mark.parametrize(
    "processes, concurrency, line",
    [
        (1, 1, "runworkers: 1 process × 1 handler thread"),
        (1, 10, "runworkers: 1 process × 10 handler threads"),
        (4, 8, "runworkers: 4 processes × 8 handler threads"),
    ],
)
def test_the_start_line(caplog, processes, concurrency, line):
    with caplog.at_level(logging.INFO, logger="headgate_django.worker"):
        announce(processes, concurrency)
    assert [r.getMessage() for r in caplog.records] == [line]
