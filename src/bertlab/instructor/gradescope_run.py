"""Gradescope's side of ``bertlab gradescope``: grade the submitted notebook, write results.json.

``run_autograder`` runs ``python -m bertlab.instructor.gradescope_run --root /autograder``. The
submission is judged as ``bertlab autograde`` judges it (``runner.grade_task``: grade and locked
cells restored from the source, the learner's cells in a sandboxed process of their own, under
the course's limits), against the source notebook that travelled in the autograder's zip. Whatever
was submitted, a results.json is written: a missing, renamed, oversized or unreadable notebook
scores 0 on every grade cell, with the reason, as does a failure of the grader itself.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from bertlab.grading import notebooks, scratch
from bertlab.grading.runner import failed_all
from bertlab.instructor.gradescope_results import results

CONFIG = "autograder.json"  # in source/: the assignment, the course's version and limits


class Refused(Exception):
    """The submission holds no notebook that can be graded; the message says why, to the learner."""


def _size(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def find_notebook(submission: Path, assignment: str, max_bytes: int) -> Path:
    """The submitted ``<assignment>.ipynb`` (uploaded alone, in a zip's folder, or from a repository)."""
    expected = f"{assignment}.ipynb"
    files = sorted(
        (p for p in submission.rglob("*") if p.is_file() and not p.is_symlink()),
        key=lambda p: (len(p.parts), str(p)),  # the shallowest first: a repository's top folder
    )
    named = [p for p in files if p.name == expected]
    if not named:
        found = ", ".join(str(p.relative_to(submission)) for p in files[:5]) or "nothing"
        raise Refused(
            f"{expected} was not submitted (found {found}). Submit the course's notebook under its own "
            f"name, {expected}: it is graded by that name."
        )
    size = named[0].stat().st_size
    if size > max_bytes:
        raise Refused(
            f"{expected} is {_size(size)}, over the {_size(max_bytes)} a notebook may be. Clear its outputs "
            "(in JupyterLab: Kernel, Restart Kernel and Clear Outputs), save and submit it again."
        )
    return named[0]


def grade(root: Path, config: dict) -> dict:
    """results.json's content for the submission under ``root``."""
    from bertlab.grading.pool import JudgePool, Limits, judge_env
    from bertlab.grading.runner import grade_task

    start = time.monotonic()
    assignment, version = config["assignment"], config["bertlab"]
    source_path = root / "source" / "sources" / f"{assignment}.ipynb"
    source = notebooks.read(source_path)
    try:
        found = find_notebook(root / "submission", assignment, int(config["max_megabytes"] * 1e6))
    except Refused as why:
        return results(
            assignment, source, failed_all(source, str(why)), "error", time.monotonic() - start, version, str(why)
        )
    with scratch.folder("gradescope") as tmp:
        # The grader reads the learner's folder by the assignment's name, as nbgrader lays it out.
        copy = Path(tmp) / assignment / found.name
        copy.parent.mkdir()
        shutil.copyfile(found, copy)
        pool = JudgePool(judge_env(1))
        pool.expect(1)
        try:
            limits = Limits(config["timeout"], config["memory_limit"])
            verdict = grade_task(assignment, [copy], limits, pool, sources=[source_path])
        finally:
            pool.close()
    failed = [c.message for c in verdict.checks if not c.passed]
    reason = failed[0] if verdict.status in ("error", "timeout") and failed else None
    return results(assignment, source, verdict.checks, verdict.status, time.monotonic() - start, version, reason)


def crashed(root: Path, config: dict, err: BaseException) -> dict:
    """results.json when the grader itself failed: every grade cell 0, the error named."""
    reason = f"the autograder could not grade this submission ({type(err).__name__}: {err}); tell your instructor"
    try:
        source = notebooks.read(root / "source" / "sources" / f"{config['assignment']}.ipynb")
    except (notebooks.GradingError, KeyError):
        return {"score": 0.0, "output": reason, "stdout_visibility": "hidden", "tests": []}
    return results(config["assignment"], source, [], "error", 0.0, config.get("bertlab", "?"), reason)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertlab.instructor.gradescope_run")
    parser.add_argument("--root", type=Path, default=Path("/autograder"), help="Gradescope's /autograder")
    root = parser.parse_args(argv).root
    config: dict = {}
    try:
        config = json.loads((root / "source" / CONFIG).read_text())
        payload = grade(root, config)
    except Exception as err:  # noqa: BLE001 -- any failure must still give the learner a result that says so
        payload = crashed(root, config, err)
    out = root / "results" / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2))
    print(f"{payload['output']}\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
