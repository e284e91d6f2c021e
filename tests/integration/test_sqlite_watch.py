"""The SQLite wake source: a commit that leaves a job available wakes the runner, others don't."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from django.db import connection

from headgate_django.models import QueueState
from headgate_django.worker.notify import SqliteWatcher, wake_source
from tests.app import tasks

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def watch() -> Iterator[Callable[..., threading.Event]]:
    if connection.vendor != "sqlite":
        pytest.skip("the data_version watcher is SQLite's")
    watchers: list[SqliteWatcher] = []

    def start(queues: list[str] | None = None) -> threading.Event:
        wake = threading.Event()
        watcher = SqliteWatcher(wake, queues, timedelta(milliseconds=5), timedelta(milliseconds=50))
        watcher.start()
        watchers.append(watcher)
        # Let it read the counter once before the commit under test.
        assert not wake.wait(0.1)
        return wake

    yield start
    for watcher in watchers:
        watcher.stop()
        watcher.join(5)
        assert not watcher.is_alive()


def test_enqueue_wakes(watch):
    wake = watch()
    tasks.record_run.enqueue(label="now")
    assert wake.wait(2)


def test_unrelated_commit_does_not_wake(watch):
    wake = watch()
    QueueState.objects.create(name="elsewhere", paused=True)
    assert not wake.wait(0.3)


def test_job_for_another_queue_does_not_wake(watch):
    wake = watch(queues=["reports"])
    tasks.record_run.enqueue(label="default queue")
    assert not wake.wait(0.3)


def test_scheduled_job_does_not_wake_until_due(watch):
    wake = watch()
    tasks.record_run.enqueue_at(timedelta(hours=1), label="later")
    assert not wake.wait(0.3)


def test_chosen_by_vendor_and_setting(settings):
    if connection.vendor != "sqlite":
        assert not isinstance(wake_source(threading.Event(), None), SqliteWatcher)
        return
    assert isinstance(wake_source(threading.Event(), None), SqliteWatcher)
    settings.HEADGATE = {"SQLITE_WAKE_INTERVAL": None}
    assert wake_source(threading.Event(), None) is None
