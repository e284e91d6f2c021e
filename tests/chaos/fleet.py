"""The worker processes of a chaos run: start, SIGKILL, replace, and stop them by pid."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent


def worker_env(url: str, headgate: dict[str, Any]) -> dict[str, str]:
    """The environment of a ``runworkers`` child (and of the orchestrator's own Django)."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=url,
        PYTHONPATH=str(ROOT),
        HEADGATE_TEST_LOG_LEVEL="INFO",
        HEADGATE_TEST_SETTINGS_JSON=json.dumps(headgate),
    )
    return env


@dataclass
class Worker:
    worker_id: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass(frozen=True)
class Kill:
    worker_id: str
    pid: int
    at: float  # seconds since the run started
    ports: frozenset[int]  # the local ports of its connections to the database server


@dataclass
class Pause:
    """A worker stopped with SIGSTOP (a stalled VM, a suspended container): its leases lapse
    while its handlers still hold their stale attempts. It is resumed at ``resume_at``
    and retired with SIGTERM a little later; a replacement starts at once."""

    worker: Worker
    resume_at: float  # time.monotonic()
    ports: frozenset[int]  # the local ports of its connections to the database server
    resumed: bool = False
    retired: bool = False
    # What the server showed once none of its sessions ran a statement: their ids, its
    # clock, and how many rows they had moved to running by then, as visible at that time.
    sessions: frozenset[int] = frozenset()
    stopped_at: datetime | None = None
    leases_entered: int = 0


class Fleet:
    """``size`` live ``runworkers`` processes; each kill is followed by a replacement."""

    def __init__(
        self, *, env: dict[str, str], logdir: Path, size: int, concurrency: int, seed: int
    ) -> None:
        self.env = env
        self.logdir = logdir
        self.size = size
        self.concurrency = concurrency
        self.live: list[Worker] = []
        self.stopped: list[Worker] = []
        self.kills: list[Kill] = []
        self.pauses: list[Pause] = []
        self._started = 0
        self._random = random.Random(seed)

    def start(self) -> Worker:
        self._started += 1
        worker_id = f"chaos-w{self._started}"
        log = self.logdir / f"{worker_id}.log"
        with log.open("wb") as handle:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "manage.py"),
                    "runworkers",
                    "--worker-id",
                    worker_id,
                    "--concurrency",
                    str(self.concurrency),
                ],
                env=self.env,
                cwd=ROOT,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        worker = Worker(worker_id, proc, log)
        self.live.append(worker)
        return worker

    def fill(self) -> None:
        while len(self.live) < self.size:
            self.start()

    def kill_random(self, at: float, server_port: int) -> Kill:
        """SIGKILL one live worker chosen at random and wait until it is gone.

        The worker is stopped first, so the connections it has to the server at
        ``server_port`` can be listed while it can open no new one: the server keeps running
        what it already received from them after the process is gone."""
        victim = self._random.choice(self.live)
        victim.proc.send_signal(signal.SIGSTOP)
        ports = client_ports(victim.proc.pid, server_port)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(timeout=30)
        self.live.remove(victim)
        self.stopped.append(victim)
        kill = Kill(victim.worker_id, victim.proc.pid, at, ports)
        self.kills.append(kill)
        return kill

    def pause_random(self, seconds: float, server_port: int) -> Pause | None:
        """SIGSTOP one serving worker for ``seconds`` (None if none serves yet); it no longer
        counts as live. Its connections to the server at ``server_port`` are listed."""
        serving = [w for w in self.live if _serving(w)]
        if not serving:
            return None
        victim = self._random.choice(serving)
        victim.proc.send_signal(signal.SIGSTOP)
        self.live.remove(victim)
        pause = Pause(
            victim, time.monotonic() + seconds, client_ports(victim.proc.pid, server_port)
        )
        self.pauses.append(pause)
        return pause

    def resume_due(self, now: float, retire_after: float = 2.0) -> None:
        """SIGCONT paused workers whose time has come, so their stale attempts try to write;
        SIGTERM them ``retire_after`` seconds later (their exit code is checked at stop)."""
        for pause in self.pauses:
            if not pause.resumed and now >= pause.resume_at:
                pause.worker.proc.send_signal(signal.SIGCONT)
                pause.resumed = True
            if pause.resumed and not pause.retired and now >= pause.resume_at + retire_after:
                pause.worker.proc.send_signal(signal.SIGTERM)
                pause.retired = True

    def exited(self) -> list[Worker]:
        """Live workers that exited on their own (a worker must never die by itself)."""
        return [w for w in self.live if w.proc.poll() is not None]

    def replace_exited(self) -> list[str]:
        """Replace the live workers that exited by themselves; return their ids."""
        gone = self.exited()
        for worker in gone:
            self.live.remove(worker)
            self.stopped.append(worker)
        self.fill()
        return [w.worker_id for w in gone]

    def wait_serving(self, timeout: float = 60.0) -> None:
        """Wait until every live worker has started its loop (and installed its signal
        handlers: a SIGTERM before that would end it like a SIGKILL)."""
        deadline = time.monotonic() + timeout
        for worker in self.live:
            while not _serving(worker):
                if worker.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{worker.worker_id} never started; see {worker.log}")
                time.sleep(0.1)

    def stop(self, timeout: float = 60.0) -> dict[str, int]:
        """SIGTERM every live worker (a graceful drain); SIGKILL any that outlive ``timeout``.
        Returns each worker's exit code."""
        self.resume_due(float("inf"), retire_after=0)
        self.wait_serving()
        for worker in self.live:
            if worker.proc.poll() is None:
                worker.proc.send_signal(signal.SIGTERM)
        codes: dict[str, int] = {}
        for worker in [*self.live, *(p.worker for p in self.pauses)]:
            try:
                codes[worker.worker_id] = worker.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                codes[worker.worker_id] = worker.proc.wait()
        self.stopped += self.live
        self.live = []
        return codes

    def kill_all(self) -> None:
        """The last resort on the way out of a failed run."""
        for worker in [*self.live, *(p.worker for p in self.pauses)]:
            if worker.proc.poll() is None:
                worker.proc.kill()
                worker.proc.wait()
        self.stopped += self.live
        self.live = []


def client_ports(pid: int, server_port: int) -> frozenset[int]:
    """The local ports of process ``pid``'s TCP connections to ``server_port`` (Linux: its
    socket descriptors matched against the kernel's connection tables)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed while we looked
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == server_port:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return frozenset(ports)


def _serving(worker: Worker) -> bool:
    return " serving " in worker.log.read_text(errors="replace")
