"""Settings validation: unknown keys, bad values and cross-field rules each get a check id."""

from datetime import timedelta
from pathlib import Path

import pytest
from django.core import checks
from django.test import override_settings

from headgate_django.checks import check_settings
from headgate_django.conf import DEFAULTS, headgate_settings
from headgate_django.exceptions import ConfigurationError
from tests.conftest import manage


def ids(**headgate):
    with override_settings(HEADGATE=headgate):
        return sorted(m.id for m in check_settings())


def test_defaults_are_clean():
    assert ids() == []


def test_unknown_key_is_an_error():
    assert ids(LEASE_TTLL=timedelta(seconds=1)) == ["headgate.E001"]
    with override_settings(HEADGATE={"NOPE": 1}), pytest.raises(ConfigurationError, match="NOPE"):
        headgate_settings.LEASE_TTL  # noqa: B018


def test_an_unknown_key_names_the_setting_it_looks_like() -> None:
    with override_settings(HEADGATE={"lease_ttll": 5, "XYZZY": 1}):
        (message,) = [m.msg for m in check_settings()]
    assert "lease_ttll (did you mean LEASE_TTL?)" in message
    assert "XYZZY, " in message  # nothing close: no guess


@pytest.mark.parametrize("name", ["HEADGATES", "HEAD_GATE", "HEDGATE"])
def test_a_misspelt_headgate_setting_is_warned_about(name: str) -> None:
    """Django keeps any upper-case name of a settings module, so a typo in the dict's own
    name would leave every key at its default without a word."""
    with override_settings(**{name: {"LEASE_TTL": timedelta(seconds=5)}}):
        (warning,) = check_settings()
    assert warning.id == "headgate.W006"
    assert f"{name} is not read by headgate-django; did you mean HEADGATE?" in warning.msg


def test_settings_named_after_headgate_are_no_typo() -> None:
    with override_settings(HEADGATE_DEMO_OPERATOR=True, HEADGATE_CONFIG={}):
        assert check_settings() == []


def test_bad_duration_and_bad_count_are_reported_together():
    assert ids(LEASE_TTL=5, CRASH_LIMIT=0) == ["headgate.E002", "headgate.E005"]


def test_sqlite_wake_interval_is_a_positive_duration_or_none():
    assert ids(SQLITE_WAKE_INTERVAL=None) == []
    assert ids(SQLITE_WAKE_INTERVAL=timedelta(milliseconds=20)) == []
    assert ids(SQLITE_WAKE_INTERVAL=timedelta(0)) == ["headgate.E002"]
    assert ids(SQLITE_WAKE_INTERVAL=0.005) == ["headgate.E002"]


def test_queues_is_none_or_a_list_of_queue_names():
    """A bare string would be served letter by letter: "default" as d, e, f, a, u, l, t."""
    for value in (None, ["default"], ("default", "emails")):
        assert ids(QUEUES=value) == [], value
    for value in ("default", ["bad queue"], [""], ["default", 1], {"default": 1}):
        assert ids(QUEUES=value) == ["headgate.E015"], value


def test_autodiscover_modules_is_a_list_of_module_names():
    """A bare string would be imported letter by letter, so no app's tasks would register."""
    for value in (["tasks"], ("tasks", "jobs"), []):
        assert ids(AUTODISCOVER_MODULES=value) == [], value
    for value in ("tasks", ["tasks", 1], [""], None):
        assert ids(AUTODISCOVER_MODULES=value) == ["headgate.E016"], value


def test_prepare_statements_is_none_or_a_bool():
    for value in (None, True, False):
        assert ids(PREPARE_STATEMENTS=value) == []
    assert ids(PREPARE_STATEMENTS="auto") == ["headgate.E013"]
    assert ids(PREPARE_STATEMENTS=1) == ["headgate.E013"]


def test_evict_busy_share_is_a_number_above_zero_and_at_most_one():
    for value in (0.05, 0.1, 1, 1.0):
        assert ids(EVICT_BUSY_SHARE=value) == []
    for value in (0, 0.0, -0.1, 1.5, "0.1", None, True):
        assert ids(EVICT_BUSY_SHARE=value) == ["headgate.E014"], value


def test_renew_must_be_at_most_half_the_lease():
    assert ids(LEASE_TTL=timedelta(seconds=10), RENEW_INTERVAL=timedelta(seconds=6)) == [
        "headgate.E003"
    ]
    assert ids(LEASE_TTL=timedelta(seconds=10), RENEW_INTERVAL=timedelta(seconds=5)) == []


