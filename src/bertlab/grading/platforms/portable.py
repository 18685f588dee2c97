"""The portable path: the same grading with no Linux-only interface (macOS, ``BERTLAB_PORTABLE=1``).

- Process state and memory come from psutil, which reads each system's own interface
  (``/proc`` on Linux, ``libproc`` and ``sysctl`` on macOS, the Win32 API on Windows): a
  well-kept library instead of code of ours per system.
- Learner processes are started by ``multiprocessing``, the way it starts them safely here:
  ``spawn`` (a new interpreter) by default, as Python itself does on macOS, where a fork without
  exec after Apple's frameworks have started is unsafe. ``BERTLAB_START_METHOD=forkserver``
  chooses a fork server that has imported torch instead (measured against spawn on the
  Performance page). A spawned process pays the imports (seconds), so each judge keeps two spare
  learner processes that have imported and loaded everything and wait for their notebooks; a
  notebook takes the older and a new spare starts at once, at low priority, while it is graded.
- The parent-death guard is a watchdog thread in the learner's process: it reads a pipe whose
  only writer is the judge, and ends the process and its own children when that pipe closes,
  which happens when the judge is gone, however it ended.
- There is no sandbox: ``confine`` says so (False), and ``bertlab doctor`` and the
  honest-grading page say what that leaves open.
"""

from __future__ import annotations

import atexit
import gc
import json
import multiprocessing
import os
import signal
import sys
import threading
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import cast

import psutil

name = "portable"
START_METHOD_ENV = "BERTLAB_START_METHOD"
START_METHODS = ("spawn", "forkserver")  # never plain fork: not safe once torch is imported


def start_method() -> str:
    """``spawn``, unless ``BERTLAB_START_METHOD`` names another safe method this system has."""
    wanted = os.environ.get(START_METHOD_ENV, "spawn")
    return wanted if wanted in START_METHODS and wanted in multiprocessing.get_all_start_methods() else "spawn"


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


def rss_mb(pid: int) -> float:
    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except psutil.Error:
        return 0.0


def below(pid: int) -> list[psutil.Process]:
    """The processes below ``pid``. One that left the tree (a double fork) is not found: there
    is no subreaper here."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def tree_memory_mb(pid: int, below: list[psutil.Process], limit: float) -> float:
    """The memory of ``pid``'s process tree in MB, over ``limit`` exactly when the tree is: its
    RSS plus the PSS of each process ``below`` it (their USS where the system has no PSS: macOS),
    read only when their RSS together are over ``limit``; the Linux path's ``tree_memory_mb``
    says why."""
    own = rss_mb(pid)
    most = own + sum(rss_mb(child.pid) for child in below)
    if most <= limit:
        return most
    total = own * 2**20
    for child in below:
        try:
            full = child.memory_full_info()
            total += getattr(full, "pss", full.uss)
        except psutil.Error:  # ended meanwhile, or not ours to read: its RSS, never too little
            total += rss_mb(child.pid) * 2**20
    return total / 2**20


def release_memory() -> None:
    gc.collect()  # the C heap is the system allocator's to keep or return


def describe() -> dict[str, str]:
    return {
        "path": "portable",
        "judges": "each started as a new Python process",
        "learners": f"started by multiprocessing ({start_method()}); each judge keeps two spares warm",
        "sandbox": "absent: the learner's code may write wherever you may and read transformers "
        "(see How grading is kept honest)",
    }


def start_judge_factory(env: dict):
    return None  # forking a process that has imported torch is what this path avoids


# --- learner processes -----------------------------------------------------------------------


class LearnerProcess:
    """A learner process started by multiprocessing, waiting for its notebook's folder."""

    def __init__(self, env: dict | None):
        # start_method() is one of START_METHODS: each asked for by name, so its context's type is known
        context: SpawnContext | ForkServerContext
        if start_method() == "forkserver":
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(["torch", "IPython.core.interactiveshell", "bertlab.checks"])
        else:
            context = multiprocessing.get_context("spawn")
        request_r, self.request_w = os.pipe()
        self.answer_r, answer_w = os.pipe()
        lifeline_r, self.lifeline_w = os.pipe()  # the judge holds the only writer
        ends = [
            Connection(request_r, writable=False),
            Connection(answer_w, readable=False),
            Connection(lifeline_r, writable=False),
        ]
        self.process = context.Process(target=_learner_main, args=(*ends, env), name="bertlab-learner")
        try:
            self.process.start()
        finally:
            for end in ends:
                end.close()
        self.pid = cast(int, self.process.pid)  # None only before start(), which has returned

    def go(self, cwd: str) -> None:
        from bertlab.grading import wire

        wire.write_frame(self.request_w, json.dumps({"cwd": cwd}).encode())

    def alive(self) -> bool:
        return self.process.is_alive()

    def below(self) -> list[psutil.Process]:
        return below(self.pid)

    def memory_mb(self, below: list[psutil.Process], limit: float) -> float:
        return tree_memory_mb(self.pid, below, limit)

    def kill(self) -> None:
        if hasattr(os, "killpg"):  # its own process group (see _learner_main): its children too
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.process.kill()
        self.process.join()
        try:
            os.close(self.lifeline_w)
        except OSError:
            pass

    def how_ended(self) -> str:
        code = self.process.exitcode
        return "" if code is None else f" ({f'signal {-code}' if code < 0 else f'exit code {code}'})"


