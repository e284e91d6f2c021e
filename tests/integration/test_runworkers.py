"""``manage.py runworkers`` options and reports: --burst, --processes, per-attempt timeouts,
jobs of kinds this worker does not know."""

from __future__ import annotations

import io
import signal

import pytest
from django.core.management import call_command

from headgate_django import enqueue, store
from headgate_django.envelope import Envelope, encode_call
from tests.app import tasks
from tests.conftest import wait_for
from tests.integration.helpers import alive, headgate_env, job, runs, state_is, wait_serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_burst_drains_then_exits_zero(start_worker):
    ids = [tasks.echo.enqueue(value=i) for i in range(5)]
    worker = start_worker("--burst", "--concurrency", "2")
    assert worker.proc.wait(timeout=60) == 0, worker.output()
    # The process leaves without the interpreter's teardown: its last log line is flushed.
    assert " stopped: " in worker.output()
    for i, job_id in enumerate(ids):
        row = job(job_id)
        assert row.state == "completed"
        assert row.result == {"value": i, "attempt": 1}


def test_the_status_line_accounts_for_every_claim(start_worker):
    """Snoozes (what a waiting coordinator does every poll), skips and revokes have their
    own counters: claimed = completed + retried + snoozed + skipped + failed + lost +
    in flight, so an operator never sees claims vanish."""
    tasks.echo.enqueue(value=1)
    tasks.snooze_once.enqueue()  # back in a minute: after this burst
    tasks.skip.enqueue()
    tasks.revoke.enqueue()
    worker = start_worker("--burst", "--concurrency", "2")
    assert worker.proc.wait(timeout=60) == 0, worker.output()
    assert (
        "stopped: claimed=4 completed=1 retried=0 snoozed=1 skipped=2 failed=0 lost=0 "
        "in_flight=0" in worker.output()
    ), worker.output()


@pytest.mark.parametrize(
    "option, reason",
    [
        (["--concurrency", "0"], "--concurrency must be at least 1, not 0"),
        (["--processes", "-1"], "--processes must be at least 1, not -1"),
        (["--queue", ""], "--queue: a queue name must be a non-empty string"),
        (["--queue", "a b"], "--queue: invalid queue name 'a b'"),
        (
            ["--queue", "default,emails"],
            "one queue per --queue: --queue default --queue emails",
        ),
        (["--lease-ttl", "0"], "--lease-ttl must be positive"),
        (["--lease-ttl", "nan"], "--lease-ttl must be positive and at most 31536000 seconds"),
        (["--lease-ttl", "inf"], "at most 31536000 seconds (a year), not inf"),
        (["--lease-ttl", "1e15"], "at most 31536000 seconds (a year), not 1e+15"),
        (["--metrics-port", "99999"], "--metrics-port must be from 1 to 65535, not 99999"),
        (["--metrics-port", "-1"], "--metrics-port must be from 1 to 65535, not -1"),
        (["--worker-id", " "], "--worker-id must not be blank"),
    ],
)
def test_a_refused_option_exits_one_with_the_reason_before_the_start_line(
    start_worker, option, reason
):
    worker = start_worker("--burst", *option)
    assert worker.proc.wait(timeout=60) == 1
    assert reason in worker.output()
    assert "handler thread" not in worker.output()  # refused before announcing a start


def test_a_lease_too_short_for_the_eviction_budget_is_warned_about():
    """--lease-ttl is held to the rule the system check holds LEASE_TTL to (W003), and only
    for a worker that runs the duties (eviction is one)."""
    said = io.StringIO()
    call_command("runworkers", "--burst", "--lease-ttl", "1.2", stderr=said)
    assert "warning: --lease-ttl: HEADGATE['EVICT_BUDGET'] (1 s) is not below" in said.getvalue()
    assert "(headgate.W003)" in said.getvalue()
    for fine in (["--lease-ttl", "1.6"], ["--lease-ttl", "1.2", "--no-duties"]):
        said = io.StringIO()
        call_command("runworkers", "--burst", *fine, stderr=said)
        assert "W003" not in said.getvalue(), fine


