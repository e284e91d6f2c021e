"""System checks for rules that span settings (ids ``headgate.E00x`` / ``headgate.W00x``),
for the demo's credential-less operator port in a production-looking project (E007), and
for the API's docs pages in a project that lacks the app of their templates (W005), and
for a misspelt name of the ``HEADGATE`` setting itself (W006).

Every independent rule is checked and reported together; only the comparisons between
durations wait until the durations themselves are valid.
"""

from __future__ import annotations

import difflib
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from headgate_django import checks_values
from headgate_django.exceptions import ConfigurationError


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    from headgate_django.conf import headgate_settings

    headgate_settings.reload()
    try:
        headgate_settings.LEASE_TTL  # noqa: B018 - loads and validates the keys
    except ConfigurationError as exc:
        return [Error(str(exc), id="headgate.E001", hint="Fix or remove the key in HEADGATE.")]
    problems = checks_values.durations(headgate_settings)
    if not problems:
        problems += _duration_order(headgate_settings)
    return (
        problems
        + checks_values.counts(headgate_settings)
        + checks_values.switches(headgate_settings)
        + checks_values.workflow_queue(headgate_settings)
        + checks_values.authentication_classes(headgate_settings)
        + _schedules(headgate_settings)
        + _bulk(headgate_settings)
        + _queues(headgate_settings)
        + _autodiscover(headgate_settings)
        + _encryption(headgate_settings)
        + _admission()
        + _queue_weights()
        + _death_handler()
        + _listen_using(headgate_settings)
        + _prepare_statements(headgate_settings)
        + _evict_busy_share(headgate_settings)
        + _read_replica(headgate_settings)
        + _environment()
        + _misspelt_setting()
    )


def _misspelt_setting() -> list[Any]:
    """Unknown keys inside ``HEADGATE`` are an error (E001), but Django reads any name a
    settings module defines: ``HEADGATES = {...}`` would be ignored without a word, and
    every value in it silently replaced by its default."""
    names = [name for name in dir(settings) if name.isupper() and name != "HEADGATE"]
    return [
        Warning(
            f"the setting {name} is not read by headgate-django; did you mean HEADGATE?",
            hint=f"Rename {name} to HEADGATE: until then every HEADGATE key has its default.",
            id="headgate.W006",
        )
        for name in difflib.get_close_matches("HEADGATE", names, n=3, cutoff=0.8)
    ]


def _death_handler() -> list[Any]:
    """``HEADGATE["ON_DEATH"]`` must name a callable (headgate.E030)."""
    from headgate_django.deaths import global_handler

    try:
        global_handler()
    except ConfigurationError as exc:
        return [Error(str(exc), id="headgate.E030", hint="A callable taking one DeathNotice.")]
    return []


def _duration_order(s: Any) -> list[Any]:
    problems: list[Any] = []
    # At most every lease/2: a renewal delayed by up to half a lease still lands in time.
    if s.renew_interval > s.LEASE_TTL / 2:
        problems.append(
            Error(
                "HEADGATE['RENEW_INTERVAL'] must be at most LEASE_TTL / 2",
                hint="Renew at most every LEASE_TTL / 2, or leave it unset (LEASE_TTL / 3).",
                id="headgate.E003",
            )
        )
    if s.renew_interval <= s.LEASE_TTL / 2:
        problems.extend(eviction_outlasts_lease(s.LEASE_TTL, s.renew_interval, s.EVICT_BUDGET))
    if s.BACKOFF_CAP < s.BACKOFF_BASE:
        problems.append(Error("BACKOFF_CAP must not be below BACKOFF_BASE", id="headgate.E004"))
    return problems


