"""The instructor's loop, as the instructor guide gives it.

Every assignment is generated and checked for hidden tests in its release; two of them (the loop is
the same for each, and grading every assignment is the class tests' and grading tests' job) go round
the whole loop. In a fresh course (the repository's nbgrader_config.py and solutions/, PATH without
the venv): generate_assignment, release_assignment, a learner's fetch_assignment and submit,
collect, a second learner's untouched notebooks placed in submitted/ by hand, ``bertlab autograde``,
generate_feedback and export. All state stays inside the course's ``instructor/``. Hidden tests
reach no learner: not in the release, the exchange, the fetched copy or the feedback.
"""

from __future__ import annotations

import csv
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests import submissions as sub
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("nbgrader-loop")]

ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())
LOOPED = ["03-self-attention", "05-feed-forward"]  # released, fetched, submitted, graded, fed back
HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)


def _env() -> dict:
    # No manual PATH change: the venv's bin/ is not on PATH, as in a shell that never activated it.
    bindir = os.path.dirname(sys.executable)
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and os.path.abspath(p) != bindir
    )
    return {**os.environ, "PATH": path, "HF_HUB_OFFLINE": "1"}


def _run(args: list[str], cwd: Path, ok=(0,)) -> subprocess.CompletedProcess:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=_env())
    assert proc.returncode in ok, f"{' '.join(args[1:])} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return proc


def nbgrader(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "nbgrader", *args], cwd)