def test_call_command_returns_to_its_caller():
    """Only the command line leaves the process at the end; a caller of call_command (a
    script, a test) gets control back after the burst."""
    ids = [tasks.echo.enqueue(value=i) for i in range(3)]
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    call_command("runworkers", "--burst", "--concurrency", "2", "--no-duties")
    assert all(job(job_id).state == "completed" for job_id in ids)
    # ... with its own signal handling as it was: the worker's is gone with the worker.
    assert {s: signal.getsignal(s) for s in handlers} == handlers


def test_processes_start_children_that_all_serve_and_stop_together(start_worker):
    parent = start_worker(
        "--processes",
        "2",
        "--concurrency",
        "1",
        "--worker-id",
        "pair",
        env=headgate_env(IDLE_BACKOFF_MAX=0.1),
    )
    wait_serving(parent, count=2)  # both children log to the parent's output
    ids = [tasks.sleeper.enqueue(seconds=0.5, label=str(i)) for i in range(4)]
    wait_for(lambda: all(state_is(job_id, "completed") for job_id in ids))

    executions = [e for job_id in ids for e in runs(job_id)]
    pids = {e.pid for e in executions}
    assert len(pids) == 2
    assert parent.pid not in pids
    # Each child gets its own id: a shared one would make both hold the same duty lease.
    assert {e.worker for e in executions} == {"pair.1", "pair.2"}

    assert parent.terminate() == 0
    assert parent.output().count(" stopped: ") == 2
    assert not any(alive(pid) for pid in pids)


def test_attempt_timeout_archives_the_last_attempt(start_worker):
    # Two jobs, one handler thread: the first handler ignores its timeout and keeps its
    # thread, so the second must wait for the thread, not time out while queued for it.
    ids = [tasks.too_slow.enqueue(), tasks.too_slow.enqueue()]
    worker = start_worker("--burst", "--concurrency", "1")
    assert worker.proc.wait(timeout=60) == 0, worker.output()
    for job_id in ids:
        row = job(job_id)
        assert row.state == "archived"
        assert row.attempt == 1
        assert len(row.errors) == 1
        assert row.errors[0]["error"].startswith("timeout:")
        assert row.result is None
        (execution,) = runs(job_id)
        assert execution.started_at < row.finalized_at


def test_job_of_unknown_kind_is_left_alone_and_reported(start_worker):
    (unknown,) = enqueue(Envelope(kind="test.nobody-handles-this", payload=encode_call([], {})))
    known = tasks.noop.enqueue()
    worker = start_worker()
    wait_for(lambda: state_is(known, "completed"))
    wait_for(lambda: "test.nobody-handles-this" in worker.output())

    row = job(unknown)
    assert (row.state, row.fence, row.attempt) == ("available", 0, 0)
    (line,) = [ln for ln in worker.output().splitlines() if "test.nobody-handles-this" in ln]
    assert " WARNING " in line
    assert "1 available job" in line
    assert worker.terminate() == 0
    assert job(unknown).state == "available"


def test_unknown_kinds_are_counted_once_the_worker_runs_short(start_worker):
    """Counting them reads every available job, so a worker whose claims come back full
    leaves it until it runs out of jobs it can claim (here, after the fourth sleeper)."""
    enqueue(Envelope(kind="test.nobody-handles-this", payload=encode_call([], {})))
    # Three sleepers take the worker past the first second; the fourth leaves time to look.
    sleepers = [
        tasks.sleeper.enqueue(seconds=s, label=str(n)) for n, s in enumerate([0.4] * 3 + [2])
    ]
    worker = start_worker("--concurrency", "1")
    wait_for(lambda: runs(sleepers[3]))
    # Over a second since the worker began (three sleepers done), every claim so far full.
    assert "nobody-handles-this" not in worker.output()
    wait_for(lambda: "nobody-handles-this" in worker.output())
    wait_for(lambda: state_is(sleepers[3], "completed"))
    assert worker.terminate() == 0


