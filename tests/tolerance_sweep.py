"""How close the reference solutions come to each check's tolerance, under each CPU condition.

Every values comparison of the checks goes through ``bertlab.checks.compare.closeness``, the
share of the tolerance a result uses (at most 1 is a match). A child process per condition of
``tests/kernels.py`` runs every grade cell of the solution notebooks in process (as the checks'
own tests do) with that function recording, per task and stage, the largest share any
comparison used. Its reciprocal is the check's margin: how many times the reference solution's
largest difference fits in the tolerance. A margin near 1 is a tolerance another CPU may break.

The right code measured is the solutions' and the forms of ``FORMS``: bad-submission cases
that compute more exactly than HF's (float64, cast back) or sum in another order (einsum, addmm
on the flattened tokens), recorded as ``"<case>: <task> <stage>"``. Wrong code is measured too:
each known mistake that changes a module task's captured values, simulated on them, and how
many times over the tolerance it lands (its margin, the other way round). A mistake an
absolute tolerance alone would catch there must stay ``FLOOR`` times over the tolerance.

``python -m tests.tolerance_sweep`` prints the tables; ``tests/test_grades_under_kernels.py``
fails when a grade cell fails or a margin is under ``FLOOR``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from tests.kernels import Condition, conditions, run_all

ROOT = Path(__file__).resolve().parents[1]
# The reference solution must stay within half of every tolerance on every condition: rounding
# that moved a number twice as far on another CPU would still pass.
FLOOR = 2.0
# Right code that rounds otherwise than HF's (tests/submissions.py): it must keep the same margin.
FORMS = (
    "05-intermediate-in-float64",
    "05-output-in-float64",
    "04-self-output-in-float64",
    "05-feed-forward-einsum",
    "05-feed-forward-addmm",
    "04-self-output-addmm",
    "06-layer-ffn-in-float64",
)

CHILD = """
import json, sys
import nbformat
from tests.conftest import solution_notebook, solution_namespace
from bertlab.checks import CheckFailed, compare

worst, failed, state = {}, [], {"task": None}
measure = compare.closeness
SKIPPED = ("plot", "predictions")  # cells the solutions' namespace skips too (tests/conftest.py)


def stage_of(frame):
    while frame is not None:
        if frame.f_code.co_name.startswith("check_") and frame.f_code.co_name != "check_case":
            return frame.f_code.co_name.removeprefix("check_")
        frame = frame.f_back
    return "?"


def recording(expected, got, atol, rtol=0.0):
    used = measure(expected, got, atol, rtol)
    key = f"{state['task']} {stage_of(sys._getframe(1))}"
    worst[key] = max(worst.get(key, 0.0), used)
    return used


def mistakes():
    # {"task mistake": how many times over the tolerance it lands, under atol + rtol and atol alone}
    import torch
    from bertlab import diagnose
    from bertlab.checks import TASKS
    from bertlab.checks.framework import Context
    from bertlab.checks.module_base import ModuleBase

    ctx, found = Context.load(), {}
    for mistake in diagnose.REGISTRY.values():
        for task in [TASKS[t] for t in mistake.tasks if isinstance(TASKS.get(t), ModuleBase)]:
            shares = [0.0, 0.0]
            for layer in task.layers(ctx) if mistake.outputs else []:
                inputs, expected = task.captured(ctx, layer)
                try:
                    with torch.no_grad():
                        wrong = mistake.outputs(task.reference(ctx, layer), inputs)
                except (TypeError, AttributeError, KeyError, IndexError, ValueError, RuntimeError):
                    continue  # a simulation for another call form
                for k, v in expected.items():
                    if k in wrong and wrong[k].shape == v.shape and bool(torch.isfinite(wrong[k]).all()):
                        shares[0] = max(shares[0], measure(v, wrong[k], task.atol, task.rtol))
                        shares[1] = max(shares[1], measure(v, wrong[k], task.atol))
            if shares[1] > 1:  # the captured values show it: the values check must catch it
                found[f"{task.id} {mistake.id}"] = shares
    return found


