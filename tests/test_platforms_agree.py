"""nbgrader, Gradescope and GitHub Classroom give the same points to the same notebooks.

A right, a wrong (Task 5.1 done, 5.2 left as released) and a malformed (not a notebook) hand-in
of 05-feed-forward are graded three ways: by ``bertlab autograde`` into an nbgrader gradebook; by
the Gradescope autograder ``bertlab gradescope`` writes, run as Gradescope runs it
(``gradescope_emulation``), its results.json checked against the schema written from
Gradescope's specification; and by the workflow ``bertlab classroom`` writes, its grading step
and each of its command-grader tests run as a runner would in a learner's repository (the hidden
tests' sources checked out beside ``exercises/``, as the workflow does when the classroom has
them), a test earning its ``max-score`` when its command exits 0, as Classroom's command grader
gives it. The totals must be equal, and Gradescope's and Classroom's points equal per grade cell.

Not run here: Gradescope's image build (setup.sh, checked statically in test_gradescope.py) and
GitHub's runner (the workflow is linted in test_classroom.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from bertlab import cli
from tests import class_submissions
from tests import gradescope_emulation as emulation
from tests.class_submissions import SUBMITTED, graded_course
from tests.submissions import FFN, ROOT, max_points, right

pytestmark = pytest.mark.slow  # every hand-in is graded end to end, three ways

ASSIGNMENT = FFN
COMMAND_GRADER = "classroom-resources/autograding-command-grader@v1"


@pytest.fixture(scope="module")
def hand_ins() -> dict[str, bytes]:
    return {
        "right": nbformat.writes(right(ASSIGNMENT)).encode(),
        "wrong": nbformat.writes(class_submissions._partial_ffn()).encode(),
        "malformed": b"this is not a notebook",
    }


def by_nbgrader(tmp: Path, hand_ins: dict[str, bytes], capsys) -> dict[str, float]:
    course = graded_course(tmp / "course", ASSIGNMENT, {})
    for student, data in hand_ins.items():
        folder = course / SUBMITTED / student / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / f"{ASSIGNMENT}.ipynb").write_bytes(data)
    capsys.readouterr()
    assert cli.main(["autograde", "--course", str(course), "--json"]) == 0
    return {o["student"]: o["score"] for o in json.loads(capsys.readouterr().out)}


def by_gradescope(tmp: Path, hand_ins: dict[str, bytes]) -> dict[str, dict[str, float]]:
    assert cli.main(["gradescope", ASSIGNMENT, "--course", str(ROOT), "--out-dir", str(tmp)]) == 0
    root = emulation.lay_out(tmp / f"{ASSIGNMENT}-gradescope.zip", tmp / "autograder")
    scores = {}
    for student, data in hand_ins.items():
        emulation.submit(root, {f"{ASSIGNMENT}.ipynb": data})
        results = emulation.run(root)
        assert results["score"] == sum(t["score"] for t in results["tests"]), results
        scores[student] = {t["extra_data"]["grade_id"]: t["score"] for t in results["tests"]}
    return scores


def by_classroom(tmp: Path, hand_ins: dict[str, bytes]) -> dict[str, dict[str, float]]:
    workflow = tmp / "classroom.yml"
    assert cli.main(["classroom", ASSIGNMENT, "--course", str(ROOT), "--out", str(workflow)]) == 0
    steps = yaml.safe_load(workflow.read_text())["jobs"]["grade"]["steps"]
    (grading,) = [s for s in steps if s.get("name") == "Grade the notebooks"]
    tests = [s for s in steps if s.get("uses") == COMMAND_GRADER]
    scores: dict[str, dict[str, float]] = {}
    for student, data in hand_ins.items():
        repo, runner_temp = tmp / student / "repo", tmp / student / "runner-temp"
        runner_temp.mkdir(parents=True)
        (repo / "exercises" / ASSIGNMENT).mkdir(parents=True)
        (repo / "exercises" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").write_bytes(data)
        shutil.copytree(ROOT / "solutions" / ASSIGNMENT, repo / "solutions" / ASSIGNMENT)
        shutil.copy(ROOT / "nbgrader_config.py", repo)
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "RUNNER_TEMP": str(runner_temp),
            "HF_HUB_OFFLINE": "1",
        }
        ran = subprocess.run(["bash", "-e", "-c", grading["run"]], cwd=repo, env=env, capture_output=True, text=True)
        assert ran.returncode == 0, ran.stderr
        scores[student] = {}
        for test in tests:
            command = test["with"]["command"].replace("${{ runner.temp }}", str(runner_temp))
            verdict = subprocess.run(["bash", "-c", command], cwd=repo, env=env, capture_output=True, text=True)
            grade_id = command.split()[-1]
            scores[student][grade_id] = float(test["with"]["max-score"]) if verdict.returncode == 0 else 0.0
    return scores


def test_nbgrader_gradescope_and_classroom_give_the_same_points(tmp_path, hand_ins, capsys):
    nbgrader = by_nbgrader(tmp_path / "nbgrader", hand_ins, capsys)
    gradescope = by_gradescope(tmp_path / "gradescope", hand_ins)
    classroom = by_classroom(tmp_path / "classroom", hand_ins)
    totals = {
        student: (nbgrader[student], sum(gradescope[student].values()), sum(classroom[student].values()))
        for student in hand_ins
    }
    assert all(len(set(three)) == 1 for three in totals.values()), totals
    assert gradescope == classroom
    # The three kinds of hand-in are told apart: all the points, some, none.
    assert totals["right"][0] == max_points(ASSIGNMENT) > totals["wrong"][0] > totals["malformed"][0] == 0, totals
