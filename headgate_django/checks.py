"""System checks for rules that span settings (ids ``headgate.E00x`` / ``headgate.W00x``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from headgate_django.exceptions import ConfigurationError


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    from headgate_django.conf import headgate_settings

    headgate_settings.reload()
    try:
        s = headgate_settings
        lease = s.LEASE_TTL
    except ConfigurationError as exc:
        return [Error(str(exc), id="headgate.E001", hint="Fix or remove the key in HEADGATE.")]
    problems: list[Any] = []
    for key in ("LEASE_TTL", "BACKOFF_BASE", "BACKOFF_CAP", "COORDINATOR_POLL", "SHUTDOWN_TIMEOUT"):
        value = getattr(s, key)
        if not isinstance(value, timedelta) or value <= timedelta(0):
            problems.append(
                Error(f"HEADGATE[{key!r}] must be a positive timedelta", id="headgate.E002")
            )
    if problems:
        return problems
    if s.renew_interval >= lease:
        problems.append(
            Error(
                "HEADGATE['RENEW_INTERVAL'] must be shorter than LEASE_TTL",
                hint="Renew at most every LEASE_TTL / 2, or leave it unset (LEASE_TTL / 3).",
                id="headgate.E003",
            )
        )
    if s.BACKOFF_CAP < s.BACKOFF_BASE:
        problems.append(Error("BACKOFF_CAP must not be below BACKOFF_BASE", id="headgate.E004"))
    for key in ("CRASH_LIMIT", "MAX_ATTEMPTS", "CLAIM_BATCH", "MAX_BATCH"):
        value = getattr(s, key)
        if not isinstance(value, int) or value < 1:
            problems.append(Error(f"HEADGATE[{key!r}] must be an integer ≥ 1", id="headgate.E005"))
    if not settings.USE_TZ:
        problems.append(
            Error(
                "headgate-django needs USE_TZ = True (store instants are UTC)", id="headgate.E006"
            )
        )
    for alias, db in settings.DATABASES.items():
        if (
            db.get("ENGINE", "").endswith("sqlite3")
            and db.get("OPTIONS", {}).get("transaction_mode") != "IMMEDIATE"
        ):
            problems.append(
                Warning(
                    f"SQLite database {alias!r} does not use BEGIN IMMEDIATE transactions",
                    hint="Set OPTIONS['transaction_mode'] = 'IMMEDIATE' (and WAL through "
                    "init_command) so concurrent workers queue for the write lock instead "
                    "of failing with 'database is locked'.",
                    id="headgate.W001",
                )
            )
    return problems
