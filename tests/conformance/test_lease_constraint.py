"""``headgate_job_running_has_lease``: the database itself refuses a running job without a
lease and a lease on a job that is not running.

Fenced writes match a job by ``(id, lease_id, fence)`` without re-reading its state, which
is sound only because of this rule; a write that breaks it fails whatever wrote it.
"""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from headgate_django.kernel.states import State
from headgate_django.models import Job
from tests.conformance.helpers import claim, enqueue_job, row

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    "state", [s for s in State if s is not State.RUNNING], ids=lambda s: s.value
)
def test_a_lease_on_a_job_that_is_not_running_is_refused(state):
    job_id = enqueue_job()
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(id=job_id).update(state=state.value, lease_id="a-lease")
    assert row(job_id)["lease_id"] is None


def test_a_running_job_without_a_lease_is_refused():
    job_id = enqueue_job()
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(id=job_id).update(state=State.RUNNING.value)
    claimed = claim(job_id)
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(id=job_id).update(lease_id=None)
    assert row(job_id)["lease_id"] == claimed.ref.lease_id


def test_a_running_job_with_its_lease_and_a_finished_one_without_are_stored():
    job_id = enqueue_job()
    claimed = claim(job_id)
    assert row(job_id)["state"] == State.RUNNING.value
    assert row(job_id)["lease_id"] == claimed.ref.lease_id
    Job.objects.filter(id=job_id).update(state=State.COMPLETED.value, lease_id=None)
    assert row(job_id)["state"] == State.COMPLETED.value
