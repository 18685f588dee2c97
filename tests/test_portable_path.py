"""The portable path grades as the Linux path does, with what macOS lacks removed from every process.

Each grading below is a ``bertlab grade --cold`` command on the portable path: the bad submissions
that exercise the process machinery (``os._exit``, ``sys.exit``, endless loops, runaway memory),
and the course's solutions and released exercises (``test_grading.py`` grades them on the Linux
path), the latter under the ``default`` kernel set and one thread, so that the one grading of the
course proves both that the portable path and a learner's oldest kernels give full marks
(``test_grades_under_kernels.py`` relies on it). The portable verdicts must be right, and equal to
the Linux path's: the same points and messages for every grade cell. The Linux path's verdicts are
the bad-submission runs' (``tests/bad_submission_runs.py``: the same ``grade()`` with the same
options, graded once for both modules), not a second grading of the same cases. Warm judges,
``--watch`` and Ctrl-C on the portable path are tested with the Linux path's tests, parametrized by
path (``test_warm_judges.py``, ``test_watch.py``).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.bad_submission_runs import GROUP, OPTIONS, Graded
from tests.conftest import ROOT
from tests.grading_paths import PATHS, gone_within, judge_of, path_env, processes_with
from tests.kernels import Condition
from tests.submissions import CASES, build_course
from tests.test_bad_submissions import describe, problems_with

# In the bad submissions' group: the Linux path's verdicts are their runs, graded on this worker.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.xdist_group(GROUP)]

TASKS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())
PROCESS_CASES = {
    "right-feed-forward",
    "os-exit-in-cell",
    "os-exit-in-forward",
    "sys-exit-in-cell",
    "sys-exit-in-forward",
    "right-beside-limits",
    "infinite-loop-in-cell",
    "infinite-loop-in-forward",
    "runaway-memory",
}
MARKER = "BERTLAB_TEST_RUN"
# The course's own notebooks are graded under the kernel set furthest from this CPU's own (every
# other grading of the suite runs under that one): see the module's docstring.
COURSE_CONDITION = Condition("default", 1)


def digest(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """``main``: the bad submissions that end by themselves; ``limits``: those that end at a
    limit; ``course``: the course's notebooks, untouched, each task's solution and released
    exercise side by side (``solutions-<task>``, ``exercises-<task>``): one grading for both."""
    root = tmp_path_factory.mktemp("course")
    cases = [c for c in CASES if c.name in PROCESS_CASES]
    assert {c.name for c in cases} == PROCESS_CASES, "a process case was renamed: update this test"
    runs = build_course(root, cases)
    # Not in root/solutions: build_course keeps there the sources its cases are restored from.
    for task in TASKS:
        for kind in KINDS:
            shutil.copytree(ROOT / kind / task, root / COURSE / f"{kind}-{task}")
    return {**runs, COURSE: root / COURSE}


COURSE = "course"  # the run of the course's own notebooks
KINDS = ("solutions", "exercises")  # what it grades of each task


def grade(folder: Path, path: str, run: str) -> dict:
    """``bertlab grade --cold`` on ``path``: its JSON report; fails if it changed a submitted file
    or left a process running."""
    marker = uuid.uuid4().hex
    options = {**OPTIONS["main"], **OPTIONS.get(run, {})}
    args = [
        "grade",
        "--cold",
        "--path",
        str(folder),
        "--json",
        "--no-progress",
        "--jobs",
        "2",
        "--timeout",
        f"{options['timeout']:g}",
    ]
    if options["memory_mb"]:
        args += ["--memory-limit", f"{options['memory_mb']:g}"]
    before = digest(folder)
    proc = subprocess.run(
        [sys.executable, "-m", "bertlab.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**path_env(path, COURSE_CONDITION.env() if run == COURSE else None), MARKER: marker},
        timeout=1200,
    )
    assert proc.stdout.strip(), f"no report on the {path} path:\n{proc.stderr[-3000:]}"
    assert digest(folder) == before, f"grading on the {path} path changed or added files under {folder}"
    left = gone_within(MARKER, marker, 10)  # a learner's watchdog ends it as its judge ends: moments later
    assert not left, f"the {path} path left processes behind: {left}"
    return {t["task"]: t for t in json.loads(proc.stdout)["tasks"]}


@pytest.fixture(scope="module")
def graded(folders) -> dict[tuple[str, str], dict]:
    """Each run on the portable path (the Linux path's are the bad submissions' runs; its full
    marks and zeros for the course are ``test_grading.py``'s)."""
    assert PATHS == ("linux", "portable"), PATHS
    return {("portable", run): grade(folder, "portable", run) for run, folder in folders.items()}


def verdict(task: dict) -> list[tuple]:
    return [(c["name"], c["points"], c["max_points"], c["message"]) for c in task["checks"]]


def test_the_emulation_removes_what_macos_lacks():
    """What the portable path is tested without is really gone from a process of the run."""
    probe = (
        "import ctypes, os, sys\n"
        "from bertlab.grading import platforms\n"
        "missing = [n for n in ('pidfd_open', 'fork') if not hasattr(os, n)]\n"
        "for n in ('prctl', 'syscall'):\n"
        "    try:\n        getattr(ctypes.CDLL(None), n)\n"
        "    except AttributeError:\n        missing.append(n)\n"
        "print(platforms.current().name, sorted(missing))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=path_env("portable"), capture_output=True, text=True, check=True
    ).stdout.split(maxsplit=1)
    assert out == ["portable", "['fork', 'pidfd_open', 'prctl', 'syscall']\n"]


@pytest.mark.parametrize("task", TASKS)
def test_solutions_score_full_marks_and_exercises_zero_on_the_portable_path_under_default_kernels(graded, task):
    right, stubs = (graded["portable", COURSE][f"{kind}-{task}"] for kind in KINDS)
    where = f"on the portable path, under {COURSE_CONDITION.name}"
    assert right["status"] == "passed" and right["score"] == right["max_score"] > 0, (where, verdict(right))
    assert stubs["score"] == 0 and stubs["max_score"] == right["max_score"], (where, verdict(stubs))


@pytest.mark.parametrize("case", [c for c in CASES if c.name in PROCESS_CASES], ids=lambda c: c.folder)
def test_process_cases_get_their_verdict_on_the_portable_path(graded, case):
    from bertlab.grading.results import CheckResult
    from bertlab.grading.runner import TaskResult

    task = graded["portable", case.run][case.folder]
    result = TaskResult(
        task["task"], task["score"], task["max_score"], task["status"], [CheckResult(**c) for c in task["checks"]]
    )
    problems = problems_with(case, result)
    assert not problems, f"{case.why}\n\n" + "\n".join(problems) + "\n\n" + describe(result)


def linux_verdicts(run: Graded, names) -> dict[str, dict]:
    """The Linux path's report of ``names`` in a bad-submission run, shaped as the JSON report."""
    return {
        name: {"status": t.status, "checks": [dataclasses.asdict(c) for c in t.checks]}
        for name, t in run.tasks.items()
        if name in names
    }


@pytest.mark.parametrize("run", ["main", "limits"])
def test_both_paths_give_the_same_points_and_messages(graded, run, request):
    portable = graded["portable", run]
    linux = linux_verdicts(request.getfixturevalue(f"{run}_run"), set(portable))
    assert sorted(linux) == sorted(portable)
    # Runaway memory is stopped when a reading first exceeds the limit: where in the notebook
    # that falls depends on timing on either path, so only its end is compared.
    timing = {c.folder for c in CASES if c.name == "runaway-memory"}
    differ = {
        name: (verdict(linux[name]), verdict(portable[name]))
        for name in linux
        if name not in timing and verdict(linux[name]) != verdict(portable[name])
    }
    assert not differ, f"the paths disagree: {differ}"
    for name in timing & set(linux):
        assert linux[name]["status"] == portable[name]["status"], (verdict(linux[name]), verdict(portable[name]))


# --- no Linux-only interface outside the platform module ---------------------------------------

PLATFORM_LINUX = ROOT / "src" / "bertlab" / "grading" / "platforms" / "linux"
LINUX_ONLY_ATTRIBUTES = {"fork", "forkpty", "pidfd_open", "prctl", "syscall", "malloc_trim", "CDLL"}


def linux_only_uses(path: Path) -> list[str]:
    """Where ``path`` calls a Linux-only interface: ``os.fork``, pidfd, libc's prctl, raw
    syscalls, glibc's malloc_trim, a libc loaded through ctypes, or a path under ``/proc``.
    Docstrings may name them; code may not."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in LINUX_ONLY_ATTRIBUTES:
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and node.value.startswith("/proc")
        ):
            found.append(f"{path.name}:{node.lineno} {node.value!r}")
    return found


def test_grading_code_outside_the_platform_module_touches_no_linux_only_interface():
    outside = [p for p in (ROOT / "src" / "bertlab").rglob("*.py") if PLATFORM_LINUX not in p.parents]
    assert len(outside) > 50
    found = [use for path in outside for use in linux_only_uses(path)]
    assert not found, f"Linux-only interfaces outside {PLATFORM_LINUX.relative_to(ROOT)}: {found}"


def test_the_scan_finds_each_interface_where_the_linux_module_uses_it():
    """The scan above can fail: it finds every kind of use in the module that is allowed them."""
    found = " ".join(use for path in PLATFORM_LINUX.glob("*.py") for use in linux_only_uses(path))
    for needle in (".fork", ".pidfd_open", ".prctl", ".syscall", ".malloc_trim", "'/proc/"):
        assert needle in found, f"the scan does not see {needle} in the Linux module: {found}"


@pytest.mark.parametrize("path", PATHS)
def test_a_judge_killed_mid_notebook_costs_that_notebook_only_and_leaves_no_process(tmp_path, path):
    """The judge grading a notebook is killed outright: the command still ends, that notebook is
    reported as an error, and the process running its cells (looping forever) ends with its judge:
    on Linux by the kernel's parent-death signal, on the portable path by its watchdog."""
    import time

    import nbformat
    import psutil

    task = "05-feed-forward"
    (tmp_path / task).mkdir()
    nb = nbformat.read(ROOT / "solutions" / task / f"{task}.ipynb", as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell("while True:\n    pass"))
    nbformat.write(nb, tmp_path / task / f"{task}.ipynb")
    marker = uuid.uuid4().hex
    client = subprocess.Popen(
        [sys.executable, "-m", "bertlab.cli", "grade", "--cold", "--path", str(tmp_path), "--json", "--no-progress"],
        cwd=ROOT,
        env={**path_env(path), MARKER: marker},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline, looping = time.monotonic() + 120, []
        while not looping and time.monotonic() < deadline:
            time.sleep(0.2)
            looping = [p for p in processes_with(MARKER, marker) if Path(p.cwd()).name == "work"]
        assert looping, "the looping notebook never started"
        judge = judge_of(looping[0], client.pid, path)
        assert "bertlab.grading" in " ".join(judge.cmdline()), judge.cmdline()
        judge.kill()
        out, _err = client.communicate(timeout=120)
    finally:
        client.kill()
    report = json.loads(out)["tasks"][0]
    assert report["status"] == "error" and report["score"] == 0, report
    assert "the grading process died" in report["checks"][0]["message"], report["checks"][0]["message"]
    left = gone_within(MARKER, marker, 10)
    assert not left, left
    _, alive = psutil.wait_procs(looping, timeout=10)  # a killed process may take a moment to be torn down
    assert not alive, "the looping notebook's process outlived its judge"
