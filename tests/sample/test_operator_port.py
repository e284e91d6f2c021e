"""The demo's credential-less operator port is an explicit opt-in that works only in
development: refused with DEBUG off (at request time and by system check E007, also under
``check --deploy``), refused to proxied requests, and not opened by ``rundemo`` without it."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import checks
from django.core.management.base import CommandError
from django.test import Client, override_settings

from sampleproject.auth import PROXY_HEADERS
from sampleproject.demo.management.commands.rundemo import Command as RunDemo

PORT = 8089
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "sampleproject.auth.OperatorPortAuthentication",
    ]
}
DEMO = {"DEBUG": True, "HEADGATE_DEMO_OPERATOR": True, "DEMO_OPERATOR_PORT": PORT}


@pytest.fixture
def operator(db: Any) -> User:
    from django.contrib.auth.models import Permission

    user = User.objects.create_user("operator")
    user.user_permissions.set(Permission.objects.filter(codename="view_job"))
    return user


def get(**meta: Any) -> Any:
    defaults = {"SERVER_PORT": str(PORT), "REMOTE_ADDR": "127.0.0.1"}
    return Client().get("/api/v1/jobs", **{**defaults, **meta})


@pytest.mark.django_db
@override_settings(REST_FRAMEWORK=REST_FRAMEWORK, **DEMO)
def test_the_opted_in_port_serves_loopback_callers_as_the_operator(operator: User) -> None:
    assert get().status_code == 200
    assert get(SERVER_PORT="8000").status_code == 401  # the ordinary port needs credentials
    assert get(REMOTE_ADDR="10.0.0.7").status_code == 401


@pytest.mark.django_db
@override_settings(REST_FRAMEWORK=REST_FRAMEWORK, **{**DEMO, "HEADGATE_DEMO_OPERATOR": False})
def test_without_the_opt_in_the_port_is_an_ordinary_one(operator: User) -> None:
    # DEBUG on, the port configured, a loopback caller: still nobody, without the opt-in.
    assert get().status_code == 401


@pytest.mark.django_db
@override_settings(REST_FRAMEWORK=REST_FRAMEWORK, **{**DEMO, "DEBUG": False})
def test_with_debug_off_the_port_refuses_every_request(operator: User) -> None:
    response = get()
    assert response.status_code == 401
    assert "only with DEBUG on" in response.json()["error"]["message"]


@pytest.mark.django_db
@override_settings(REST_FRAMEWORK=REST_FRAMEWORK, **DEMO)
@pytest.mark.parametrize("header", PROXY_HEADERS)
def test_proxied_requests_are_refused(header: str, operator: User) -> None:
    # A reverse proxy on the same host connects from 127.0.0.1 for every caller.
    response = get(**{header: "203.0.113.9"})
    assert response.status_code == 401
    assert "refuses proxied requests" in response.json()["error"]["message"]


def e007(*, deploy: bool) -> list[Any]:
    found = checks.run_checks(include_deployment_checks=deploy, tags=[checks.Tags.security])
    return [m for m in found if m.id == "headgate.E007"]


@pytest.mark.parametrize("deploy", [False, True])
def test_system_check_refuses_the_opt_in_with_debug_off(deploy: bool) -> None:
    with override_settings(DEBUG=False, HEADGATE_DEMO_OPERATOR=True):
        (error,) = e007(deploy=deploy)
    assert error.level == checks.ERROR and "DEBUG is off" in error.msg
    with override_settings(DEBUG=False, HEADGATE_DEMO_OPERATOR=False):
        assert e007(deploy=deploy) == []


def test_deploy_check_refuses_the_opt_in_even_with_debug_on() -> None:
    with override_settings(DEBUG=True, HEADGATE_DEMO_OPERATOR=True):
        assert e007(deploy=False) == []  # development, as `make demo` runs it
        (error,) = e007(deploy=True)
    assert error.level == checks.ERROR


@override_settings(HEADGATE_DEMO_OPERATOR=False)
def test_rundemo_opens_no_operator_port_without_the_opt_in() -> None:
    with pytest.raises(CommandError, match="HEADGATE_DEMO_OPERATOR"):
        RunDemo().handle(addr="127.0.0.1:8000", operator_addr="127.0.0.1:8080")
