"""Policy names that differ only by case: two policies, or (where the database compares
text without case, MySQL/MariaDB's usual collations) the second refused with a clear error
that names both. Never the first one silently changed in the second's name, which left the
jobs of the second name unlimited (the claim matches names exactly) while the first's
limit was replaced."""

from __future__ import annotations

from datetime import timedelta

import pytest

from headgate_django import admission
from headgate_django.exceptions import DefinitionError

pytestmark = pytest.mark.django_db


def _refused_or_stored(set_second, name: str, other: str) -> bool:
    """Run ``set_second``; True if it was refused for the clash with ``other``."""
    try:
        set_second()
    except DefinitionError as exc:
        assert f"{name!r}" in str(exc) and f"{other!r}" in str(exc) and "case" in str(exc)
        return True
    return False


def test_rate_classes_differing_only_by_case():
    admission.set_rate_class("Mail", limit=2, window=timedelta(seconds=60))
    refused = _refused_or_stored(
        lambda: admission.set_rate_class("mail", limit=100, window=1, paused=True), "mail", "Mail"
    )
    classes = {c["name"]: (c["limit"], c["paused"]) for c in admission.rate_classes()}
    assert classes["Mail"] == (2, False)
    assert ("mail" in classes) is not refused


@pytest.mark.parametrize(
    "policy",
    [
        lambda q: admission.set_concurrency_limit(q, 1),
        lambda q: admission.set_fairness(q, quantum=3),
        lambda q: admission.set_queue_weight(q, 5),
        lambda q: admission.set_backpressure(q, 10),
    ],
    ids=["ceiling", "fairness", "weight", "backpressure"],
)
def test_queue_policies_differing_only_by_case(policy):
    admission.set_concurrency_limit("Reports", 3)
    admission.set_backpressure("Reports", 50)
    refused = _refused_or_stored(lambda: policy("reports"), "reports", "Reports")
    ceilings = {c["queue"]: c["max_concurrent"] for c in admission.concurrency_limits()}
    assert ceilings["Reports"] == 3
    assert {b["queue"]: b["max_unfinished"] for b in admission.backpressure_limits()}[
        "Reports"
    ] == 50
    assert not any(f["queue"] == "Reports" for f in admission.fair_queues())
    assert not any(w["queue"] == "Reports" for w in admission.queue_weights())
    if refused:
        assert "reports" not in ceilings
