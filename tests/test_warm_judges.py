"""`bertlab judges`: warm judges give the verdicts fresh ones give, and are used only when they may be."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tests.conftest import ROOT
from tests.grading_paths import PATHS, gone_within, path_env, processes_with

pytestmark = pytest.mark.slow
TASK = "05-feed-forward"


def bertlab(*args, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bertlab.cli", *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600
    )


def verdicts(proc: subprocess.CompletedProcess) -> list[tuple]:
    report = json.loads(proc.stdout)
    return [
        (t["task"], c["name"], c["passed"], c["points"], c["message"], c["mistake"])
        for t in report["tasks"]
        for c in t["checks"]
    ]


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """The solution of 05 and a copy whose GELU is the tanh approximation (wrong: HF's is exact)."""
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(ROOT / "solutions" / TASK, root / "right" / TASK)
    nb = nbformat.read(ROOT / "solutions" / TASK / f"{TASK}.ipynb", as_version=4)
    changed = 0
    for cell in nb.cells:
        if "self.intermediate_act_fn = nn.GELU()" in cell.source:
            cell.source = cell.source.replace("nn.GELU()", "nn.GELU(approximate='tanh')")
            changed += 1
    assert changed == 1, "the solution's GELU line moved: update this test"
    (root / "wrong" / TASK).mkdir(parents=True)
    nbformat.write(nb, root / "wrong" / TASK / f"{TASK}.ipynb")
    return root


@pytest.fixture(scope="module", params=PATHS)
def judges(tmp_path_factory, request):
    """Warm judges (one) in a folder of their own, on each grading path, stopped at the end; the
    commands of a test that uses them run on the same path. Every process they start inherits
    ``BERTLAB_TEST_JUDGES``, which tells them apart from other tests' processes."""
    folder = tmp_path_factory.mktemp("judges")
    env = {**path_env(request.param), "BERTLAB_JUDGES_DIR": str(folder), "BERTLAB_TEST_JUDGES": str(folder)}
    started = bertlab("judges", "start", "--jobs", "1", "--idle-minutes", "10", env=env)
    assert started.returncode == 0, started.stderr
    assert "warm judges started" in started.stdout
    yield env
    bertlab("judges", "stop", env=env)


def graded(env: dict) -> int:
    status = bertlab("judges", "status", env=env)
    assert status.returncode == 0, status.stderr
    return int(status.stdout.split(" notebook(s) graded")[0].rsplit(" ", 1)[1])


# Right and wrong on the Linux path, right on the portable one: what differs between the paths is
# how judges and learners start, which a right notebook exercises fully; the verdicts are the same
# code's (test_portable_path compares the paths' verdicts cell by cell).
@pytest.mark.parametrize(
    "judges, which", [("linux", "right"), ("linux", "wrong"), ("portable", "right")], indirect=["judges"]
)
def test_warm_judges_give_the_verdicts_of_fresh_ones(judges, course, which):
    before = graded(judges)
    warm = bertlab("grade", "--path", str(course / which), "--json", "--no-progress", env=judges)
    assert "by the warm judges" in warm.stderr, warm.stderr
    assert graded(judges) == before + 1, "the warm judges did not grade the notebook"
    cold = bertlab("grade", "--path", str(course / which), "--json", "--no-progress", "--cold", env=judges)
    assert "by the warm judges" not in cold.stderr
    assert graded(judges) == before + 1, "--cold must not use the warm judges"
    assert warm.returncode == cold.returncode == (0 if which == "right" else 1), warm.stdout + warm.stderr
    assert verdicts(warm) == verdicts(cold)
    passed = [v[2] for v in verdicts(warm)]
    assert all(passed) if which == "right" else not all(passed)


# The fingerprint that tells judges for another model apart is computed alike on both paths.
@pytest.mark.parametrize("judges", ["linux"], indirect=True)
def test_judges_for_another_model_are_not_used(judges, course, tiny_bert_dir):
    before = graded(judges)
    proc = bertlab(
        "grade", "--path", str(course / "right"), "--json", "--no-progress", "--model", str(tiny_bert_dir), env=judges
    )
    assert "by the warm judges" not in proc.stderr
    assert graded(judges) == before
    status = bertlab("judges", "status", "--model", str(tiny_bert_dir), env=judges)
    assert "started from other code, libraries, model or kernel settings" in status.stdout


@pytest.mark.parametrize("judges", ["linux"], indirect=True)
def test_judges_started_under_other_kernel_settings_are_not_used(judges):
    """Judges compute under the kernel set and threads they started with: a command that asks for
    others (``ATEN_CPU_CAPABILITY=default`` to see a grade on plain kernels) does not get them."""
    assert "`bertlab grade` uses them" in bertlab("judges", "status", env=judges).stdout
    for setting in ({"ATEN_CPU_CAPABILITY": "default"}, {"OMP_NUM_THREADS": "3"}):
        status = bertlab("judges", "status", env={**judges, **setting})
        assert "started from other code, libraries, model or kernel settings" in status.stdout, setting


def test_a_socket_nobody_answers_on_means_fresh_judges(course, tmp_path, monkeypatch):
    from bertlab.grading import warm_judges

    monkeypatch.setenv("BERTLAB_JUDGES_DIR", str(tmp_path))
    env = dict(os.environ)
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(warm_judges.socket_path()))  # left behind, as by a server that was killed
    proc = bertlab("grade", "--path", str(course / "right"), "--json", "--no-progress", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "by the warm judges" not in proc.stderr
    assert "no warm judges are running" in bertlab("judges", "status", env=env).stdout


def test_a_shared_folder_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    proc = bertlab("judges", "start", env={**os.environ, "BERTLAB_JUDGES_DIR": str(shared)})
    assert proc.returncode == 2
    assert "must belong to you and be private" in proc.stderr


@pytest.mark.parametrize("path", PATHS)
def test_stop_ends_the_server_and_its_judges(tmp_path, path):
    """Stopping leaves no process of the judges' behind: server, judges, templates, spares."""
    import time

    env = {**path_env(path), "BERTLAB_JUDGES_DIR": str(tmp_path), "BERTLAB_TEST_JUDGES": str(tmp_path)}
    assert bertlab("judges", "start", "--jobs", "1", env=env).returncode == 0
    deadline = time.monotonic() + 60
    while len(processes_with("BERTLAB_TEST_JUDGES", str(tmp_path))) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)  # the server, its judge, and the judge's template or spare
    assert len(processes_with("BERTLAB_TEST_JUDGES", str(tmp_path))) >= 3
    stopped = bertlab("judges", "stop", env=env)
    assert stopped.stdout.strip() == "warm judges stopped"
    left = gone_within("BERTLAB_TEST_JUDGES", str(tmp_path), 10)
    assert not left, left
    assert bertlab("judges", "stop", env=env).stdout.strip() == "no warm judges were running"


