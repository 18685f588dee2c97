"""Warm judge processes (``judge_process.py``) and the pool that keeps them: what every way of grading
(``bertlab grade``, warm judges, ``--watch``, ``bertlab autograde``, a Dask worker) runs notebooks on,
with the limits each notebook gets and the environment judges start in."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bertlab.grading import confinement
from bertlab.grading.results import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT

if TYPE_CHECKING:
    from bertlab.grading.platforms.linux.judge_factory import JudgeFactory


@dataclass(frozen=True)
class Limits:
    """What one notebook may use: seconds for all its cells, MB for the learner's process."""

    timeout: float = DEFAULT_TIMEOUT
    memory_mb: float = DEFAULT_MEMORY_MB


class JudgeProcess:
    """A warm judge process (``judge_process.py``) that grades notebooks one after another: a fork of the
    pool's ``JudgeFactory`` when it has one, else a process of its own."""

    def __init__(self, env: dict, factory=None):
        self.env = env
        if factory is not None:
            self.proc = factory.spawn()
        else:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bertlab.grading.judge_process"],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,  # so a kill takes every process the worker started
            )
        self.stderr: list[str] = []
        self.more: int | None = None  # notebooks that may follow the next one (``JudgePool.expect``)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for line in self.proc.stderr:  # kept for the message if the worker dies
            self.stderr = [*self.stderr, line.rstrip()][-20:]

    def _last_words(self) -> str:
        if self.stderr:
            return self.stderr[-1]
        return self.proc.last_words() if hasattr(self.proc, "last_words") else "no output"

    def judge(self, notebook: Path, result: Path, limits: Limits) -> str:
        """``done``, or why not: ``timeout`` or ``died: <last line of stderr>``."""
        request = {
            "notebook": str(notebook),
            "result": str(result),
            "timeout": limits.timeout,
            "memory_mb": limits.memory_mb,
            "more": self.more,
        }
        answer: list[str] = []
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError:
            return f"died: {self._last_words()}"
        reader = threading.Thread(target=lambda: answer.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(limits.timeout + 60)  # the worker stops the learner at the limit; this is the backstop
        if reader.is_alive():
            self.close()
            return "timeout"
        if answer and answer[0].strip() == "done":
            return "done"
        self.close()
        return f"died: {self._last_words()}"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive and self.proc.pid is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        with contextlib.suppress(OSError):  # a judge we could not kill (its pid never came) ends on EOF
            self.proc.stdin.close()


class Judge(Protocol):
    """One judge, for one notebook: a ``JudgeProcess``, or a warm judge reached through its socket."""

    def judge(self, notebook: Path, result: Path, limits: Limits) -> str: ...


class Judges(Protocol):
    """What notebooks are graded on: a ``JudgePool``, or the warm judges in front of one."""

    def take(self) -> contextlib.AbstractContextManager[Judge]: ...

    def close(self) -> None: ...


class _NoFactory:
    """Where judges are not forked (the portable path): each starts as a process of its own."""

    alive = False

    def close(self) -> None:
        pass


_NO_FACTORY = _NoFactory()


class JudgePool:
    """Warm workers handed out to one grading thread at a time; a dead one is replaced.

    Its workers are forks of one ``JudgeFactory``, started with the first of them: the imports
    and the model are loaded once, however many judges run side by side or replace one that died.
    """

    def __init__(self, env: dict):
        from bertlab.grading import scratch

        # What a grader killed here left behind (learners' notebooks, hidden tests): not kept
        scratch.sweep()
        self.env, self.lock = env, threading.Lock()
        self.idle: list[JudgeProcess] = []
        self.busy: set[JudgeProcess] = set()
        self.factory: JudgeFactory | _NoFactory | None = None  # set when the first worker starts
        self.untaken: int | None = None  # notebooks not handed out yet, where known (``expect``)

    def expect(self, notebooks: int) -> None:
        """This pool grades ``notebooks`` notebooks, then stops: each judge hears, with each
        notebook, how many may follow it, and starts nothing ahead for notebooks that will not come."""
        with self.lock:
            self.untaken = notebooks

    def _new_judge(self) -> JudgeProcess:
        """A fork of the factory where the platform has one; a process of its own otherwise, or
        when the factory has stopped (it reports its own failure to start, if that is why)."""
        from bertlab.grading import platforms

        if self.factory is None:
            self.factory = platforms.current().start_judge_factory(self.env) or _NO_FACTORY
        return JudgeProcess(self.env, self.factory if self.factory.alive else None)

    def warm_up(self) -> None:
        """Start a worker now, so the first notebook does not wait for its imports."""
        with self.lock:
            self.idle.append(self._new_judge())

    @contextlib.contextmanager
    def take(self):
        with self.lock:
            # One that ended while idle (killed from outside, out of memory) must not cost a notebook.
            for dead in [w for w in self.idle if not w.alive]:
                self.idle.remove(dead)
                dead.close()
            # The one idle longest: on the portable path a judge that just graded is still starting
            # its next spare learner process (seconds of imports), which the next notebook would wait for.
            worker = self.idle.pop(0) if self.idle else self._new_judge()
            self.busy.add(worker)
            if self.untaken is not None:
                self.untaken = max(0, self.untaken - 1)
            worker.more = self.untaken
        try:
            yield worker
        finally:
            with self.lock:
                self.busy.discard(worker)
                if worker.alive:
                    self.idle.append(worker)
            if not worker.alive:
                worker.close()  # its pipes too: whatever is left of it reads the end of its input

    def close(self) -> None:
        """Stop every worker, those still judging too (Ctrl-C): the processes running their
        notebooks' cells end with them."""
        with self.lock:
            workers, self.idle = self.idle + list(self.busy), []
            factory, self.factory = self.factory, None
        if factory is not None:  # first: a judge it has not forked yet never will be
            factory.close()
        for worker in workers:
            worker.close()


def spin_briefly(env) -> None:
    """Idle OpenMP threads of torch wait briefly, not long, in ``env`` (unless it says otherwise).

    Set before torch is imported in every process that judges: the judge and the learner's process
    take turns, each waiting for the other's answer, and by default an idle OpenMP thread spins
    for a while on the core the other one needs (with two threads, notebook 05 graded 20% slower
    than with one). Spinning briefly costs nothing where two threads help (06 and 07, about 10%).
    """
    env.setdefault("GOMP_SPINCOUNT", "2000")


def share_cores(env, jobs: int) -> None:
    """Threads per process in ``env`` for ``jobs`` judges side by side (unless it says otherwise).

    Set before torch and numpy are imported. Judges running side by side must share the cores,
    not each start one thread per core: oversubscribed BLAS threads make every matmul several
    times slower (the mutation test's numpy notebook, on two test workers: 67 s, 27 s shared).
    """
    threads = str(max(1, (os.cpu_count() or 1) // max(1, jobs)))
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, threads)


# Set by the pools whose judges outlive one command (warm judges, --watch, a cluster's workers):
# what only some notebooks need is computed once at start, not on the first grade that needs it.
WARM_ALL = "BERTLAB_JUDGE_WARM_ALL"


def judge_env(jobs: int, model: str | None = None, long_lived: bool = False) -> dict:
    """The environment of judges of which ``jobs`` run side by side; ``long_lived`` judges, which
    outlive one command, compute at start what only some notebooks need (``judge_process._warm_up``)."""
    # Only what Python, torch and the course read: a judge's learner processes are forked from it,
    # and what the instructor's shell held (tokens, passwords) must not be in their memory.
    env = {**confinement.environment(), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "MPLBACKEND": "Agg"}
    env.pop(WARM_ALL, None)
    if long_lived:
        env[WARM_ALL] = "1"
    share_cores(env, jobs)
    spin_briefly(env)
    if model:
        env["BERTLAB_MODEL"] = str(Path(model).resolve())
    return env
