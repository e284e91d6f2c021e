"""Cells of the job list, made to fit a 1366 px laptop screen.

The admin's default cells print every column in full: 26-character ids, dotted kinds,
long timestamps. Ten of those do not fit beside the sidebar and the filters, and the
state — the one column everyone reads — was the one cut. Here ids are shortened (the
full id is in the hover title and one click copies it), a kind loses its module path
when no other registered kind ends the same way, instants drop the year and time zone
(both in the hover title), and the state is a coloured badge that also says its name.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from headgate_django.registry import registered_kinds

#: Where the list's first page listens for changes (see ``consumers.JobListConsumer``).
LIVE_PATH = "/ws/headgate/jobs/"
#: The list's filters the live first page follows (the admin's own parameters), by the
#: name :func:`headgate_django.store.console.job_page_fingerprint` gives them.
JOB_LIST_FILTERS = {"state__exact": "state", "queue__exact": "queue", "kind__exact": "kind"}
#: Longer filter values are refused: no id, kind or queue is this long.
MAX_FILTER_CHARS = 255
#: Ids up to this long are shown whole; longer ones keep their head and tail.
SHORT_ID = 14
_HEAD, _TAIL = 4, 8
#: Two overlapping sheets, drawn rather than a glyph that not every font has.
_COPY_ICON = (
    '<svg viewBox="0 0 12 12" aria-hidden="true"><rect x="3.5" y="0.7" width="7.8" height="7.8" '
    'rx="1"/><rect x="0.7" y="3.5" width="7.8" height="7.8" rx="1"/></svg>'
)


def short_id(value: str) -> str:
    """``01JF…K3Q8ZB7X``: ULIDs share their time prefix, so the tail tells jobs apart."""
    if len(value) <= SHORT_ID:
        return value
    return f"{value[:_HEAD]}…{value[-_TAIL:]}"


def id_cell(value: str, url: str | None) -> SafeString:
    """The shortened id (a link when ``url``), its full text on hover, a copy button."""
    text = short_id(value)
    shown = format_html('<a href="{}">{}</a>', url, text) if url else text
    return format_html(
        '<span class="hg-id" title="{}">{}</span>'
        '<button type="button" class="hg-copy" data-copy="{}" title="Copy {}" '
        'aria-label="Copy id {}">' + _COPY_ICON + "</button>",
        value,
        shown,
        value,
        value,
        value,
    )


def _tail(kind: str) -> str:
    return kind.rsplit(".", 1)[-1].rsplit(":", 1)[-1]


@lru_cache(maxsize=8)
def _ambiguous(kinds: tuple[str, ...]) -> frozenset[str]:
    seen: dict[str, int] = {}
    for kind in kinds:
        seen[_tail(kind)] = seen.get(_tail(kind), 0) + 1
    return frozenset(tail for tail, n in seen.items() if n > 1)


def short_kind(kind: str) -> str:
    """The kind's last dotted part, when no other registered kind has the same one."""
    tail = _tail(kind)
    if not tail or tail == kind:
        return kind
    known = tuple(registered_kinds())
    if kind not in known or tail in _ambiguous(known):
        return kind
    return tail


def kind_cell(kind: str) -> SafeString:
    return format_html('<span class="hg-kind" title="{}">{}</span>', kind, short_kind(kind))


def state_cell(state: str) -> SafeString:
    return format_html('<span class="hg-badge hg-s-{}">{}</span>', state, state)


def time_cell(value: datetime | None) -> SafeString | str:
    """``12-02 13:59:37`` in the site's time zone; the full instant on hover."""
    if value is None:
        return "—"
    local = timezone.localtime(value) if timezone.is_aware(value) else value
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        local.isoformat(sep=" ", timespec="seconds"),
        local.strftime("%m-%d %H:%M:%S"),  # wraps at the space when the screen is narrow
    )


def attempts_cell(attempt: int, crash_attempt: int) -> SafeString:
    """Failed attempts, with crashes (lapsed leases) after them only when there were any."""
    if crash_attempt:
        return format_html(
            '<span title="{} failed, {} crashed">{} · {}✕</span>',
            attempt,
            crash_attempt,
            attempt,
            crash_attempt,
        )
    return format_html('<span title="{} failed attempts">{}</span>', attempt, attempt)
