"""What must hold once a chaos run has drained. Each check returns a :class:`Check` that
names what it looked at, so the report says what was proven, not only that it passed."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from headgate_django import durable
from headgate_django.conf import headgate_settings
from headgate_django.kernel.states import TERMINAL_STATES
from headgate_django.models import Job, Quarantine
from headgate_django.workflows import inspect_workflow
from tests.app.chaos_tasks import expected_result
from tests.app.models import Execution
from tests.chaos import workload as w
from tests.chaos.audit import Transition

_TERMINAL = sorted(s.value for s in TERMINAL_STATES)
_SHOW = 5  # offenders named per failed check


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def verdict(name: str, offenders: Collection[Any], checked: str) -> Check:
    if not offenders:
        return Check(name, True, checked)
    sample = ", ".join(str(o) for o in list(offenders)[:_SHOW])
    return Check(name, False, f"{len(offenders)} offender(s), e.g. {sample}")


def _fence_in(detail: str | None, key: str) -> Any:
    value = json.loads(detail) if detail else None
    if key == "message":
        return value and value.get("message")
    return value and value.get("fence")


def jobs_terminal(load: w.Workload) -> Check:
    """Every planned job exists and completed; no row of any kind is left unfinished."""
    wanted = {w.job_id(n) for n in range(load.jobs)}
    completed = set(
        Job.objects.filter(kind="chaos.job", state="completed").values_list("id", flat=True)
    )
    unfinished = list(
        Job.objects.exclude(state__in=_TERMINAL).values_list("id", "state")[: _SHOW + 1]
    )
    offenders = [f"{j} not completed" for j in sorted(wanted - completed)]
    offenders += [f"{j} left {s}" for j, s in unfinished]
    return verdict(
        "every job terminal",
        offenders,
        f"{len(completed)}/{len(wanted)} jobs completed; no row left unfinished",
    )


def completed_once(transitions: Iterable[Transition]) -> Check:
    """No row entered ``completed`` twice (the audit counts every entry of every job)."""
    counts = Counter(t.job_id for t in transitions if t.new_state == "completed")
    twice = [f"{j} ×{c}" for j, c in counts.items() if c > 1]
    return verdict("no job completed twice", twice, f"{len(counts)} rows entered completed once")


def stale_writes(transitions: Iterable[Transition]) -> tuple[list[str], int]:
    """Progress writes whose fence is not the row's fence when they landed, and completions
    of chaos jobs whose result names another fence; with the number of progress writes."""
    offenders: list[str] = []
    writes = 0
    for t in transitions:
        if t.new_state == "progress":
            writes += 1
            if _fence_in(t.detail, "message") != f"fence:{t.old_fence}":
                offenders.append(f"{t.job_id}: {t.detail} landed under fence {t.old_fence}")
        elif (
            t.new_state == "completed"
            and t.kind in ("chaos.job", "chaos.node")
            and _fence_in(t.detail, "fence") != t.old_fence
        ):
            offenders.append(f"{t.job_id}: result {t.detail} under fence {t.old_fence}")
    return offenders, writes


#: What a worker logs when a handler's session died under it and it runs the attempt again,
#: once, under the same lease (docs/guarantees.md, "A database outage").
RERUN_LOGGED = re.compile(r"job (\S+) failed on a lost database connection; running it again")


def reruns_logged(logs: Iterable[str]) -> set[str]:
    """The jobs the workers' logs say they ran again in place after a lost session."""
    return {m.group(1) for text in logs for m in RERUN_LOGGED.finditer(text)}


def double_runs(runs: Iterable[tuple[str, int, int]], reruns: Collection[str]) -> list[str]:
    """Fences that ran more than once, from ``(job_id, fence, pid)`` executions.

    One fence belongs to one claim, so its executions must come from one process. That
    process may run it twice, and only when it logged the in-place rerun a lost session
    causes; anything more is two live holders, or a rerun nobody owned up to.
    """
    pids: dict[tuple[str, int], list[int]] = {}
    for job, fence, pid in runs:
        pids.setdefault((job, fence), []).append(pid)
    offenders = []
    for (job, fence), seen in pids.items():
        if len(set(seen)) > 1:
            offenders.append(f"{job} ran under fence {fence} in {len(set(seen))} processes")
        elif len(seen) > 2 or (len(seen) == 2 and job not in reruns):
            offenders.append(f"{job} ran {len(seen)} times under fence {fence}")
    return offenders