def eviction_outlasts_lease(
    lease_ttl: timedelta, renew_interval: timedelta, evict_budget: timedelta
) -> list[Any]:
    """headgate.W003: a worker renews between two maintenance duties, not during one, so a
    pass of eviction that outlasts what is left of the lease after a renewal interval lets
    it lapse. ``runworkers --lease-ttl`` asks the same of the lease it is given."""
    margin = lease_ttl - renew_interval
    if margin > evict_budget:
        return []
    return [
        Warning(
            f"HEADGATE['EVICT_BUDGET'] ({evict_budget.total_seconds():g} s) is not below "
            f"the lease ({lease_ttl.total_seconds():g} s) less the renewal interval "
            f"({margin.total_seconds():g} s)",
            hint=(
                "Leases are renewed between a worker's maintenance duties, not during "
                "one, so an eviction pass that long can let the leases of running jobs "
                "lapse: lower EVICT_BUDGET or raise the lease (LEASE_TTL, --lease-ttl)."
            ),
            id="headgate.W003",
        )
    ]


def _bulk(s: Any) -> list[Any]:
    """The bulk limits in order and a valid queue for bulk jobs (headgate.E020)."""
    from headgate_django.exceptions import DefinitionError
    from headgate_django.kernel.names import validate_queue

    problems = []
    sync, most = s.BULK_SYNC_LIMIT, s.BULK_MAX_JOBS
    counts = checks_values.is_count(sync) and checks_values.is_count(most)
    if counts and sync > most:
        problems.append(
            Error(
                "HEADGATE['BULK_SYNC_LIMIT'] must not be above HEADGATE['BULK_MAX_JOBS']",
                id="headgate.E020",
            )
        )
    try:
        validate_queue(s.BULK_QUEUE)
    except DefinitionError as exc:
        problems.append(Error(f"HEADGATE['BULK_QUEUE']: {exc}", id="headgate.E020"))
    return problems


def _queues(s: Any) -> list[Any]:
    """``QUEUES`` is None or a list of queue names (headgate.E015): a bare string would
    otherwise be served letter by letter, and a name no job can carry serves nothing."""
    from headgate_django.exceptions import DefinitionError
    from headgate_django.kernel.names import validate_queue

    queues = s.QUEUES
    if queues is None:
        return []
    if not isinstance(queues, list | tuple):
        return [
            Error("HEADGATE['QUEUES'] must be None or a list of queue names", id="headgate.E015")
        ]
    try:
        for queue in queues:
            validate_queue(queue)
    except DefinitionError as exc:
        return [Error(f"HEADGATE['QUEUES']: {exc}", id="headgate.E015")]
    return []


def module_names(value: Any) -> bool:
    """Whether ``value`` is what ``AUTODISCOVER_MODULES`` takes: a list of module names."""
    return isinstance(value, list | tuple) and all(isinstance(m, str) and m for m in value)


def _autodiscover(s: Any) -> list[Any]:
    """``AUTODISCOVER_MODULES`` is a list of module names (headgate.E016): a bare string
    would be imported letter by letter, and no app's tasks would register."""
    if module_names(s.AUTODISCOVER_MODULES):
        return []
    return [
        Error(
            "HEADGATE['AUTODISCOVER_MODULES'] must be a list of module names, such as ['tasks']",
            id="headgate.E016",
        )
    ]


def _encryption(s: Any) -> list[Any]:
    """The key ring, the current key id and the library (headgate.E021)."""
    from headgate_django.kernel import sealed

    ring, current = s.ENCRYPTION_KEYS, s.ENCRYPTION_KEY_ID
    if not isinstance(ring, dict):
        return [Error("HEADGATE['ENCRYPTION_KEYS'] must be a dict", id="headgate.E021")]
    try:
        keys = sealed.parse_ring(ring)
    except ValueError as exc:
        return [Error(f"HEADGATE['ENCRYPTION_KEYS']: {exc}", id="headgate.E021")]
    problems = []
    if current is not None and current not in keys:
        problems.append(
            Error(
                f"HEADGATE['ENCRYPTION_KEY_ID'] {current!r} is not in ENCRYPTION_KEYS",
                id="headgate.E021",
            )
        )
    if (keys or current is not None) and not sealed.AVAILABLE:
        problems.append(
            Error(
                "payload encryption needs the cryptography package",
                id="headgate.E021",
                hint='pip install "headgate-django[encryption]"',
            )
        )
    return problems


