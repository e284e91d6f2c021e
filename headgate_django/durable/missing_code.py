"""The durable code this worker lacks: executions and Operation jobs it left for a worker
that has their (name, version), for the worker's status line.

A worker that lacks the code snoozes the job for ``MISSING_CODE_RETRY`` and looks again, so
an entry not seen for two of those periods is over (another worker took the job, or it
finished) and drops out of the status.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

#: How soon a worker lacking the code looks at the job again.
MISSING_CODE_RETRY = timedelta(seconds=30)


class MissingCode:
    def __init__(self, window: timedelta = MISSING_CODE_RETRY * 2) -> None:
        self.window = window.total_seconds()
        self._seen: dict[tuple[str, str, str], dict[str, float]] = {}
        self._lock = threading.Lock()

    def note(self, what: str, name: str, version: str, subject: str) -> None:
        """``subject`` (an execution or a job id) waits for ``what`` ``name`` at ``version``."""
        with self._lock:
            self._seen.setdefault((what, name, version), {})[subject] = time.monotonic()

    def status(self) -> str | None:
        """``missing_code=[workflow 'checkout' v'2': 3 waiting; …]``, or None."""
        horizon = time.monotonic() - self.window
        parts = []
        with self._lock:
            for key in sorted(self._seen):
                recent = {s: at for s, at in self._seen[key].items() if at >= horizon}
                if recent:
                    self._seen[key] = recent
                    what, name, version = key
                    parts.append(f"{what} {name!r} v{version!r}: {len(recent)} waiting")
                else:
                    del self._seen[key]
        return f"missing_code=[{'; '.join(parts)}]" if parts else None


missing_code = MissingCode()