def test_an_eviction_budget_that_outlasts_the_lease_margin_is_warned_about():
    # A 3 s lease renewed every second leaves 2 s: the default 1 s budget fits, 2 s does not.
    assert ids(LEASE_TTL=timedelta(seconds=3)) == []
    assert ids(LEASE_TTL=timedelta(seconds=3), EVICT_BUDGET=timedelta(seconds=2)) == [
        "headgate.W003"
    ]
    assert ids(LEASE_TTL=timedelta(seconds=1)) == ["headgate.W003"]


def test_backoff_cap_below_base():
    assert ids(BACKOFF_BASE=timedelta(seconds=10), BACKOFF_CAP=timedelta(seconds=1)) == [
        "headgate.E004"
    ]


def test_use_tz_and_sqlite_transaction_mode(monkeypatch):
    from django.conf import settings

    sqlite = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
    # Only the check reads DATABASES here; override_settings would warn about it.
    monkeypatch.setattr(settings, "DATABASES", sqlite)
    with override_settings(USE_TZ=False):
        assert sorted(m.id for m in check_settings()) == ["headgate.E006", "headgate.W001"]


@pytest.mark.django_db
def test_the_models_raise_no_warnings_on_the_database_under_test():
    """On MySQL/MariaDB Django would warn about the partial indexes and the conditional
    unique constraint; migrations 0002 and 0009 cover them there, so nothing is reported."""
    from django.apps import apps
    from django.core import checks

    config = apps.get_app_config("headgate_django")
    found = checks.run_checks(app_configs=[config], databases=["default"])
    assert [m.id for m in found if m.level >= checks.WARNING] == []


def test_worker_heartbeat_and_retention_are_positive_durations():
    assert ids(WORKER_HEARTBEAT=timedelta(seconds=1), WORKER_RETENTION=timedelta(hours=2)) == []
    assert ids(WORKER_HEARTBEAT=timedelta(0)) == ["headgate.E002"]
    assert ids(WORKER_RETENTION=60) == ["headgate.E002"]


@pytest.mark.parametrize(
    "headgate",
    [
        {"RATE_CLASSES": {"mail": {"limit": 0, "window": 1}}},
        {"RATE_CLASSES": {"mail": {"limit": 5}}},
        {"RATE_CLASSES": {"mail": {"limit": 5, "window": 1, "colour": "red"}}},
        {"RATE_CLASSES": {"bad name": {"limit": 5, "window": 1}}},
        {"RATE_CLASSES": ["mail"]},
        {"CONCURRENCY_LIMITS": {"reports": 0}},
        {"CONCURRENCY_LIMITS": {"reports": {"max_concurrent": 3, "on_saturated": "drop"}}},
        {"CONCURRENCY_LIMITS": {"bad queue": 3}},
        {"BACKPRESSURE": {"imports": -1}},
        {"BACKPRESSURE": {"imports": "lots"}},
    ],
)
def test_bad_admission_policies_are_errors(headgate):
    assert ids(**headgate) == ["headgate.E009"]


def test_good_admission_policies_are_clean():
    assert (
        ids(
            RATE_CLASSES={"mail": {"limit": 50, "window": timedelta(seconds=1), "burst": 10}},
            CONCURRENCY_LIMITS={
                "reports": 3,
                "sync": {"max_concurrent": 1, "on_saturated": "cancel_running"},
            },
            BACKPRESSURE={"imports": 0},
        )
        == []
    )


def test_bulk_limits_are_counts_in_order_and_the_bulk_queue_a_queue_name():
    assert ids(BULK_MAX_JOBS=0) == ["headgate.E005"]
    assert ids(BULK_SYNC_LIMIT=True) == ["headgate.E005"]
    assert ids(BULK_MAX_JOBS=100, BULK_SYNC_LIMIT=101) == ["headgate.E020"]
    assert ids(BULK_MAX_JOBS=100, BULK_SYNC_LIMIT=100) == []
    assert ids(BULK_QUEUE="no spaces allowed") == ["headgate.E020"]
    assert ids(BULK_QUEUE="") == ["headgate.E020"]


def test_encryption_settings_are_checked():
    key = b"k" * 32
    assert ids(ENCRYPTION_KEYS={"k1": key}, ENCRYPTION_KEY_ID="k1") == []
    assert ids(ENCRYPTION_KEYS={"k1": key}) == []  # a ring to read old payloads with
    assert ids(ENCRYPTION_KEYS=[key]) == ["headgate.E021"]
    assert ids(ENCRYPTION_KEYS={"k1": b"short"}) == ["headgate.E021"]
    assert ids(ENCRYPTION_KEYS={"k1": "not base64"}) == ["headgate.E021"]
    assert ids(ENCRYPTION_KEYS={"k1": key}, ENCRYPTION_KEY_ID="k2") == ["headgate.E021"]
    assert ids(ENCRYPTION_KEY_ID="k1") == ["headgate.E021"]


