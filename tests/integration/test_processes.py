"""``runworkers --processes P``: children forked from the set-up parent.

Each child runs what ``--processes 1`` runs; the parent forwards SIGTERM/SIGINT/SIGHUP and
exits with the worst child exit code. The signal and exit-code rules are checked with the real
command; what a raising child does is checked with ``supervise`` itself in a fresh process,
because a handler cannot make a worker's own code raise.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from headgate_django.models import Job
from tests.app import tasks
from tests.conftest import ROOT, wait_for
from tests.integration.helpers import runs, state_is, wait_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_burst_children_share_the_drain_and_exit_zero(start_worker):
    # One handler per child and jobs of 0.3 s: neither child can drain them all before
    # the other has claimed some.
    ids = [tasks.sleeper.enqueue(seconds=0.3, label=str(i)) for i in range(8)]
    parent = start_worker("--burst", "--processes", "2", "--concurrency", "1", "--worker-id", "b")
    assert parent.proc.wait(timeout=60) == 0, parent.output()
    assert all(state_is(job_id, "completed") for job_id in ids)
    executions = [e for job_id in ids for e in runs(job_id) if e.label.startswith("start:")]
    assert len(executions) == len(ids)
    assert {e.worker for e in executions} == {"b.1", "b.2"}
    pids = {e.pid for e in executions}
    assert len(pids) == 2
    assert parent.pid not in pids
    assert parent.output().count(" stopped: ") == 2


def test_children_leave_what_the_parent_set_up_to_the_collector(start_worker):
    """The parent freezes its objects before forking, so a child's garbage collections
    skip them (and leave their memory pages shared)."""
    job_id = tasks.gc_frozen.enqueue()
    parent = start_worker("--burst", "--processes", "2", "--concurrency", "1")
    assert parent.proc.wait(timeout=60) == 0, parent.output()
    assert Job.objects.get(id=job_id).result > 10_000


def test_sigterm_to_the_parent_drains_every_child_then_exits_zero(start_worker):
    parent = start_worker("--processes", "2", "--concurrency", "1")
    wait_serving(parent, count=2)
    ids = [tasks.sleeper.enqueue(seconds=1.0, label=str(i)) for i in range(2)]
    wait_for(lambda: len({e.pid for job_id in ids for e in runs(job_id)}) == 2)

    assert parent.terminate() == 0, parent.output()
    # Both jobs were running when the signal came; the drain let them finish.
    assert all(state_is(job_id, "completed") for job_id in ids)
    assert parent.output().count(": draining (") == 2
    assert parent.output().count(" stopped: ") == 2


def test_sighup_to_the_parent_drains_every_child_then_exits_zero(start_worker):
    """What a closing terminal sends reaches only the parent (each child has a process
    group of its own): it passes it on, and every child drains as on SIGTERM."""
    parent = start_worker("--processes", "2", "--concurrency", "1")
    wait_serving(parent, count=2)
    ids = [tasks.sleeper.enqueue(seconds=1.0, label=str(i)) for i in range(2)]
    wait_for(lambda: len({e.pid for job_id in ids for e in runs(job_id)}) == 2)

    parent.proc.send_signal(signal.SIGHUP)
    assert parent.proc.wait(timeout=60) == 0, parent.output()
    assert all(state_is(job_id, "completed") for job_id in ids)
    assert parent.output().count("received SIGHUP: draining (") == 2
    assert parent.output().count(" stopped: ") == 2


def test_a_child_killed_by_a_signal_makes_the_parent_exit_128_plus_n(start_worker):
    parent = start_worker("--processes", "2", "--concurrency", "1", "--worker-id", "k")
    wait_serving(parent, count=2)
    job_id = tasks.crashy.enqueue(marker="k")
    wait_for(lambda: runs(job_id))
    victim = runs(job_id)[0].pid
    os.kill(victim, signal.SIGKILL)

    # Said when it happens, not only in the exit code once the survivor stops too.
    wait_for(
        lambda: f"worker process {victim} was killed by SIGKILL; 1 of 2 " in parent.output(),
        timeout=30,
    )
    assert parent.terminate() == 128 + signal.SIGKILL
    assert parent.output().count(" stopped: ") == 1  # the survivor drained and stopped


def test_children_stop_when_their_parent_is_killed(start_worker):
    """A SIGKILLed parent forwards nothing, and each child is in a process group of its
    own: the children notice they are orphaned and drain and exit by themselves instead of
    claiming on, unsupervised."""
    parent = start_worker("--processes", "2", "--concurrency", "1", "--worker-id", "o")
    wait_serving(parent, count=2)
    lines = parent.output().splitlines()
    line = next(text for text in lines if "started 2 worker processes" in text)
    children = [int(pid) for pid in line.rpartition(": ")[2].split(", ")]
    parent.kill()

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # An exited child of the dead parent is reaped by init; until then it is a zombie.
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rpartition(")")[2].split()[0] == "Z"
        except FileNotFoundError:
            return True

    wait_for(lambda: all(gone(pid) for pid in children), timeout=30)
    assert parent.output().count("its parent") == 2
    assert parent.output().count(" stopped: ") == 2  # each drained and stopped cleanly


SUPERVISE = """
import sys
import django
django.setup()
from headgate_django.worker.supervisor import supervise

def serve(worker_id):
    sys.stdout.write(f"serving {worker_id}\\n")
    sys.stdout.flush()
    if worker_id == "w.2":
        raise RuntimeError("child failure")

code = supervise(2, serve, "w")
print("parent returned", code, flush=True)
"""


def run_supervise(worker_env: dict[str, str], script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script],
        env=worker_env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_raising_child_logs_its_traceback_and_exits_non_zero(worker_env):
    result = run_supervise(worker_env, SUPERVISE)
    output = result.stdout + result.stderr
    assert "serving w.1" in output
    assert "serving w.2" in output
    assert "Traceback" in output
    assert "RuntimeError: child failure" in output
    # Children leave with os._exit: only the parent ever returns from supervise().
    assert output.count("parent returned") == 1
    assert "parent returned 1" in output
    assert result.returncode == 0, output


def test_the_parent_refuses_to_fork_while_another_thread_runs(worker_env):
    script = (
        "import threading\n"
        "threading.Thread(target=threading.Event().wait, name='busy', daemon=True).start()\n"
        + SUPERVISE
    )
    result = run_supervise(worker_env, script)
    assert result.returncode != 0
    assert "cannot fork worker processes while threads run (busy)" in result.stderr
    assert "serving" not in result.stdout