def _admission() -> list[Any]:
    """Declared admission policies are checked as ``runworkers`` would apply them
    (headgate.E009)."""
    from headgate_django.admission import declared
    from headgate_django.exceptions import DefinitionError

    try:
        declared()
    except DefinitionError as exc:
        return [
            Error(
                str(exc),
                id="headgate.E009",
                hint=(
                    "See HEADGATE['RATE_CLASSES'], ['CONCURRENCY_LIMITS'], ['BACKPRESSURE'] "
                    "and ['FAIRNESS']."
                ),
            )
        ]
    return []


def _queue_weights() -> list[Any]:
    """``HEADGATE["QUEUE_WEIGHTS"]`` is checked as ``runworkers`` would apply it
    (headgate.E010)."""
    from headgate_django.admission import declared_weights
    from headgate_django.exceptions import DefinitionError

    try:
        declared_weights()
    except DefinitionError as exc:
        return [
            Error(
                str(exc),
                id="headgate.E010",
                hint="Map each queue name to an integer weight of at least 1.",
            )
        ]
    return []


def _schedules(s: Any) -> list[Any]:
    """Declared schedules are checked as ``runworkers`` would sync them (headgate.E008), so
    a typo in a spec or a task path fails ``manage.py check``, not a worker start."""
    # DefinitionError, not only ScheduleError: a target's arguments that do not fit its
    # task, or a payload over the limit, are refused by the envelope's own checks.
    from headgate_django.exceptions import DefinitionError
    from headgate_django.schedules.declared import declared, options

    problems: list[Any] = []
    for key in ("SCHEDULE_GRACE", "SCHEDULE_LOOKAHEAD"):
        value = getattr(s, key)
        if not isinstance(value, timedelta) or value < timedelta(0):
            problems.append(Error(f"HEADGATE[{key!r}] must be a timedelta ≥ 0", id="headgate.E008"))
    try:
        entries = declared()
    except DefinitionError as exc:
        return [*problems, Error(str(exc), id="headgate.E008")]
    for name, entry in entries.items():
        try:
            options(name, entry)
        except DefinitionError as exc:
            problems.append(Error(str(exc), id="headgate.E008", hint="See HEADGATE['SCHEDULES']."))
    return problems


def _read_replica(s: Any) -> list[Any]:
    alias = s.READ_REPLICA
    if alias is None:
        return []
    if not (isinstance(alias, str) and alias in settings.DATABASES):
        return [
            Error(
                f"HEADGATE['READ_REPLICA'] is {alias!r}, which is not an alias in DATABASES",
                hint="Name the DATABASES alias of a replica of the default database.",
                id="headgate.E012",
            )
        ]
    missing = [
        name
        for name, installed in (
            ("headgate_django.replicas.ReplicaReadsMiddleware", settings.MIDDLEWARE),
            ("headgate_django.replicas.ReplicaRouter", settings.DATABASE_ROUTERS),
        )
        if name not in installed
    ]
    if not missing:
        return []
    return [
        Warning(
            f"HEADGATE['READ_REPLICA'] is set but {' and '.join(missing)} is not installed: "
            "every read still goes to the primary",
            hint="Add the middleware to MIDDLEWARE and the router to DATABASE_ROUTERS.",
            id="headgate.W002",
        )
    ]


def _listen_using(s: Any) -> list[Any]:
    alias = s.LISTEN_USING
    if alias is None or (isinstance(alias, str) and alias in settings.DATABASES):
        return []
    return [
        Error(
            f"HEADGATE['LISTEN_USING'] is {alias!r}, which is not an alias in DATABASES",
            hint="Name a DATABASES alias that reaches the same PostgreSQL database directly "
            "(not through a transaction-pooling proxy), or remove the key.",
            id="headgate.E011",
        )
    ]


def _prepare_statements(s: Any) -> list[Any]:
    """``PREPARE_STATEMENTS`` is ``None`` (decide by the alias) or a bool (headgate.E013)."""
    if s.PREPARE_STATEMENTS is None or isinstance(s.PREPARE_STATEMENTS, bool):
        return []
    return [
        Error(
            f"HEADGATE['PREPARE_STATEMENTS'] is {s.PREPARE_STATEMENTS!r}; "
            "it must be None, True or False",
            hint="None lets the store decide from the DATABASES alias (see the settings reference).",
            id="headgate.E013",
        )
    ]


