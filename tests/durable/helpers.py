"""Drive durable executions through the real store in the test's thread."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from django.db import connection, connections
from django.db.models.functions import Now

from headgate_django import durable, testing
from headgate_django.models import Execution, HistoryEvent, Job, SignalInbox
from headgate_django.store.durable_jobs import OP_KIND, TASK_KIND, task_job_id


def start(name: str, input: Any = None, version: str = "1", **options: Any) -> str:
    return durable.Client().start(name, version, input, **options).workflow_id


def drive(rounds: int = 200, *, tasks_due: bool = False) -> list[tuple[str, str]]:
    """Run every runnable job until none is left. Operation retries and snoozes are made
    due at once (so are workflow tasks with ``tasks_due``: replay-error backoffs); timers
    are not, because a pass checks them against the store clock."""
    outcomes: list[tuple[str, str]] = []
    kinds = [OP_KIND, TASK_KIND] if tasks_due else [OP_KIND]
    for _ in range(rounds):
        ran = testing.run_jobs().outcomes
        outcomes += ran
        due = Job.objects.filter(kind__in=kinds, state__in=["scheduled", "retryable"]).update(
            state="available", scheduled_at=Now()
        )
        if not ran and not due:
            return outcomes
    raise AssertionError(f"jobs still runnable after {rounds} rounds")


def replay_until_suspended(wf: str) -> None:
    """Run the execution's failing workflow task, its backoffs made due at once, until the
    execution is suspended (with the job table's 25 attempts at most)."""
    for _ in range(30):
        testing.run_jobs()
        if view(wf).state == "suspended":
            return
        Job.objects.filter(kind=TASK_KIND, state="retryable").update(state="available")
    raise AssertionError("the execution was not suspended")


#: What a trigger that refuses an execution's changes says (see ``refusing_changes``).
REFUSED = "refused by a trigger"

_REFUSE = {
    "sqlite": [
        "CREATE TRIGGER headgate_test_refuse BEFORE UPDATE ON headgate_durable_execution "
        "WHEN OLD.id = '{id}' BEGIN SELECT RAISE(ABORT, '{msg}'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION headgate_test_refuse() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION '{msg}'; END $$",
        "CREATE TRIGGER headgate_test_refuse BEFORE UPDATE ON headgate_durable_execution "
        "FOR EACH ROW WHEN (OLD.id = '{id}') EXECUTE FUNCTION headgate_test_refuse()",
    ],
    "mysql": [
        "CREATE TRIGGER headgate_test_refuse BEFORE UPDATE ON headgate_durable_execution "
        "FOR EACH ROW BEGIN IF OLD.id = '{id}' THEN SIGNAL SQLSTATE '45000' "
        "SET MESSAGE_TEXT = '{msg}'; END IF; END"
    ],
}
_ALLOW = {
    "sqlite": ["DROP TRIGGER headgate_test_refuse"],
    "postgresql": [
        "DROP TRIGGER headgate_test_refuse ON {table}",
        "DROP FUNCTION headgate_test_refuse()",
    ],
    "mysql": ["DROP TRIGGER headgate_test_refuse"],
}


@contextlib.contextmanager
def refusing_changes(execution_id: str) -> Iterator[None]:
    """The database refuses every change to ``execution_id``'s header (with ``REFUSED``),
    as a persistent store failure would. DDL: MariaDB commits at once, so a test using it
    runs with ``django_db(transaction=True)``."""
    with _trigger(_REFUSE, execution_id):
        yield


#: The same trigger on the job table, for the checkpoint note that fails an Operation.
_REFUSE_FAILED_MARK = {
    "sqlite": [
        "CREATE TRIGGER headgate_test_refuse BEFORE UPDATE ON headgate_job "
        "WHEN OLD.id = '{id}' AND NEW.checkpoint LIKE '%\"failed\"%' "
        "BEGIN SELECT RAISE(ABORT, '{msg}'); END"
    ],
    "postgresql": [
        _REFUSE["postgresql"][0],
        "CREATE TRIGGER headgate_test_refuse BEFORE UPDATE ON headgate_job FOR EACH ROW "
        "WHEN (OLD.id = '{id}' AND NEW.checkpoint::text LIKE '%\"failed\"%') "
        "EXECUTE FUNCTION headgate_test_refuse()",
    ],
    "mysql": [
        "CREATE TRIGGER headgate_test_refuse BEFORE UPDATE ON headgate_job FOR EACH ROW "
        "BEGIN IF OLD.id = '{id}' AND NEW.checkpoint LIKE '%\"failed\"%' THEN "
        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{msg}'; END IF; END"
    ],
}


@contextlib.contextmanager
def refusing_operation_failure(job_id: str) -> Iterator[None]:
    """The database refuses to note the Operation of ``job_id`` failed (with ``REFUSED``):
    the runtime's write after a handler that failed for good. Its other writes land."""
    with _trigger(_REFUSE_FAILED_MARK, job_id, table="headgate_job"):
        yield


@contextlib.contextmanager
def _trigger(
    create: dict[str, list[str]], row_id: str, table: str = "headgate_durable_execution"
) -> Iterator[None]:
    with connection.cursor() as cursor:
        for sql in create[connection.vendor]:
            cursor.execute(sql.format(id=row_id, msg=REFUSED))
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for sql in _ALLOW[connection.vendor]:
                cursor.execute(sql.format(table=table))


def history(workflow_id: str) -> list[tuple[str, dict[str, Any]]]:
    rows = HistoryEvent.objects.filter(execution_id=workflow_id).order_by("seq")
    return list(rows.values_list("type", "payload"))


def types(workflow_id: str) -> list[str]:
    return [t for t, _ in history(workflow_id)]


def seqs(workflow_id: str) -> list[int]:
    return list(
        HistoryEvent.objects.filter(execution_id=workflow_id)
        .order_by("seq")
        .values_list("seq", flat=True)
    )


def view(workflow_id: str) -> durable.ExecutionView:
    return durable.Manager().get(workflow_id)


def task_job(workflow_id: str) -> Job:
    return Job.objects.get(pk=task_job_id(workflow_id))


def op_job(workflow_id: str, n: int = 1) -> Job:
    return Job.objects.get(pk=f"{workflow_id}:op:{n}")


def op_jobs(workflow_id: str) -> list[Job]:
    return list(Job.objects.filter(kind=OP_KIND, workflow_id=f"durable:{workflow_id}"))


def live_jobs(workflow_id: str) -> list[Job]:
    live = ["pending", "scheduled", "available", "running", "retryable"]
    return list(Job.objects.filter(workflow_id=f"durable:{workflow_id}", state__in=live))


def counts() -> tuple[int, int, int, int]:
    """Rows in the durable tables and the job table, for "nothing was written" checks."""
    return (
        Execution.objects.count(),
        HistoryEvent.objects.count(),
        SignalInbox.objects.count(),
        Job.objects.count(),
    )


def in_parallel(*calls: Callable[[], Any]) -> list[Any]:
    """Run ``calls`` on threads at once; return what each returned or raised."""
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except BaseException as exc:  # the outcome is what the test checks
            results[index] = exc
        finally:
            connections.close_all()  # this thread's own

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results
