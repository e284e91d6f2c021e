"""The worker: claim in batches, run handlers on threads, ack in batches, renew leases.

Threads, each with one job:
- the claim loop (the caller's thread): claims the free handler slots, plus a local buffer
  while jobs are short (:mod:`.claim_size`); idles with backoff 50 ms → 2 s, and wakes
  early on LISTEN/NOTIFY or when a job finishes;
- handler threads (``--concurrency`` of them, each taking the next buffered job), plus one
  event loop thread for ``async def``, where each handler thread's async attempts run
  their sync code on a thread of their own (:mod:`.async_runner`);
- the acker: writes every success waiting for it in one fenced statement;
- the heartbeat: renews all held leases (buffered ones too) every lease/3 in one statement,
  enforces per-attempt timeouts, runs due duties, prints the status line and keeps this
  worker's registry row and per-minute outcome counts (:mod:`.presence`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TypeVar

from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
)

from headgate_django import metrics, store, tracing
from headgate_django.conf import headgate_settings
from headgate_django.context import JobContext
from headgate_django.exceptions import LeaseLostError, WorkerIdInUseError
from headgate_django.kernel import workers as kernel_workers
from headgate_django.kernel.states import State
from headgate_django.registry import batch_task, registered_kinds
from headgate_django.store.claim import ClaimedJob
from headgate_django.store.fenced import Completion, LeaseRef
from headgate_django.store.sessions import roll_back_left_open
from headgate_django.store.tracing import job_trace_contexts
from headgate_django.worker import batches, events, execute, logs
from headgate_django.worker.async_runner import AsyncRunner
from headgate_django.worker.claim_size import ClaimSizer
from headgate_django.worker.duties import DutyRunner
from headgate_django.worker.notify import wake_source
from headgate_django.worker.outage import OutageLog
from headgate_django.worker.presence import FLUSH_EVERY, Presence
from headgate_django.worker.settle import completion, settle
from headgate_django.worker.status import status_line

log = logging.getLogger("headgate_django.worker")
attempt_log = logging.getLogger(logs.ATTEMPTS_LOGGER)

#: The heartbeat looks for waiting jobs of unregistered kinds once the worker has run out of
#: jobs it can claim (a claim came back short), no sooner than this after start and then at
#: most this often: counting them reads every available job, which a busy worker, and a
#: drain, need not pay for.
UNKNOWN_KINDS_FIRST = 1.0
UNKNOWN_KINDS_EVERY = 60.0
#: After a failed lease renewal, the next try comes this soon (seconds).
RENEW_RETRY = 0.5
#: Backoff of an outcome or completion write the database refused (seconds).
PERSIST_BACKOFF_MIN = 0.1
PERSIST_BACKOFF_MAX = 2.0
#: How long a stopping worker waits, in all, for its idle handler threads to close their
#: sessions and end (seconds); a thread still inside a released handler is not waited for.
_HANDLER_EXIT_WAIT = 2.0

T = TypeVar("T")
# settle() labels (and "claimed") → the Stats counter they add to; the rest count nowhere.
_STAT_OF_LABEL = {
    "claimed": "claimed",
    "completed": "completed",
    "retried": "retried",
    "snoozed": "snoozed",
    "skipped": "skipped",
    "revoked": "skipped",
    "archived": "failed",
    "undecodable": "failed",
    "lost": "lost",
}


@dataclass
class Stats:
    """The counters of the status line, written by the claim, handler and ack threads."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0
    snoozed: int = 0  # waiting coordinators and durable tasks snooze too: their polls count here
    skipped: int = 0  # Skip and Revoke: withdrawn by the handler, neither retried nor failed
    failed: int = 0
    lost: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, label: str, n: int = 1) -> None:
        """Count ``n`` claims (``claimed``) or recorded outcomes by their ``settle`` label."""
        name = _STAT_OF_LABEL.get(label)
        if name is not None:
            with self._lock:
                setattr(self, name, getattr(self, name) + n)

    def line(self, inflight: int) -> str:
        return (
            f"claimed={self.claimed} completed={self.completed} retried={self.retried} "
            f"snoozed={self.snoozed} skipped={self.skipped} failed={self.failed} "
            f"lost={self.lost} in_flight={inflight}"
        )