# Learner processes started ahead, each waiting for a notebook: two per judge, so that a grade
# right after another finds one ready while the spare that replaces the first still imports.
SPARES = 2
_spares: list[LearnerProcess] = []
_spares_owner = 0
# How many spares to keep once a notebook has taken one (``expect_notebooks``). A judge of one
# command is told how many notebooks are left to hand out: a spare no notebook will take costs
# an interpreter's imports (seconds of a core) while the command's own notebooks are graded.
_wanted = SPARES


def _own_spares() -> list[LearnerProcess]:
    """This judge's spares (a process forked from a judge inherits the list, not the spares)."""
    global _spares, _spares_owner
    if _spares_owner != os.getpid():
        _spares, _spares_owner = [], os.getpid()
    return _spares


def prepare_learners() -> None:
    """Start this judge's spare learner processes: they import while the judge loads. As many as
    ``expect_notebooks`` said, and at least the one its first notebook takes."""
    spares = _own_spares()
    while len(spares) < max(1, _wanted):
        spares.append(LearnerProcess(None))


def expect_notebooks(more: int | None) -> None:
    """At most ``more`` notebooks may follow the next one this judge grades (None: any number):
    keep no more spares than that from now on."""
    global _wanted
    _wanted = SPARES if more is None else max(0, min(SPARES, more))


def start_learner(cwd: str, env: dict | None):
    """The oldest spare learner process (and a new spare in its place), or a new one: (process,
    request fd, answer fd). A process with an environment of its own is never a spare."""
    spares = _own_spares()
    for dead in [spare for spare in spares if not spare.alive()]:
        spares.remove(dead)
        dead.kill()
    if env is None and spares:
        process = spares.pop(0)
    else:
        process = LearnerProcess(env)
    if env is None:
        while len(spares) > _wanted:  # the newest first: it has imported least
            spares.pop().kill()
        while len(spares) < _wanted:
            spares.append(LearnerProcess(None))
    process.go(cwd)
    return process, process.request_w, process.answer_r


@atexit.register  # after multiprocessing's own handler was registered: so it runs before it
def _stop_spares() -> None:
    """A spare waits for a notebook forever: stop it, or the interpreter's exit would wait for it."""
    if _spares_owner == os.getpid():
        for spare in _spares:
            spare.kill()


# --- in the learner's process ----------------------------------------------------------------

_watchdog: threading.Thread | None = None


def _end_this_process() -> None:
    if hasattr(os, "killpg"):
        os.killpg(os.getpgrp(), signal.SIGKILL)  # with whatever the learner's code started
    os._exit(1)


def _watch(lifeline_fd: int | None) -> None:
    global _watchdog

    def until_judge_gone() -> None:
        if lifeline_fd is not None:
            while os.read(lifeline_fd, 1):  # nothing is ever written: EOF when the judge is gone
                pass
        else:  # a process we did not start: its parent's end shows as a new parent
            import time

            first = os.getppid()
            while os.getppid() == first:
                time.sleep(0.2)
        _end_this_process()

    _watchdog = threading.Thread(target=until_judge_gone, name="bertlab-watchdog", daemon=True)
    _watchdog.start()


def guard_parent() -> None:
    """End this process when its judge is gone (a watchdog thread; started once)."""
    if _watchdog is None:
        _watch(None)


def confine(folder: str, readable: list[str], unreadable: list[str], ports: tuple[int, ...] = ()) -> bool:
    return False  # no portable sandbox: reported by `bertlab doctor`, never assumed


def _learner_main(request: Connection, answer: Connection, lifeline: Connection, env: dict | None) -> None:
    """A learner process: import and load, wait for the notebook's folder, then serve the judge."""
    if hasattr(os, "setsid"):
        os.setsid()  # its own process group, so the judge's kill takes its subprocesses too
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the learner's prints go nowhere: megabytes must not fill a pipe
        os.dup2(devnull, fd)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    _watch(lifeline.fileno())
    if env is None and hasattr(os, "nice"):
        # A spare imports while its judge grades, or while the learner's next `bertlab grade`
        # starts: at low priority it takes only the time they leave (a learner's second grade in
        # a row took 3.1 s instead of 1.9 s). It cannot be raised back: the learner's code runs
        # at this priority too, which changes its speed only where something else wants the core.
        os.nice(10)
    from bertlab.grading import learner, wire

    learner.preload()
    try:
        options = json.loads(bytes(wire.read_frame(request.fileno())))
    except wire.ChannelClosed:
        return  # a spare that was never used
    os.chdir(options["cwd"])
    learner.main(str(request.fileno()), str(answer.fileno()), sys.modules[__name__])
