"""`bertlab grade` end to end: real CLI, real notebooks, isolated workers."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def bertlab(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertlab.cli", *args], cwd=cwd, capture_output=True, text=True)


def digest(folder: Path) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_solutions_score_full_marks():
    proc = bertlab("grade", "--path", "solutions", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["score"] == report["max_score"] > 0
    for task in report["tasks"]:
        assert task["status"] == "passed"
        assert all(c["passed"] and c["mistake"] is None for c in task["checks"])


def test_untouched_exercises_score_zero_without_tracebacks():
    before = digest(ROOT / "exercises")
    proc = bertlab("grade", "--json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["score"] == 0 and report["max_score"] > 0
    for task in report["tasks"]:
        assert task["status"] == "failed"
        for check in task["checks"]:
            assert "not implemented yet" in check["message"], check["message"]
            assert "Traceback" not in check["message"]
    assert "Traceback" not in proc.stderr
    assert digest(ROOT / "exercises") == before, "grading must never write to the learner's files"


def test_table_output_and_task_selection():
    proc = bertlab("grade", "03")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["notebook", "score", "status"]
    assert any(line.startswith("03-self-attention") and "failed" in line for line in lines)
    assert "[Task 3.1] eager_attention_forward: not implemented yet" in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [(["99"], "no task matches '99'"), (["--path", "nowhere"], "nowhere is not a directory")],
)
def test_nothing_to_grade_exits_2(args, message):
    proc = bertlab("grade", *args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_broken_notebooks_never_stop_the_others(tmp_path):
    """A corrupt file and a deleted grade cell each cost only their own task."""
    course = tmp_path / "course"
    shutil.copytree(ROOT / "solutions", course / "solutions")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    work = course / "work"
    source = ROOT / "solutions" / "03-self-attention" / "03-self-attention.ipynb"

    def variant(name: str, edit) -> None:
        nb = nbformat.read(source, as_version=4)
        edit(nb)
        (work / name).mkdir(parents=True)
        nbformat.write(nb, work / name / f"{name}.ipynb")

    variant("03-self-attention", lambda nb: None)  # right: full marks
    variant("05-deleted", lambda nb: nb.cells.pop(4))  # the first grade cell
    (work / "06-corrupt").mkdir()
    (work / "06-corrupt" / "06-corrupt.ipynb").write_text("{ not json")
    # 05-deleted has no source under solutions/, so copy one in for the restore to find
    shutil.copytree(course / "solutions" / "03-self-attention", course / "solutions" / "05-deleted")
    (course / "solutions" / "05-deleted" / "03-self-attention.ipynb").rename(
        course / "solutions" / "05-deleted" / "05-deleted.ipynb"
    )

    proc = bertlab("grade", "--path", str(work), "--json", cwd=course)
    assert proc.returncode == 1, proc.stderr
    status = {t["task"]: t for t in json.loads(proc.stdout)["tasks"]}
    assert status["03-self-attention"]["status"] == "passed"
    assert status["06-corrupt"]["status"] == "error"
    assert "not a valid notebook" in status["06-corrupt"]["checks"][0]["message"]
    deleted = status["05-deleted"]
    assert deleted["status"] == "failed"
    assert deleted["max_score"] == status["03-self-attention"]["max_score"]
    assert [c["message"] for c in deleted["checks"] if not c["passed"]] == [
        "this grade cell was deleted from your notebook; copy it back from the release"
    ]


def test_every_command_has_help():
    for args in ([], ["grade"], ["doctor"], ["release"]):
        proc = bertlab(*args, "--help")
        assert proc.returncode == 0 and "usage: bertlab" in proc.stdout


def test_doctor_reports_ok():
    proc = bertlab("doctor")
    assert proc.returncode == 0, proc.stdout
    assert "weights sha256" in proc.stdout and "matches the bundled weights" in proc.stdout
    assert "CPU kernels" in proc.stdout


def test_doctor_names_the_cpu_kernels_in_use():
    """The kernel set decides a number's last bits: a learner's report must say which one ran."""
    import torch

    from bertlab import doctor

    assert (
        f"{torch.backends.cpu.get_cpu_capability()} (" in doctor.cpu_kernels()[2] or "ATEN_CPU_CAPABILITY" in os.environ
    )
    proc = subprocess.run(
        [sys.executable, "-c", "from bertlab import doctor; print(doctor.cpu_kernels()[2])"],
        env={**os.environ, "ATEN_CPU_CAPABILITY": "default"},
        capture_output=True,
        text=True,
    )
    assert proc.stdout.startswith("DEFAULT (ATEN_CPU_CAPABILITY=default)"), proc.stdout + proc.stderr


def test_a_hanging_notebook_is_killed_at_its_timeout(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import time\ntime.sleep(600)")]
    grade_cell = nbformat.v4.new_code_cell("assert True")
    grade_cell.metadata["nbgrader"] = {"grade": True, "grade_id": "test-hang", "points": 1, "solution": False}
    nb.cells.append(grade_cell)
    (tmp_path / "01-hang").mkdir()
    nbformat.write(nb, tmp_path / "01-hang" / "01-hang.ipynb")
    proc = bertlab("grade", "--path", str(tmp_path), "--json", "--timeout", "3")
    task = json.loads(proc.stdout)["tasks"][0]
    assert proc.returncode == 1
    assert (task["status"], task["score"], task["max_score"]) == ("timeout", 0, 1)
    # The cell that was running, not the grade cell it stopped; and no advice meant for whoever
    # sets the limit (the message reaches a learner as nbgrader feedback).
    # Named as the learner finds it: by its first line (a count of cells would include the text ones).
    assert task["checks"][0]["message"] == "timed out after 3 s (the cell that starts `import time` was running)"
    assert task["checks"][0]["cause"] == "timeout"  # what the table's advice reads


def test_the_advice_to_raise_a_limit_is_in_the_table_not_the_verdict():
    from bertlab.grading.results import CheckResult
    from bertlab.grading.runner import Report, TaskResult
    from bertlab.grading.table import render

    stopped = CheckResult("test-hang", False, 0.0, 1.0, "timed out after 3 s (cell 1 was running)", cause="timeout")
    table = render(Report([TaskResult("01-hang", 0.0, 1.0, "timeout", [stopped])]))
    assert "--timeout SECONDS" in table and "--timeout" not in stopped.message
    assert "--memory-limit" not in table
    full = CheckResult("test-big", False, 0.0, 1.0, "stopped: your code used more than 9 MB of memory", cause="memory")
    table = render(Report([TaskResult("01-big", 0.0, 1.0, "error", [full])]))
    assert "--memory-limit MB" in table and "--timeout" not in table
    # the advice follows the verdict's cause, not its words: the same words without it give none
    worded = CheckResult("test-hang", False, 0.0, 1.0, "timed out after 3 s (cell 1 was running)")
    assert "--timeout" not in render(Report([TaskResult("01-hang", 0.0, 1.0, "failed", [worded])]))
    assert "--timeout" not in render(Report([TaskResult("01-ok", 1.0, 1.0, "passed", [])]))


def test_cells_after_the_last_grade_cell_are_not_run(tmp_path):
    """They cannot change a grade: a closing cell that would hang costs neither time nor points."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("answer = 42")]
    grade_cell = nbformat.v4.new_code_cell("assert answer == 42")
    grade_cell.metadata["nbgrader"] = {"grade": True, "grade_id": "test-answer", "points": 1, "solution": False}
    nb.cells += [grade_cell, nbformat.v4.new_code_cell("import time\ntime.sleep(600)")]
    (tmp_path / "01-tail").mkdir()
    nbformat.write(nb, tmp_path / "01-tail" / "01-tail.ipynb")
    proc = bertlab("grade", "--path", str(tmp_path), "--json", "--timeout", "20", "--cold")
    task = json.loads(proc.stdout)["tasks"][0]
    assert (task["status"], task["score"], task["max_score"]) == ("passed", 1, 1), proc.stdout


@pytest.mark.parametrize("columns", [60, 100, 160])
def test_the_grade_table_fits_the_terminal_rules_included(monkeypatch, columns):
    """Every row and rule of the table fits the terminal's width: a long first message is cut,
    and a rule is as wide as the widest row, not wider."""
    from bertlab.grading.results import CheckResult
    from bertlab.grading.runner import Report, TaskResult
    from bertlab.grading.table import render

    monkeypatch.setenv("COLUMNS", str(columns))
    long = CheckResult("test-5-1-values", False, 0.0, 2.0, "[Task 5.1] BertIntermediate: values differ " * 5)
    tasks = [
        TaskResult("05-feed-forward", 0.0, 9.0, "failed", [long]),
        TaskResult("02-embeddings", 4.0, 4.0, "passed", []),
    ]
    table = render(Report(tasks)).split("\n\n")[0].splitlines()
    assert all(len(line) <= columns for line in table), [len(line) for line in table]
    rules = [line for line in table if set(line) == {"-"}]
    assert len(rules) == 2 and all(len(rule) == max(len(line) for line in table) for rule in rules)
