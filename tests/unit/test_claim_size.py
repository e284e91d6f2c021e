"""The worker's claim sizes (pure logic: no database, no threads)."""

from __future__ import annotations

from headgate_django.worker.claim_size import ACK_BACKLOG, BUFFER_BATCHES, WINDOW, ClaimSizer


def test_before_any_handler_ran_only_the_free_slots_are_claimed():
    sizer = ClaimSizer(concurrency=10, batch=100)
    assert sizer.size(held=0, waiting=0) == 10
    assert sizer.size(held=9, waiting=0) == 1  # every free slot, at once
    assert sizer.size(held=10, waiting=0) == 0


def test_long_jobs_are_never_buffered():
    sizer = ClaimSizer(concurrency=4, batch=100)
    sizer.observe(WINDOW * 4)  # each handler takes as long as four slots' worth of window
    assert sizer.prefetch() == 1
    sizer.observe(WINDOW * 100)
    assert sizer.prefetch() == 0
    assert sizer.size(held=3, waiting=0) == 1
    assert sizer.size(held=4, waiting=0) == 0


def test_short_jobs_are_claimed_in_whole_batches_beyond_the_slots():
    sizer = ClaimSizer(concurrency=10, batch=100)
    sizer.observe(0.0001)
    assert BUFFER_BATCHES == 2
    assert sizer.prefetch() == 200
    assert sizer.size(held=0, waiting=0) == 100
    assert sizer.size(held=160, waiting=150) == 50  # the buffer holds up to two batches
    assert sizer.size(held=210, waiting=200) == 0


def test_the_next_batch_is_claimed_while_a_whole_batch_still_waits():
    """No-op jobs finish faster than a claim comes back: the claim for the next batch goes
    out while the handlers have a whole batch ahead of them."""
    sizer = ClaimSizer(concurrency=10, batch=100)
    sizer.observe(0.00002)
    assert sizer.size(held=100, waiting=90) == 100
    assert sizer.size(held=110, waiting=100) == 100


def test_a_low_water_mark_keeps_claims_large_until_the_buffer_runs_dry():
    sizer = ClaimSizer(concurrency=100, batch=100)
    sizer.observe(0.0001)
    assert sizer.size(held=251, waiting=51) == 0  # 49 would fit: wait for half a batch
    assert sizer.size(held=250, waiting=50) == 50
    assert sizer.size(held=299, waiting=0) == 1  # handlers would idle: claim what fits


def test_the_average_follows_a_change_in_job_length():
    sizer = ClaimSizer(concurrency=10, batch=100)
    sizer.observe(0.0001)
    assert sizer.prefetch() == 200
    for _ in range(30):
        sizer.observe(5.0)
    assert sizer.prefetch() == 0


def test_finished_jobs_awaiting_their_ack_take_no_room_until_acks_fall_behind():
    sizer = ClaimSizer(concurrency=100, batch=100)
    sizer.observe(0.0001)  # short jobs: two full batches of buffer
    # The previous batch finished and waits for its ack: the next claim need not wait.
    assert sizer.size(held=100, waiting=100, acking=100) == 100
    assert sizer.size(held=100, waiting=100, acking=ACK_BACKLOG * 100) == 100
    # Acks more than ACK_BACKLOG batches behind: stop claiming until they catch up.
    assert sizer.size(held=0, waiting=0, acking=ACK_BACKLOG * 100 + 1) == 0