@pytest.fixture
def hanging(course, tmp_path) -> Path:
    """A course folder whose notebook 05 loops forever in its first cell."""
    folder = tmp_path / "hangs" / TASK
    folder.mkdir(parents=True)
    nb = nbformat.read(course / "right" / TASK / f"{TASK}.ipynb", as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell("while True:\n    pass"))
    nbformat.write(nb, folder / f"{TASK}.ipynb")
    return folder.parent


@pytest.mark.parametrize("how", ["--cold", "warm"])
def test_ctrl_c_stops_grading_at_once(judges, hanging, how):
    """Ctrl-C on `bertlab grade` ends it at once, with or without warm judges, and stops the
    process running the notebook's cells. Before, it waited for the notebook's time limit."""
    import signal
    import time

    marker = judges["BERTLAB_TEST_JUDGES"]
    args = [sys.executable, "-m", "bertlab.cli", "grade", "--path", str(hanging), "--no-progress"]
    client = subprocess.Popen(
        args + ([how] if how == "--cold" else []),
        cwd=ROOT,
        env=judges,
        text=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        # The child only resets one signal before exec, taking no lock:
        # a test worker ignores SIGINT, the client must not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    deadline = time.monotonic() + 60
    while not learners(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert learners(marker), "the hanging notebook never started"
    client.send_signal(signal.SIGINT)
    try:
        assert client.wait(10) == 130
    finally:
        client.kill()
    assert "stopped (Ctrl-C)" in client.stderr.read()
    deadline = time.monotonic() + 10
    while learners(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = learners(marker)
    for pid in left:  # not left spinning when this test fails
        os.kill(pid, 9)
    assert not left, "the hanging notebook's process outlived the command"


def test_a_client_that_goes_away_frees_its_judge(judges, course, hanging):
    """A `bertlab grade` killed outright (no Ctrl-C handling) still stops the warm judge's
    grading of its notebook: a notebook that hangs does not hold the judge until its time limit."""
    import time

    client = subprocess.Popen(
        [sys.executable, "-m", "bertlab.cli", "grade", "--path", str(hanging), "--no-progress"],
        cwd=ROOT,
        env=judges,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def busy() -> int:
        return int(bertlab("judges", "status", env=judges).stdout.split(", ")[-1].split(" grading now")[0])

    marker = judges["BERTLAB_TEST_JUDGES"]
    deadline = time.monotonic() + 60
    while not learners(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert busy() == 1 and learners(marker), "the hanging notebook never started under the warm judge"
    client.kill()
    client.wait()
    deadline = time.monotonic() + 20
    while (busy() or learners(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert busy() == 0, "the warm judge kept grading for a client that is gone"
    left = learners(marker)
    for pid in left:  # not left spinning when this test fails
        os.kill(pid, 9)
    assert not left, "the hanging notebook's process outlived its judge"
    after = bertlab("grade", "--path", str(course / "right"), "--json", "--no-progress", env=judges)
    assert after.returncode == 0 and "by the warm judges" in after.stderr, after.stderr


def learners(marker: str) -> list[int]:
    """The processes running a notebook's cells for the judges whose environment holds ``marker``
    (a learner process works in the folder the graded copy is in: ``bertlab-grade-*/work``)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or f"BERTLAB_TEST_JUDGES={marker}".encode() not in (
                proc / "environ"
            ).read_bytes().split(b"\0"):
                continue
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        if cwd.name == "work" and cwd.parent.name.startswith("bertlab-grade-"):
            found.append(int(proc.name))
    return found


def test_two_clones_of_the_course_keep_their_judges_and_records_apart(tmp_path, monkeypatch):
    """Each clone's `bertlab judges` reaches its own server (and keeps its own grading times): a
    `stop` in one leaves the other's judges running, even with one environment between them."""
    from bertlab.grading import durations, warm_judges

    seen = {}
    for clone in ("one", "two"):
        (tmp_path / clone / "exercises").mkdir(parents=True)
        (tmp_path / clone / "nbgrader_config.py").write_text("")
        monkeypatch.chdir(tmp_path / clone / "exercises")  # anywhere inside the course
        seen[clone] = (warm_judges.socket_path(), durations.path())
    assert seen["one"][0] != seen["two"][0] and seen["one"][1] != seen["two"][1], seen
    monkeypatch.chdir(tmp_path / "one")
    assert warm_judges.socket_path() == seen["one"][0]  # the same course, from its root
