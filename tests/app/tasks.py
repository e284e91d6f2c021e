"""Tasks used by the test suite (autodiscovered like a user's ``tasks`` module)."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta

from asgiref.sync import sync_to_async

from headgate_django import Revoke, Skip, Snooze, task
from tests.app.models import Execution


def record(ctx, label: str = "") -> None:
    Execution.objects.create(
        job_id=ctx.job_id,
        label=label,
        attempt=ctx.attempt,
        fence=ctx.lease.fence,
        worker=ctx.worker_id,
        pid=os.getpid(),
    )


@task(kind="test.noop")
def noop(ctx) -> None:
    return None


@task(kind="test.echo")
def echo(ctx, value=None, **kwargs):
    return {"value": value, "attempt": ctx.attempt}


@task(kind="test.record")
def record_run(ctx, label: str = "", sleep: float = 0.0):
    record(ctx, label)
    if sleep:
        time.sleep(sleep)
    return {"label": label}


@task(kind="test.fail", max_attempts=3)
def always_fail(ctx, message: str = "boom"):
    raise RuntimeError(message)


@task(kind="test.flaky")
def flaky(ctx, succeed_on: int = 2):
    record(ctx)
    if ctx.attempt < succeed_on:
        raise ValueError(f"attempt {ctx.attempt} fails")
    return ctx.attempt


@task(kind="test.snooze")
def snooze_once(ctx, seconds: float = 60.0):
    record(ctx)
    if Execution.objects.filter(job_id=ctx.job_id).count() == 1:
        raise Snooze(timedelta(seconds=seconds))
    return "woke"


@task(kind="test.revoke")
def revoke(ctx, reason: str = "the order is gone"):
    raise Revoke(reason)


@task(kind="test.skip")
def skip(ctx, reason: str = "not needed"):
    raise Skip(reason)


@task(kind="test.async")
async def async_echo(ctx, value=None):
    return {"async": value}


@task(kind="test.sleep")
def sleeper(ctx, seconds: float = 1.0, label: str = ""):
    """Sleeps in small steps; records start and end so tests can see what finished."""
    record(ctx, f"start:{label}")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    record(ctx, f"end:{label}")
    return "slept"


@task(kind="test.gc_frozen")
def gc_frozen(ctx) -> int:
    """How many objects the collector of the process running this leaves alone."""
    import gc

    return gc.get_freeze_count()


@task(kind="test.crashy")
def crashy(ctx, marker: str = ""):
    """Hangs until killed (tests SIGKILL the worker while this runs)."""
    record(ctx, "crashy")
    while not ctx.cancelled:
        time.sleep(0.05)


@task(kind="test.crash_once")
def crash_once(ctx, marker: str = ""):
    """Hangs (until killed or cancelled) while no crash was charged; then completes."""
    record(ctx, f"crash_attempt:{ctx.crash_attempt}")
    if ctx.crash_attempt >= 1:
        return {"recovered_after": ctx.crash_attempt}
    while not ctx.cancelled:
        time.sleep(0.05)
    return None


@task(kind="test.steps")
def steps(ctx, fail_at: str = ""):
    a = ctx.step("a", lambda: (record(ctx, "a"), 1)[1])
    b = ctx.step("b", lambda: (record(ctx, "b"), 2)[1])
    if fail_at == "c" and ctx.attempt == 1:
        raise RuntimeError("fail before c")
    c = ctx.step("c", lambda: (record(ctx, "c"), 3)[1])
    return a + b + c


@task(kind="test.cursor")
def cursor_pages(ctx, pages: int = 5, fail_after: int = -1):
    def walk(cursor: bytes | None) -> int:
        start = int(cursor or b"0")
        for page in range(start, pages):
            record(ctx, f"page:{page}")
            ctx.set_cursor(str(page + 1).encode())
            if page == fail_after and ctx.attempt == 1:
                raise RuntimeError("interrupted")
        return pages

    return ctx.step_cursor("import-pages", walk)


@task(kind="test.async-steps")
async def async_steps(ctx, pages: int = 4, fail_after: int = -1):
    """The resumable-work API from an ``async def`` handler, as ``steps`` and ``cursor_pages``."""
    arecord = sync_to_async(record)

    async def first():
        await arecord(ctx, "a")
        return 1

    async def walk(cursor: bytes | None) -> int:
        for page in range(int(cursor or b"0"), pages):
            await arecord(ctx, f"page:{page}")
            await ctx.aset_cursor(str(page + 1).encode())
            await ctx.aset_progress(page + 1, pages, f"page {page + 1}")
            if page == fail_after and ctx.attempt == 1:
                raise RuntimeError("interrupted")
        return pages

    a = await ctx.astep("a", first)
    b = await ctx.astep("b", lambda: 10)  # a plain function works too
    return a + b + await ctx.astep_cursor("pages", walk)


@task(kind="test.timeout", timeout=timedelta(milliseconds=300), max_attempts=1)
def too_slow(ctx):
    """Ignores its 300 ms timeout (and cancellation) and sleeps on."""
    record(ctx, "timeout")
    time.sleep(1.5)
    return "late"


@task(
    kind="test.versioned", schema_version=2, upcaster=lambda v, a, k: (a, {**k, "upcast_from": v})
)
def versioned(ctx, **kwargs):
    return kwargs


@task(kind="test.ephemeral", retention=timedelta(0))
def ephemeral(ctx):
    return "gone"


@task(kind="test.fail_times")
def fail_times(ctx, times: int = 1):
    """Fails the first ``times`` executions of this job (counted in Execution rows), across
    attempts, operator retries and workflow generations."""
    record(ctx, "fail_times")
    if Execution.objects.filter(job_id=ctx.job_id).count() <= times:
        raise RuntimeError(f"execution fails ({times} planned failure(s))")
    return "ok"


# -- workflow tests -------------------------------------------------------------------

#: When set (in a worker subprocess): ``;``-separated pause points ``path|suffix|mode``.
#: The first coordinator tick (across every process given the same ``path``) that promotes
#: a node whose job id ends with ``suffix`` creates ``path``, writes ``pid,promoted ids``
#: to it and hangs until the test SIGKILLs that worker. ``mode`` says where: ``before-commit``
#: (inside the fenced tick transaction: the checkpoint and the promotion are written but not
#: committed) or ``after-commit`` (the tick committed; the attempt has not ended).
_TICK_PAUSES = os.environ.get("HEADGATE_TEST_TICK_PAUSE")
if _TICK_PAUSES:
    from headgate_django.store import workflows as _workflow_store
    from headgate_django.workflows import coordinator as _coordinator

    _pauses = [spec.split("|") for spec in _TICK_PAUSES.split(";")]

    def _hang(job_ids, mode):
        for path, suffix, pause_mode in _pauses:
            if pause_mode != mode or not any(j.endswith(suffix) for j in job_ids):
                continue
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                continue  # another worker already paused here
            os.write(fd, ",".join([str(os.getpid()), *job_ids]).encode())
            os.close(fd)
            while True:  # until SIGKILL
                time.sleep(0.05)

    _promote = _workflow_store._promote
    _tick_save = _coordinator.workflow_tick_save

    def _paused_promote(cursor, conn, job_ids):
        _promote(cursor, conn, job_ids)
        _hang(job_ids, "before-commit")

    def _paused_tick_save(ref, **kwargs):
        _tick_save(ref, **kwargs)
        _hang(kwargs["plan"].promote, "after-commit")

    _workflow_store._promote = _paused_promote
    _coordinator.workflow_tick_save = _paused_tick_save


@task(kind="test.wf_cursor")
def wf_cursor_pages(ctx, pages: int = 6, pause: float = 0.0):
    """The seed's cursor-step example: import a page, then persist the next page as the
    cursor (fenced). A stale attempt whose cursor write is refused records it and stops."""
    from headgate_django import LeaseLostError

    def walk(cursor: bytes | None) -> int:
        page = int(cursor or b"0")
        while page < pages:
            record(ctx, f"page:{page}")  # import_page(page)
            time.sleep(pause)
            page += 1
            try:
                ctx.set_cursor(str(page).encode())
            except LeaseLostError:
                record(ctx, f"fenced:{page}")
                raise
        return pages

    return ctx.step_cursor("import-pages", walk)


_BASE_EXCEPTIONS: dict[str, type[BaseException]] = {
    "SystemExit": SystemExit,
    "KeyboardInterrupt": KeyboardInterrupt,
    "GeneratorExit": GeneratorExit,
    "CancelledError": asyncio.CancelledError,
}


@task(kind="test.base_exit", max_attempts=2)
def base_exit(ctx, name: str = "SystemExit"):
    """Raises a ``BaseException`` that is not an ``Exception`` (by class name)."""
    record(ctx, name)
    raise _BASE_EXCEPTIONS[name]("raised by the handler")


@task(kind="test.async_base_exit", max_attempts=2)
async def async_base_exit(ctx, name: str = "CancelledError"):
    await asyncio.sleep(0)
    raise _BASE_EXCEPTIONS[name]("raised by the handler")


@task(kind="test.hard_exit")
def hard_exit(ctx):
    """Ends the worker process on the spot, as a segfault or the OOM killer would."""
    record(ctx, "hard_exit")
    os._exit(3)


@task(kind="test.periodic")
def periodic(ctx, label: str = ""):
    """Records which schedule tick it ran for: ``<schedule>@<tick epoch seconds>``."""
    origin = ctx.periodic_origin
    record(ctx, f"{origin.schedule}@{int(origin.tick_at.timestamp())}" if origin else "none")
    return None


def _schedule_defs() -> None:
    """A workflow factory and a durable workflow for the schedule tests."""
    from headgate_django import durable, schedules
    from headgate_django.workflows import Workflow

    @schedules.workflow_factory("test-nightly-import")
    def nightly_import(workflow_id, tick_at):
        return Workflow(workflow_id).add("run", periodic.envelope(), [])

    @schedules.workflow_factory("test-stall-once")
    def stall_once(workflow_id, tick_at):
        """The first call in any process (the file named by HEADGATE_TEST_STALL_MARKER does
        not exist yet) writes its pid there and sleeps, so a test can SIGSTOP it inside a
        scheduler pass: after the pass read its due schedules, before it writes."""
        marker = os.environ.get("HEADGATE_TEST_STALL_MARKER")
        if marker:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                time.sleep(3.0)
        return nightly_import(workflow_id, tick_at)

    @schedules.workflow_factory("test-broken")
    def broken(workflow_id, tick_at):
        raise RuntimeError("the report source is down")

    @durable.workflow("test-scheduled", version="1")
    def scheduled(ctx, inp):
        return {"ok": True}


_schedule_defs()

from tests.app import runtime_tasks as runtime_tasks  # noqa: E402  (signals, waits, aliases)


@task(kind="test.charge")
def charge(ctx, cost: int = 1):
    """Reports what the attempt cost against its rate class (admission tests)."""
    ctx.charge(cost)
    return {"rate_class": ctx.rate_class, "weight": ctx.weight}