def run_cells(label, cells, namespace):
    check = namespace["check"]

    def checking(task, *args, _check=check, **kwargs):
        state["task"] = f"{label}{task}"
        return _check(task, *args, **kwargs)

    namespace["check"] = checking
    for cell in cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade"):
            try:
                exec(compile(cell.source, meta["grade_id"], "exec"), namespace)
            except CheckFailed as err:
                failed.append(f"{label}{meta['grade_id']}: {str(err).splitlines()[0]}")


compare.closeness = recording  # allclose and every comparison call it through the module
for name in sys.argv[1:]:
    if name.startswith("case:"):  # a right form: the case's notebook, run as the solutions are
        from tests.submissions import CASES

        nb = next(c for c in CASES if c.folder == name[5:]).build()
        namespace = {}
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and not meta.get("grade") and meta.get("grade_id") not in SKIPPED:
                exec(compile(cell.source, f"<cell {name}>", "exec"), namespace)
        run_cells(f"{name[5:]}: ", nb.cells, namespace)
    else:
        run_cells("", nbformat.read(solution_notebook(name), as_version=4).cells, solution_namespace(name))
compare.closeness = measure
print(json.dumps({"closeness": worst, "failed": failed, "mistakes": mistakes()}))
"""


def notebooks() -> list[str]:
    return [p.name for p in sorted((ROOT / "solutions").glob("[0-9][0-9]-*")) if p.is_dir()]


def run(condition: Condition) -> dict:
    """``{"closeness": {"task stage": largest share of the tolerance}, "failed": [grade cell: message]}``."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *notebooks(), *(f"case:{c}" for c in FORMS)],
        env={**condition.env(), "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the solutions' checks did not run under {condition.name}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def sweep(conds: list[Condition] | None = None) -> dict[str, dict]:
    return run_all(run, conditions() if conds is None else conds)


def margins(runs: dict[str, dict]) -> dict[str, tuple[float, str]]:
    """Per ``"task stage"``: the smallest margin (tolerance over largest difference) and where."""
    found: dict[str, tuple[float, str]] = {}
    for condition, result in runs.items():
        for key, used in result["closeness"].items():
            margin = 1 / used if used > 0 else float("inf")
            if key not in found or margin < found[key][0]:
                found[key] = (margin, condition)
    return dict(sorted(found.items()))


def mistake_margins(runs: dict[str, dict]) -> dict[str, tuple[float, float, str]]:
    """Per ``"task mistake"``: how many times over the tolerance it lands where it lands least
    (and over atol alone, there), and under which condition."""
    found: dict[str, tuple[float, float, str]] = {}
    for condition, result in runs.items():
        for key, (share, atol_only) in result["mistakes"].items():
            if key not in found or share < found[key][0]:
                found[key] = (share, atol_only, condition)
    return dict(sorted(found.items(), key=lambda item: item[1][0]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.tolerance_sweep",
        description="Grade the solution notebooks' checks under every CPU capability and thread count this machine "
        "can dispatch; print per check how many times the reference's largest difference fits in the tolerance.",
    )
    parser.parse_args(argv)
    runs = sweep()
    for key, (margin, where) in margins(runs).items():
        print(f"{key:<28} {margin:>10.3g}  (thinnest under {where}){'  THIN' if margin < FLOOR else ''}")
    print("\nknown mistakes on the captured values: times over the tolerance (over atol alone)")
    near = mistake_margins(runs)
    for key, (share, atol_only, where) in near.items():
        print(f"{key:<44} {share:>10.3g} ({atol_only:.3g})  (nearest under {where}){'  THIN' if share < FLOOR else ''}")
    failed = [f"{c}: {line}" for c, r in runs.items() for line in r["failed"]]
    for line in failed:
        print(line, file=sys.stderr)
    thin = any(m < FLOOR for m, _ in margins(runs).values()) or any(s < FLOOR for s, _, _ in near.values())
    return 1 if failed or thin else 0


if __name__ == "__main__":
    raise SystemExit(main())