@dataclass(eq=False)
class _Held:
    """A claimed job, from its claim until its outcome is written or it is handed back."""

    job: ClaimedJob
    ctx: JobContext
    started: bool = False  # a handler thread took it out of the buffer
    # The handler thread that took it, while that thread is the one to write its outcome.
    thread: threading.Thread | None = None
    # Set when the handler starts: time spent waiting in the buffer is not run time.
    deadline: float | None = None
    settled: bool = False  # written (or timed out, or released): nothing more to write
    # The handler returned and its outcome is being written: a success by the acker,
    # anything else by the handler's thread. From then on no deadline, lost renewal or
    # end of the drain window acts on the job: the outcome it has is the one written.
    finishing: bool = False


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    def __init__(
        self,
        *,
        queues: list[str] | None = None,
        concurrency: int = 10,
        lease_ttl: timedelta | None = None,
        burst: bool = False,
        worker_id: str | None = None,
        run_duties: bool = True,
        using: str = "default",
        exclude_kinds: Collection[str] = (),
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        s = headgate_settings
        self.queues = queues or s.QUEUES or None
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl or s.LEASE_TTL
        self.renew_every = (self.lease_ttl / 3 if lease_ttl else s.renew_interval).total_seconds()
        self._next_renew = float("inf")  # monotonic; the heartbeat thread sets it
        self.burst = burst
        self.worker_id = worker_id or default_worker_id()
        self.using = using
        # Kinds this worker leaves to others (runworkers --durable-mode).
        self.exclude_kinds = frozenset(exclude_kinds)
        self.stats = Stats()
        self._warned_classes: set[str] = set()  # unconfigured rate classes warned about
        # Every job held, buffered or running, keyed by lease, not job id: a job that timed
        # out here may be claimed here again while the abandoned handler of its earlier
        # attempt still holds a slot.
        self._held: dict[LeaseRef, _Held] = {}
        # The claim's jobs' trace contexts, read only with OpenTelemetry installed.
        self._trace_parents: dict[str, dict[str, str]] = {}
        # A job, or a group of jobs of one batch kind (worker/batches.py), per item.
        self._buffer: queue.SimpleQueue[_Held | list[_Held] | None] = queue.SimpleQueue()
        self._batches: batches.Collector[_Held] = batches.Collector(self._buffer.put)
        self._waiting = 0  # held jobs no handler has started yet
        self._sizer = ClaimSizer(concurrency, s.CLAIM_BATCH)
        # Jobs a handler runs on its own thread (see adopt()): renewed, never claimed.
        self._adopted: dict[LeaseRef, JobContext] = {}
        self._lock_waiter: threading.Thread | None = None  # see _renew_behind_locks
        self._lock = threading.Lock()
        self._busy = 0  # handler threads still inside a handler
        self._claim_parked = False  # the claim loop found no room and waits for some
        self._ran_short = False  # a claim found fewer jobs than it asked for
        self._wake = threading.Event()
        self._stopping = threading.Event()
        # Set by stop() only: a stop asked for (a signal) ends the duty pass in progress,
        # while a burst that ran out of jobs lets it finish, so that even a run that found
        # nothing to do does every duty's work once.
        self._stop_asked = threading.Event()
        # Set when the drain begins: writes the database refuses are retried until then.
        self._drain_deadline: float | None = None
        # Bumped on every database error this worker sees; a handler thread that has not
        # seen the latest value replaces its connection before its next attempt.
        self._db_errors = 0
        self._outage = OutageLog()
        #: Set when a burst run gave up on an unreachable database (the command exits 1).
        self.gave_up = False
        #: Set when a handler thread could not be started (the command exits 1).
        self.failed_to_start = False
        self._thread_seen = threading.local()
        self._acks: queue.SimpleQueue[tuple[_Held, Completion] | None] = queue.SimpleQueue()
        self._handlers = [
            threading.Thread(target=self._handler_loop, name=f"headgate-job-{n}", daemon=True)
            for n in range(concurrency)
        ]
        self._async = AsyncRunner()
        # Duty leases under this process's own name: two processes given one --worker-id
        # must not both hold a duty meant to run in one place.
        holder = f"{self.worker_id}#{uuid.uuid4().hex[:6]}"
        self._duties = DutyRunner(holder) if run_duties else None
        self._named = worker_id is not None  # a given id may be another process's too
        self._presence = Presence(
            self.worker_id, queues=self.queues, concurrency=concurrency, using=using
        )
        # A burst worker exits when the queues are empty, so it has nothing to wait for.
        self._listener = None if burst else wake_source(self._wake, self.queues, using)

    # -- lifecycle ---------------------------------------------------------------------
    @property
    def handlers_running(self) -> int:
        """Handler threads still running, e.g. ones released at the end of the drain window."""
        return self._busy

    def stop(self) -> None:
        """Stop claiming; in-flight handlers get the drain window to finish."""
        self._stop_asked.set()
        self._stopping.set()
        self._wake.set()

    def run(self) -> None:
        if self._named:
            self._take_id()
        log.info(
            "worker %s serving %s with concurrency %d; %s",
            self.worker_id,
            ", ".join(self.queues) if self.queues else "every queue",
            self.concurrency,
            logs.start_details(using=self.using, duties=self._duties is not None),
        )
        acker = threading.Thread(target=self._ack_loop, name="headgate-ack", daemon=True)
        heart = threading.Thread(target=self._heartbeat_loop, name="headgate-heart", daemon=True)
        # Starting a thread waits until it runs: about half a millisecond each here, which
        # would hold the first claim back by 50 ms at --concurrency 100. The handlers are
        # started beside the claim loop instead; claimed jobs wait in the buffer meanwhile.
        starter = threading.Thread(
            target=self._start_handlers, name="headgate-start-handlers", daemon=True
        )
        acker.start()
        heart.start()
        starter.start()
        if self._listener:
            self._listener.start()
        try:
            self._claim_loop()
        finally:
            self._drain()
            self._acks.put(None)
            acker.join(timeout=30)
            self._stopping.set()
            heart.join(timeout=30)
            if self._listener:
                self._listener.stop()
            starter.join()  # every handler started, so each gets its stop below
            for _ in self._handlers:  # threads still inside a released handler exit later
                self._buffer.put(None)
            idle_until = time.monotonic() + _HANDLER_EXIT_WAIT
            for thread in list(self._handlers):  # the idle ones close their sessions and go
                if thread.ident is not None:  # not one that could not start
                    thread.join(max(0.0, idle_until - time.monotonic()))
            self._async.close()
            if self._duties:
                self._safe(self._duties.release_all)
            self._safe(self._presence.flush)
            self._safe(functools.partial(self._beat, stopped=True))
            log.info("worker %s stopped: %s", self.worker_id, self.stats.line(0))

    def _start_handlers(self) -> None:
        """Start the handler threads. One the system refuses (more threads than its limits
        allow) stops the worker: the jobs claimed for it would otherwise wait in the buffer,
        their leases renewed, for a thread that never comes (for ever, at one thread)."""
        for thread in self._handlers:
            try:
                thread.start()
            except RuntimeError as exc:
                log.error(
                    "could not start handler thread %s (%s): stopping; give this worker a "
                    "lower --concurrency than %d",
                    thread.name,
                    exc,
                    self.concurrency,
                )
                self.failed_to_start = True
                self.stop()
                return

    # -- claiming ----------------------------------------------------------------------
    def _claim_loop(self) -> None:
        s = headgate_settings
        idle_min = s.IDLE_BACKOFF_MIN.total_seconds()
        idle_max = s.IDLE_BACKOFF_MAX.total_seconds()
        idle = idle_min
        while not self._stopping.is_set():
            limit = self._claim_size()
            if limit <= 0:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            # Cleared before the claim, not after: a wake-up that arrives while the claim
            # runs must shorten the idle wait that follows it.
            self._wake.clear()
            jobs = self._claim(limit)
            if jobs is None:  # database unavailable
                if self.burst and self._burst_gives_up():
                    return
                idle = min(idle * 2, idle_max)
                self._stopping.wait(idle)
                continue
            if len(jobs) < limit:
                self._ran_short = True
            if jobs:
                idle = idle_min
                for job in jobs:
                    self._hold(job)
                if len(jobs) < limit and not self.burst:
                    # Nothing else was claimable. Claiming again at once would find nothing,
                    # and its Python would hold the GIL while the handler thread that was
                    # just given a job wakes up: wait for a wake-up (an enqueue, a finished
                    # job) or the shortest poll instead.
                    self._wake.wait(idle)
                continue
            if self.burst and self._burst_done():
                self._safe(self._report_unknown_kinds)  # what this run leaves behind
                return
            if self._wake.wait(idle):
                idle = idle_min
            else:
                longer = min(idle * 2, idle_max)
                if idle < longer == idle_max:
                    log.debug("idle: next poll in %.1f s", idle_max)
                idle = longer

    def _claim_size(self) -> int:
        with self._lock:
            size = self._room()
            # Set under the lock, so a handler that frees a slot after this sees it.
            self._claim_parked = size <= 0
            return size

    def _room(self) -> int:
        """What the claim sizer allows now; the caller holds ``_lock``."""
        # _held also keeps finished jobs until their ack lands; _busy are running.
        active = self._busy + self._waiting
        return self._sizer.size(active, self._waiting, acking=len(self._held) - active)

    def _slot_freed(self) -> None:
        """A handler is done with its job: wake a claim loop that waits for room, once
        there is enough.

        Without this, a claim loop that found no room would wait for the next batched
        ack to land (or a second) while the handlers, done with the buffer, sat idle.
        """
        with self._lock:
            self._busy -= 1
            wake = self._claim_parked and self._room() > 0
            if wake:
                self._claim_parked = False
        if wake:
            self._wake.set()

    def _claim(self, limit: int) -> list[ClaimedJob] | None:
        try:
            jobs = store.job_claim(
                worker_id=self.worker_id,
                limit=limit,
                lease_ttl=self.lease_ttl,
                queues=self.queues,
                kinds=[k for k in registered_kinds() if k not in self.exclude_kinds],
                using=self.using,
            )
        except DatabaseError as exc:
            self._outage.failed("claim", exc)
            self._reset_connection()
            return None
        self._outage.succeeded()
        self.stats.count("claimed", len(jobs))
        metrics.observe_claims(jobs)
        if tracing.ENABLED and jobs and tracing.active():
            self._trace_parents = (
                self._safe(
                    lambda: job_trace_contexts([j.ref.job_id for j in jobs], using=self.using)
                )
                or {}
            )
        return jobs

    def _burst_gives_up(self) -> bool:
        """A burst run is for a cron job or a CI step, which must end: once the database has
        been unreachable for twice the lease TTL with no job held (nothing a wait could
        still save), it stops, and ``runworkers`` exits 1."""
        limit = 2 * self.lease_ttl.total_seconds()
        if self._held or self._outage.down_for() < limit:
            return False
        log.error("database unreachable for %.0f s: the burst run gives up", limit)
        self.gave_up = True
        return True

    def _burst_done(self) -> bool:
        if any(not r.settled for r in list(self._held.values())):
            self._wake.wait(0.05)
            return False
        return self._safe(store.job_promote_due) == 0

    def _hold(self, job: ClaimedJob) -> None:
        if job.rate_class is not None:
            self._warn_unconfigured_class(job)
        ctx = JobContext(job, worker_id=self.worker_id, using=self.using)
        ctx.host = self
        if self._trace_parents:
            ctx.trace_parent = self._trace_parents.get(job.ref.job_id)
        entry = _Held(job, ctx)
        with self._lock:
            self._held[job.ref] = entry
            self._waiting += 1
        batched = batch_task(job.kind)
        if batched is not None:
            self._batches.add(batched, entry)
        else:
            self._buffer.put(entry)

    # -- running -----------------------------------------------------------------------
    def _handler_loop(self) -> None:
        """One handler thread: run buffered jobs one after another until told to stop."""
        while (entry := self._buffer.get()) is not None:
            if isinstance(entry, list):
                self._run_batch(entry)
                continue
            if not self._begin(entry):
                continue  # handed back (drain) or its lease was lost while it waited
            try:
                self._fresh_connection()
                self._run_and_settle(entry)
            except BaseException as exc:  # a dead handler thread would shrink the worker
                log.exception("handler thread failed on job %s", entry.job.ref.job_id)
                self._fail_stranded(entry, exc)
            finally:
                self._slot_freed()
        # This thread's sessions end with it: a worker run in-process (tests, an embedding
        # program) must not leave them open on the server after ``run()`` returns.
        with contextlib.suppress(DatabaseError):
            connections.close_all()

    def _fail_stranded(self, entry: _Held, exc: BaseException) -> None:
        """Fail the attempt of a job whose handler thread broke down outside the handler.

        Letting it go instead would leave it ``running`` until its lease lapsed, then charge
        it a crash and run it again, though nothing crashed.
        """
        with self._lock:
            if entry.settled or entry.thread is None:
                return  # its outcome is written, or the acker's to write
            entry.finishing = True

        def write() -> str:
            return settle(entry.job, execute.failure(exc), using=self.using)

        try:
            # The heartbeat must not wait out an outage here: it renews every other lease.
            on_heartbeat = threading.current_thread() not in self._handlers
            if on_heartbeat:
                label = write()
            else:
                label = self._persist(write, f"the failure of job {entry.job.ref.job_id}")
            self._count(label, entry.job.queue)
        except LeaseLostError:
            self.stats.count("lost")
        except Exception as write_exc:
            log.error("could not record the failure of job %s: %s", entry.job.ref.job_id, write_exc)
        finally:
            self._finish(entry)

    def _replace_dead_handlers(self) -> None:
        """Start a new handler thread for each one that died, failing the job it held.

        ``_handler_loop`` catches everything a job can raise, so this is the last line: a
        worker whose threads died one by one would hold its leases while it ran nothing.
        """
        for n, thread in enumerate(self._handlers):
            if thread.ident is None or thread.is_alive():
                continue  # not started yet (see run), or alive
            log.error("handler thread %s died; starting a new one", thread.name)
            with self._lock:
                stranded = [e for e in self._held.values() if e.thread is thread]
            for entry in stranded:  # its slot was freed as the thread unwound
                self._fail_stranded(entry, RuntimeError(f"handler thread {thread.name} died"))
            fresh = threading.Thread(target=self._handler_loop, name=thread.name, daemon=True)
            self._handlers[n] = fresh
            fresh.start()

    def _begin(self, entry: _Held) -> bool:
        """Start the attempt's clock, unless the job was settled while it waited."""
        with self._lock:
            if entry.settled:
                return False
            entry.started = True
            entry.thread = threading.current_thread()
            self._waiting -= 1
            self._busy += 1
            timeout = entry.job.timeout
            if timeout:
                entry.deadline = time.monotonic() + timeout.total_seconds()
        return True

    def _run_and_settle(self, entry: _Held) -> None:
        started = time.monotonic()
        entry.ctx.repeats_lost_connection = True
        outcome = self._attempt(entry)
        if isinstance(outcome, execute.Failed) and outcome.connection_lost and not entry.settled:
            # The session died under the handler (a restart, a killed connection) before
            # anything told this thread to reconnect. The lease is still ours: run the
            # attempt again, once, on a new connection, rather than charge the job for it.
            log.warning(
                "job %s failed on a lost database connection; running it again on a new one",
                entry.job.ref.job_id,
            )
            self._reset_connection()
            self._fresh_connection()
            entry.ctx.repeats_lost_connection = False  # a second lost session is charged
            outcome = self._attempt(entry)
        self._record(entry, outcome, time.monotonic() - started)

    def _run_batch(self, group: list[_Held]) -> None:
        """Run a group of one batch kind in one handler call; write each outcome alone."""
        begun = [entry for entry in group if self._begin(entry)]
        if not begun:
            return
        definition = batch_task(begun[0].job.kind)
        try:
            self._fresh_connection()
            started = time.monotonic()
            attempts = [(e.ctx, e.job.payload, e.job.schema_version) for e in begun]
            try:
                outcomes = batches.run_batch(definition, attempts)  # type: ignore[arg-type]
            except BaseException as exc:  # an upcaster, say: every member fails with it
                outcomes = [execute.failure(exc)] * len(begun)
            outcomes = self._closed_out(begun, outcomes)
            took = (time.monotonic() - started) / len(begun)
            for entry, outcome in zip(begun, outcomes, strict=True):
                self._record(entry, outcome, took)
        except BaseException as exc:
            log.exception("handler thread failed on a batch of %s", begun[0].job.kind)
            for entry in begun:
                self._fail_stranded(entry, exc)
        finally:
            # Once per batch, not per job: a batch handler that reads the database leaves
            # no session open on this thread past its connection's age.
            close_old_connections()
            for _ in begun:
                self._slot_freed()

    def _record(self, entry: _Held, outcome: execute.Outcome, took: float) -> None:
        """Write one attempt's outcome: a success through the acker, the rest here."""
        with self._lock:
            self._sizer.observe(took)
            # One writer per attempt, decided under the lock: a timeout or the drain's
            # release marks the job settled, a returning handler marks it finishing; each
            # leaves a job the other has marked alone.
            timed_out = entry.settled
            entry.finishing = not timed_out
        metrics.observe_attempt(entry.job.queue, entry.job.kind, execute.label(outcome), took)
        if attempt_log.isEnabledFor(logging.DEBUG):
            attempt_log.debug(
                "job %s (%s) attempt %d %s in %.1f ms",
                entry.job.ref.job_id,
                entry.job.kind,
                entry.ctx.attempt,
                execute.label(outcome),
                took * 1000,
            )
        if timed_out:  # timed out or released while running
            self._finish(entry)
            return
        if isinstance(outcome, execute.Succeeded):
            entry.thread = None  # the acker writes it from here on
            self._acks.put((entry, completion(entry.job, outcome)))
            return
        try:
            label = self._persist(
                lambda: settle(entry.job, outcome, using=self.using),
                f"the outcome of job {entry.job.ref.job_id}",
            )
            self._count(label, entry.job.queue)
        except LeaseLostError:
            self.stats.count("lost")
        except DatabaseError as exc:
            log.error("could not record the outcome of job %s: %s", entry.job.ref.job_id, exc)
        finally:
            close_old_connections()
            self._finish(entry)

    def _attempt(self, entry: _Held) -> execute.Outcome:
        try:
            outcome = execute.run_attempt(
                entry.ctx, entry.job.payload, entry.job.schema_version, self._async
            )
        except BaseException as exc:  # e.g. a user upcaster: record it, never strand the job
            outcome = execute.failure(exc)
        return self._closed_out([entry], [outcome])[0]

    def _closed_out(
        self, entries: list[_Held], outcomes: list[execute.Outcome]
    ) -> list[execute.Outcome]:
        """The outcomes of attempts whose handler just returned on this thread, once any
        transaction it left open is rolled back: this thread writes outcomes and runs the
        next jobs on the same connections, which a transaction nobody commits would hold
        (and, once Django closed the connection in it, refuse) for the rest of its life."""
        left = roll_back_left_open()
        if left:
            log.warning(
                "the handler of job(s) %s left a transaction open on %s; rolled back",
                ", ".join(e.job.ref.job_id for e in entries),
                ", ".join(left),
            )
        return [execute.left_open(outcome, left) for outcome in outcomes]

    def _finish(self, *entries: _Held) -> None:
        """Let go of settled jobs; one wake-up for the claim loop however many they are."""
        with self._lock:
            for entry in entries:
                entry.settled = True
                self._held.pop(entry.job.ref, None)
        self._wake.set()

    # -- follow-up jobs a handler runs on its own thread (JobContext.host) ---------------
    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def serves(self, kind: str, queue: str) -> bool:
        return (
            kind not in self.exclude_kinds
            and kind in registered_kinds()
            and kernel_workers.serves_queue(self.queues, queue)
        )

    def adopt(self, ref: LeaseRef, ctx: JobContext) -> None:
        with self._lock:
            self._adopted[ref] = ctx
        self.stats.count("claimed")

    def disown(self, ref: LeaseRef) -> None:
        with self._lock:
            self._adopted.pop(ref, None)

    def count_outcome(self, label: str, queue: str | None = None) -> None:
        self._count(label, queue)

    def _count(self, label: str, queue: str | None = None) -> None:
        """Count a recorded outcome in the status line and, by queue, the registry's
        per-minute series."""
        self.stats.count(label)
        if queue is not None:
            self._presence.tally(queue, label)

    # -- acking ------------------------------------------------------------------------
    def _ack_loop(self) -> None:
        while True:
            item = self._acks.get()
            batch = [] if item is None else [item]
            stop = item is None
            while not stop and len(batch) < 500:
                try:
                    nxt = self._acks.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                else:
                    batch.append(nxt)
            if batch:
                self._write_acks(batch)
            if stop:
                close_old_connections()
                return

    def _write_acks(self, batch: list[tuple[_Held, Completion]]) -> None:
        try:
            done = self._persist(
                lambda: store.job_complete_many([c for _, c in batch], using=self.using),
                f"{len(batch)} completion(s)",
            )
        except DatabaseError as exc:
            log.error("could not record %d completion(s): %s", len(batch), exc)
            self._reset_connection()
            done = set()
        except Exception:  # the acker must not die: every later success would hang
            log.exception("could not record %d completion(s)", len(batch))
            done = set()
        self.stats.count("completed", len(done))
        self._reconcile_charges([entry for entry, written in batch if written.ref.job_id in done])
        events.completed((e.job, c.result) for e, c in batch if c.ref.job_id in done)
        for entry, written in batch:
            if written.ref.job_id in done:
                self._presence.tally(entry.job.queue, "completed")
            else:
                self.stats.count("lost")
                log.warning(
                    "completion of job %s did not land: its lease was lost", written.ref.job_id
                )
        self._finish(*(entry for entry, _ in batch))

    def _reconcile_charges(self, entries: list[_Held]) -> None:
        """Settle what handlers reported with ``ctx.charge(n)`` against the weight their
        rate class was charged at the claim (most jobs report nothing: no write)."""
        refunds: dict[str, int] = {}
        for entry in entries:
            charged, job = entry.ctx.charged, entry.job
            if charged is not None and job.rate_class is not None and charged != job.weight:
                refunds[job.rate_class] = refunds.get(job.rate_class, 0) + job.weight - charged
        if refunds:
            self._safe(lambda: store.rate_bucket_reconcile(refunds, using=self.using))

    def _warn_unconfigured_class(self, job: ClaimedJob) -> None:
        """Once per worker and class: a job named a rate class nobody configured, so it
        ran unlimited (fail-open)."""
        name = job.rate_class
        if name is None or name in self._warned_classes:
            return
        if name not in store.configured_rate_classes(using=self.using):
            self._warned_classes.add(name)
            log.warning(
                "job %s names rate class %r, which is not configured: its jobs run without "
                "a rate limit (set it with admission.set_rate_class or HEADGATE['RATE_CLASSES'])",
                job.ref.job_id,
                name,
            )

    # -- heartbeat ---------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        self._next_renew = time.monotonic() + self.renew_every
        status_every = headgate_settings.STATUS_INTERVAL.total_seconds()
        next_status = time.monotonic() + status_every
        next_unknown = time.monotonic() + UNKNOWN_KINDS_FIRST
        while not (self._stopping.is_set() and not self._held):
            now = time.monotonic()
            self._safe(functools.partial(self._enforce_timeouts, now))
            if not self._stopping.is_set():
                self._safe(self._replace_dead_handlers)
            self._renew_if_due()
            self._batches.flush(now=now)
            if self._duties and not self._stopping.is_set():
                self._safe(
                    functools.partial(
                        self._duties.tick, self._stop_asked.is_set, self._renew_if_due
                    )
                )
            self._keep_presence(now)
            if now >= next_status:
                line = self.stats.line(len(self._held))
                log.info("status %s", status_line(line, self._outage.status_field()))
                next_status = now + status_every
            if now >= next_unknown and self._ran_short and not self._stopping.is_set():
                self._ran_short = False
                self._safe(self._report_unknown_kinds)
                next_unknown = now + UNKNOWN_KINDS_EVERY
            if not self._stopping.is_set():
                self._stopping.wait(0.05)  # a stop with nothing held ends the loop at once
            elif self._held:
                time.sleep(0.05)  # draining: keep renewing until the held jobs are gone
        close_old_connections()

    def _keep_presence(self, now: float) -> None:
        """The registry row every heartbeat interval, the per-minute tallies every second."""
        presence = self._presence
        if now >= presence.next_beat:
            presence.next_beat = now + presence.every
            self._safe(self._beat)
        if now >= presence.next_flush:
            presence.next_flush = now + FLUSH_EVERY
            self._safe(presence.flush)

    def _take_id(self) -> None:
        """Refuse to start under a given worker id that a live worker runs under.

        Their job leases and duties would stay apart, but their registry rows (the workers
        page, the metrics) would overwrite each other, and the logs and ``claimed_by``
        could not tell them apart. An id whose worker stopped, is gone (it missed its
        heartbeats: a crash), or ran on this host in a process that has exited, is taken
        over, so a worker restarted under its own id starts.
        A database that cannot be reached now is the claim loop's to wait for: the worker
        starts unchecked, and says so.
        """
        try:
            holder = self._presence.register()
        except DatabaseError as exc:
            log.warning(
                "could not check that no live worker runs under the id %s (%s); starting",
                self.worker_id,
                exc,
            )
            return
        if holder is None:
            return
        self._async.close()  # nothing else was started
        beats = kernel_workers.GONE_AFTER_BEATS
        raise WorkerIdInUseError(
            f"a live worker runs under the id {self.worker_id!r} (pid {holder.pid} on "
            f"{holder.host}, last heartbeat {holder.heartbeat_age_s:.1f} s ago): give each "
            "worker process its own id (--worker-id); a worker that died without stopping "
            "frees its id at once for a worker on its own host, and for others once it has "
            f"missed {beats} heartbeats ({beats * holder.heartbeat_s:g} s)",
            worker_id=self.worker_id,
            host=holder.host,
            pid=holder.pid,
        )

    def _beat(self, stopped: bool = False) -> None:
        with self._lock:
            held = [entry.job.queue for entry in self._held.values() if not entry.settled]
        stats = self.stats
        self._presence.beat(
            held_queues=held,
            claimed=stats.claimed,
            completed=stats.completed,
            retried=stats.retried,
            failed=stats.failed,
            stopped=stopped,
        )

    def _report_unknown_kinds(self) -> None:
        """Jobs no handler here knows are never claimed; say so rather than stay silent."""
        waiting = store.unknown_kinds_waiting(
            registered_kinds(), queues=self.queues, using=self.using
        )
        modules = " or ".join(repr(name) for name in headgate_settings.AUTODISCOVER_MODULES)
        for kind, count in sorted(waiting.items()):
            # The enqueuing code knew the kind: most often the worker never imported the
            # module that defines it, so the warning says which modules it imports.
            log.warning(
                "%s available job(s) of kind %r have no handler in this worker; "
                "they wait for a worker that registers it: a worker registers the tasks that "
                "installed apps define in, or import into, their modules named %s "
                "(HEADGATE['AUTODISCOVER_MODULES'])",
                f"{count:,}+" if count >= store.UNKNOWN_COUNTED_UP_TO else count,
                kind,
                modules,
            )

    def _renew_if_due(self) -> None:
        """Renew the held leases once their interval is up (the heartbeat thread's loop,
        and between two duties of a pass)."""
        now = time.monotonic()
        if now >= self._next_renew:
            renewed = self._safe(self._renew)
            # A failed renewal is tried again soon, not a whole interval later: the
            # leases must be renewed as soon as the database is back, before they lapse.
            self._next_renew = now + (self.renew_every if renewed else RENEW_RETRY)

    def _renew(self) -> bool:
        with self._lock:
            refs = [r.job.ref for r in self._held.values() if not r.settled]
            refs.extend(self._adopted)
        lost, locked = store.job_renew_free_leases(refs, lease_ttl=self.lease_ttl, using=self.using)
        self._stop_lost([r for r in refs if r.job_id in lost])
        if locked:
            self._renew_behind_locks(locked)
        return True

    def _renew_behind_locks(self, refs: list[LeaseRef]) -> None:
        """Renew, on a thread of their own, the rows the renewal found held by another
        transaction (a handler's ``ctx.once``, a workflow pass folding an eager Operation's
        outcome): each is waited for, and renewed the moment its holder commits, while
        this thread goes on renewing the others. One such thread at a time; rows still
        held when it is busy are found again by the next renewal."""
        with self._lock:
            if self._lock_waiter is not None and self._lock_waiter.is_alive():
                return
            waiter = threading.Thread(
                target=self._wait_and_renew,
                args=(sorted(refs),),
                name=f"headgate-renew-locked-{self.worker_id}",
                daemon=True,
            )
            self._lock_waiter = waiter
        waiter.start()

    def _wait_and_renew(self, refs: list[LeaseRef]) -> None:
        # One row per transaction: waiting for one row while holding none, this thread
        # can neither deadlock with a holder nor keep another job's row from its acker.
        try:
            for ref in refs:
                with self._lock:
                    entry = self._held.get(ref)
                    ours = ref in self._adopted or (entry is not None and not entry.settled)
                if not ours:
                    continue
                try:
                    lost = store.job_renew_leases([ref], lease_ttl=self.lease_ttl, using=self.using)
                except DatabaseError as exc:
                    # Not an outage (the heartbeat's renewal reports those): most likely
                    # the holder outlasted MySQL's lock wait timeout. The next renewal
                    # finds the row again.
                    log.info("renewal of job %s behind a lock failed: %s", ref.job_id, exc)
                    return
                if lost:
                    self._stop_lost([ref])
        except Exception:  # a bug: the next renewal starts another thread
            log.exception("renewal of leases behind a lock failed")
        finally:
            with contextlib.suppress(DatabaseError):
                connections[self.using].close()

    def _stop_lost(self, refs: list[LeaseRef]) -> None:
        """Tell the handlers of the attempts ``refs`` (whose leases were lost) to stop."""
        if not refs:
            return
        with self._lock:
            adopted = [self._adopted[r] for r in refs if r in self._adopted]
            held = [self._held[r] for r in refs if r in self._held]
        for ctx in adopted:
            log.warning("lease on job %s was lost; telling the handler to stop", ctx.job_id)
            ctx.cancel()
        for entry in held:
            # An outcome written while this renewal ran also reads as "lost"; its writer
            # (the acker or the handler's thread) reports one that did not land.
            if entry.settled or entry.finishing:
                continue
            entry.ctx.cancel()
            if self._drop_unstarted(entry):
                log.warning("lease on buffered job %s was lost; dropped", entry.job.ref.job_id)
            else:
                log.warning(
                    "lease on job %s was lost; telling the handler to stop", entry.job.ref.job_id
                )

    def _drop_unstarted(self, entry: _Held) -> bool:
        """Forget a job still in the buffer (its handler thread will skip it)."""
        with self._lock:
            if entry.started or entry.settled:
                return False
            entry.settled = True
            self._waiting -= 1
            self._held.pop(entry.job.ref, None)
        self._wake.set()
        return True

    def _enforce_timeouts(self, now: float) -> None:
        with self._lock:
            late = [
                r
                for r in self._held.values()
                if r.deadline is not None
                and now > r.deadline
                and not r.settled
                # A handler that returned in time is not late because its outcome is
                # still being written: retrying it now would run a finished job again.
                and not r.finishing
            ]
            # Settled at once, under the lock, so a handler returning meanwhile leaves the
            # outcome to this timeout. The job stays held until the handler returns: its
            # thread is still busy, so counting it keeps the worker from claiming work it
            # cannot start.
            for entry in late:
                entry.settled = True
        for entry in late:
            entry.ctx.cancel()
            timeout = entry.job.timeout
            error = f"timeout: the attempt ran longer than {timeout}"
            try:
                state = store.job_retry(entry.job.ref, error=error, using=self.using)
                self._count("archived" if state is State.ARCHIVED else "retried", entry.job.queue)
                events.failed(entry.job, error=error, retried=state is not State.ARCHIVED)
                log.warning(
                    "job %s (%s) timed out after %s", entry.job.ref.job_id, entry.job.kind, timeout
                )
            except LeaseLostError:
                self.stats.count("lost")
            except DatabaseError as exc:
                log.error("could not record the timeout of job %s: %s", entry.job.ref.job_id, exc)
                self._reset_connection()

    # -- shutdown ----------------------------------------------------------------------
    def _drain(self) -> None:
        """Hand back buffered jobs, wait for in-flight handlers, then hand back leftovers.

        Nothing handed back is charged a crash: buffered jobs never started, and handlers
        still running at the end of the window are released, not left to expire.
        """
        self._batches.flush()  # groups still filling are buffered jobs too
        with self._lock:
            unstarted = [r for r in self._held.values() if not r.started and not r.settled]
            for entry in unstarted:
                entry.settled = True
                self._held.pop(entry.job.ref, None)
            self._waiting -= len(unstarted)
        if unstarted:
            self._release([r.job.ref for r in unstarted], "buffered")
        deadline = time.monotonic() + headgate_settings.SHUTDOWN_TIMEOUT.total_seconds()
        self._drain_deadline = deadline
        if self._held:
            log.info("draining %d in-flight job(s)", len(self._held))
        while self._held and time.monotonic() < deadline:
            self._wake.wait(0.05)
            self._wake.clear()
        with self._lock:
            # Still running. The rest timed out, or finished with an outcome that the acker
            # or the handler's thread is still writing: releasing those would run them again.
            leftovers = [r for r in self._held.values() if not r.settled and not r.finishing]
            for entry in list(self._held.values()):
                entry.settled = True
                self._held.pop(entry.job.ref, None)
            adopted = list(self._adopted.items())
        for entry in leftovers:
            entry.ctx.cancel()
        for _, ctx in adopted:
            ctx.cancel()
        refs = [r.job.ref for r in leftovers] + [ref for ref, _ in adopted]
        if refs:
            self._release(refs, "unfinished")

    def _release(self, refs: list[LeaseRef], what: str) -> None:
        released = self._safe(lambda: store.job_release_many(refs, using=self.using))
        log.warning("released %d %s job(s) back to their queues", len(released or ()), what)

    def _persist(self, write: Callable[[], T], what: str) -> T:
        """Run a write about held jobs until the database takes it.

        A job whose handler has finished must not be stranded by a database outage: its
        entry stays held (the heartbeat keeps renewing it) while this retries with backoff.
        Giving up instead would let its lease lapse, charge a crash for the outage and run
        the handler again. There is no deadline while the worker runs, because the lease
        is not lost when it lapses during an outage: a renewal only needs the job to be
        unclaimed, and the reclaim duty waits a renewal interval after the database is
        back. If the job was reclaimed meanwhile, the fenced write says so when it lands.
        Once the worker is stopping, retries end with the drain window. Only lost or
        refused connections are retried; any other database error is raised at once.
        """
        delay = PERSIST_BACKOFF_MIN
        while True:
            try:
                return write()
            except (OperationalError, InterfaceError) as exc:
                deadline = self._drain_deadline
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise
                log.warning("could not record %s (%s); retrying in %.1f s", what, exc, delay)
                self._reset_connection()
                time.sleep(delay)
                delay = min(delay * 2, PERSIST_BACKOFF_MAX)

    def _safe(self, fn):  # type: ignore[no-untyped-def]
        try:
            result = fn()
        except DatabaseError as exc:
            self._outage.failed("housekeeping", exc)
            self._reset_connection()
            return None
        except Exception:  # the heartbeat must outlive any bug, or every lease lapses
            log.exception("worker housekeeping failed; will retry")
            return None
        # Not the end of an outage: many of these calls need no database when they have
        # nothing to write. A claim that went through is (see _claim).
        return result

    def _reset_connection(self) -> None:
        self._db_errors += 1
        with contextlib.suppress(DatabaseError):
            connections[self.using].close()

    def _fresh_connection(self) -> None:
        """Drop this handler thread's connections if the worker saw a database error since
        the thread's last attempt: a restarted server has dropped every idle session too,
        and an attempt must not fail (and use up an attempt) on a connection known dead."""
        if getattr(self._thread_seen, "errors", 0) != self._db_errors:
            self._thread_seen.errors = self._db_errors
            with contextlib.suppress(DatabaseError):
                connections.close_all()
