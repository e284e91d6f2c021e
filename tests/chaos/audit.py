"""An audit trail of ``headgate_job``, written by database triggers in the private database.

Every state change, every progress write and every deleted row becomes one
``chaos_transition`` row, committed (or rolled back) with the statement that caused it,
stamped with when that statement wrote it and which server session did.
The invariants read the store's own history from it instead of trusting what the workers
say they did: how often each job entered ``completed``, which fence a progress write
carried against the row's fence at that moment, and whose lease each charged crash was.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

_POSTGRES = [
    """CREATE TABLE chaos_transition (
        id bigserial PRIMARY KEY, job_id varchar(255) NOT NULL, kind varchar(128) NOT NULL,
        old_state varchar(16) NOT NULL, new_state varchar(16) NOT NULL,
        old_fence bigint NOT NULL, old_crash integer NOT NULL, new_crash integer NOT NULL,
        claimed_by varchar(255) NOT NULL, detail text,
        at timestamptz NOT NULL DEFAULT clock_timestamp(),
        conn integer NOT NULL DEFAULT pg_backend_pid())""",
    """CREATE FUNCTION chaos_audit() RETURNS trigger AS $$
    BEGIN
      IF TG_OP = 'DELETE' THEN
        INSERT INTO chaos_transition (job_id, kind, old_state, new_state, old_fence,
          old_crash, new_crash, claimed_by, detail)
        VALUES (OLD.id, OLD.kind, OLD.state, 'deleted', OLD.fence, OLD.crash_attempt,
          OLD.crash_attempt, OLD.claimed_by, NULL);
        RETURN NULL;
      END IF;
      IF NEW.state IS DISTINCT FROM OLD.state THEN
        INSERT INTO chaos_transition (job_id, kind, old_state, new_state, old_fence,
          old_crash, new_crash, claimed_by, detail)
        VALUES (NEW.id, NEW.kind, OLD.state, NEW.state, OLD.fence, OLD.crash_attempt,
          NEW.crash_attempt, OLD.claimed_by, NEW.result::text);
      END IF;
      IF NEW.progress IS DISTINCT FROM OLD.progress THEN
        INSERT INTO chaos_transition (job_id, kind, old_state, new_state, old_fence,
          old_crash, new_crash, claimed_by, detail)
        VALUES (NEW.id, NEW.kind, OLD.state, 'progress', OLD.fence, OLD.crash_attempt,
          NEW.crash_attempt, OLD.claimed_by, NEW.progress::text);
      END IF;
      RETURN NULL;
    END $$ LANGUAGE plpgsql""",
    "CREATE TRIGGER chaos_audit AFTER UPDATE OR DELETE ON headgate_job "
    "FOR EACH ROW EXECUTE FUNCTION chaos_audit()",
]

_COLUMNS = "job_id, kind, old_state, new_state, old_fence, old_crash, new_crash, claimed_by, detail"
_MYSQL = [
    """CREATE TABLE chaos_transition (
        id bigint AUTO_INCREMENT PRIMARY KEY, job_id varchar(255) NOT NULL,
        kind varchar(128) NOT NULL, old_state varchar(16) NOT NULL,
        new_state varchar(16) NOT NULL, old_fence bigint NOT NULL, old_crash integer NOT NULL,
        new_crash integer NOT NULL, claimed_by varchar(255) NOT NULL, detail longtext,
        at datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        conn bigint NOT NULL DEFAULT (CONNECTION_ID()))""",
    f"""CREATE TRIGGER chaos_audit_update AFTER UPDATE ON headgate_job FOR EACH ROW
    BEGIN
      IF NOT (NEW.state <=> OLD.state) THEN
        INSERT INTO chaos_transition ({_COLUMNS})
        VALUES (NEW.id, NEW.kind, OLD.state, NEW.state, OLD.fence, OLD.crash_attempt,
          NEW.crash_attempt, OLD.claimed_by, NEW.result);
      END IF;
      IF NOT (NEW.progress <=> OLD.progress) THEN
        INSERT INTO chaos_transition ({_COLUMNS})
        VALUES (NEW.id, NEW.kind, OLD.state, 'progress', OLD.fence, OLD.crash_attempt,
          NEW.crash_attempt, OLD.claimed_by, NEW.progress);
      END IF;
    END""",
    f"""CREATE TRIGGER chaos_audit_delete AFTER DELETE ON headgate_job FOR EACH ROW
    INSERT INTO chaos_transition ({_COLUMNS})
    VALUES (OLD.id, OLD.kind, OLD.state, 'deleted', OLD.fence, OLD.crash_attempt,
      OLD.crash_attempt, OLD.claimed_by, NULL)""",
]


@dataclass(frozen=True)
class Transition:
    job_id: str
    kind: str
    old_state: str
    new_state: str  # a state, "progress" (a progress write) or "deleted"
    old_fence: int  # the row's fence when the statement ran
    old_crash: int
    new_crash: int
    claimed_by: str  # the lease holder when the statement ran
    detail: str | None  # the new result (state changes) or progress (progress writes)

    @property
    def charged_crash(self) -> bool:
        return self.new_crash > self.old_crash


def install() -> None:
    statements = _POSTGRES if connection.vendor == "postgresql" else _MYSQL
    with connection.cursor() as cursor:
        for sql in statements:
            cursor.execute(sql)


def uninstall() -> None:
    """Remove the trail from a database that outlives the run (a test's)."""
    if connection.vendor == "postgresql":
        statements = [
            "DROP TRIGGER IF EXISTS chaos_audit ON headgate_job",
            "DROP FUNCTION IF EXISTS chaos_audit()",
        ]
    else:
        statements = [
            "DROP TRIGGER IF EXISTS chaos_audit_update",
            "DROP TRIGGER IF EXISTS chaos_audit_delete",
        ]
    with connection.cursor() as cursor:
        for sql in [*statements, "DROP TABLE IF EXISTS chaos_transition"]:
            cursor.execute(sql)


def history(job_id: str) -> list[str]:
    """One job's audit trail as text lines, for the report of a failed run."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT at, old_state, new_state, old_fence, new_crash, claimed_by "
            "FROM chaos_transition WHERE job_id = %s ORDER BY id",
            [job_id],
        )
        return [
            f"{at:%H:%M:%S.%f} {old}→{new} fence {fence} crashes {crash} by {by or '-'}"
            for at, old, new, fence, crash, by in cursor.fetchall()
        ]


def leases_entered(sessions: Collection[int], before: datetime) -> int:
    """How many rows these server sessions had moved into ``running`` before ``before``
    (the server's clock), as far as this session can see now."""
    if not sessions:
        return 0
    marks = ", ".join(["%s"] * len(sessions))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM chaos_transition WHERE new_state = 'running' "
            f"AND conn IN ({marks}) AND at < %s",
            [*sorted(sessions), before],
        )
        return int(cursor.fetchone()[0])


def transitions() -> list[Transition]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_COLUMNS} FROM chaos_transition ORDER BY id")
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    return [Transition(*row) for row in rows]
