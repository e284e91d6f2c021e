"""Signals reach a worker's handler on a relay thread, not inside the signal handler."""

from __future__ import annotations

import os
import signal
import threading

from headgate_django.worker.signals import relay_signals


def test_each_signal_is_handled_on_the_relay_thread_in_order() -> None:
    seen: list[tuple[int, str]] = []
    done = threading.Event()

    def handle(signum: int) -> None:
        seen.append((signum, threading.current_thread().name))
        if len(seen) == 2:
            done.set()

    previous = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2)}
    try:
        relay_signals(handle, (signal.SIGUSR1, signal.SIGUSR2))
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR2)
        assert done.wait(5)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert seen == [
        (signal.SIGUSR1, "headgate-signals"),
        (signal.SIGUSR2, "headgate-signals"),
    ]


def test_a_signal_landing_while_the_main_thread_holds_an_event_lock_does_not_deadlock() -> None:
    """What a direct ``Event.set()`` in the handler would have deadlocked on."""
    stopping = threading.Event()
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        relay_signals(lambda _: stopping.set(), (signal.SIGUSR1,))
        with stopping._cond:  # the main thread holds the Event's lock, as Event.wait() does
            os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs here, on this thread
        assert stopping.wait(5)
    finally:
        signal.signal(signal.SIGUSR1, previous)
