"""Console and API reads from a read replica (``headgate_django.replicas``).

The "replica" here is a second SQLite database (tests/settings.py), so a read that
reaches it is told apart from one of the primary: a job stored only in the primary is
missing from what the replica serves. What must never read it: mutations, and workers.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from headgate_django import enqueue, testing
from headgate_django.checks import check_settings
from headgate_django.models import Job
from tests.app import tasks

pytestmark = [
    pytest.mark.skipif("replica" not in settings.DATABASES, reason="the SQLite leg has one"),
    pytest.mark.django_db(databases=["default", "replica"]),
]
REPLICA = override_settings(HEADGATE={"READ_REPLICA": "replica"})


def ids(response: Any) -> set[str]:
    assert response.status_code == 200, response.content
    return {row["id"] for row in response.json()["jobs"]}


def test_api_lists_and_details_read_the_replica_and_mutations_the_primary(operator: Any) -> None:
    on_primary = tasks.echo.enqueue(value=1)
    (on_replica,) = enqueue(tasks.echo.envelope(value=2), using="replica")
    assert ids(operator.get("/api/v1/jobs")) == {on_primary}  # no READ_REPLICA: the primary
    with REPLICA:
        assert ids(operator.get("/api/v1/jobs")) == {on_replica}
        assert operator.get(f"/api/v1/jobs/{on_replica}").status_code == 200
        assert operator.get(f"/api/v1/jobs/{on_primary}").status_code == 404  # "lag"
        # A mutation reads and writes the primary, whatever the replica shows.
        cancelled = operator.post(f"/api/v1/jobs/{on_primary}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
        assert Job.objects.using("replica").get(pk=on_replica).state == "available"
        # A worker in the same process claims from the primary.
        other = tasks.echo.enqueue(value=3)
        assert testing.run_one() == (other, "completed")
    assert Job.objects.get(pk=on_primary).state == "cancelled"


def test_console_lists_read_the_replica(client: Any, django_user_model: Any) -> None:
    staff = django_user_model.objects.create_superuser("replica-admin", "a@example.com", "pw")
    client.force_login(staff)
    on_primary = tasks.echo.enqueue(value=1)
    (on_replica,) = enqueue(tasks.echo.envelope(value=2), using="replica")
    page = client.get("/admin/headgate_django/job/")
    assert on_primary in page.content.decode() and on_replica not in page.content.decode()
    with REPLICA:
        page = client.get("/admin/headgate_django/job/")
        assert page.status_code == 200
        assert on_replica in page.content.decode() and on_primary not in page.content.decode()
        assert client.get(f"/admin/headgate_django/job/{on_replica}/change/").status_code == 200


def test_the_replica_alias_and_the_installation_are_checked() -> None:
    with override_settings(HEADGATE={"READ_REPLICA": "nowhere"}):
        assert [e.id for e in check_settings() if e.id.startswith("headgate.E012")] == [
            "headgate.E012"
        ]
    with REPLICA:
        assert not [e for e in check_settings() if e.id in ("headgate.E012", "headgate.W002")]
    with REPLICA, override_settings(DATABASE_ROUTERS=[]):
        (warning,) = [e for e in check_settings() if e.id == "headgate.W002"]
        assert "ReplicaRouter" in warning.msg and "ReplicaReadsMiddleware" not in warning.msg
