"""Signals reach a worker's handler on a relay thread, not inside the signal handler."""

from __future__ import annotations

import os
import signal
import threading

from headgate_django.worker.signals import relayed_signals


def test_each_signal_is_handled_on_the_relay_thread_in_order() -> None:
    seen: list[tuple[int, str]] = []
    done = threading.Event()

    def handle(signum: int) -> None:
        seen.append((signum, threading.current_thread().name))
        if len(seen) == 2:
            done.set()

    with relayed_signals(handle, (signal.SIGUSR1, signal.SIGUSR2)):
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR2)
        assert done.wait(5)
    assert seen == [
        (signal.SIGUSR1, "headgate-signals"),
        (signal.SIGUSR2, "headgate-signals"),
    ]


def test_a_signal_landing_while_the_main_thread_holds_an_event_lock_does_not_deadlock() -> None:
    """What a direct ``Event.set()`` in the handler would have deadlocked on."""
    stopping = threading.Event()
    with relayed_signals(lambda _: stopping.set(), (signal.SIGUSR1,)):
        with stopping._cond:  # the main thread holds the Event's lock, as Event.wait() does
            os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs here, on this thread
        assert stopping.wait(5)


def test_the_relay_outlives_a_handler_that_raises() -> None:
    """A first signal whose handling fails (a message to a stream that is gone) must not
    leave the next one unread: the worker would be unstoppable."""
    seen: list[int] = []
    done = threading.Event()

    def handle(signum: int) -> None:
        seen.append(signum)
        if len(seen) == 1:
            raise OSError("stderr is gone")
        done.set()

    with relayed_signals(handle, (signal.SIGUSR1,)):
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert done.wait(5)
    assert seen == [signal.SIGUSR1, signal.SIGUSR1]


def test_leaving_the_block_puts_the_previous_handlers_back_and_ends_the_relay() -> None:
    """A worker run through ``call_command`` in a longer-lived process must hand that
    process its own SIGTERM/SIGINT handling back when it returns."""
    mine: list[int] = []

    def own_handler(signum: int, _frame: object) -> None:
        mine.append(signum)

    previous = signal.signal(signal.SIGUSR1, own_handler)
    try:
        relayed: list[int] = []
        with relayed_signals(relayed.append, (signal.SIGUSR1,)):
            assert signal.getsignal(signal.SIGUSR1) is not own_handler
        assert not [t for t in threading.enumerate() if t.name == "headgate-signals"]
        os.kill(os.getpid(), signal.SIGUSR1)
        assert mine == [signal.SIGUSR1] and relayed == []
    finally:
        signal.signal(signal.SIGUSR1, previous)
