"""The job page's live parts: its progress (kept live by :class:`.consumers.JobConsumer`)
and what each attempt logged (``ctx.log``), filtered by level in the browser.

Progress and logs are diagnostics, shown with the view permission like errors (see
:mod:`headgate_django.visibility`); nothing here reads a payload, result or output.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from headgate_django.kernel.attempt_log import LEVELS

#: Where a job page's socket lives (``console.routing``).
LIVE_PREFIX = "/ws/headgate/job/"


def live_path(job_id: str) -> str:
    return LIVE_PREFIX + quote(job_id, safe=":") + "/"


def progress_html(data: dict[str, Any] | None) -> str:
    """The progress fragment: state, attempt and the last reported progress, as a bar."""
    if data is None:
        return mark_safe('<p class="hg-note" data-state="gone">This job no longer exists.</p>')
    progress = data.get("progress") or {}
    head = format_html(
        '<span class="hg-badge hg-s-{}" data-state="{}">{}</span> attempt {}',
        data["state"],
        data["state"],
        data["state"],
        data["attempt"],
    )
    if not isinstance(progress, dict) or not progress.get("total"):
        return format_html(
            '<p class="hg-progress" data-current="" data-total="">{} · no progress reported</p>',
            head,
        )
    current, total = int(progress.get("current", 0)), int(progress["total"])
    return format_html(
        '<div class="hg-progress" data-current="{}" data-total="{}">{} · '
        '<progress max="{}" value="{}"></progress> {} / {} ({}%) '
        '<span class="hg-progress-message">{}</span></div>',
        current,
        total,
        head,
        total,
        current,
        current,
        total,
        current * 100 // total,
        progress.get("message") or "",
    )


def progress_live(job_id: str, data: dict[str, Any] | None, site_name: str) -> SafeString:
    """The fragment as first drawn, with the socket that redraws it (``fragment.js``)."""
    return format_html(
        '<div id="hg-job-progress" class="hg-fragment" data-ws="{}" data-site="{}">{}</div>'
        '<p><span id="hg-live" class="hg-live" role="status" data-status="connecting">'
        "Connecting…</span></p>",
        live_path(job_id),
        site_name,
        progress_html(data),
    )


def _at(ms: Any) -> str:
    try:
        return datetime.fromtimestamp(int(ms) / 1000, UTC).isoformat(timespec="milliseconds")
    except (TypeError, ValueError, OverflowError):
        return "—"


def _entry_rows(entries: list[dict[str, Any]]) -> SafeString:
    return format_html_join(
        "",
        '<tr class="hg-log" data-level="{}"><td>{}</td><td><span class="hg-log-{}">{}</span>'
        "</td><td>{}{}</td><td><code>{}</code></td></tr>",
        (
            (
                e.get("level", "info"),
                _at(e.get("at_ms")),
                e.get("level", "info"),
                e.get("level", "info"),
                e.get("message", ""),
                " (truncated)" if e.get("truncated") else "",
                json.dumps(e.get("fields") or {}, ensure_ascii=False),
            )
            for e in entries
        ),
    )


def logs_html(attempts: list[dict[str, Any]]) -> SafeString | str:
    """Each attempt's entries, newest attempt open, with a level filter (``joblogs.js``)."""
    if not attempts:
        return "— (no attempt logged anything)"
    options = format_html_join(
        "", '<option value="{}">{} and above</option>', ((lv, lv) for lv in LEVELS)
    )
    sections = format_html_join(
        "",
        '<details class="hg-attempt-log" data-attempt="{}"{}><summary>attempt #{} · {} · {} · '
        "{} entries{}</summary><table><thead><tr><th>at</th><th>level</th><th>message</th>"
        "<th>fields</th></tr></thead><tbody>{}</tbody></table></details>",
        (
            (
                a.get("attempt"),
                " open" if n == len(attempts) - 1 else "",
                a.get("attempt"),
                a.get("outcome"),
                a.get("at"),
                len(a.get("entries") or []),
                f", {a['dropped']} older dropped" if a.get("dropped") else "",
                _entry_rows(a.get("entries") or []),
            )
            for n, a in enumerate(attempts)
        ),
    )
    return format_html(
        '<div class="hg-logs"><label>Show <select class="hg-log-level">{}</select></label>{}</div>',
        options,
        sections,
    )
