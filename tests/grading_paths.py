"""The two grading paths, for tests that must hold on both (see ``bertlab.grading.platforms``).

``portable`` is run here as macOS would run it: ``BERTLAB_PORTABLE=1``, and ``tests/macos_like``
on ``PYTHONPATH`` so that every process of the run starts without the Linux-only interfaces
(``os.pidfd_open``, ``os.fork``, libc's ``prctl`` and ``syscall``).
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

MACOS_LIKE = Path(__file__).resolve().parent / "macos_like"
PATHS = ("linux", "portable")


def path_env(path: str, env: dict | None = None) -> dict:
    """``env`` (default: this process's) for grading on ``path``."""
    env = dict(os.environ if env is None else env)
    env.pop("BERTLAB_PORTABLE", None)
    if path == "portable":
        env["BERTLAB_PORTABLE"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(MACOS_LIKE), env.get("PYTHONPATH")]))
    return env


def processes_with(name: str, value: str) -> list[psutil.Process]:
    """The running processes whose environment holds ``name=value``: every process a command
    started inherits it, its judges', learners' and spares' too."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(name) == value:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def gone_within(name: str, value: str, seconds: float) -> list[str]:
    """The command lines of the processes with ``name=value`` still running after ``seconds``
    (a process that ends with its parent may take a moment), each killed: none outlives a test."""
    import contextlib
    import time

    deadline = time.monotonic() + seconds
    while processes_with(name, value) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = []
    for proc in processes_with(name, value):
        with contextlib.suppress(psutil.Error):
            left.append(" ".join(proc.cmdline()))
            proc.kill()
    return left


def judge_of(learner: psutil.Process, client: psutil.Process | int, path: str) -> psutil.Process:
    """The judge grading the notebook ``learner`` runs, for a command ``client`` with one judge.

    On the portable path the judge is the learner's parent. On Linux the learner's parent is its
    template, whose parent is the judge factory's template maker (forked before the factory loaded
    transformers); the judge is the factory's other child."""
    client_pid = client if isinstance(client, int) else client.pid
    if path == "portable":
        return learner.parent()
    maker = learner.parent().parent()
    factory = maker.parent()
    assert factory.parent().pid == client_pid, "the learner is not below the command's judge factory"
    (judge,) = [p for p in factory.children() if p.pid != maker.pid and p.status() != psutil.STATUS_ZOMBIE]
    return judge
