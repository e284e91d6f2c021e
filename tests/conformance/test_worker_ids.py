"""Two processes given one ``--worker-id`` (a copy-pasted unit file, say): their job leases
were always apart (each lease id has a random tail), but both held every maintenance duty
the id held, and their registry rows overwrote each other: a worker given the id of a
live one now refuses to start."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from django.db import connections

from headgate_django import store
from headgate_django.exceptions import WorkerIdInUseError
from headgate_django.store.workers import Beat, worker_get, worker_heartbeat, worker_register
from headgate_django.worker.runner import Worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_workers_given_one_id_never_both_hold_a_duty():
    first, second = Worker(worker_id="twin"), Worker(worker_id="twin")
    assert first._duties is not None and second._duties is not None
    ttl = timedelta(minutes=1)
    assert store.duty_acquire("reclaim", holder=first._duties.holder, ttl=ttl)
    assert not store.duty_acquire("reclaim", holder=second._duties.holder, ttl=ttl)


def test_a_worker_given_the_id_of_a_live_worker_refuses_to_start():
    worker_heartbeat(Beat("twin", "elsewhere", 1, None, 10, timedelta(seconds=5)))
    before = worker_get("twin")
    with pytest.raises(WorkerIdInUseError) as refused:
        Worker(worker_id="twin", queues=["twin-q"], burst=True, run_duties=False).run()
    assert "a live worker runs under the id 'twin' (pid 1 on elsewhere" in str(refused.value)
    assert refused.value.details == {"worker_id": "twin", "host": "elsewhere", "pid": 1}
    after = worker_get("twin")  # the live worker's row is left as it was
    assert (after.host, after.pid, after.started_at) == ("elsewhere", 1, before.started_at)


def test_a_worker_given_a_free_id_starts_and_takes_it_over():
    """Stopped, gone (a crash: its heartbeats missed), never seen, or this very process's
    own row (a worker run again in one process, a container restarted as pid 1)."""
    worker_heartbeat(
        Beat("stopped-twin", "elsewhere", 1, None, 10, timedelta(seconds=5)), stopped=True
    )
    # Last heartbeat "now", but every 1 ms: three missed beats later it is gone.
    worker_heartbeat(Beat("crashed-twin", "elsewhere", 2, None, 10, timedelta(milliseconds=1)))
    worker_heartbeat(
        Beat("own-twin", socket.gethostname(), os.getpid(), None, 10, timedelta(seconds=5))
    )
    time.sleep(0.05)
    for worker_id in ("stopped-twin", "crashed-twin", "own-twin", "never-seen"):
        Worker(worker_id=worker_id, queues=["twin-q"], burst=True, run_duties=False).run()
        row = worker_get(worker_id)
        assert (row.host, row.pid, row.status) == (socket.gethostname(), os.getpid(), "stopped")


def test_a_row_this_host_wrote_from_a_process_now_gone_is_taken_over_at_once():
    """A worker restarted under its own id right after a crash (its old row still live)."""
    dead = _pid_of_finished()
    worker_heartbeat(Beat("restarted", socket.gethostname(), dead, None, 10, timedelta(hours=1)))
    assert worker_get("restarted").status == "live"
    Worker(worker_id="restarted", queues=["twin-q"], burst=True, run_duties=False).run()
    assert worker_get("restarted").pid == os.getpid()


def _pid_of_finished() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_of_two_workers_registering_one_id_at_once_one_gets_it():
    """One statement decides, so neither can overwrite the other's fresh row."""
    beats = [Beat("race", f"host-{n}", n, None, 10, timedelta(seconds=5)) for n in range(2)]
    barrier = threading.Barrier(2)
    refused: list[object] = []

    def register(beat: Beat) -> None:
        barrier.wait()
        try:
            refused.append(worker_register(beat))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=register, args=(beat,)) for beat in beats]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [holder is None for holder in refused].count(True) == 1, refused
    (holder,) = (holder for holder in refused if holder is not None)
    assert worker_get("race").host == holder.host  # the winner's row, not overwritten
