"""The GitHub Classroom workflow ``bertlab classroom`` writes: actionlint finds nothing in it, each
grade cell of the nbgrader source is one command-grader test worth the cell's points, the reporter
reads every test, and the verdict command passes a grade cell only when it earned its points.
The graded runs are in test_platforms_agree.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bertlab import cli
from bertlab.grading import notebooks
from bertlab.instructor import classroom_verdict
from bertlab.instructor.gradescope_results import grade_cells
from tests.submissions import ROOT

ACTIONLINT = shutil.which("actionlint", path=str(Path(sys.executable).parent))
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("template")
    out = repo / ".github" / "workflows" / "classroom.yml"
    assert cli.main(["classroom", "--course", str(ROOT), "--out", str(out)]) == 0
    return out


def lint(workflow: Path) -> subprocess.CompletedProcess:
    assert ACTIONLINT, "actionlint is missing: it is in the dev extra (make start installs it)"
    return subprocess.run([ACTIONLINT, "-no-color", str(workflow)], capture_output=True, text=True)


def test_actionlint_finds_nothing(written):
    found = lint(written)
    assert found.returncode == 0, found.stdout + found.stderr


def test_actionlint_would_find_a_mistake(written, tmp_path):
    broken = tmp_path / ".github" / "workflows" / "classroom.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(
        written.read_text().replace("steps.t05-test-5-1-names.outputs", "steps.t05-test-5-1-name.outputs")
    )
    assert lint(broken).returncode != 0


def test_each_grade_cell_is_a_test_worth_its_points(written):
    steps = yaml.safe_load(written.read_text())["jobs"]["grade"]["steps"]
    tests = {
        tuple(s["with"]["command"].split()[-2:]): float(s["with"]["max-score"])
        for s in steps
        if s.get("uses", "").startswith("classroom-resources/autograding-command-grader@")
    }
    expected = {
        (assignment, cell["grade_id"]): cell["points"]
        for assignment in ASSIGNMENTS
        for cell in grade_cells(notebooks.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb"))
    }
    assert tests == expected
    (report,) = [s for s in steps if s.get("uses", "").startswith("classroom-resources/autograding-grading-reporter@")]
    ids = [s["id"] for s in steps if s.get("uses", "").startswith("classroom-resources/autograding-command-grader@")]
    assert report["with"]["runners"].split(",") == ids
    assert report["env"] == {f"{i.upper()}_RESULTS": f"${{{{ steps.{i}.outputs.result }}}}" for i in ids}


def _grades(passed: bool, points: float) -> dict:
    check = {"name": "test-5-1-names", "passed": passed, "points": points, "max_points": 1.0, "message": "said"}
    return {"tasks": [{"task": "05-feed-forward", "checks": [check]}]}


def test_a_grade_cell_passes_only_with_its_points(tmp_path, capsys):
    assert classroom_verdict.verdict(_grades(True, 1.0), "05-feed-forward", "test-5-1-names") == (True, "said")
    assert not classroom_verdict.verdict(_grades(False, 0.0), "05-feed-forward", "test-5-1-names")[0]
    assert not classroom_verdict.verdict(_grades(True, 1.0), "05-feed-forward", "test-5-2-names")[0]
    assert not classroom_verdict.verdict(_grades(True, 1.0), "03-self-attention", "test-5-1-names")[0]
    grades = tmp_path / "grades.json"
    grades.write_text(json.dumps(_grades(True, 1.0)))
    assert classroom_verdict.main([str(grades), "05-feed-forward", "test-5-1-names"]) == 0
    assert classroom_verdict.main([str(tmp_path / "none.json"), "05-feed-forward", "test-5-1-names"]) == 1
    assert "could not be graded" in capsys.readouterr().out
