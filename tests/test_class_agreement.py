"""One class, four graders, the same score per grade cell.

A class of 20 submissions (tests/class_submissions.py) is graded by
- ``bertlab grade``;
- ``nbgrader autograde`` with the repository's nbgrader_config.py (its gradebook);
- ``bertlab autograde`` (its gradebook, in a second copy of the course);
- ``bertlab autograde --scheduler`` on a Dask cluster of two single-worker processes on loopback,
  started with Dask's own commands as the instructor guide says (its gradebook, in a third copy);
  its gradebook export must equal the local one's too.

Every grade cell of every submission gets the same points from all four. The notebooks' own grade
cells, run in nbgrader's kernel, are no fifth grader: that kernel is confined as the judge's
learner process is, and its ``check`` defers to the judge. The submission that hangs is graded on
its own, with a 10 s limit, in each grader.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.class_submissions import roster, write_class, write_course, write_grade_view
from tests.conftest import ROOT
from tests.dask_loopback import log_tail, loopback_cluster

# nbgrader autograde runs every submission in a kernel, then judges it: about 10 s each on a quiet
# two-core machine, many times that on a busy one.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("class-agreement"), pytest.mark.timeout(2400)]

HANG_LIMIT = 10  # seconds: the hanging submission's limit, in every grader
TIMINGS: dict[str, float] = {}
LOGS: dict[str, str] = {}  # command -> its warnings and errors (shown when its grades differ)


def _env() -> dict:
    # PYTHONPATH: nbgrader imports the test's kernel recorder from tests/.
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }


def _run(name: str, args: list[str], cwd: Path, ok=(0,)) -> subprocess.CompletedProcess:
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=_env())
    TIMINGS[name] = TIMINGS.get(name, 0.0) + time.perf_counter() - start
    assert proc.returncode in ok, f"{' '.join(args[2:])} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc


def _run_together(name: str, commands: list[tuple[list[str], Path]]) -> None:
    """Run (command, directory) pairs at once; each exits 0, or 1 when a submission could not be read."""
    start = time.perf_counter()
    procs = [
        subprocess.Popen(c, cwd=cwd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for c, cwd in commands
    ]
    errors = [(c, p.communicate()[1], p.returncode) for (c, _), p in zip(commands, procs, strict=True)]
    TIMINGS[name] = TIMINGS.get(name, 0.0) + time.perf_counter() - start
    for command, stderr, code in errors:
        LOGS[" ".join(command[2:])] = "\n".join(line for line in stderr.splitlines() if "| INFO]" not in line)[-6000:]
        assert code in (0, 1), f"{' '.join(command[2:])} exited {code}:\n{stderr[-4000:]}"


def _nbgrader(*args: str) -> list[str]:
    return [sys.executable, "-m", "nbgrader", *args]


def _bertlab(*args: str) -> list[str]:
    return [sys.executable, "-m", "bertlab.cli", *args]


def _gradebook_scores(course: Path, students) -> dict[str, dict[str, float]]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course}/instructor/gradebook.db", "bertlab") as gb:
        return {
            s.id: {g.name: float(g.score) for g in gb.find_submission_notebook(s.assignment, s.assignment, s.id).grades}
            for s in students
        }


def _cell_points(assignment: str) -> dict[str, float]:
    """Grade id -> points of the assignment's grade cells, from its nbgrader source."""
    import nbformat

    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    return {
        c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"])
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade")
    }


def _grade_ids(assignment: str) -> list[str]:
    return list(_cell_points(assignment))


