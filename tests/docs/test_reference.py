"""The reference pages match the code they describe: settings and their defaults, system
check ids, ``runworkers`` options, the exception tree, the public names and the limits.
Every Python block of the pages written here also parses, and imports only names that
exist."""

from __future__ import annotations

import ast
import importlib
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import BaseCommand, load_command_class

import headgate_django
import headgate_django.tasks
import headgate_django.workflows
from headgate_django import checks, checks_values, exceptions
from headgate_django.conf import DEFAULTS
from tests.docs.markdown import DOCS, blocks

REFERENCE = DOCS / "reference"
#: Pages owned by this suite (other pages are checked by their own tests).
PAGES = sorted(
    [
        DOCS / "index.md",
        DOCS / "tutorial.md",
        *(DOCS / "how-to").glob("*.md"),
        *REFERENCE.glob("*.md"),
        *(DOCS / "explanation").glob("*.md"),
    ]
)


def _rows(page: str) -> dict[str, list[str]]:
    """Table rows of a reference page, keyed by the first cell's first code span."""
    rows: dict[str, list[str]] = {}
    for line in (REFERENCE / page).read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = re.search(r"`([^`]+)`", cells[0])
        if name:
            rows.setdefault(name[1], cells)
    return rows


def _literal(cell: str) -> object:
    """The first code span of a table cell, evaluated (``timedelta(...)`` allowed)."""
    code = re.search(r"`([^`]+)`", cell)
    assert code, f"no value in {cell!r}"
    return eval(code[1].split(" → ")[0], {"timedelta": timedelta})


@pytest.mark.parametrize("key", sorted(DEFAULTS))
def test_every_setting_is_documented_with_its_default(key):
    rows = _rows("settings.md")
    assert key in rows, f"HEADGATE[{key!r}] is not in docs/reference/settings.md"
    assert _literal(rows[key][1]) == DEFAULTS[key], f"documented default of {key} is wrong"


def test_the_settings_page_documents_no_unknown_setting():
    rows = _rows("settings.md")
    documented = {k for k, cells in rows.items() if k.isupper() and len(cells) == 3}
    assert documented - set(DEFAULTS) == set()


def test_every_system_check_id_is_documented():
    source = "".join(
        Path(module.__file__).read_text(encoding="utf-8") for module in (checks, checks_values)
    )
    in_code = set(re.findall(r"headgate\.[EW]\d{3}", source))
    page = (REFERENCE / "settings.md").read_text(encoding="utf-8")
    in_docs = set(re.findall(r"headgate\.[EW]\d{3}", page))
    assert in_code and in_code == in_docs


def test_every_runworkers_option_is_documented():
    command = load_command_class("headgate_django", "runworkers")
    parser = command.create_parser("manage.py", "runworkers")
    base = BaseCommand().create_parser("manage.py", "runworkers")  # Django's own options
    django_options = {opt for action in base._actions for opt in action.option_strings}
    own = {
        opt
        for action in parser._actions
        for opt in action.option_strings
        if opt.startswith("--") and opt not in django_options
    }
    rows = _rows("cli.md")
    missing = {opt for opt in own if not any(k.split()[0] == opt for k in rows)}
    assert not missing, f"runworkers options missing from docs/reference/cli.md: {missing}"


def test_runworkers_help_names_option_values_as_the_reference_does():
    """`runworkers --help` and the CLI reference call an option's value by one name
    (`--concurrency N`, not `N` on the page and `CONCURRENCY` in the terminal)."""
    command = load_command_class("headgate_django", "runworkers")
    parser = command.create_parser("manage.py", "runworkers")
    rows = _rows("cli.md")
    for action in parser._actions:
        option = next((o for o in action.option_strings if o.startswith("--")), None)
        if option is None or action.nargs == 0 or action.choices:
            continue  # a flag, or a value the help lists by its choices
        documented = [k for k in rows if k.split()[0] == option]
        if not documented:
            continue  # Django's own options
        shown = action.metavar or action.dest.upper()
        assert documented == [f"{option} {shown}"], (option, shown)