def test_runworkers_runs_these_checks_and_leaves_the_linting_ones_to_manage_py_check():
    from django.core.checks import Tags

    from headgate_django.management.commands.runworkers import Command

    run = set(Command.requires_system_checks)
    assert set(check_settings.tags) <= run
    assert not run & {Tags.models, Tags.urls, Tags.templates, Tags.caches, Tags.staticfiles}


@pytest.mark.parametrize("command", [["check"], ["runworkers", "--burst"]])
def test_an_unknown_key_stops_commands_with_the_check_not_a_traceback(
    command: list[str], tmp_path: Path
) -> None:
    """The app's ``ready()`` reads the settings; an unknown key must reach the check."""
    (tmp_path / "typo_settings.py").write_text(
        "from tests.settings import *  # noqa: F403\nHEADGATE = {'LEASE_TTLL': 5}\n"
    )
    done = manage(*command, settings="typo_settings", pythonpath=str(tmp_path))
    assert done.returncode != 0
    assert "headgate.E001" in done.stderr and "LEASE_TTLL" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(
    "entry, problem",
    [
        ({"task": "test.noop", "spec": "@hourly", "kwargs": {"user": 1}}, "do not fit noop(ctx)"),
        ({"task": "test.echo", "spec": "@hourly", "kwargs": {"value": "x" * 200}}, "over the"),
        ({"task": "tests.app.tasks.no_such_task", "spec": "@hourly"}, "no task has the kind"),
    ],
)
def test_a_declared_schedule_that_could_not_fire_is_e008(entry, problem) -> None:
    """Every refusal of the target, not only the schedule's own, is a check error rather
    than a traceback from ``manage.py check``."""
    with override_settings(HEADGATE={"MAX_PAYLOAD_BYTES": 100, "SCHEDULES": {"s": entry}}):
        [error] = check_settings()
    assert error.id == "headgate.E008" and problem in error.msg, error.msg


@pytest.mark.parametrize(
    ("options", "warned"),
    [
        ({}, False),  # Django's own default on MySQL/MariaDB is read committed
        ({"isolation_level": "read committed"}, False),
        ({"isolation_level": "READ COMMITTED"}, False),
        ({"isolation_level": "repeatable read"}, True),
        ({"isolation_level": "serializable"}, True),
        ({"isolation_level": None}, True),  # the server's default: REPEATABLE READ
    ],
)
def test_a_mysql_database_not_in_read_committed_is_warned_about(monkeypatch, options, warned):
    """Under REPEATABLE READ a transaction that lost a race on a unique index re-reads its
    old snapshot and cannot see the winner: an idempotent enqueue then fails as a conflict."""
    from django.conf import settings

    mysql = {"default": {"ENGINE": "django.db.backends.mysql", "NAME": "x", "OPTIONS": options}}
    monkeypatch.setattr(settings, "DATABASES", mysql)
    found = [m for m in check_settings() if m.id == "headgate.W004"]
    assert bool(found) is warned
    if warned:
        assert "'default'" in found[0].msg and "read committed" in found[0].hint


def test_autodiscover_modules_that_is_no_list_fails_the_check_not_the_start(
    tmp_path: Path,
) -> None:
    """Apps are set up before checks run: a value the import cannot take must reach the
    check (headgate.E016), not end ``manage.py`` in a traceback."""
    (tmp_path / "modules_settings.py").write_text(
        "from tests.settings import *  # noqa: F403\nHEADGATE = {'AUTODISCOVER_MODULES': 5}\n"
    )
    done = manage("check", settings="modules_settings", pythonpath=str(tmp_path))
    assert done.returncode != 0
    assert "headgate.E016" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


class _Nonsense:
    """A value no setting takes (``object()`` would be the same, with a worse repr)."""

    def __repr__(self) -> str:
        return "<nonsense>"


@pytest.mark.parametrize("key", sorted(DEFAULTS))
def test_every_setting_refuses_a_value_of_no_type_it_takes_with_a_check_error(key):
    """A value of the wrong type is reported by ``manage.py check`` (and stops
    ``runworkers``), never left for a duty, a request or an enqueue to trip over, and never
    a traceback from the check itself."""
    with override_settings(HEADGATE={key: _Nonsense()}):
        found = [m for m in check_settings() if m.level >= checks.ERROR]
    assert found, f"HEADGATE[{key!r}] = <nonsense> passes the checks"


