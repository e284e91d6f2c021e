"""A job's attempts as a timeline: when each was claimed, by which worker, how long it
ran, how it ended, and the error with its traceback.

Built from the job's ``errors`` (one entry per attempt that did not succeed; entries
written since this release carry ``claimed_at`` and ``worker``) and, for the attempt
that is running or that finished the job, from the row itself. Error messages and
tracebacks are diagnostics, shown with the view permission (see
:mod:`headgate_django.visibility`); nothing here shows a payload, result or checkpoint.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

#: What each recorded outcome means, in words (only "error" consumes an attempt).
OUTCOMES = {
    "error": ("failed", "archived"),
    "crash": ("crashed — the lease lapsed", "retryable"),
    "timeout": ("timed out", "archived"),
    "skip": ("skipped", "cancelled"),
    "undecodable": ("payload undecodable", "undecodable"),
    "uncertain": ("uncertain", "retryable"),
    "condition": ("condition failed", "archived"),
}


def _instant(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


def _duration(start: Any, end: Any) -> str:
    began, ended = _instant(start), _instant(end)
    if began is None or ended is None:
        return "—"
    seconds = (ended - began).total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def _when(value: Any) -> str:
    at = _instant(value)
    return at.isoformat(sep=" ", timespec="seconds") if at else "—"


def attempt_rows(job: Any) -> list[dict[str, Any]]:
    """One dict per attempt, oldest first: what the timeline shows."""
    rows = []
    for entry in job.errors or []:
        word, colour = OUTCOMES.get(str(entry.get("kind")), (str(entry.get("kind")), "archived"))
        rows.append(
            {
                "attempt": entry.get("attempt"),
                "claimed": _when(entry.get("claimed_at")),
                "worker": entry.get("worker") or "—",
                "duration": _duration(entry.get("claimed_at"), entry.get("at")),
                "ended": _when(entry.get("at")),
                "outcome": word,
                "colour": colour,
                "error": entry.get("error") or "",
                "traceback": entry.get("traceback") or "",
            }
        )
    # The attempt that runs now, or the one that succeeded, left no entry: the row has it.
    if job.state in ("running", "completed") and job.claimed_at is not None:
        running = job.state == "running"
        rows.append(
            {
                "attempt": len(rows) + 1,
                "claimed": _when(job.claimed_at),
                "worker": job.claimed_by or "—",
                "duration": "running" if running else _duration(job.claimed_at, job.finalized_at),
                "ended": "—" if running else _when(job.finalized_at),
                "outcome": "running" if running else "succeeded",
                "colour": job.state,
                "error": "",
                "traceback": "",
            }
        )
    return rows


def attempts_timeline(job: Any) -> SafeString | str:
    rows = attempt_rows(job)
    if not rows:
        return "— (not claimed yet)"
    items = format_html_join(
        "",
        '<li class="hg-attempt"><span class="hg-badge hg-s-{}">#{} {}</span> '
        '<span class="hg-attempt-meta">claimed {} · worker <code>{}</code> · ran {} · '
        "ended {}</span>{}</li>",
        (
            (
                r["colour"],
                r["attempt"],
                r["outcome"],
                r["claimed"],
                r["worker"],
                r["duration"],
                r["ended"],
                _error(r["error"], r["traceback"]),
            )
            for r in rows
        ),
    )
    return format_html('<ol class="hg-attempts">{}</ol>', items)


def _error(message: str, trace: str) -> SafeString | str:
    if not message and not trace:
        return ""
    if not trace:
        return format_html('<pre class="hg-json">{}</pre>', message)
    return format_html(
        '<pre class="hg-json">{}</pre><details><summary>traceback</summary>'
        '<pre class="hg-json hg-trace">{}</pre></details>',
        message,
        trace,
    )
