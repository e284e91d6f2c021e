"""``manage.py runworkers``: run job workers until SIGTERM/SIGINT/SIGHUP (or, with --burst,
idle)."""

from __future__ import annotations

import errno
import signal
import sys
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from headgate_django.conf import headgate_settings
from headgate_django.durable import handlers as durable_modes
from headgate_django.exceptions import ConfigurationError, DefinitionError, WorkerIdInUseError
from headgate_django.kernel.names import validate_queue
from headgate_django.store.schema import schema_problem
from headgate_django.worker import logs
from headgate_django.worker.exit import exit_code, exit_now
from headgate_django.worker.runner import Worker
from headgate_django.worker.signals import relayed_signals, stop_signals

#: The longest ``--lease-ttl`` accepted, in seconds.
LEASE_TTL_MAX = 365 * 24 * 3600


class Command(BaseCommand):
    help = "Run headgate workers: claim jobs, run handlers, keep leases and duties."
    # Only the checks that say whether this worker can run correctly: headgate's own, on
    # its settings, are tagged ``compatibility``. A worker serves no URLs and renders no
    # templates: the URL checks would import every view (the console's graph layout and
    # CEL included) in each worker process at start-up, for nothing. Headgate uses no
    # Django cache. The model checks lint every installed model's definition, which
    # neither the worker's code nor its schema check depends on; ``manage.py check`` and
    # ``migrate`` run them, and here they took about 7 ms of each process's start.
    requires_system_checks = [Tags.compatibility, Tags.signals]
    #: Set once the checks and start-up steps are done: SIGTERM/SIGINT/SIGHUP are then
    #: the worker's (a drain), not an interruption of the start.
    _serving = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="QUEUE",
            help="Serve this queue (repeatable). Default: HEADGATE['QUEUES'], or every queue.",
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            default=10,
            metavar="N",
            help="Handler threads per process (default 10).",
        )
        parser.add_argument(
            "--processes",
            type=int,
            default=1,
            metavar="P",
            help="Worker processes to start (default 1).",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Drain what is due, then exit (default: run until a signal).",
        )
        parser.add_argument(
            "--lease-ttl",
            type=float,
            default=None,
            metavar="SECONDS",
            help="Lease length of each claim (default HEADGATE['LEASE_TTL'], 30 s).",
        )
        parser.add_argument(
            "--no-duties",
            action="store_true",
            help="Do not run maintenance duties (default: take them when free).",
        )
        parser.add_argument(
            "--worker-id",
            default=None,
            metavar="ID",
            help="Name this worker in leases and logs (default host:pid:random).",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=None,
            metavar="PORT",
            help="Serve Prometheus metrics on 127.0.0.1:PORT (needs prometheus-client; "
            "default: none).",
        )
        parser.add_argument(
            "--durable-mode",
            choices=["combined", "workflow-only", "operation-only"],
            default="combined",
            help="Durable jobs to claim: workflow tasks, Operations, or both (default combined).",
        )

    def run_from_argv(self, argv: list[str]) -> None:
        """From the command line, leave without the interpreter's teardown once done.

        Nothing runs after a worker, and tearing down every module Django and the project
        imported (and, with ``--processes``, waiting for that in the parent after the
        children are gone) adds a tenth of a second or more to each stop. Logs and standard
        streams are flushed and connections closed first. ``call_command`` does not come
        through here and returns as usual.
        """
        try:
            super().run_from_argv(argv)
        except SystemExit as exc:
            exit_now(exit_code(exc))
        except KeyboardInterrupt:
            if self._serving:
                raise
            # Until a worker serves, SIGINT is Python's: a Ctrl-C while the command waits
            # for a slow database is the user's choice, not a crash to show a traceback for.
            self.stderr.write("interrupted while starting: nothing was run")
            exit_now(130)  # what a shell reports for a command that SIGINT stopped
        exit_now(0)

    def handle(self, *args: Any, **options: Any) -> None:
        logs.configure(options["verbosity"], settings.LOGGING)
        for name in ("concurrency", "processes"):
            if options[name] < 1:
                raise CommandError(f"--{name} must be at least 1, not {options[name]}")
        lease_ttl = options["lease_ttl"]
        # Written so that nan fails too; a bound keeps the expiry a date every database stores.
        if lease_ttl is not None and not 0 < lease_ttl <= LEASE_TTL_MAX:
            raise CommandError(
                f"--lease-ttl must be positive and at most {LEASE_TTL_MAX} seconds (a year), "
                f"not {lease_ttl:g}"
            )
        if lease_ttl is not None and not options["no_duties"]:
            self._warn_on_lease(timedelta(seconds=lease_ttl))
        if options["worker_id"] is not None and not options["worker_id"].strip():
            raise CommandError("--worker-id must not be blank (leave it out for host:pid:random)")
        port = options["metrics_port"]
        if port is not None and not 0 < port < 65536:
            raise CommandError(f"--metrics-port must be from 1 to 65535, not {port}")
        for queue in options["queues"] or ():
            try:
                validate_queue(queue)
            except DefinitionError as exc:
                raise CommandError(f"--queue: {exc}{_one_per_option(queue)}") from None
        logs.announce(options["processes"], options["concurrency"])
        self._prepare(options)
        self._serving = True
        if options["processes"] > 1:
            from headgate_django.worker.supervisor import supervise

            try:
                code = supervise(
                    options["processes"],
                    lambda worker_id: self._serve_child(options, worker_id),
                    options["worker_id"],
                )
            except ConfigurationError as exc:
                raise CommandError(f"--processes: {exc}") from exc
            sys.exit(code)
        self._serve(options, options["worker_id"])

    def _prepare(self, options: dict[str, Any]) -> None:
        """What a worker needs before it serves: headgate's tables, the declared schedules
        and admission policies in the store, and the metrics endpoint if asked for."""
        self._check_schema()
        self._sync_schedules(options["verbosity"])
        self._apply_admission(options["verbosity"])
        if options["metrics_port"] is not None:
            if options["processes"] > 1:
                raise CommandError(
                    "--metrics-port serves one process: start one runworkers per port "
                    "instead of --processes"
                )
            from headgate_django import metrics

            port = options["metrics_port"]
            try:
                metrics.serve(port)
            except ConfigurationError as exc:
                raise CommandError(f"--metrics-port: {exc}") from exc
            except OSError as exc:
                why = (
                    "is in use: stop what listens there, or choose another port"
                    if exc.errno == errno.EADDRINUSE
                    else f"cannot be used ({exc.strerror})"  # a port below 1024, say
                )
                raise CommandError(f"--metrics-port {port}: 127.0.0.1:{port} {why}") from exc

    def _warn_on_lease(self, lease_ttl: timedelta) -> None:
        """The system check's lease rule (headgate.W003) for the lease ``--lease-ttl``
        gives, which the checks of the settings never see (it is renewed every third). A
        worker without duties evicts nothing, so it is asked only of one with them."""
        from headgate_django.checks import eviction_outlasts_lease

        budget = headgate_settings.EVICT_BUDGET
        for warning in eviction_outlasts_lease(lease_ttl, lease_ttl / 3, budget):
            self.stderr.write(f"warning: --lease-ttl: {warning.msg} ({warning.id}). {warning.hint}")

    def _apply_admission(self, verbosity: int) -> None:
        """Write ``HEADGATE["RATE_CLASSES"]``, ``["CONCURRENCY_LIMITS"]`` and
        ``["BACKPRESSURE"]`` into the store. An unreachable database is left to the worker."""
        from headgate_django.admission import apply_declared
        from headgate_django.exceptions import DefinitionError

        try:
            applied = apply_declared()
        except DatabaseError:
            return
        except DefinitionError as exc:
            raise CommandError(str(exc)) from exc
        if applied and verbosity > 1:
            self.stderr.write(f"applied {applied} declared admission policies")

    def _sync_schedules(self, verbosity: int) -> None:
        """Sync ``HEADGATE["SCHEDULES"]`` into the store and say which ones it paused
        because they left the settings. An unreachable database is left to the worker."""
        from headgate_django.exceptions import ScheduleError
        from headgate_django.schedules import sync_declared

        try:
            report = sync_declared()
        except DatabaseError:
            return
        except ScheduleError as exc:
            raise CommandError(f"HEADGATE['SCHEDULES']: {exc}") from exc
        if report["paused"]:
            self.stderr.write(
                "paused schedules no longer in HEADGATE['SCHEDULES']: "
                + ", ".join(report["paused"])
            )
        if report["synced"] and verbosity > 1:
            self.stderr.write(f"synced schedules: {', '.join(report['synced'])}")

    def _check_schema(self) -> None:
        """Refuse to start on a database without headgate's tables or its migrations.

        A database that cannot be reached yet is left to the worker, which waits for it.
        """
        try:
            problem = schema_problem()
        except DatabaseError:
            return
        if problem:
            raise CommandError(f"{problem}: run `manage.py migrate` first")

    def _serve_child(self, options: dict[str, Any], worker_id: str | None) -> None:
        """A ``--processes`` child's worker. A ``CommandError`` ends the child as Django
        ends the command, with one line and its exit status: it is no crash to log with a
        traceback (the supervisor's lot for anything else a child raises)."""
        try:
            self._serve(options, worker_id)
        except CommandError as exc:
            self.stderr.write(f"CommandError: {exc}")
            sys.exit(exc.returncode)

    def _serve(self, options: dict[str, Any], worker_id: str | None) -> None:
        """Run one worker until it stops: this process's, or a ``--processes`` child's."""
        worker = Worker(
            queues=options["queues"],
            concurrency=options["concurrency"],
            lease_ttl=timedelta(seconds=options["lease_ttl"]) if options["lease_ttl"] else None,
            burst=options["burst"],
            worker_id=worker_id,
            run_duties=not options["no_duties"],
            exclude_kinds=durable_modes.MODES[options["durable_mode"]],
        )

        def on_signal(signum: int) -> None:
            name = signal.Signals(signum).name
            if worker._stopping.is_set() and signum == signal.SIGHUP:
                # Not a request to hurry: a closing terminal can send more than one (its
                # shell passes one on, and the kernel another as the shell exits).
                self.stderr.write(f"received {name} again: still draining")
                return
            if worker._stopping.is_set():
                # A second signal means now: no drain, and no waiting for handler threads
                # (a KeyboardInterrupt would still wait for them at interpreter exit).
                self.stderr.write(f"received {name} again: exiting without draining")
                exit_now(1, close_connections=False)
            # Stop first: the message below writes to a stream that may be gone.
            worker.stop()
            if options["verbosity"] > 0:
                window = headgate_settings.SHUTDOWN_TIMEOUT.total_seconds()
                again = "SIGTERM" if signum == signal.SIGHUP else "it again"
                self.stderr.write(
                    f"received {name}: draining (running jobs get up to {window:g} s, "
                    f"HEADGATE['SHUTDOWN_TIMEOUT']); send {again} to exit at once"
                )

        stops = stop_signals()
        with relayed_signals(on_signal, stops):
            # A --processes child starts with them blocked (see the supervisor); one that
            # came in meanwhile is handled now, by the handler above.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
            try:
                worker.run()
            except WorkerIdInUseError as exc:
                raise CommandError(str(exc)) from exc
        if worker.gave_up:
            raise CommandError("the database stayed unreachable; nothing was run")
        if worker.failed_to_start:
            raise CommandError(
                "a handler thread could not be started: lower --concurrency "
                f"(now {options['concurrency']})"
            )
        if worker.handlers_running:
            # Handlers that outlived the drain window were released back to their queues;
            # do not let the interpreter wait for their threads at exit.
            exit_now(0)


def _one_per_option(queue: str) -> str:
    """The way out for ``--queue a,b`` (a list where one name goes), or nothing."""
    names = [name.strip() for name in queue.split(",") if name.strip()]
    if "," not in queue or not names:
        return ""
    return "; one queue per --queue: " + " ".join(f"--queue {name}" for name in names)