def test_runworkers_help_gives_the_queue_default_the_reference_gives():
    """Without --queue a worker serves HEADGATE["QUEUES"] when it is set, not every queue."""
    command = load_command_class("headgate_django", "runworkers")
    parser = command.create_parser("manage.py", "runworkers")
    (queue,) = [a for a in parser._actions if "--queue" in a.option_strings]
    assert "HEADGATE['QUEUES']" in queue.help
    assert 'every queue (or `HEADGATE["QUEUES"]`)' in _rows("cli.md")["--queue QUEUE"][1]


def _exception_classes() -> list[type[exceptions.HeadgateError]]:
    return [
        obj
        for obj in vars(exceptions).values()
        if isinstance(obj, type)
        and issubclass(obj, exceptions.HeadgateError)
        and obj.__module__ == exceptions.__name__
    ]


@pytest.mark.parametrize("cls", _exception_classes(), ids=lambda c: c.__name__)
def test_every_exception_is_documented_with_its_codes(cls):
    rows = {
        re.sub(r"^[│├└─\s]+", "", cells[0]).strip("`"): cells
        for cells in (
            [c.strip() for c in line.strip().strip("|").split("|")]
            for line in (REFERENCE / "errors.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and "`" in line
        )
    }
    assert cls.__name__ in rows, f"{cls.__name__} is not in docs/reference/errors.md"
    cells = rows[cls.__name__]
    assert cells[1] == str(cls.status_code)
    assert cells[2] == f"`{cls.default_code}`"


def _public_names() -> list[str]:
    from headgate_django import testing

    names = [*headgate_django.__all__, *headgate_django.workflows.__all__]
    names += list(headgate_django.tasks.__all__)
    names += [
        n
        for n in vars(testing)
        if n in {"run_jobs", "run_one", "enqueued", "assert_enqueued", "RunReport"}
    ]
    return sorted(set(names))


@pytest.mark.parametrize("name", _public_names())
def test_every_public_name_is_in_the_python_api_reference(name):
    page = (REFERENCE / "python-api.md").read_text(encoding="utf-8")
    assert f"`{name}" in page, f"{name} is not in docs/reference/python-api.md"


def test_the_limits_page_states_the_limits_of_the_code():
    from headgate_django.kernel import cel, graph, names, workflow
    from headgate_django.store import fenced, signals
    from headgate_django.workflows import bundle, cancel, inspect
    from headgate_django.workflows import signals as workflow_signals

    page = (REFERENCE / "limits.md").read_text(encoding="utf-8")
    limits = {
        "kind bytes": names.MAX_KIND_BYTES,
        "queue bytes": names.MAX_QUEUE_BYTES,
        "id bytes": names.MAX_ID_BYTES,
        "nodes": graph.MAX_NODES,
        "edges": graph.MAX_EDGES,
        "node name bytes": graph.MAX_NAME_BYTES,
        "CEL bytes": cel.MAX_EXPRESSION_BYTES,
        "CEL depth": cel.MAX_EXPRESSION_DEPTH,
        "history": workflow.MAX_HISTORY,
        "errors kept": fenced.MAX_ERRORS,
        "emissions kept": signals.KEEP_PER_WORKFLOW,
        "signal payload": workflow_signals.MAX_PAYLOAD_BYTES,
        "signal source": workflow_signals.MAX_SOURCE_BYTES,
        "bundle jobs": bundle.MAX_JOBS,
        "cancel workflows": cancel.MAX_WORKFLOWS,
        "page size": inspect.MAX_PAGE,
        "payload": DEFAULTS["MAX_PAYLOAD_BYTES"],
        "batch": DEFAULTS["MAX_BATCH"],
    }
    for what, value in limits.items():
        assert f"{value:,}" in page or str(value) in page, f"limits.md lacks the {what} ({value})"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_python_blocks_parse_and_import_real_names(page):
    for block in blocks(page):
        if block.lang != "python":
            continue
        tree = ast.parse(block.code, filename=block.where)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "headgate_django"
            ):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), (
                        f"{block.where}: {node.module} has no {alias.name}"
                    )
