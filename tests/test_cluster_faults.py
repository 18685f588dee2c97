"""``bertlab autograde --scheduler`` when things go wrong: nothing is lost, nothing runs forever.

One Dask ``LocalCluster`` of two single-threaded worker processes (each restarted by its nanny when
killed), with the scheduler allowing one worker death per task (``allowed-failures``: 1). Its
tests, cheapest first:

- a worker of another bertlab version is refused, both versions named, before anything is graded;
- one run of three submissions: a worker killed while it grades one of them (that submission is
  graded elsewhere, in full), and a submission whose every worker is killed (it ends as
  KilledWorker after two deaths, and is recorded as 0 with that reason, not retried forever);
- Ctrl-C on the instructor's command cancels the class's tasks on the cluster.

Whether the class gets the same verdicts on a cluster as on this machine is test_class_agreement's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import submissions as sub
from tests.class_submissions import graded_course
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("cluster-faults"), pytest.mark.timeout(600)]

DASK = Path(sys.executable).parent / "dask"
ASSIGNMENT = sub.NUMPY
SLOW = "import time\ntime.sleep({})  # long enough to be killed in the middle of it"


def _course(root: Path, notebooks: dict) -> Path:
    """A course with ``ASSIGNMENT`` in its gradebook and one submission per student."""
    return graded_course(root, ASSIGNMENT, notebooks)


def _slow(seconds: float):
    """A right notebook that takes ``seconds`` longer to grade."""
    return sub.insert_after(sub.right(ASSIGNMENT), "softmax", SLOW.format(seconds))


@pytest.fixture(scope="module")
def cluster():
    import dask
    from distributed import Client, LocalCluster

    # Where an operator sets them: the scheduler's configuration (DASK_DISTRIBUTED__SCHEDULER__...).
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        local = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    client = Client(local, set_as_default=False)
    try:
        yield local, client
    finally:
        client.close()
        local.close()


def test_a_worker_of_another_version_is_refused_naming_both(tmp_path):
    from distributed import LocalCluster

    from bertlab.grading.cluster import installed_version
    from bertlab.instructor.autograde import autograde
    from bertlab.instructor.cluster_judges import ClusterError

    # A worker whose installed bertlab says 0.0.1: what a stale venv on a worker machine reports.
    stale = tmp_path / "stale"
    (stale / "bertlab-0.0.1.dist-info").mkdir(parents=True)
    (stale / "bertlab-0.0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: bertlab\nVersion: 0.0.1\n"
    )
    with LocalCluster(n_workers=0, processes=True, dashboard_address=":0") as empty:
        worker = subprocess.Popen(
            [str(DASK), "worker", empty.scheduler_address, "--nthreads", "1", "--no-nanny"],
            env={**os.environ, "PYTHONPATH": str(stale)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with pytest.raises(ClusterError) as refused:
                autograde(tmp_path / "no-course-needed", [], scheduler=empty.scheduler_address, progress=False)
        finally:
            worker.kill()
            worker.wait()
    message = str(refused.value)
    assert "bertlab 0.0.1" in message and f"bertlab {installed_version()}" in message, message


def _kill_while_grading(client, students: list[str], hits: dict[str, int], stop: threading.Event) -> None:
    """Kill every worker process that grades "always", and one that grades "once" (unless a kill of
    the first kind took it already); ``hits`` counts the kills each student's submission was at.

    A worker's tasks are the one it runs and those queued behind it, and a kill counts against
    each (Dask's allowed-failures). So a worker that holds "once", killed once already, is not
    killed for "always" until "once" has left it: a second kill would end "once" too."""

    def held(worker) -> set[str]:
        keys = [str(k) for k in client.processing().get(worker, ())]
        return {s for s in students if any(f"{s}/" in k for k in keys)}

    def wanted(here: set[str]) -> bool:
        if "once" in here:
            return hits["once"] == 0
        return "always" in here

    while not stop.is_set():
        for worker in list(client.processing()):
            if not wanted(held(worker)):
                continue
            time.sleep(1.0)  # in the middle of the submission: its notebook sleeps for longer
            here = held(worker)
            if not wanted(here):
                continue
            os.kill(client.run(os.getpid, workers=[worker])[worker], signal.SIGKILL)
            for student in here:
                hits[student] += 1
            while worker in client.scheduler_info()["workers"] and not stop.is_set():
                time.sleep(0.1)  # gone from the scheduler: the tasks are back in its hands
        time.sleep(0.2)


def test_a_killed_worker_loses_nothing_and_a_killing_submission_ends_at_zero(cluster, tmp_path):
    from nbgrader.api import Gradebook

    from bertlab.instructor.autograde import autograde

    local, client = cluster
    # "always" sleeps long: the killer may wait for "once" to leave its worker before killing it.
    course = _course(tmp_path / "course", {"once": _slow(3), "always": _slow(30), "quiet": sub.exercise(ASSIGNMENT)})
    hits, stop = {"once": 0, "always": 0, "quiet": 0}, threading.Event()
    killer = threading.Thread(target=_kill_while_grading, args=(client, list(hits), hits, stop), daemon=True)
    killer.start()
    try:
        outcomes = {
            o.student: o for o in autograde(course, [], scheduler=local.scheduler_address, timeout=60, progress=False)
        }
    finally:
        stop.set()
        killer.join()
    full = sub.max_points(ASSIGNMENT)
    # allowed-failures 1: a second death ends it; one death is retried elsewhere.
    assert hits["always"] == 2 and hits["once"] == 1 and hits["quiet"] <= 1, hits
    assert (outcomes["once"].status, outcomes["once"].score) == ("passed", full), outcomes["once"]
    assert (outcomes["always"].status, outcomes["always"].score, outcomes["always"].max_score) == ("error", 0, full)
    assert "was not tried again" in outcomes["always"].reason and "2 times" in outcomes["always"].reason
    assert outcomes["quiet"].status == "failed" and outcomes["quiet"].score == 0
    # In the gradebook as on the command's table, and the reason where the feedback is made from.
    with Gradebook(f"sqlite:///{course}/instructor/gradebook.db", "bertlab") as gb:
        assert gb.find_submission(ASSIGNMENT, "once").score == full
        assert gb.find_submission(ASSIGNMENT, "always").score == 0
    graded = course / "instructor" / "autograded" / "always" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert "was not tried again" in graded.read_text()
    # Nothing of a killed worker runs on: its judges, their templates and learners end with it.
    assert not _orphans_within(10), "a killed worker's grading processes outlived it"


def _orphans_within(seconds: float) -> list[str]:
    """Grading processes adopted by init (their worker was killed) still running after ``seconds``."""
    import psutil

    deadline = time.monotonic() + seconds
    while True:
        found = []
        for proc in psutil.process_iter(["ppid", "cmdline", "status"]):
            command = " ".join(proc.info["cmdline"] or [])
            # (a warm judges' server is started to outlive its command: it is not grading's orphan)
            orphan = proc.info["ppid"] == 1 and proc.info["status"] != psutil.STATUS_ZOMBIE
            if orphan and "bertlab.grading" in command and "warm_judges" not in command:
                found.append(f"{proc.pid}: {command}")
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_ctrl_c_cancels_the_class_on_the_cluster(cluster, tmp_path):
    local, client = cluster
    course = _course(tmp_path / "course", {f"s{i}": _slow(20) for i in range(3)})
    command = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bertlab.cli",
            "autograde",
            "--course",
            str(course),
            "--scheduler",
            local.scheduler_address,
            "--timeout",
            "8",
            "--json",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A test worker ignores SIGINT and its children would inherit that: the command must not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )
    deadline = time.monotonic() + 120
    while not any(client.processing().values()) and time.monotonic() < deadline and command.poll() is None:
        time.sleep(0.2)
    assert command.poll() is None, command.communicate()
    command.send_signal(signal.SIGINT)
    _out, err = command.communicate(timeout=60)
    assert command.returncode == 130, err
    assert "cancelled 2 submission(s) on the cluster" in err, err
    assert "0 of 3 submission(s) graded and recorded; the other 3 are left for the next run" in err, err
    # The scheduler forgets them: nothing of the class is left to run.
    deadline = time.monotonic() + 10
    while client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) == 0
    # Each is marked for the next run, which grades it whatever this one's flags were.
    state = json.loads((course / "instructor" / "autograded" / ".bertlab-autograde.json").read_text())
    assert {key: entry["fingerprint"] for key, entry in state.items()} == {
        f"s{i}/{ASSIGNMENT}": "pending" for i in range(3)
    }


def test_a_submission_that_signals_its_worker_kills_nothing(cluster, tmp_path):
    """The hostile cell (``tests/hostile.py``) sends SIGKILL to every process above its own: the
    learner's template, the judge factory, the Dask worker and its nanny. The kernel refuses each
    (Landlock's signal scope): no worker dies, and both submissions earn what their code computes."""
    from bertlab.grading.platforms.linux import landlock
    from bertlab.instructor.autograde import autograde
    from tests import hostile

    if landlock.abi() < 6:
        pytest.skip("this kernel cannot scope signals (Landlock ABI 6, Linux 6.12): the site says so")
    local, client = cluster
    before = client.run(os.getpid)
    course = _course(
        tmp_path / "course", {"hostile": hostile.notebook(sub.right(ASSIGNMENT)), "honest": sub.right(ASSIGNMENT)}
    )
    outcomes = {o.student: o for o in autograde(course, [], scheduler=local.scheduler_address, progress=False)}
    assert client.run(os.getpid) == before, "a worker died, or was replaced, while the class was graded"
    full = sub.max_points(ASSIGNMENT)
    assert [(outcomes[s].status, outcomes[s].score) for s in ("hostile", "honest")] == [("passed", full)] * 2, outcomes


def test_a_worker_of_another_version_joining_mid_run_is_named_and_loses_nothing(tmp_path, capfd):
    """A stale worker joins after the version check; the first submission it is given comes back
    refused: the worker is named, gets no more, and that submission is graded by another."""
    from distributed import LocalCluster

    from bertlab.instructor.autograde import autograde

    stale = tmp_path / "stale"
    (stale / "bertlab-0.0.1.dist-info").mkdir(parents=True)
    (stale / "bertlab-0.0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: bertlab\nVersion: 0.0.1\n"
    )
    students = [f"s{i}" for i in range(4)]
    course = _course(tmp_path / "course", {s: _slow(2) for s in students})
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as local:
        joined: list = []

        def join_later() -> None:
            time.sleep(4)  # after the check at the start, while the first submission is graded
            joined.append(
                subprocess.Popen(
                    [str(DASK), "worker", local.scheduler_address, "--nthreads", "1", "--no-nanny"],
                    env={**os.environ, "PYTHONPATH": str(stale)},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

        late = threading.Thread(target=join_later, daemon=True)
        late.start()
        try:
            outcomes = autograde(course, [], scheduler=local.scheduler_address, timeout=60, progress=False)
        finally:
            late.join()
            for proc in joined:
                proc.kill()
                proc.wait()
    said = capfd.readouterr().err
    full = sub.max_points(ASSIGNMENT)
    assert sorted((o.student, o.status, o.score) for o in outcomes) == [(s, "passed", full) for s in students]
    assert "has bertlab 0.0.1" in said and "its submissions go to the other workers" in said, said
