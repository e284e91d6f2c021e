"""The per-minute chart of the dashboard: an inline SVG built here, no script, no CDN.

One stacked bar per minute of the last hour (completed, retried, failed from the bottom
up), scaled to the busiest minute, with a ``<title>`` per bar for the hover text and an
``aria-label`` that says the hour's totals in words. The same markup goes into the first
page and every live update, so the two never draw differently.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape

WIDTH = 360
HEIGHT = 72
#: Series from the bottom of a bar up: (index in a row, CSS class, word).
SERIES = (
    (1, "hg-c-completed", "completed"),
    (3, "hg-c-retried", "retried"),
    (2, "hg-c-failed", "failed"),
)


def _clock(minute: int) -> str:
    return datetime.fromtimestamp(minute * 60, UTC).strftime("%H:%M UTC")


def minute_chart(queue: str, rows: Sequence[tuple[int, int, int, int]]) -> str:
    """SVG markup for ``rows`` of ``(minute, completed, failed, retried)``, oldest first."""
    peak = max((r[1] + r[2] + r[3] for r in rows), default=0)
    totals = {word: sum(r[i] for r in rows) for i, _, word in SERIES}
    label = (
        f"{queue}, last {len(rows)} minutes: {totals['completed']} completed, "
        f"{totals['failed']} failed, {totals['retried']} retried"
        + (f"; busiest minute {peak}" if peak else "")
    )
    step = WIDTH / max(len(rows), 1)
    bars = []
    for n, row in enumerate(rows):
        total = row[1] + row[2] + row[3]
        if not total:
            continue
        x = n * step
        y = float(HEIGHT)
        parts = []
        for index, css, _ in SERIES:
            h = HEIGHT * row[index] / peak
            if h:
                y -= h
                parts.append(
                    f'<rect class="{css}" x="{x:.1f}" y="{y:.1f}" '
                    f'width="{max(step - 1, 1):.1f}" height="{h:.1f}"/>'
                )
        title = f"{_clock(row[0])}: {row[1]} completed, {row[2]} failed, {row[3]} retried"
        bars.append(f"<g><title>{escape(title)}</title>{''.join(parts)}</g>")
    return (
        f'<svg class="hg-chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" role="img" aria-label="{escape(label)}" '
        f'data-peak="{peak}" preserveAspectRatio="none">'
        f'<line class="hg-axis" x1="0" y1="{HEIGHT}" x2="{WIDTH}" y2="{HEIGHT}"/>'
        f"{''.join(bars)}</svg>"
    )
