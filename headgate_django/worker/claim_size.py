"""How many jobs a worker claims at a time: its free handler slots, plus a buffer while its
jobs are short.

A claim is one statement and one commit whatever its size, so claiming only the few slots
that have just come free makes short jobs pay a commit each. Short jobs are therefore
claimed in whole batches into a local buffer (leased, renewed, handed back on SIGTERM like
running jobs). Long or unknown jobs are not buffered: a job waiting in one worker's buffer
behind a long handler could have run at once in another worker, and a killed worker's
buffered jobs are charged a crash when their leases expire. The buffer therefore holds at
most what the handlers get through in :data:`WINDOW`, judged by how long handlers have taken,
and at most :data:`BUFFER_BATCHES` claim batches.
"""

from __future__ import annotations

#: A worker buffers no more jobs than its handlers are expected to start within this many
#: seconds, so a buffered job waits about this long at most.
WINDOW = 0.1
#: The buffer's limit in claim batches. Two, so that with jobs shorter than a claim's round
#: trip the claim for the next batch is under way while a whole batch still waits: with one,
#: the handlers emptied the buffer before that claim came back, and sat idle (a no-op drain
#: at ``--concurrency 10`` spent a fifth of its time so).
BUFFER_BATCHES = 2
#: Finished jobs awaiting their ack, in claim batches, beyond which a worker claims no more.
ACK_BACKLOG = 2
#: Weight of the newest handler duration in the running average.
_SMOOTHING = 0.2


class ClaimSizer:
    """Decides claim sizes from the jobs held and the handler durations seen so far."""

    def __init__(self, concurrency: int, batch: int) -> None:
        self.concurrency = concurrency
        self.batch = batch
        self.mean_run: float | None = None  # seconds per handler call, None before the first

    def observe(self, seconds: float) -> None:
        """Record how long one handler call took."""
        if self.mean_run is None:
            self.mean_run = seconds
        else:
            self.mean_run += _SMOOTHING * (seconds - self.mean_run)

    def prefetch(self) -> int:
        """Jobs to hold beyond the handler slots: what the handlers start within WINDOW."""
        if self.mean_run is None:
            return 0
        expected = self.concurrency * WINDOW / max(self.mean_run, 1e-6)
        return min(BUFFER_BATCHES * self.batch, int(expected))

    def size(self, held: int, waiting: int, acking: int = 0) -> int:
        """How many jobs to claim now (0: not yet).

        ``held`` jobs are running or waiting for a handler, ``waiting`` of them waiting;
        ``acking`` more have finished and wait for their batched ack. Those take no handler
        slot and no buffer room, so they do not hold the next claim back: otherwise every
        claim would wait for the previous batch's ack to commit, and claims and acks would
        take turns instead of overlapping. Only when acks fall behind by more than
        :data:`ACK_BACKLOG` batches does the worker stop claiming until they catch up.

        Without a buffer, every free slot is claimed as soon as it frees up. With one, the
        worker waits until at least half a batch fits (a low-water mark that keeps claims
        large) unless its buffer has run dry.
        """
        if acking > ACK_BACKLOG * self.batch:
            return 0
        prefetch = self.prefetch()
        room = self.concurrency + prefetch - held
        if room <= 0:
            return 0
        if prefetch and waiting and 2 * room < min(self.batch, self.concurrency + prefetch):
            return 0
        return min(self.batch, room)