def no_stale_writes(transitions: Iterable[Transition], reruns: Collection[str]) -> Check:
    """No write of a stale attempt landed, and no fence ran twice but for a logged rerun."""
    offenders, writes = stale_writes(transitions)
    runs = Execution.objects.filter(label__in=["job", "node"]).values_list("job_id", "fence", "pid")
    offenders += double_runs(runs, reruns)
    return verdict(
        "no stale fenced write landed",
        offenders,
        f"{writes} fenced progress writes and every completion matched their row's fence; "
        f"each fence ran in one process ({len(reruns)} logged reruns after a lost session)",
    )


def dags_succeeded(load: w.Workload, transitions: Iterable[Transition]) -> Check:
    completions = Counter(t.job_id for t in transitions if t.new_state == "completed")
    offenders: list[str] = []
    for n in range(load.dags):
        snap = inspect_workflow(w.dag_id(n))
        if snap.coordinator_state != "completed" or snap.failed or snap.generation != 1:
            offenders.append(
                f"{snap.workflow_id}: {snap.coordinator_state}, generation {snap.generation}"
            )
        for node in snap.nodes:
            if node.state != "completed" or completions[node.job_id] != 1:
                offenders.append(f"{node.job_id}: {node.state}, ×{completions[node.job_id]}")
    return verdict(
        "every DAG workflow succeeded",
        offenders,
        f"{load.dags} workflows; each of {len(w.DAG_NODES)} nodes completed exactly once "
        "in generation 1",
    )


def durables_succeeded(load: w.Workload) -> Check:
    manager = durable.Manager()
    offenders: list[str] = []
    for n in range(load.durables):
        wid = w.durable_id(n)
        view = manager.get(wid)
        if view.state != "succeeded" or view.result != expected_result(n):
            offenders.append(f"{wid}: {view.state} {view.result!r} {view.failure_reason}")
            continue
        try:
            durable.replay(manager.history(wid))
        except Exception as exc:  # any failure to replay is what this check reports
            offenders.append(f"{wid}: replay failed: {exc}")
    return verdict(
        "every durable workflow succeeded and replays",
        offenders,
        f"{load.durables} executions returned the expected result; each history replayed",
    )


def crashes_match_faults(
    transitions: Iterable[Transition],
    *,
    killed: Collection[str],
    held_at_kills: int,
    paused: Collection[str] = (),
    held_at_pauses: int = 0,
) -> tuple[Check, int, int]:
    """Every charged crash was a lease of a killed or paused worker; every lease a killed
    worker held when it died was charged exactly once; a paused worker's leases were charged
    at most once each (a pause can catch a write mid-transaction, which then lands when the
    worker resumes). Returns the check and the crashes charged for kills and for pauses."""
    charged = [t for t in transitions if t.charged_crash]
    for_kills = [t for t in charged if t.claimed_by in killed]
    for_pauses = [t for t in charged if t.claimed_by in paused]
    offenders = [
        f"{t.job_id} charged, held by live {t.claimed_by}"
        for t in charged
        if t.claimed_by not in killed and t.claimed_by not in paused
    ]
    if len(for_kills) != held_at_kills:
        offenders.append(f"{len(for_kills)} crashes charged for {held_at_kills} leases killed")
    if len(for_pauses) > held_at_pauses:
        offenders.append(f"{len(for_pauses)} crashes charged for {held_at_pauses} leases paused")
    check = verdict(
        "crash counters match the faults",
        offenders,
        f"{len(for_kills)} crashes charged = {held_at_kills} leases held by {len(killed)} "
        f"killed workers; {len(for_pauses)} ≤ {held_at_pauses} held by {len(paused)} paused",
    )
    return check, len(for_kills), len(for_pauses)


def quarantine_expected() -> tuple[Check, int]:
    """A quarantine is expected only for a job killed ``CRASH_LIMIT`` times."""
    limit = headgate_settings.CRASH_LIMIT
    rows = list(Quarantine.objects.values_list("fingerprint", "sample_job_id", "crash_count"))
    offenders = [f"{j} quarantined after {c} crash(es)" for _, j, c in rows if c < limit]
    return (
        verdict("no quarantine except where expected", offenders, f"{len(rows)} quarantined"),
        len(rows),
    )
