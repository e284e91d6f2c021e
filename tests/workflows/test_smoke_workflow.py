import pytest

from headgate_django import enqueue, testing
from headgate_django.models import Job
from headgate_django.workflows import Workflow, inspect_workflow, workflow_events
from tests.app import tasks


@pytest.mark.django_db
def test_daily_import_smoke():
    batch = (
        Workflow("daily-import")
        .coordinator_queue("workflows")
        .add("extract", tasks.record_run.envelope(label="extract"), [])
        .add("customers", tasks.record_run.envelope(label="customers"), ["extract"])
        .add("orders", tasks.record_run.envelope(label="orders"), ["extract"])
        .add("index", tasks.record_run.envelope(label="index"), ["customers", "orders"])
        .prepare()
    )
    ids = enqueue(batch)
    assert ids[0] == "daily-import:coordinator"
    report = testing.run_jobs(include_scheduled=True)
    snap = inspect_workflow("daily-import")
    assert snap.coordinator_state == "completed", report.outcomes
    assert {n.name: n.state for n in snap.nodes} == dict.fromkeys(
        ["extract", "customers", "orders", "index"], "completed"
    )
    events = [e["event"] for e in workflow_events("daily-import")]
    assert events[0] == "workflow_started" and events[-1] == "workflow_succeeded"
    assert Job.objects.get(pk="daily-import:index").state == "completed"
