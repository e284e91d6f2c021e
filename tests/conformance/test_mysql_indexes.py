"""MySQL/MariaDB: secondary indexes hold what their queries need, not a copy of every row.

Without partial indexes, a plain index there takes an entry of its full key for every job,
finished or not. The fingerprint is looked up only for waiting jobs (when one is
quarantined), so it is indexed through a generated column that is NULL for every other row
(migration 0020): a finished job's entry carries no 32-character hash.
"""

from __future__ import annotations

import pytest
from django.db import connection

from headgate_django.kernel.states import State
from tests.conformance.helpers import job_in_state

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "mysql", reason="MySQL/MariaDB's own index shape"),
]


def _indexes() -> dict[str, list[str]]:
    with connection.cursor() as cursor:
        cursor.execute("SHOW INDEX FROM headgate_job")
        names = [d[0] for d in cursor.description]
        found: dict[str, list[str]] = {}
        for values in cursor.fetchall():
            entry = dict(zip(names, values, strict=True))
            found.setdefault(entry["Key_name"], []).append(entry["Column_name"])
    return found


def test_no_index_keys_every_row_by_fingerprint() -> None:
    indexes = _indexes()
    assert indexes["headgate_job_fp_waiting_my"] == ["fp_waiting"]
    assert not [name for name, cols in indexes.items() if cols[0] == "fingerprint"]


def test_fp_waiting_is_the_fingerprint_only_while_the_job_waits() -> None:
    waiting, _ = job_in_state(State.AVAILABLE)
    done, _ = job_in_state(State.COMPLETED)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, fingerprint, fp_waiting FROM headgate_job WHERE id IN (%s, %s)",
            [waiting, done],
        )
        rows = {r[0]: (r[1], r[2]) for r in cursor.fetchall()}
    assert rows[waiting][1] == rows[waiting][0]
    assert rows[done][1] is None


def test_jobs_by_kind_come_off_an_index() -> None:
    assert _indexes()["headgate_job_kind"][0] == "kind"


def test_fair_claims_have_one_index_which_holds_only_waiting_jobs() -> None:
    indexes = _indexes()
    assert indexes["headgate_job_fair_my"][0] == "fair_queue"
    assert not [name for name, cols in indexes.items() if cols[:2] == ["queue", "partition_key"]]