def _evict_busy_share(s: Any) -> list[Any]:
    """``EVICT_BUSY_SHARE`` is a number in (0, 1] (headgate.E014)."""
    share = s.EVICT_BUSY_SHARE
    if isinstance(share, (int, float)) and not isinstance(share, bool) and 0 < share <= 1:
        return []
    return [
        Error(
            f"HEADGATE['EVICT_BUSY_SHARE'] is {share!r}; it must be a number above 0 and at most 1",
            hint="0.1 (the default) lets eviction take a tenth of its time while jobs wait; "
            "1 never pauses.",
            id="headgate.E014",
        )
    ]


def _environment() -> list[Any]:
    problems: list[Any] = []
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
        problems += _mysql_isolation(alias, db)
    return problems


def _mysql_isolation(alias: str, db: dict[str, Any]) -> list[Any]:
    """MySQL/MariaDB must run in READ COMMITTED (headgate.W004), Django's default there.

    Under REPEATABLE READ a transaction reads the snapshot of its first read. One that lost
    a race on a unique index (an enqueue of the same caller id or unique key, inside the
    caller's transaction) then looks for the winner's row, does not see it, and fails with
    ``IdConflictError`` instead of the idempotent answer or ``DuplicateError``. Leaving
    ``isolation_level`` out gives READ COMMITTED; ``None`` keeps the server's default,
    which is REPEATABLE READ.
    """
    if not db.get("ENGINE", "").endswith("mysql"):
        return []
    options = db.get("OPTIONS") or {}
    level = options.get("isolation_level", "read committed")
    if isinstance(level, str) and level.strip().lower() == "read committed":
        return []
    return [
        Warning(
            f"MySQL/MariaDB database {alias!r} does not use the READ COMMITTED isolation "
            f"level (isolation_level={level!r})",
            hint="Remove OPTIONS['isolation_level'] or set it to 'read committed': under "
            "REPEATABLE READ a transaction that loses a race for a job id or unique key "
            "cannot see the winner and fails instead of answering idempotently.",
            id="headgate.W004",
        )
    ]


_DEMO_OPERATOR_HINT = (
    "HEADGATE_DEMO_OPERATOR makes every caller on the demo's operator port an operator "
    "without credentials: remove it from production settings (only `make demo` sets it)."
)


@register(Tags.security)
def check_demo_operator(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """The sample project's credential-less operator port, opted into with DEBUG off."""
    if getattr(settings, "HEADGATE_DEMO_OPERATOR", False) and not settings.DEBUG:
        return [_demo_operator_error("HEADGATE_DEMO_OPERATOR is on while DEBUG is off")]
    return []


@register(Tags.security, deploy=True)
def check_demo_operator_deploy(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """The same under ``check --deploy`` with DEBUG on (with DEBUG off the check above
    already reports it)."""
    if getattr(settings, "HEADGATE_DEMO_OPERATOR", False) and settings.DEBUG:
        return [_demo_operator_error("HEADGATE_DEMO_OPERATOR is on in a deployment check")]
    return []


def _demo_operator_error(message: str) -> Error:
    return Error(message, hint=_DEMO_OPERATOR_HINT, id="headgate.E007")


@register(Tags.urls)
def check_api_docs_templates(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """The API's docs pages (served with DEBUG on) render drf-spectacular's templates,
    which Django finds only with its app installed: without it, their first visit is a
    TemplateDoesNotExist error page. Said only to a project that routes the API."""
    from django.apps import apps
    from django.urls import NoReverseMatch, reverse

    if not settings.DEBUG or apps.is_installed("drf_spectacular"):
        return []
    if not getattr(settings, "ROOT_URLCONF", None):
        return []
    try:
        reverse("headgate_api:docs")
    except NoReverseMatch:
        return []
    return [
        Warning(
            "the API's docs pages (docs/ and redoc/ under /api/v1/) render drf-spectacular's "
            "templates, and 'drf_spectacular' is not in INSTALLED_APPS",
            hint="Add 'drf_spectacular' to INSTALLED_APPS; the rest of the API works without it.",
            id="headgate.W005",
        )
    ]
