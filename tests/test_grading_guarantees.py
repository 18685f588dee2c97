"""What the honest-grading page promises, end to end: no network, limits from the command line
and from bertlab.toml, and a tampered notebook losing its points under nbgrader autograde too."""

from __future__ import annotations

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

# Loaded by every Python process that has this directory on its path: any connection that is not
# a local socket file fails, as on a machine without a network.
NO_NETWORK = """
import socket

def _refuse(self, address, *args, **kwargs):
    if self.family != socket.AF_UNIX:
        raise OSError("network blocked by the test")
    return _connect(self, address, *args, **kwargs)

_connect = socket.socket.connect
socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
"""

TAMPER = "import bertlab.checks\nbertlab.checks.check = lambda *a, **k: None\ncheck = lambda *a, **k: None\n"


def course(tmp_path: Path, assignment: str, toml: str | None = None) -> Path:
    """A course directory with the sources and the solution of ``assignment`` as the submission."""
    root = tmp_path / "course"
    (root / "solutions").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    shutil.copytree(ROOT / "solutions" / assignment, root / "solutions" / assignment)
    shutil.copytree(ROOT / "solutions" / assignment, root / "submitted" / assignment)
    if toml is not None:
        (root / "bertlab.toml").write_text(toml)
    return root


def grade(
    root: Path, *args: str, env: dict | None = None, path: str = "submitted"
) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "bertlab.cli", "grade", "--path", path, "--json", *args],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
    )
    return proc, json.loads(proc.stdout) if proc.stdout.strip() else {}


def test_grading_needs_no_network(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(NO_NETWORK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])}
    probe = subprocess.run(
        [sys.executable, "-c", "import socket; socket.create_connection(('127.0.0.1', 9), 1)"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert "network blocked by the test" in probe.stderr, "the blocker must be active in child processes"
    root = course(tmp_path, "05-feed-forward")
    proc, report = grade(root, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["score"] == report["max_score"] > 0


@pytest.mark.parametrize("where", ["toml", "command line"])
def test_memory_limit_from_config_and_command_line(tmp_path, where):
    # Importing torch alone takes more than 100 MB: the learner's process is stopped at its first cell.
    toml = "[grade]\nmemory_limit = 100\n" if where == "toml" else "[grade]\nmemory_limit = 8000\n"
    root = course(tmp_path, "05-feed-forward", toml)
    _proc, report = grade(root, *(["--memory-limit", "120"] if where == "command line" else []))
    limit = "100" if where == "toml" else "120"
    (task,) = report["tasks"]
    assert task["status"] == "error" and task["score"] == 0
    assert all(f"more than {limit} MB" in c["message"] for c in task["checks"]), task["checks"]


def test_timeout_from_config(tmp_path):
    root = course(tmp_path, "05-feed-forward", "[grade]\ntimeout = 3\n")
    # A cell that outlasts the limit: a fast machine must not grade the whole notebook within it.
    notebook = root / "submitted" / "05-feed-forward" / "05-feed-forward.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    first_grade_cell = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade"))
    nb.cells.insert(first_grade_cell, nbformat.v4.new_code_cell("import time\ntime.sleep(30)"))
    nbformat.write(nb, notebook)
    _proc, report = grade(root)
    (task,) = report["tasks"]
    assert task["status"] == "timeout" and task["score"] < task["max_score"]
    assert "timed out after 3 s" in task["checks"][-1]["message"]


def test_bad_settings_file_is_named(tmp_path):
    root = course(tmp_path, "05-feed-forward", "[grade]\ntimeout = -1\n")
    proc, _ = grade(root)
    assert proc.returncode == 2
    assert "bertlab.toml: grade.timeout must be a positive number" in proc.stderr


def _tampered(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    index = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "bert-output")
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(TAMPER))
    nbformat.write(nb, path)


def test_tampered_notebook_loses_its_points_under_nbgrader_autograde(tmp_path):
    """The right solution plus a cell that disables `check`: 0 points from both graders, with the reason."""
    root = course(tmp_path, "05-feed-forward")
    submission = root / "instructor" / "submitted" / "alice" / "05-feed-forward"  # nbgrader_config.py's
    submission.parent.mkdir(parents=True)
    shutil.move(root / "submitted" / "05-feed-forward", submission)
    _tampered(submission / "05-feed-forward.ipynb")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    for step in ("generate_assignment", "autograde"):  # the first registers the assignment in the gradebook
        nbgrader = subprocess.run(
            [sys.executable, "-m", "nbgrader", step, "05-feed-forward", "--force"],
            cwd=root,
            capture_output=True,
            text=True,
            env=env,
        )
        assert nbgrader.returncode == 0, nbgrader.stderr[-3000:]
    graded = nbformat.read(
        root / "instructor" / "autograded" / "alice" / "05-feed-forward" / "05-feed-forward.ipynb", as_version=4
    )
    outputs = [c.outputs for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert outputs and all(o and o[0].output_type == "error" and "changes the grader" in o[0].evalue for o in outputs)

    _proc, report = grade(root, env=env, path="instructor/submitted/alice")
    (task,) = report["tasks"]
    assert task["score"] == 0 and task["max_score"] > 0
    assert all("changes the grader" in c["message"] for c in task["checks"])
