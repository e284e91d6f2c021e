#!/usr/bin/env python
"""What a CEL condition can cost a coordinator tick: adversarial expressions against the
static estimate and the runtime step limit.

    .venv/bin/python benchmarks/cel_cost.py [--quick] [--runs N] [--json OUT]

For each case the script prints whether the static estimate accepts it (at the workflow
size the case assumes: ``states`` and ``completed`` have one entry per node), the
estimate, and the median and maximum time of ``cel.evaluate`` over N runs, activation
included, as the coordinator calls it. A refused case is evaluated anyway, as a forged
payload that skipped the estimate would be, to show the step limit stopping it (the
verdict is then ``refused``, the outcome ``stopped``). Families with a size parameter
(nesting depth, list length, node count) are measured at several sizes and at the largest
size the estimate accepts, which is the worst case under the budget. Each time is also
given as a ratio to the baseline, a trivial ``revision == 1u`` on an empty workflow.

Target: the worst accepted case ≤ 10 ms median per evaluation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.jobs import machine  # noqa: E402
from headgate_django.exceptions import ConditionError, ConditionEvaluationError  # noqa: E402
from headgate_django.kernel import cel, cel_cost, cel_runtime  # noqa: E402

TARGET_MS = 10.0
TEN = "[0,1,2,3,4,5,6,7,8,9]"
#: Node names at the 128-byte limit, so the inputs are as big as a condition can see.
NAME = "n" * 120


@dataclass
class Result:
    case: str
    nodes: int
    estimate: int
    verdict: str
    outcome: str
    median_ms: float
    max_ms: float
    cpu_median_ms: float
    ratio: float = 0.0

    @property
    def accepted(self) -> bool:
        return self.verdict == "accepted"


def nested(levels: int, method: str = "all") -> str:
    expression = "true"
    for name in reversed("abcdef"[:levels]):
        expression = f"{TEN}.{method}({name}, {expression})"
    return expression if method in ("all", "exists", "exists_one") else f"size({expression}) > 0"


def literal_list(length: int) -> str:
    return "[" + ",".join(["1"] * length) + "].exists(x, x == 2)"


def concatenation(terms: int) -> str:
    return "+".join(["'abcdefgh'"] * terms) + " != ''"


def arithmetic(terms: int) -> str:
    return "+".join(["1"] * terms) + " > 0"


#: (name, expression, node count) — fixed cases.
FIXED: list[tuple[str, str, int]] = [
    ("documented example", f"completed['{NAME}0'] && states['{NAME}1'] == 'completed'", 3),
    ("map/filter chain", f"{TEN}.map(a, a * 2).filter(x, x > 3).size() > 0", 0),
    ("map of maps, filtered", f"size({TEN}.map(a, {TEN}.map(b, a * b)).filter(l, true)) > 0", 0),
    ("size over 999 nodes", "size(states) == 999", 999),
    ("lookup in 999 nodes", f"'{NAME}1' in states && completed['{NAME}1']", 999),
    ("all nodes, 999 (refused)", "completed.all(n, completed[n])", 999),
    ("node pairs, 999 (refused)", "states.all(a, states.all(b, a == b || a != b))", 999),
]

#: (name, expression of a size, node count of a size, sizes to show) — families.
FAMILIES: list[tuple[str, Callable[[int], str], Callable[[int], int], list[int]]] = [
    ("nested all, levels", lambda n: nested(n), lambda n: 0, [1, 2, 3, 4, 5, 6]),
    ("nested exists, levels", lambda n: nested(n, "exists"), lambda n: 0, [1, 2, 3, 4, 5, 6]),
    ("nested map, levels", lambda n: nested(n, "map"), lambda n: 0, [1, 2, 3, 4, 5, 6]),
    ("nested filter, levels", lambda n: nested(n, "filter"), lambda n: 0, [1, 2, 3]),
    ("literal list iterated, length", literal_list, lambda n: 0, [10, 100, 500]),
    ("string concatenation, terms", concatenation, lambda n: 0, [10, 40, 110]),
    ("arithmetic chain, terms", arithmetic, lambda n: 0, [10, 40]),
    ("all nodes, nodes", lambda n: "completed.all(n, completed[n])", lambda n: n, [10, 999]),
    (
        "every state checked, nodes",
        lambda n: "states.exists(k, states[k] == 'archived' || states[k] == 'cancelled')",
        lambda n: n,
        [10, 999],
    ),
    (
        "string growth per node, nodes",
        lambda n: "states.all(k, size(k + k + k + k + k + k + k + k) > 0)",
        lambda n: n,
        [10, 999],
    ),
]


def workflow(nodes: int) -> tuple[dict[str, str], dict[str, bool]]:
    states = {f"{NAME}{i}": "completed" for i in range(nodes)}
    return states, dict.fromkeys(states, True)


def verdict(expression: str, nodes: int) -> tuple[int, str, cel.CompiledCondition | None]:
    """The estimate, what cel.compile says (accepted, or refused and why), and a runnable
    program either way."""
    environment = cel_runtime._get_environment()
    try:
        tree = environment.compile(expression)
        estimate = cel_cost.estimate(tree, nodes)
    except Exception:
        return -1, "refused (not parsable)", None
    try:
        return estimate, "accepted", cel.compile(expression, nodes=nodes)
    except ConditionError as exc:
        why = "budget" if "too expensive" in exc.message else exc.message.rsplit(" is ", 1)[-1]
        program = environment.program(tree)
        return estimate, f"refused ({why[:24]})", cel.CompiledCondition(expression, program)


def measure(name: str, expression: str, nodes: int, runs: int) -> Result:
    estimate, said, compiled = verdict(expression, nodes)
    if compiled is None:
        return Result(name, nodes, estimate, said, "-", 0.0, 0.0, 0.0)
    states, completed = workflow(nodes)
    times, cpu, outcome = [], [], ""
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.thread_time()
        try:
            outcome = str(cel.evaluate(compiled, 1, 1, states, completed)).lower()
        except ConditionEvaluationError as exc:
            outcome = "stopped" if "evaluation steps" in exc.message else "error"
        cpu.append((time.thread_time() - start_cpu) * 1000)
        times.append((time.perf_counter() - start) * 1000)
    median, cpu_median = statistics.median(times), statistics.median(cpu)
    return Result(name, nodes, estimate, said, outcome, median, max(times), cpu_median)


def largest_accepted(expression_of: Callable[[int], str], nodes_of: Callable[[int], int]) -> int:
    """The largest size the estimate accepts (sizes grow the cost monotonically)."""
    low, high = 0, 1

    def accepted(size: int) -> bool:
        return verdict(expression_of(size), nodes_of(size))[1] == "accepted"

    low, high = 0, 1
    while accepted(high) and high < 1 << 12:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if accepted(middle) else (low, middle)
    return low


def cases(runs: int) -> tuple[Result, list[Result], list[Result]]:
    baseline = measure("baseline: revision == 1u", "revision == 1u", 0, runs)
    results = [measure(name, expression, nodes, runs) for name, expression, nodes in FIXED]
    worst = []
    for name, expression_of, nodes_of, sizes in FAMILIES:
        for size in sizes:
            results.append(measure(f"{name} {size}", expression_of(size), nodes_of(size), runs))
        limit = largest_accepted(expression_of, nodes_of)
        if limit:
            label = f"{name} {limit} (largest accepted)"
            worst.append(measure(label, expression_of(limit), nodes_of(limit), runs))
    for result in [baseline, *results, *worst]:
        result.ratio = result.median_ms / baseline.median_ms if baseline.median_ms else 0.0
    return baseline, results, worst


def table(rows: list[Result]) -> None:
    print(
        "| case | nodes | estimate | verdict | outcome | median ms | max ms | CPU ms | × baseline |"
    )
    print("|---|---:|---:|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.case} | {r.nodes} | {r.estimate:,} | {r.verdict} | {r.outcome} "
            f"| {r.median_ms:.2f} | {r.max_ms:.2f} | {r.cpu_median_ms:.2f} | {r.ratio:.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="7 runs per case instead of 31")
    parser.add_argument("--runs", type=int, help="runs per case (overrides --quick)")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    args = parser.parse_args()
    runs = args.runs or (7 if args.quick else 31)

    print("machine:", ", ".join(f"{k} {v}" for k, v in machine().items()))
    print(f"budget: {cel.MAX_EVALUATION_STEPS:,} evaluation steps; {runs} runs per case\n")
    baseline, results, worst = cases(runs)
    table([baseline, *results])
    print("\nworst case under the budget, per family:\n")
    table(worst)
    accepted = [r for r in [*results, *worst] if r.accepted]
    top = max(accepted, key=lambda r: r.median_ms)
    status = "met" if top.median_ms <= TARGET_MS else "MISSED"
    print(
        f"\nworst accepted: {top.case}: median {top.median_ms:.2f} ms, max {top.max_ms:.2f} ms, "
        f"CPU median {top.cpu_median_ms:.2f} ms (target ≤ {TARGET_MS:.0f} ms median: {status}); "
        f"baseline {baseline.median_ms:.3f} ms"
    )
    if args.json:
        payload = {
            "machine": machine(),
            "budget": cel.MAX_EVALUATION_STEPS,
            "runs": runs,
            "baseline": asdict(baseline),
            "cases": [asdict(r) for r in results],
            "worst": [asdict(r) for r in worst],
        }
        args.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
