import pytest
from django.test import RequestFactory

from headgate_django import metrics as m
from tests.app import tasks


@pytest.mark.django_db
def test_metrics_view_reports_counters_and_queue_depth():
    m.observe_attempt("default", "test.echo", "completed", 0.01)
    tasks.echo.enqueue(value=1)
    response = m.metrics_view(RequestFactory().get("/metrics"))
    body = response.content.decode()
    assert response.status_code == 200
    assert (
        'headgate_jobs_outcomes_total{kind="test.echo",outcome="completed",queue="default"}' in body
    )
    assert 'headgate_queue_jobs{queue="default",state="available"} 1.0' in body
    assert "headgate_queue_oldest_available_seconds" in body
