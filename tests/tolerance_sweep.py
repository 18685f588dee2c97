"""How close the reference solutions come to each check's tolerance, under each CPU condition.

Every values comparison of the checks goes through ``bertlab.checks.compare.closeness``, the
share of the tolerance a result uses (at most 1 is a match). A child process per condition of
``tests/kernels.py`` runs every grade cell of the solution notebooks in process (as the checks'
own tests do) with that function recording, per task and stage, the largest share any
comparison used. Its reciprocal is the check's margin: how many times the reference solution's
largest difference fits in the tolerance. A margin near 1 is a tolerance another CPU may break.

``python -m tests.tolerance_sweep`` prints the table; ``tests/test_grades_under_kernels.py``
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

CHILD = """
import json, sys
import nbformat
from tests.conftest import solution_notebook, solution_namespace
from bertlab.checks import CheckFailed, compare

worst, failed, state = {}, [], {"task": None}
measure = compare.closeness


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


compare.closeness = recording  # allclose and every comparison call it through the module
for name in sys.argv[1:]:
    namespace = solution_namespace(name)
    check = namespace["check"]

    def checking(task, *args, _check=check, **kwargs):
        state["task"] = task
        return _check(task, *args, **kwargs)

    namespace["check"] = checking
    for cell in nbformat.read(solution_notebook(name), as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade"):
            try:
                exec(compile(cell.source, meta["grade_id"], "exec"), namespace)
            except CheckFailed as err:
                failed.append(f"{name} {meta['grade_id']}: {str(err).splitlines()[0]}")
print(json.dumps({"closeness": worst, "failed": failed}))
"""


def notebooks() -> list[str]:
    return [p.name for p in sorted((ROOT / "solutions").glob("[0-9][0-9]-*")) if p.is_dir()]


def run(condition: Condition) -> dict:
    """``{"closeness": {"task stage": largest share of the tolerance}, "failed": [grade cell: message]}``."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *notebooks()],
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
    failed = [f"{c}: {line}" for c, r in runs.items() for line in r["failed"]]
    for line in failed:
        print(line, file=sys.stderr)
    return 1 if failed or any(m < FLOOR for m, _ in margins(runs).values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