def hidden_lines(assignment: str) -> list[str]:
    """Every non-empty line of the assignment's hidden tests, from its nbgrader source."""
    text = (ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text()
    source = "\n".join(c.source for c in nbformat.reads(text, as_version=4).cells)
    return [line.strip() for block in HIDDEN.findall(source) for line in block.splitlines() if line.strip()]


def visible_text(path: Path) -> str:
    """What a reader of the file sees: notebooks as their cells' text, HTML without its tags."""
    if path.suffix == ".ipynb":
        return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def leaks(files: list[Path], assignment: str) -> list[str]:
    lines = hidden_lines(assignment)
    return [f"{f.name}: {line}" for f in files for line in lines if line in visible_text(f)]


# Session-wide: xdist may run other modules' tests between this module's, which would tear a
# module fixture down and go round the loop again (a minute each time).
@pytest.fixture(scope="session")
def loop(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions", course / "solutions")
    home = tmp_path_factory.mktemp("learner-home")  # where the learner fetches and works

    nbgrader(course, "generate_assignment", "--assignment=*", "--force")
    for name in LOOPED:
        nbgrader(course, "release_assignment", name, "--force")
        # The learner's side has no course config: their own nbgrader config names the exchange.
        learner = (
            f"--Exchange.root={course / 'instructor' / 'exchange'}",
            f"--Exchange.assignment_dir={home}",
            f"--Exchange.cache={home / '.nbgrader-cache'}",
            "--course=bertlab",
        )
        nbgrader(home, "fetch_assignment", name, *learner)
        fetched = home / name / f"{name}.ipynb"
        shutil.copy(fetched, tmp_path_factory.getbasetemp() / f"fetched-{name}.ipynb")  # kept for the leak test
        nbformat.write(sub.right(name), fetched)  # the learner completes it
        nbgrader(home, "submit", name, *learner, "--student=learner")
        nbgrader(course, "collect", name)
        untouched = course / "instructor" / "submitted" / "idle" / name
        untouched.mkdir(parents=True)
        shutil.copy(course / "exercises" / name / f"{name}.ipynb", untouched)

    graded = _run([sys.executable, "-m", "bertlab.cli", "autograde", "--course", str(course), "--json"], ROOT)
    feedback = nbgrader(course, "generate_feedback", "--assignment=*", "--force")
    nbgrader(course, "export", "--to", "instructor/grades.csv")
    return {
        "course": course,
        "home": home,
        "fetched": tmp_path_factory.getbasetemp(),
        "autograde": graded.stdout,
        "feedback_log": feedback.stderr,
    }


def test_feedback_is_generated_without_configuration_warnings(loop):
    """The course's configuration is all nbgrader and nbconvert recognise (a warning on every run
    teaches an instructor to ignore warnings)."""
    assert "[GenerateFeedbackApp | " in loop["feedback_log"]  # nbgrader's log is read here
    assert "not recognized" not in loop["feedback_log"], loop["feedback_log"]


def test_every_step_writes_inside_the_workspace(loop):
    course = loop["course"]
    for step in ("exchange", "submitted", "autograded", "feedback", "gradebook.db", "grades.csv"):
        assert (course / "instructor" / step).exists(), step
    # Nothing of a class run lands beside the course's own files.
    assert sorted(p.name for p in course.iterdir()) == ["exercises", "instructor", "nbgrader_config.py", "solutions"]


def test_exported_grades(loop):
    with open(loop["course"] / "instructor" / "grades.csv") as f:
        rows = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(f)}
    # Every generated assignment is in the gradebook; only the looped ones were handed in.
    assert {a for _, a in rows} == set(ASSIGNMENTS) and {s for s, _ in rows} == {"learner", "idle"}
    assert all(float(r["score"]) == 0.0 for (_, a), r in rows.items() if a not in LOOPED)
    for name in LOOPED:
        maximum = sub.max_points(name)
        assert float(rows["learner", name]["max_score"]) == maximum > 0
        assert float(rows["learner", name]["score"]) == maximum, name  # the reference solution, submitted
        assert float(rows["idle", name]["score"]) == 0.0, name  # the release as fetched


FORMGRADER_VIEW = """
import json, sys
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config.loader import PyFileConfigLoader

config = PyFileConfigLoader("nbgrader_config.py", path=".").load_config()
api = NbGraderAPI(CourseDirectory(config=config), config=config)
print(json.dumps({name: api.get_submissions(name) for name in sys.argv[1:]}))
"""


def test_formgrader_sees_the_submissions_autograded(loop):
    # What the formgrader lists, through its API, in a process of its own as the formgrader's
    # server is (nbgrader's API leaves asyncio state behind in the process that imports it).
    listed = json.loads(_run([sys.executable, "-c", FORMGRADER_VIEW, *LOOPED], loop["course"]).stdout)
    for name in LOOPED:
        submissions = {s["student"]: s for s in listed[name]}
        assert set(submissions) == {"learner", "idle"}, name
        assert all(s["autograded"] and not s["needs_manual_grade"] for s in submissions.values()), submissions


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_hidden_tests_never_reach_a_learner(loop, assignment):
    course = loop["course"]
    assert hidden_lines(assignment), f"{assignment} has no hidden tests to keep hidden"
    release = course / "exercises" / assignment / f"{assignment}.ipynb"
    if assignment not in LOOPED:
        assert leaks([release], assignment) == []
        return
    # The check can fail: the instructor's autograded copy holds them, and so does its HTML.
    autograded = course / "instructor" / "autograded" / "learner" / assignment / f"{assignment}.ipynb"
    assert len(leaks([autograded], assignment)) == len(hidden_lines(assignment))
    from nbconvert import HTMLExporter

    rendered = course / f"rendered-{assignment}.html"
    rendered.write_text(HTMLExporter().from_filename(str(autograded))[0])
    assert leaks([rendered], assignment), "the HTML check cannot see hidden tests"
    rendered.unlink()

    learner_files = [
        release,
        *(course / "instructor" / "exchange").rglob(f"{assignment}.ipynb"),
        loop["fetched"] / f"fetched-{assignment}.ipynb",
        *(course / "instructor" / "feedback").glob(f"*/{assignment}/*.html"),
    ]
    assert len(learner_files) >= 5, learner_files  # release, outbound, inbound and two feedback pages
    assert leaks(learner_files, assignment) == []


def test_a_resubmission_regraded_into_an_error_leaves_no_old_feedback(loop, tmp_path):
    """The learner resubmits a file that is not a notebook; the guide's commands for a resubmission
    (submit again, ``collect --update``, autograde, feedback, export) give 0 in the gradebook and
    the export, and leave the learner no feedback with the old full marks (nbgrader skips a
    submission without an autograded copy, and would leave it)."""
    course, home, name = tmp_path / "course", tmp_path / "home", LOOPED[-1]
    shutil.copytree(loop["course"], course)
    shutil.copytree(loop["home"], home)
    feedback = course / "instructor" / "feedback" / "learner" / name
    assert list(feedback.glob("*.html")), "the first submission's feedback is missing: nothing to go stale"
    (home / name / f"{name}.ipynb").write_text('{"cells": [  (saved half-way)')
    learner = (
        f"--Exchange.root={course / 'instructor' / 'exchange'}",
        f"--Exchange.assignment_dir={home}",
        f"--Exchange.cache={home / '.nbgrader-cache'}",
        "--course=bertlab",
    )
    nbgrader(home, "submit", name, *learner, "--student=learner")
    nbgrader(course, "collect", "--update", name)
    regraded = json.loads(
        _run([sys.executable, "-m", "bertlab.cli", "autograde", "--course", str(course), "--json"], ROOT).stdout
    )
    assert [(o["student"], o["assignment"], o["status"]) for o in regraded if o["status"] != "skipped"] == [
        ("learner", name, "error")
    ]
    nbgrader(course, "generate_feedback", "--assignment=*", "--force")
    nbgrader(course, "export", "--to", "instructor/grades.csv")
    with open(course / "instructor" / "grades.csv") as f:
        rows = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(f)}
    assert float(rows["learner", name]["score"]) == 0.0
    assert not feedback.exists(), sorted(p.name for p in feedback.iterdir())
    assert list((course / "instructor" / "feedback" / "idle" / name).glob("*.html"))  # the others' stays


