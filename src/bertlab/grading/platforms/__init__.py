"""Everything grading needs from the operating system, behind one small interface.

The rest of grading calls only the functions below; each platform implements them in a module
of its own:

- ``linux``: what the course was built on. Judges are forks of one factory, learner processes
  forks of a template that has imported torch (milliseconds each), liveness from a pidfd or
  ``/proc``, ``PR_SET_PDEATHSIG`` as the parent-death guard, Landlock as the sandbox (writes, and reads of
  transformers).
- ``portable``: every other platform (macOS), and Linux with ``BERTLAB_PORTABLE=1``. It touches
  no Linux-only interface: psutil for process state and memory, learner processes started by
  Python's ``multiprocessing`` the way it starts them safely there (spawn), two spare learner
  processes kept warm per judge so that a notebook does not wait for their imports, a watchdog
  thread in the learner's process that ends it when its judge is gone, and no sandbox (reported
  so).

Verdicts do not depend on the path: the judge, the checks and the learner's server are the
same code; only how processes start, are watched and are stopped differs.

The interface:

- ``name``: ``"linux"`` or ``"portable"``; ``describe()``: what ``bertlab doctor`` prints.
- ``start_judge_factory(env)``: a factory that forks judges, or None (each judge starts on its own).
- ``prepare_learners()``: in a new judge, before anything else runs there: get ready to start
  learner processes fast (Linux forks its template; portable spawns its spares).
- ``expect_notebooks(more)``: in a judge, at its start and before each notebook: at most ``more``
  notebooks may follow the next one (None: any number); the portable path keeps no more spares.
- ``start_learner(cwd, env)``: ``(process, request_fd, answer_fd)``; ``process`` has ``pid``,
  ``alive()``, ``below()`` (the processes below it, however detached where the platform can
  tell), ``memory_mb(below, limit)`` (its whole process tree's, exact where it may pass
  ``limit``), ``kill()`` (its whole process group) and ``how_ended()``.
- ``guard_parent()``: in the learner's process, end it when its judge is gone.
- ``confine(folder, readable, unreadable, ports=())``: in the learner's process; True when it now
  writes only beneath ``folder``, reads only there and beneath ``readable`` (with the system's
  libraries) but nothing beneath ``unreadable``, and binds no TCP port but ``ports``.
- ``running(pid)``: whether another process runs, read without signalling it.
- ``release_memory()``: give the heap a graded notebook freed back to the system.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

PORTABLE_ENV = "BERTLAB_PORTABLE"


def is_portable() -> bool:
    """Whether this process uses the portable path (not Linux, or ``BERTLAB_PORTABLE=1``)."""
    return not sys.platform.startswith("linux") or os.environ.get(PORTABLE_ENV) == "1"


def current() -> ModuleType:
    """The module that implements the interface here (imported on first use)."""
    if is_portable():
        from bertlab.grading.platforms import portable

        return portable
    from bertlab.grading.platforms import linux

    return linux
