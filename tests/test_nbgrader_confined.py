"""``nbgrader autograde`` runs a learner's cells as ``bertlab grade`` does: confined, within the
course's limits, and nothing they start outlives their notebook.

One class is autograded with the course's ``nbgrader_config.py``: ``bob`` hands in the right
notebook, ``mallory`` the right notebook after two hostile cells (one tries to read the class's
secrets, one leaves a daemon listening on a TCP port), ``killer`` a notebook whose first cell
kills its own kernel. The hostile cells run twice, in nbgrader's kernel and in the judge
(``JudgeVerdicts``): each writes what got through to a file named for where it ran, in the
notebook's folder, which the autograded copy keeps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import nbformat
import pytest

from bertlab.grading.platforms.linux import landlock
from tests import submissions as sub
from tests.conftest import ROOT
from tests.grading_paths import gone_within

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's sandbox")]
TASK = "05-feed-forward"
MARKER = "BERTLAB_TEST_RUN"  # kept in a learner's environment: finds every process the class started
SECRET_NAME, SECRET = "INSTRUCTOR_DATABASE_URL", f"postgres://instructor:{uuid.uuid4().hex}@db"

# Where the cell runs: nbgrader's kernel (a ZMQ shell) or the judge's learner process.
WHERE = 'kind = "kernel" if type(get_ipython()).__name__ == "ZMQInteractiveShell" else "judge"\n'

READS = (
    "import json, os, sys\n"
    + WHERE
    + """task = os.path.basename(os.getcwd())  # instructor/autograded/<student>/<task> in the course
course = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.getcwd()))))
targets = {
    "the hidden tests": f"{course}/solutions/{task}/{task}.ipynb",
    "a classmate's submission": f"{course}/instructor/submitted/bob/{task}/{task}.ipynb",
    "the submissions folder": f"{course}/instructor/submitted",
    "the gradebook": f"{course}/instructor/gradebook.db",
    "another grading folder": f"{course}/instructor/autograded/bob/{task}",
    "the course's folder": course,
    "the temporary folder": "/tmp",
    "its parent's environment": f"/proc/{os.getppid()}/environ",
    "nbgrader's environment": f"/proc/{os.environ.get('JPY_PARENT_PID', os.getppid())}/environ",
}
through = []
for what, path in targets.items():
    try:
        os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(64)
        through.append(f"{what}: {path}")
    except OSError:
        pass
if SECRET in json.dumps(dict(os.environ)):
    through.append("the instructor's secret, in its environment")
if [m for m in sys.modules if m.split(".")[0] in ("transformers", "sentence_transformers")]:
    through.append("transformers' code, in its memory")
open(f"reads-{kind}.json", "w").write(json.dumps({"tried": targets, "through": through}))
""".replace("SECRET", repr(SECRET))
)

DAEMON = (
    "import os, socket, sys, time\n"
    + WHERE
    + """said_r, said_w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        try:
            server = socket.socket()
            server.bind(("127.0.0.1", 0))
            server.listen()
            said = f"listening on {server.getsockname()[1]}"
        except OSError as err:
            said = f"refused: {err}"
        open(f"daemon-{kind}.txt", "w").write(f"{os.getpid()}\\n{said}\\n")
        os.write(said_w, b"x")
        time.sleep(600)
    os._exit(0)
os.read(said_r, 1)
"""
)

KILLER = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"


def submit(course: Path, student: str, first: list[str]) -> None:
    nb = sub.right(TASK)
    nb.cells[:0] = [nbformat.v4.new_code_cell(source) for source in first]
    folder = course / "instructor" / "submitted" / student / TASK
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{TASK}.ipynb")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = tmp_path_factory.mktemp("confined") / "course"
    (course / "solutions").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / TASK, course / "solutions" / TASK)
    submit(course, "bob", [])
    submit(course, "mallory", [READS, DAEMON])
    submit(course, "killer", [KILLER])
    marker = uuid.uuid4().hex
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        MARKER: marker,
        SECRET_NAME: SECRET,
    }
    runs = []
    for step in ("generate_assignment", "autograde"):  # the first registers the assignment in the gradebook
        runs.append(
            subprocess.run(
                [sys.executable, "-m", "nbgrader", step, TASK, "--force"],
                cwd=course,
                capture_output=True,
                text=True,
                env=env,
                timeout=1200,
            )
        )
    return {"course": course, "run": runs[-1], "left": gone_within(MARKER, marker, 10)}


def autograded(graded, student: str) -> Path:
    return graded["course"] / "instructor" / "autograded" / student / TASK


def test_autograde_completes_for_every_student(graded):
    run = graded["run"]
    assert run.returncode == 0, run.stderr[-4000:]
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{graded['course'] / 'instructor' / 'gradebook.db'}") as gradebook:
        scores = {s: gradebook.find_submission(TASK, s).score for s in ("bob", "mallory", "killer")}
    full = sub.max_points(TASK)
    assert scores == {"bob": full, "mallory": full, "killer": 0}, scores


def test_the_kernel_reads_none_of_the_class_secrets(graded):
    for kind in ("kernel", "judge"):
        report = autograded(graded, "mallory") / f"reads-{kind}.json"
        assert report.exists(), f"the reads cell never ran in the {kind}"
        tried, through = json.loads(report.read_text()).values()
        # Each file is there to be read (the processes in /proc ended with the command).
        missing = [path for path in tried.values() if not path.startswith("/proc/") and not os.path.exists(path)]
        assert not missing, f"not there to be read: {missing}"
        assert through == [], f"the {kind} read: {through}"


def test_a_daemon_a_cell_detached_is_ended_with_its_kernel(graded):
    said = (autograded(graded, "mallory") / "daemon-kernel.txt").read_text().splitlines()
    assert said, "the daemon never started in the kernel"
    assert not os.path.exists(f"/proc/{said[0]}"), f"the kernel's daemon {said[0]} outlived nbgrader"
    assert graded["left"] == [], f"still running after nbgrader autograde ended: {graded['left']}"
    if landlock.abi() >= 4:
        assert said[1].startswith("refused"), f"the kernel's daemon could listen: {said[1]}"


def test_a_cell_that_kills_its_kernel_leaves_a_reason(graded):
    nb = nbformat.read(autograded(graded, "killer") / f"{TASK}.ipynb", as_version=4)
    (killed,) = [o for o in nb.cells[0].outputs if o.output_type == "error"]
    assert killed.ename == "KernelDied" and "SIGKILL" in killed.evalue, killed
    grade_cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert grade_cells and all(c.outputs and c.outputs[0].output_type == "error" for c in grade_cells)
    assert all("process ended" in c.outputs[0].evalue for c in grade_cells), grade_cells[0].outputs
    assert "cell 0 ended the notebook's kernel" in graded["run"].stderr and "SIGKILL" in graded["run"].stderr