# A learner's notes that quote nbgrader's markers: in a comment, in strings, one of them alone in
# a markdown cell of their own. The line between the markers is the learner's own code.
MARKER_CODE = (
    "\n\n# my notes: ### BEGIN HIDDEN TESTS is where the grader keeps its checks\n"
    'between_markers = "a line of mine between the markers"\n'
    'END_MARKER = "### END HIDDEN TESTS"\n'
)
MARKER_TEXT = "What does `### BEGIN HIDDEN TESTS` hide? (a question of mine, no end marker)"


def test_a_learner_cell_quoting_the_hidden_test_markers_gets_feedback(loop, tmp_path):
    """The learner's cells quote nbgrader's hidden-test markers: autograde scores the submission as
    it is, ``generate_feedback`` makes its page, which shows the learner's cells as written, and
    the assignment's hidden tests appear nowhere in it (nbgrader refused such a cell, leaving the
    learner without feedback)."""
    course, name = tmp_path / "course", LOOPED[-1]
    shutil.copytree(loop["course"], course)
    nb = sub.right(name)
    solution = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    solution.source += MARKER_CODE
    nb.cells.insert(nb.cells.index(solution) + 1, nbformat.v4.new_markdown_cell(MARKER_TEXT))
    (course / "instructor" / "submitted" / "noter" / name).mkdir(parents=True)
    nbformat.write(nb, course / "instructor" / "submitted" / "noter" / name / f"{name}.ipynb")

    graded = json.loads(
        _run([sys.executable, "-m", "bertlab.cli", "autograde", "--course", str(course), "--json"], ROOT).stdout
    )
    noter = [o for o in graded if o["student"] == "noter"]
    assert [(o["score"], o["status"]) for o in noter] == [(sub.max_points(name), "passed")], noter
    nbgrader(course, "generate_feedback", "--assignment=*", "--force")
    pages = list((course / "instructor" / "feedback" / "noter" / name).glob("*.html"))
    assert len(pages) == 1, "the learner got no feedback"
    shown = visible_text(pages[0])
    for line in [*MARKER_CODE.strip().splitlines(), MARKER_TEXT.replace("`", "")]:
        assert line in shown, f"the learner's own line is missing from their feedback: {line}"
    assert leaks(pages, name) == []