def test_a_burst_reports_the_unknown_kinds_it_leaves(start_worker):
    (unknown,) = enqueue(Envelope(kind="test.nobody-handles-this", payload=encode_call([], {})))
    tasks.noop.enqueue()
    worker = start_worker("--burst")
    assert worker.proc.wait(timeout=60) == 0, worker.output()
    assert "1 available job(s) of kind 'test.nobody-handles-this'" in worker.output()
    # Why a kind the enqueuing code knows may be unknown here (a task defined in a module
    # the worker never imports), and the way out.
    assert (
        "a worker registers the tasks that installed apps define in, or import into, "
        "their modules named 'tasks' (HEADGATE['AUTODISCOVER_MODULES'])" in worker.output()
    ), worker.output()
    assert job(unknown).state == "available"


def test_completion_that_does_not_land_is_reported_and_the_worker_goes_on(start_worker):
    job_id = tasks.sleeper.enqueue(seconds=1.0, label="cancelled")
    worker = start_worker()
    wait_for(lambda: runs(job_id))
    assert store.job_cancel(job_id)  # the operator cancels it while the handler runs

    wait_for(lambda: f"completion of job {job_id} did not land" in worker.output())
    row = job(job_id)
    assert (row.state, row.result) == ("cancelled", None)
    after = tasks.echo.enqueue(value="after")
    wait_for(lambda: state_is(after, "completed"))
    assert worker.terminate() == 0


def test_a_burst_run_on_an_unreachable_database_says_so_once_then_gives_up() -> None:
    """A burst run is for cron or CI: it must end. With nothing held, it waits twice the
    lease TTL (here 1 s) for the database, warning once, then exits 1."""
    from tests.conftest import free_port, manage

    done = manage(
        "runworkers",
        "--burst",
        "--lease-ttl",
        "1",
        settings="tests.settings",
        database_url=f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere",
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("database unavailable") == 1, done.stderr
    assert "database unreachable for 2 s: the burst run gives up" in done.stderr
    assert "CommandError: the database stayed unreachable; nothing was run" in done.stderr


def test_the_status_line_says_the_database_is_unavailable() -> None:
    """Between the outage's first warning and its reminders, the status line alone must not
    read as an idle, healthy worker (``claimed=0 … failed=0``): it names the outage."""
    from tests.conftest import free_port, manage

    done = manage(
        "runworkers",
        "--burst",
        "--lease-ttl",
        "4",  # gives up after 8 s: past the first status line, due at 5 s
        settings="tests.settings",
        database_url=f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere",
    )
    assert done.returncode == 1, done.stderr
    status = [line for line in done.stderr.splitlines() if " status claimed=" in line]
    assert status, done.stderr
    assert all(" database_unavailable=" in line for line in status), done.stderr


def test_burst_children_that_give_up_on_the_database_say_why_without_a_traceback() -> None:
    """With --processes each child gives up as a single worker does: the same one line,
    exit status 1 for the parent, and no traceback of the command's own error."""
    from tests.conftest import free_port, manage

    done = manage(
        "runworkers",
        "--burst",
        "--processes",
        "2",
        "--lease-ttl",
        "1",
        settings="tests.settings",
        database_url=f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere",
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("the burst run gives up") == 2, done.stderr
    assert (
        done.stderr.count("CommandError: the database stayed unreachable; nothing was run") == 2
    ), done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_ctrl_c_while_it_starts_stops_it_with_one_line_and_no_traceback() -> None:
    """A Ctrl-C before the worker runs (here: while it waits for a database server that
    accepted the connection but never answers) is no crash: one line, status 130 (as a
    shell reports an interrupted command), no traceback."""
    import os
    import socket
    import subprocess
    import sys

    from tests.conftest import ROOT

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"postgresql://postgres@127.0.0.1:{silent.getsockname()[1]}/x?connect_timeout=120"
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
        env.update(DJANGO_SETTINGS_MODULE="tests.settings", DATABASE_URL=url, PYTHONPATH=str(ROOT))
        with subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runworkers"],
            env=env,
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            assert proc.stderr is not None
            said = [proc.stderr.readline()]
            while said[-1] and "handler thread" not in said[-1]:  # then it looks for tables
                said.append(proc.stderr.readline())
            proc.send_signal(signal.SIGINT)
            said.append(proc.stderr.read())
            assert proc.wait(timeout=60) == 130, "".join(said)
    output = "".join(said)
    assert "Traceback" not in output, output
    assert "interrupted while starting: nothing was run" in output, output