# Session-wide: xdist may run other modules' tests between this module's, which would tear a
# module fixture down and build it again (grading the class twice costs minutes).
@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """The class graded four ways: {way: {student: {grade id: points}}}, and the courses."""
    students = roster()
    hang = [s for s in students if s.member.hangs]
    assignments = sorted({s.assignment for s in students})
    base = tmp_path_factory.mktemp("class")
    # nbgrader: one course per assignment (each its own gradebook), so the two runs can go side by
    # side, one per core, without sharing a database; bertlab: the whole class in one course.
    nbgrader_courses = {name: write_course(base / f"nbgrader-{name}", {name}) for name in assignments}
    bertlab_course = write_course(base / "bertlab", set(assignments))
    for name, course in nbgrader_courses.items():
        _run("generate_assignment", _nbgrader("generate_assignment", name, "--force"), course)
        write_class(course, [s for s in students if s.assignment == name])
    for name in assignments:  # records each assignment's grade cells in the gradebook
        _run("generate_assignment", _nbgrader("generate_assignment", name, "--force"), bertlab_course)
    write_class(bertlab_course, students)
    cluster_course = base / "bertlab-cluster"  # the same course, gradebook and submissions
    shutil.copytree(bertlab_course, cluster_course)

    # nbgrader autograde grades one submission after another (a submission it cannot read makes it
    # exit 1); the hanging one on its own, with short limits for the kernel and the judge.
    others = f"--CourseDirectory.student_id_exclude={','.join(s.id for s in hang)}"
    _run_together(
        "nbgrader autograde",
        [(_nbgrader("autograde", name, "--force", others), course) for name, course in nbgrader_courses.items()],
    )
    for s in hang:
        _run(
            "nbgrader autograde",
            _nbgrader(
                "autograde",
                s.assignment,
                "--force",
                f"--student={s.id}",
                f"--Execute.timeout={HANG_LIMIT}",
                f"--JudgeVerdicts.timeout={HANG_LIMIT}",
            ),
            nbgrader_courses[s.assignment],
            ok=(0, 1),
        )

    # bertlab autograde: the hanging one first with the short limit; the second run leaves it alone
    # (unchanged since) and grades everyone else.
    for s in hang:
        _run(
            "bertlab autograde",
            _bertlab("autograde", "--course", str(bertlab_course), "--student", s.id, "--timeout", str(HANG_LIMIT)),
            ROOT,
        )
    rest = _run(
        "bertlab autograde", _bertlab("autograde", "--course", str(bertlab_course), "--jobs", "2", "--json"), ROOT
    )
    second_run = {o["student"]: o for o in json.loads(rest.stdout)}

    # The same two runs on a Dask cluster: the judges on its workers, the gradebook written here.
    # One thread of BLAS per judge, as on this machine's two jobs: the two workers share two cores.
    with loopback_cluster(2, base, env={"OMP_NUM_THREADS": "1"}) as scheduler:
        try:
            for s in hang:
                _run(
                    "bertlab autograde --scheduler",
                    _bertlab(
                        "autograde",
                        "--course",
                        str(cluster_course),
                        "--student",
                        s.id,
                        "--timeout",
                        str(HANG_LIMIT),
                        "--scheduler",
                        scheduler,
                    ),
                    ROOT,
                )
            _run(
                "bertlab autograde --scheduler",
                _bertlab("autograde", "--course", str(cluster_course), "--scheduler", scheduler),
                ROOT,
            )
        except AssertionError as err:
            raise AssertionError(f"{err}\n{log_tail(base)}") from None

    # bertlab grade: the class as task folders, the hanging one in a run of its own.
    view = write_grade_view(base / "grade", [s for s in students if not s.member.hangs])
    report = json.loads(
        _run("bertlab grade", _bertlab("grade", "--path", str(view), "--json"), base / "grade", ok=(0, 1)).stdout
    )
    hang_view = write_grade_view(base / "grade-hang", hang)
    report["tasks"] += json.loads(
        _run(
            "bertlab grade",
            _bertlab("grade", "--path", str(hang_view), "--json", "--timeout", str(HANG_LIMIT)),
            base / "grade-hang",
            ok=(0, 1),
        ).stdout
    )["tasks"]

    ways = {
        "bertlab grade": {t["task"]: {c["name"]: c["points"] for c in t["checks"]} for t in report["tasks"]},
        "nbgrader autograde": {
            k: v
            for name, course in nbgrader_courses.items()
            for k, v in _gradebook_scores(course, [s for s in students if s.assignment == name]).items()
        },
        "bertlab autograde": _gradebook_scores(bertlab_course, students),
        "bertlab autograde --scheduler": _gradebook_scores(cluster_course, students),
    }
    print("\nclass agreement timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in TIMINGS.items()))
    return {
        "students": students,
        "ways": ways,
        "nbgrader": nbgrader_courses,
        "bertlab": bertlab_course,
        "cluster": cluster_course,
        "second_run": second_run,
    }


def _cells(ways: dict, student) -> dict[str, dict[str, float]]:
    """way -> grade id -> points, over every grade cell of the student's assignment (missing: 0)."""
    return {
        way: {g: float(scores[student.id].get(g, 0.0)) for g in _grade_ids(student.assignment)}
        for way, scores in ways.items()
    }


def test_class_is_the_one_asked_for(graded):
    students = graded["students"]
    assert len(students) >= 20
    names = {s.member.name for s in students}
    for needed in (
        "complete",
        "partial",
        "untouched",
        "not-json",
        "import-fails",
        "grade-cell-deleted",
        "tamper-rebind-check",
        "hangs",
    ):
        assert needed in names, needed
    totals = {s.id: sum(_cells(graded["ways"], s)["bertlab grade"].values()) for s in students}
    # Not a vacuous agreement: full marks, nothing, and partial scores all occur.
    complete = [s for s in students if s.member.name == "complete"]
    assert complete and all(totals[s.id] == sum(_cell_points(s.assignment).values()) for s in complete), totals
    assert all(totals[s.id] == 0 for s in students if s.member.name == "untouched"), totals
    assert len(set(totals.values())) >= 4, totals


@pytest.mark.parametrize("index", range(len(roster())), ids=[s.id for s in roster()])
def test_same_score_per_grade_cell(graded, index):
    student = graded["students"][index]
    cells = _cells(graded["ways"], student)
    judged = cells["bertlab grade"]
    logs = "\n".join(f"{command}:\n{tail}" for command, tail in LOGS.items() if student.assignment in command)
    assert cells["nbgrader autograde"] == judged, f"{cells}\n{logs}"
    assert cells["bertlab autograde"] == judged, cells
    assert cells["bertlab autograde --scheduler"] == judged, cells
    # nbgrader's kernel is confined now, as the judge's learner process is: the notebook's own
    # `check` there defers to the judge (it says so and passes), so the kernel's record of the grade
    # cells is no verdict to compare; the judge's, above, is the one nbgrader keeps.


def _export(course: Path) -> list[tuple]:
    """The rows ``nbgrader export`` writes for ``course``: (assignment, student, score, max score)."""
    _run("nbgrader export", _nbgrader("export", "--to", "instructor/grades.csv"), course)
    with open(course / "instructor" / "grades.csv") as f:
        return [(r["assignment"], r["student_id"], r["score"], r["max_score"]) for r in csv.DictReader(f)]


def _autograded(course: Path) -> list[str]:
    return [
        p.relative_to(course / "instructor" / "autograded").as_posix()
        for p in (course / "instructor" / "autograded").glob("*/*/*.ipynb")
    ]


def test_bertlab_autograde_export_equals_nbgrader_autograde_export(graded):
    nbgrader_courses = graded["nbgrader"].values()
    expected = sorted(row for course in nbgrader_courses for row in _export(course))
    assert len(expected) == len(graded["students"])
    # nbgrader exports a row for every student and assignment of a gradebook, handed in or not: the
    # single bertlab course lists each student under both assignments, the missing one at 0.
    handed_in = {(s.assignment, s.id) for s in graded["students"]}
    assert sorted(row for row in _export(graded["bertlab"]) if row[:2] in handed_in) == expected
    # The same autograded notebooks (none for the file that is not a notebook, under both), but for
    # the one that hangs: nbgrader keeps or removes the copy of a submission whose kernel it had to
    # stop, depending on where the stop fell; bertlab autograde keeps it, with "timed out" as the
    # grade cells' outputs (the same 0 points, checked per cell above).
    hangs = {f"{s.id}/{s.assignment}/{s.assignment}.ipynb" for s in graded["students"] if s.member.hangs}
    assert hangs <= set(_autograded(graded["bertlab"]))
    assert sorted(set(_autograded(graded["bertlab"])) - hangs) == sorted(
        set(n for c in nbgrader_courses for n in _autograded(c)) - hangs
    )


def test_cluster_gradebook_exports_as_this_machines(graded):
    """Every row of ``nbgrader export`` (students, assignments, scores) the same, and the same
    autograded notebooks, whether the class was judged here or on the Dask cluster."""
    local, cluster = _export(graded["bertlab"]), _export(graded["cluster"])
    assert len(local) == 2 * len(graded["students"])  # every student under both assignments
    assert sorted(cluster) == sorted(local)
    assert sorted(_autograded(graded["cluster"])) == sorted(_autograded(graded["bertlab"]))


def test_hang_and_broken_notebook_are_recorded_with_a_reason(graded):
    """The hanging one was graded in a run of its own and skipped in the second; the second run
    recorded the unreadable notebook as an error with the reason."""
    second = graded["second_run"]
    hang = next(s.id for s in graded["students"] if s.member.hangs)
    assert second[hang]["status"] == "skipped"
    broken = next(s.id for s in graded["students"] if s.member.name == "not-json")
    assert second[broken]["status"] == "error" and second[broken]["score"] == 0
    assert "not a valid notebook" in second[broken]["reason"]
    # The cell that loops is named, not the grade cell after it; the learner's feedback is made
    # from this copy, so it holds no advice meant for the instructor (who sets --timeout).
    submitted = json.loads(
        (
            graded["bertlab"] / "instructor" / "submitted" / hang / "05-feed-forward" / "05-feed-forward.ipynb"
        ).read_text()
    )
    loop_cell = next("".join(c["source"]) for c in submitted["cells"] if "while True" in "".join(c["source"]))
    first_line = next(line.strip() for line in loop_cell.splitlines() if line.strip())
    for course in (graded["bertlab"], graded["cluster"]):
        graded_hang = course / "instructor" / "autograded" / hang / "05-feed-forward" / "05-feed-forward.ipynb"
        text = graded_hang.read_text()
        assert f"timed out after {HANG_LIMIT} s (the cell that starts `{first_line}` was running)" in text, text
        assert "--timeout" not in text


def test_rerun_grades_only_what_changed(graded):
    course = graded["bertlab"]
    first = json.loads(
        _run("bertlab autograde rerun", _bertlab("autograde", "--course", str(course), "--json"), ROOT).stdout
    )
    assert {o["status"] for o in first} == {"skipped"}
    changed = graded["students"][0]
    path = course / "instructor" / "submitted" / changed.id / changed.assignment / f"{changed.assignment}.ipynb"
    path.write_text(path.read_text() + "\n")  # saved again: same notebook, new file
    again = {
        o["student"]: o
        for o in json.loads(
            _run("bertlab autograde rerun", _bertlab("autograde", "--course", str(course), "--json"), ROOT).stdout
        )
    }
    assert [s for s, o in again.items() if o["status"] != "skipped"] == [changed.id]
    assert again[changed.id]["score"] == sum(_cells(graded["ways"], changed)["nbgrader autograde"].values())