@pytest.mark.parametrize(
    "key, value",
    [
        ("RETENTION", None),
        ("RETENTION", timedelta(days=-1)),
        ("RETENTION", 7),
        ("RETENTION", timedelta(days=40_000)),  # past the store clock's year 9999
        ("CRASH_BACKOFF", timedelta(seconds=-1)),
        ("WORKFLOW_RETENTION", None),
        ("WORKFLOW_RETENTION", timedelta(0)),
        ("WORKFLOW_RETENTION", timedelta(microseconds=500)),
        ("DURABLE_RETENTION", timedelta(days=-1)),
        ("DURABLE_RETENTION", 30),
        ("IDEMPOTENCY_TTL", None),
        ("IDEMPOTENCY_TTL", timedelta(0)),
        ("EVICT_BUDGET", timedelta(seconds=-1)),
        ("EVICT_BUDGET", 1),
        ("DUTY_INTERVAL", timedelta(0)),
        ("DUTY_INTERVAL", 1),
        ("IDLE_BACKOFF_MIN", 0.05),
        ("IDLE_BACKOFF_MAX", None),
        ("STATUS_INTERVAL", 5),
        ("RENEW_INTERVAL", 5),
        ("RENEW_INTERVAL", timedelta(0)),
        ("LEASE_TTL", timedelta(days=40_000)),
    ],
)
def test_bad_durations_are_e002_and_the_check_itself_never_fails(key, value):
    assert ids(**{key: value}) == ["headgate.E002"], (key, value)


@pytest.mark.parametrize(
    "key, value",
    [
        ("RETENTION", timedelta(0)),  # deletes a successful job at its acknowledgement
        ("CRASH_BACKOFF", timedelta(0)),
        ("WORKFLOW_RETENTION", timedelta(milliseconds=1)),
        ("DURABLE_RETENTION", None),  # keeps them for ever, as documented
        ("DURABLE_RETENTION", 0),
        ("DURABLE_RETENTION", timedelta(0)),
        ("RENEW_INTERVAL", None),
        ("EVICT_BUDGET", timedelta(0)),  # one batch a pass
    ],
)
def test_the_documented_edge_values_of_durations_are_accepted(key, value):
    assert ids(**{key: value}) == [], (key, value)


@pytest.mark.parametrize(
    "key",
    [
        "EVICT_BATCH",
        "MAX_PAYLOAD_BYTES",
        "MAX_RESULT_BYTES",
        "API_MAX_BODY_BYTES",
        "DURABLE_TASK_ATTEMPTS",
    ],
)
@pytest.mark.parametrize("value", [0, -5, None, "1000", 1.5, True])
def test_sizes_and_the_eviction_batch_are_counts(key, value):
    """An eviction batch of 0 deleted nothing and, never coming back short, ran the duty
    again on every tick; None is ``LIMIT NULL`` on PostgreSQL: one unbounded delete."""
    assert ids(**{key: value}) == ["headgate.E005"], (key, value)


def test_the_eviction_batch_has_a_ceiling():
    """MySQL/MariaDB delete a batch by its ids, one bound value each, at most 65,535 in a
    statement: a larger batch failed on every pass, and no row was ever evicted."""
    assert ids(EVICT_BATCH=50_000) == []
    assert ids(EVICT_BATCH=70_000) == ["headgate.E005"]


@pytest.mark.parametrize(
    "key", ["LISTEN_NOTIFY", "WORKFLOW_EVENT_WAKE", "API_READ_ONLY", "API_PUBLIC_HEALTH"]
)
def test_switches_are_booleans(key):
    """``API_READ_ONLY = "false"`` would have made the API read-only."""
    assert ids(**{key: True}) == ids(**{key: False}) == []
    for value in ("false", 0, None):
        assert ids(**{key: value}) == ["headgate.E017"], (key, value)


def test_the_workflow_queue_is_a_queue_name():
    assert ids(WORKFLOW_QUEUE="flows") == []
    for value in ("bad queue", "", None):
        assert ids(WORKFLOW_QUEUE=value) == ["headgate.E018"], value


def test_the_api_authentication_classes_are_none_or_dotted_paths():
    assert ids(API_AUTHENTICATION_CLASSES=None) == []
    assert (
        ids(API_AUTHENTICATION_CLASSES=["rest_framework.authentication.TokenAuthentication"]) == []
    )
    for value in ("rest_framework.authentication.TokenAuthentication", [1], [""]):
        assert ids(API_AUTHENTICATION_CLASSES=value) == ["headgate.E019"], value
