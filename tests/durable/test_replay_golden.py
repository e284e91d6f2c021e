"""Golden histories (``tests/durable/golden/*.json``), one per determinism rule, replayed through
``durable.replay`` and ``manage.py durable_replay``.

Each file was recorded by running its ``ORIGINAL`` workflow through the real runtime and
exporting ``Manager.history()``. The original code must replay every file; each changed
version must pass or raise ``NondeterminismError`` exactly as the table below says.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from headgate_django import durable
from headgate_django.durable import WorkflowDef
from headgate_django.exceptions import DefinitionError, HistoryCorruptError

GOLDEN = Path(__file__).resolve().parent / "golden"


def _two_ops(first: str, second: str, version: str = "1") -> Any:
    def workflow(ctx: durable.Context, order: Any) -> Any:
        a = ctx.execute_operation(first, "1", order).result()
        b = ctx.execute_operation(second, version, order).result()
        return [a, b]

    return workflow


def _one_op(name: str, version: str = "1") -> Any:
    def workflow(ctx: durable.Context, order: Any) -> Any:
        return ctx.execute_operation(name, version, order).result()

    return workflow


def _sleep(duration: timedelta) -> Any:
    def workflow(ctx: durable.Context, _: Any) -> Any:
        ctx.select(ctx.sleep(duration))
        return "woke"

    return workflow


def _deadline(now: Any) -> Any:
    """Branch on the time: ``now(ctx)`` is the clock the code reads."""

    def workflow(ctx: durable.Context, args: dict[str, str]) -> Any:
        ctx.select(ctx.sleep(timedelta(milliseconds=20)))
        if now(ctx) < datetime.fromisoformat(args["deadline"]):
            return ctx.execute_operation("golden-on-time", "1", None).result()
        return ctx.execute_operation("golden-late", "1", None).result()

    return workflow


def _notify(guard: str | None) -> Any:
    """Reserve, then (the change) notify, then charge. ``guard`` says how the change is
    made: ``"patched"``, ``"deprecated"``, ``"always"`` (no patch call), or None: the code
    before the change."""

    def workflow(ctx: durable.Context, order: Any) -> Any:
        a = ctx.execute_operation("golden-reserve", "1", order).result()
        if guard == "deprecated":
            ctx.deprecate_patch("notify")
        if guard == "always" or guard == "deprecated" or (guard and ctx.patched("notify")):
            ctx.execute_operation("golden-notify", "1", order).result()
        return [a, ctx.execute_operation("golden-charge", "1", order).result()]

    return workflow


def _continues(ending: str) -> Any:
    """One Operation per run, continuing as new until ``n`` reaches 2 (``ending="return"``:
    the changed code returns instead)."""

    def workflow(ctx: durable.Context, state: dict[str, int]) -> Any:
        n = ctx.execute_operation("golden-step", "1", state["n"]).result()
        if n < 2 and ending == "continue":
            ctx.continue_as_new({"n": n})
        return n

    return workflow


def _child(workflow: str, version: str = "1", key: str | None = None) -> Any:
    def code(ctx: durable.Context, order: Any) -> Any:
        return ctx.child(workflow, order, version=version, key=key)

    return code


def _child_or_refusal(catch: bool) -> Any:
    def code(ctx: durable.Context, order: Any) -> Any:
        try:
            return ctx.child("golden-refuse", order, version="1")
        except durable.ChildFailedError as failure:
            if not catch:
                raise
            return {"refused": failure.reason}

    return code


def _defs(name: str, original: Any, changed: Any) -> tuple[WorkflowDef, WorkflowDef]:
    return WorkflowDef(original, name, "1"), WorkflowDef(changed, name, "1")


def _cart(ctx: durable.Context, order: Any) -> Any:
    """Items come from updates until a "checkout" signal; then they are billed."""
    ctx.state["items"] = []
    ctx.select(ctx.wait_signal("checkout"))
    return ctx.execute_operation("golden-bill", "1", ctx.state["items"]).result()


def _add(ctx: durable.Context, item: Any) -> int:
    ctx.state["items"].append(item)
    return len(ctx.state["items"])


def _one_of_each(ctx: durable.Context, item: Any) -> None:
    if item in ctx.state["items"]:
        raise ValueError(f"{item} is already in the cart")


def _until(signal: str, *, wait: bool = True) -> Any:
    """Return the items, after waiting for ``signal`` (or, changed, without waiting)."""

    def workflow(ctx: durable.Context, _: Any) -> Any:
        ctx.state["items"] = []
        if wait:
            ctx.select(ctx.wait_signal(signal))
        return ctx.state["items"]

    return workflow


def _hops(signal: str, *, continues: bool = True) -> Any:
    """Wait for ``signal``, then continue as new in run 1 (or, changed, return at once)."""

    def workflow(ctx: durable.Context, run: Any) -> Any:
        ctx.state["items"] = []
        ctx.select(ctx.wait_signal(signal))
        if run == 1 and continues:
            ctx.continue_as_new(2)
        return ctx.state["items"]

    return workflow


def _leaves_child(wait: bool) -> Any:
    """Run 1 starts a child and continues as new (or, changed, waits for the child first)."""

    def workflow(ctx: durable.Context, run: Any) -> Any:
        if run == 1:
            child = ctx.start_child(
                "golden-parcel", None, version="1", parent_close_policy="abandon"
            )
            if wait:
                child.result()
            ctx.continue_as_new(2)
        return "second run"

    return workflow


def _updated(
    name: str, original: Any, changed: Any, *, handlers: bool = True, validator: bool = True
) -> tuple[WorkflowDef, WorkflowDef]:
    """Both definitions with update "add"; ``handlers=False``/``validator=False`` leave
    the handler / the validator out of the changed one."""
    first, second = _defs(name, original, changed)
    first.update("add", validator=_one_of_each)(_add)
    if handlers:
        second.update("add", validator=_one_of_each if validator else None)(_add)
    return first, second


#: file → (original, changed, None when the change replays, else the expected error)
CASES: dict[str, tuple[WorkflowDef, WorkflowDef, str | None]] = {
    "reordered_operations.json": (
        *_defs(
            "golden-reordered",
            _two_ops("golden-reserve", "golden-charge"),
            _two_ops("golden-charge", "golden-reserve"),
        ),
        "op:1: the code schedules Operation 'golden-charge' version '1', but history has "
        "op:1 (OperationScheduled(name='golden-reserve'",
    ),
    "renamed_operation.json": (
        *_defs("golden-renamed", _one_op("golden-charge"), _one_op("golden-charge-card")),
        "the code schedules Operation 'golden-charge-card'",
    ),
    "changed_operation_version.json": (
        *_defs("golden-version", _one_op("golden-charge"), _one_op("golden-charge", "2")),
        "the code schedules Operation 'golden-charge' version '2', but history has op:1 "
        "(OperationScheduled(name='golden-charge', version='1')",
    ),
    "changed_sleep_duration.json": (
        *_defs("golden-sleep", _sleep(timedelta(milliseconds=50)), _sleep(timedelta(hours=2))),
        "timer:1: the code sleeps 7200000 ms, but history has timer:1 "
        "(TimerScheduled(duration_ms=50)",
    ),
    "removed_call.json": (
        *_defs(
            "golden-removed",
            _two_ops("golden-reserve", "golden-charge"),
            _one_op("golden-reserve"),
        ),
        "op:2: history has op:2 (OperationScheduled(name='golden-charge'",
    ),
    "added_call.json": (
        *_defs(
            "golden-added",
            _one_op("golden-reserve"),
            _two_ops("golden-reserve", "golden-notify"),
        ),
        "History records WorkflowCompleted at seq 4, but the code now parks waiting on ['op:2']",
    ),
    "branch_on_now.json": (
        *_defs(
            "golden-now",
            _deadline(lambda ctx: ctx.now()),
            _deadline(lambda ctx: datetime.now(UTC)),  # the worker's clock: not recorded
        ),
        "op:1: the code schedules Operation 'golden-late'",
    ),
    # The first run of a continue-as-new loop (exported with Manager.history(id, run_id)).
    "continue_as_new.json": (
        *_defs("golden-continue", _continues("continue"), _continues("return")),
        "History records WorkflowContinuedAsNew at seq 4, but the code now returns",
    ),
    # Recorded by the code before the change: patched() runs the old branch again.
    "patch_before_the_change.json": (
        *_defs("golden-patch-old", _notify(None), _notify("patched")),
        None,
    ),
    # Recorded by the patched code (the marker is in history): the cleanup step replays it.
    "patch_marker.json": (
        *_defs("golden-patch-new", _notify("patched"), _notify("deprecated")),
        None,
    ),
    "renamed_child_workflow.json": (
        *_defs("golden-child", _child("golden-shipping"), _child("golden-delivery")),
        "child:1: the code starts child workflow 'golden-delivery' version '1', but history "
        "has child:1 (ChildStarted(name='golden-shipping', version='1')",
    ),
    "changed_child_version.json": (
        *_defs("golden-child-version", _child("golden-shipping"), _child("golden-shipping", "2")),
        "child:1: the code starts child workflow 'golden-shipping' version '2'",
    ),
    "child_failed.json": (
        *_defs("golden-child-failed", _child_or_refusal(True), _child_or_refusal(False)),
        "History records WorkflowCompleted at seq 4, but the code now fails with "
        "'ChildFailedError: child ",
    ),
    # The child's id is recorded, not recomputed: a changed key (like a changed input)
    # replays, and only new executions get the new id.
    "changed_child_key.json": (
        *_defs(
            "golden-child-key",
            _child("golden-shipping", key="ship:42"),
            _child("golden-shipping", key="shipment:42"),
        ),
        None,
    ),
    # Updates: UpdateAccepted is matched to a handler by name; the handler runs where the
    # code waits, so each replay rebuilds ctx.state at the same point.
    "update_handled.json": (
        *_updated("golden-cart", _cart, _cart, handlers=False),
        "update 'u-1': history has UpdateAccepted(name='add') at seq 2, but the workflow has "
        "no update handler 'add'.",
    ),
    # Validators never run on replay: a rejected update left nothing to replay.
    "update_rejected.json": (*_updated("golden-validated", _cart, _cart, validator=False), None),
    # An update the code never reached (it ended first) needs no handler on replay.
    "update_unhandled.json": (
        *_updated("golden-unhandled", _until("go"), _until("go"), handlers=False),
        None,
    ),
    "update_skipped.json": (
        *_updated("golden-skipped", _until("go"), _until("go", wait=False)),
        "update 'u-1': history records its handler's outcome at seq 3, but the code now ends "
        "before handling it.",
    ),
    # A run that continued as new recorded the update it never reached (handled: false)
    # before its WorkflowContinuedAsNew: the archived run replays without the handler.
    "update_continued.json": (
        *_updated("golden-update-continued", _hops("go"), _hops("go"), handlers=False),
        None,
    ),
    # The child of a run that continued as new reports to nobody: the archived run has no
    # outcome for it, so code that now waits for the child parks instead of continuing.
    "child_continued.json": (
        *_defs("golden-child-continued", _leaves_child(False), _leaves_child(True)),
        "History records WorkflowContinuedAsNew at seq 3, but the code now parks waiting on "
        "['child:1']",
    ),
}

#: More changed versions of a golden file's workflow: (file, changed code, expected error).
VARIANTS: list[tuple[str, Any, str]] = [
    # Returning where the run continued as new is a changed ending.
    (
        "update_continued.json",
        _hops("go", continues=False),
        "History records WorkflowContinuedAsNew at seq 6, but the code now returns",
    ),
    # The same change without patched() breaks the executions recorded before it.
    (
        "patch_before_the_change.json",
        _notify("always"),
        "op:2: the code schedules Operation 'golden-notify' version '1', but history has op:2 "
        "(OperationScheduled(name='golden-charge'",
    ),
    # Dropping the patch call while histories still carry the marker breaks them too
    # (deprecate_patch is the step that accepts it).
    (
        "patch_marker.json",
        _notify("always"),
        "history has patch:notify (PatchRecorded(patch_id='notify') at seq 4)",
    ),
    # And the old code cannot replay a history that took the new branch.
    (
        "patch_marker.json",
        _notify(None),
        "op:2: the code schedules Operation 'golden-charge' version '1', but history has op:2 "
        "(OperationScheduled(name='golden-notify'",
    ),
]


def test_every_golden_file_has_a_case() -> None:
    assert sorted(p.name for p in GOLDEN.glob("*.json")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_original_code_replays_its_history(name: str) -> None:
    original, _, _ = CASES[name]
    export = durable.replay((GOLDEN / name).read_text(), workflows=[original])
    assert export.name == original.name
    assert export.events[-1].type in ("WorkflowCompleted", "WorkflowContinuedAsNew")


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_changed_code_passes_or_raises_as_expected(name: str) -> None:
    _, changed, expected = CASES[name]
    history = (GOLDEN / name).read_text()
    if expected is None:
        durable.replay(history, workflows=[changed])
        return
    with pytest.raises(durable.NondeterminismError) as raised:
        durable.replay(history, workflows=[changed])
    assert expected in str(raised.value)


@pytest.mark.parametrize(("name", "changed", "expected"), VARIANTS)
def test_more_changed_versions_raise_as_expected(name: str, changed: Any, expected: str) -> None:
    original, _, _ = CASES[name]
    definition = WorkflowDef(changed, original.name, original.version)
    with pytest.raises(durable.NondeterminismError) as raised:
        durable.replay((GOLDEN / name).read_text(), workflows=[definition])
    assert expected in str(raised.value)


def test_replay_needs_a_matching_workflow_and_a_valid_export() -> None:
    history = (GOLDEN / "renamed_operation.json").read_text()
    with pytest.raises(DefinitionError, match="no workflow 'golden-renamed' version '1'"):
        durable.replay(history, workflows=[])
    with pytest.raises(HistoryCorruptError):
        durable.replay('{"workflow": {}}', workflows=[])
    with pytest.raises(DefinitionError, match=r"takes @durable\.workflow definitions"):
        durable.replay(history, workflows=[_one_op("x")])  # type: ignore[list-item]


def test_durable_replay_command(capsys: pytest.CaptureFixture[str], swap_code: Any) -> None:
    original, changed, _ = CASES["renamed_operation.json"]
    path = str(GOLDEN / "renamed_operation.json")
    swap_code("workflow", original.name, "1", original)
    call_command("durable_replay", path)
    assert "ok   " in capsys.readouterr().out
    swap_code("workflow", original.name, "1", changed)
    with pytest.raises(CommandError, match="1 of 1 history file"):
        call_command("durable_replay", path)
    assert "FAIL" in capsys.readouterr().err
    with pytest.raises(CommandError, match="No such file"):
        call_command("durable_replay", str(GOLDEN / "missing.json"))


@pytest.mark.parametrize(
    "name", ["continue_as_new.json", "patch_before_the_change.json", "patch_marker.json"]
)
def test_durable_replay_command_reads_runs_and_patch_markers(
    name: str, capsys: pytest.CaptureFixture[str], swap_code: Any
) -> None:
    original, changed, expected = CASES[name]
    path = str(GOLDEN / name)
    swap_code("workflow", original.name, "1", original)
    call_command("durable_replay", path)
    assert "ok   " in capsys.readouterr().out
    swap_code("workflow", original.name, "1", changed)
    if expected is None:  # the patched (or cleaned-up) code replays it too
        call_command("durable_replay", path)
        assert "ok   " in capsys.readouterr().out
    else:
        with pytest.raises(CommandError, match="1 of 1 history file"):
            call_command("durable_replay", path)
        assert "FAIL" in capsys.readouterr().err


def test_durable_replay_command_reports_a_file_nested_too_deeply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hostile or broken file is a failed check like any corrupt export, not a traceback."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CommandError, match="1 of 1 history file"):
        call_command("durable_replay", str(path))
    assert "HistoryCorruptError" in capsys.readouterr().err
    with pytest.raises(HistoryCorruptError, match="nested too deeply"):
        durable.replay(path.read_bytes())
