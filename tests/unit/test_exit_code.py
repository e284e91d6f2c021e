"""The exit status a worker process reports for a ``SystemExit``, as the interpreter would."""

from __future__ import annotations

import pytest

from headgate_django.worker.exit import exit_code


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (3, 3), (128 + 15, 143)])
def test_a_number_or_none_is_the_status(code, status):
    assert exit_code(SystemExit(code)) == status


def test_a_message_is_printed_and_exits_one(capsys):
    assert exit_code(SystemExit("cannot start")) == 1
    assert capsys.readouterr().err == "cannot start\n"
