"""A Jupyter kernel confined as a learner's process of ``bertlab grade`` is, under a keeper that
enforces its limits and ends everything it started (Linux).

``nbgrader autograde`` runs each learner's notebook in a Jupyter kernel: the learner's code, as
the instructor's user, in the course's folder. The keeper (the process the stand-in knows as the
kernel) makes itself a subreaper and forks the kernel, which confines itself before ipykernel
starts a thread (Landlock holds for the calling thread and what it starts): it writes and reads
only in its notebook's folder and reads what Python needs, never the course's folder, classmates'
submissions, the gradebook or the instructor's home, binds only its own five ports, connects
nowhere, and signals nothing outside itself. The keeper stays outside, so no cell can stop it:

- when the kernel ends, or its stand-in does (Jupyter's shutdown, a killed nbgrader), it ends
  every process below it, however detached: no daemon a cell started outlives its notebook;
- it reads the tree's memory (as the judge does: ``tree_memory_mb``) four times a second and
  stops the tree past the course's memory limit or process limit;
- it tells the stand-in how the kernel ended, as an exit status (``exit_status``), so that the
  course's ``Execute`` preprocessor can give the reason (``describe``) where nbgrader gave none.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import warnings
from collections.abc import Callable

# Exit statuses past the kernel's own (0-127) and a signal's (128 + its number).
OVER_MEMORY, TOO_MANY_PROCESSES = 250, 251
CHECK_EVERY = 0.25  # seconds between readings of the kernel's tree


def exit_status(wait_status: int) -> int:
    """The stand-in's exit status for a kernel that ended with ``wait_status`` (``os.waitpid``)."""
    if os.WIFSIGNALED(wait_status):
        return 128 + os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status) & 0x7F


def describe(status: int | None, memory_mb: float, processes: int) -> str:
    """Why a kernel that ended with the stand-in's exit ``status`` did, for the learner's feedback."""
    if status == OVER_MEMORY:
        return f"stopped: your code used more than {memory_mb:g} MB of memory"
    if status == TOO_MANY_PROCESSES:
        return f"stopped: your code started more than {processes} processes"
    if status is not None and status > 128:
        try:
            name = signal.Signals(status - 128).name
        except ValueError:
            name = f"signal {status - 128}"
        return f"the notebook's kernel was killed ({name}): does a cell kill its own process?"
    code = "" if status is None else f" (exit code {status})"
    return f"the notebook's kernel ended{code}: does a cell call os._exit(), exit() or crash the interpreter?"


def _ports(connection_file: str) -> tuple[int, ...]:
    with open(connection_file) as f:
        info = json.load(f)
    return tuple(int(info[k]) for k in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"))


def _confine(request: dict) -> None:
    """In the kernel, before any thread: what the judge's learner process does in ``learner.main``."""
    from bertlab import reference
    from bertlab.grading.platforms import linux

    reference.serve_course_modules()  # the notebook's load_model(): bertlab.bert, never transformers'
    # matplotlib reads its font cache in the user's home on import: before the home is closed.
    import matplotlib.font_manager  # noqa: F401

    # ipykernel binds a TCP port of its own choosing for what a cell's forked processes print:
    # refused (a kernel binds only its five ports), so their prints are lost, said once here.
    warnings.filterwarnings("ignore", message="Couldn't bind IOPub Pipe")
    # At shutdown ipykernel looks for its children in /proc, which it cannot list: the keeper
    # ends them (all of them, detached too), so the kernel's search would only log an error.
    from ipykernel.kernelbase import Kernel

    async def keeper_ends_them(_kernel) -> None:
        pass

    Kernel._progressively_terminate_all_children = keeper_ends_them  # type: ignore[method-assign]
    confine = request["confine"]
    if not linux.confine(os.getcwd(), confine["readable"], confine["unreadable"], _ports(request["connection_file"])):
        print("bertlab: this Linux has no Landlock: the notebook's kernel runs unconfined", file=sys.stderr)


def keep(request: dict, stand_in_alive: int | None, launch: Callable[[], None], private: tuple[int, ...] = ()) -> int:
    """Fork the confined kernel (``launch`` starts ipykernel in it), keep it until it or the
    stand-in (``stand_in_alive`` reads EOF when it is gone; None: this process is the stand-in)
    ends, then end its whole tree. Returns the stand-in's exit status (``exit_status``).
    ``private``: descriptors of the keeper's that the kernel must not hold (nor write a forged
    status to)."""
    from bertlab.grading.platforms import linux
    from bertlab.grading.platforms.linux import procstat

    linux.become_subreaper()
    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # Jupyter's interrupt, the stand-in's end
    signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)  # until each process has its own handlers
    kernel = os.fork()
    if kernel == 0:
        try:
            for sig in forwarded:
                signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)
            os.setpgid(0, 0)  # a cell's killpg(0) addresses the kernel's own processes only
            linux.guard_parent()  # the kernel never outlives its keeper
            for fd in (*private, stand_in_alive):
                if fd is not None:
                    os.close(fd)
            _confine(request)
            launch()
            os._exit(0)  # shut down as asked (a cell's exit() too)
        finally:
            os._exit(1)

    def forward(number: int, _frame) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(kernel, number)

    for sig in forwarded:
        signal.signal(sig, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)
    limits = request["confine"]
    ended = os.pidfd_open(kernel)
    watched = [ended] if stand_in_alive is None else [ended, stand_in_alive]
    status = None
    while status is None:
        try:
            ready, _, _ = select.select(watched, [], [], CHECK_EVERY)
        except InterruptedError:
            continue
        if ended in ready:
            status = exit_status(os.waitpid(kernel, 0)[1])
        elif ready:  # the stand-in is gone: nobody waits for this kernel
            status = 0
        else:
            below = procstat.tree(kernel)
            if len(below) > limits["processes"]:
                status = TOO_MANY_PROCESSES
            elif linux.tree_memory_mb(kernel, below) > limits["memory_mb"]:
                status = OVER_MEMORY
    linux.end_tree(os.getpid(), include_root=False)
    if status in (OVER_MEMORY, TOO_MANY_PROCESSES):
        print(f"bertlab: {describe(status, limits['memory_mb'], limits['processes'])}", file=sys.stderr)
    return status
