"""The Linux path: template forks, pidfd and ``/proc``, ``PR_SET_PDEATHSIG``, Landlock.

Everything here is Linux-only by design; ``platforms/__init__.py`` lists the interface, and
``platforms/portable.py`` is the same interface without any of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from bertlab.grading.platforms.linux import heap, landlock, procstat

name = "linux"
running = procstat.running
release_memory = heap.release


def describe() -> dict[str, str]:
    version = landlock.abi()
    held = [
        "writes only in its notebook's folder",
        "reads only that folder, Python, its packages (not transformers) and the course's code",
        "traces no grader process",
    ]
    if version >= 4:
        held.append("opens no TCP connection")
    if version >= 6:
        held.append("signals no grader process")
    missing = [] if version >= 6 else ["signals to the grader's processes are not scoped (Landlock ABI 6, Linux 6.12)"]
    return {
        "path": "linux",
        "judges": "forked from one process that has imported torch and loaded the model",
        "learners": "forked from a template that has imported torch (milliseconds per notebook)",
        "sandbox": f"Landlock ABI {version}: the learner's code " + ", ".join(held) + "".join(f"; {m}" for m in missing)
        if version >= 1
        else "absent: this kernel has no Landlock (5.13 or newer has it)",
    }


def start_judge_factory(env: dict):
    from bertlab.grading.platforms.linux.judge_factory import JudgeFactory

    return JudgeFactory(env)


def prepare_learners() -> None:
    from bertlab.grading.platforms.linux.template import LearnerTemplate

    if not LearnerTemplate.here():  # a judge forked by the factory was handed one (``TemplateMaker``)
        LearnerTemplate.fork_here()


def expect_notebooks(more: int | None) -> None:
    """Nothing to size here: a learner process is a fork of the template, started when needed."""


_SUBREAPER = 36  # PR_SET_CHILD_SUBREAPER: orphans below this process are reparented to it, not to init


def become_subreaper() -> None:
    """Keep every process started below this one below it, even when its own parent ends: a
    learner's child that detaches itself (``setsid``, a double fork) can then still be found."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(_SUBREAPER, 1)


def end_tree(root: int, include_root: bool = True) -> None:
    """Kill every process under ``root`` (and ``root``), stopped first so that none forks meanwhile.

    Below a subreaper nothing leaves the tree, however it detaches, so a few rounds end it all."""
    for _ in range(20):
        below = procstat.descendants(root)
        if not below:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in below:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        time.sleep(0.005)
    if include_root:
        try:
            os.kill(root, signal.SIGKILL)
        except ProcessLookupError:
            pass


def tree_memory_mb(root: int, below: list[int], limit: float | None = None) -> float:
    """The memory of ``root``'s process tree in MB (over ``limit``, when given, exactly when the
    tree is): ``root``'s RSS plus the PSS of each process ``below`` it (``procstat.tree``:
    however they detached, ``root``, a subreaper, keeps them).

    A descendant forked from ``root`` maps torch and the model copy-on-write with it and the
    template: its RSS counts those again (summing RSS, a right notebook's two DataLoader workers
    would count torch three times), while its PSS counts each shared page by share, the pages it
    alone wrote in full. Private memory alone (USS) would count too little: a child that
    allocates and then forks shares those pages with its own child, private to neither.

    A PSS is read by walking the process's pages (about 8 ms for a child forked from a learner
    that imported torch), an RSS from a counter: the RSS, never less than the PSS, are summed
    first, and the PSS read only when that sum is over ``limit`` (always when there is none).

    No cgroup, even where one could be made: it charges the page cache (the files a notebook
    reads) and each page to whoever touched it first, and a learner's machine cannot make one,
    so the same notebook could be stopped on one machine and pass on another."""
    own = procstat.rss_mb(root)
    most = own + sum(procstat.rss_mb(pid) for pid in below)
    return most if limit is not None and most <= limit else own + sum(procstat.pss_mb(pid) for pid in below)


class TemplateChild:
    """A learner process forked by the template: a grandchild of the judge, known by its pid."""

    def __init__(self, pid: int, template: int | None = None):
        self.pid, self.template = pid, template

    def alive(self) -> bool:
        return procstat.running(self.pid)

    def below(self) -> list[int]:
        return procstat.tree(self.pid)

    def memory_mb(self, below: list[int], limit: float) -> float:
        return tree_memory_mb(self.pid, below, limit)

    def kill(self) -> None:
        """The learner's process and everything it started, detached or not: what detached itself
        and outlived the learner's process was adopted by the template (a subreaper), whose only
        children are this judge's learner processes, one at a time."""
        if self.alive():
            end_tree(self.pid)
        if self.template is not None:
            end_tree(self.template, include_root=False)

    def how_ended(self) -> str:
        return ""


class Child(TemplateChild):
    """A learner process of its own (an environment of its own, or no template to fork)."""

    def __init__(self, proc: subprocess.Popen):
        super().__init__(proc.pid)
        self.proc = proc

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            end_tree(self.pid)
        self.proc.wait()

    def how_ended(self) -> str:
        code = self.proc.returncode
        return "" if code is None else f" ({f'signal {-code}' if code < 0 else f'exit code {code}'})"


def start_learner(cwd: str, env: dict | None):
    """A learner process serving on two new pipes: (process, request fd, answer fd)."""
    to_learner_r, to_learner_w = os.pipe()
    from_learner_r, from_learner_w = os.pipe()
    try:
        if env is not None:
            raise OSError("an environment of its own needs a process of its own")
        from bertlab.grading.platforms.linux.template import LearnerTemplate

        template = LearnerTemplate.shared()
        process = TemplateChild(template.spawn(to_learner_r, from_learner_w, cwd), template.proc.pid)
    except OSError:
        process = Child(
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import sys; from bertlab.grading import learner; "
                    "from bertlab.grading.platforms import linux; learner.main(*sys.argv[1:3], linux)",
                    str(to_learner_r),
                    str(from_learner_w),
                ],
                pass_fds=(to_learner_r, from_learner_w),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # megabytes of printing must not fill a pipe
                stderr=subprocess.DEVNULL,
                env=env,
                cwd=cwd,
                start_new_session=True,  # so a kill takes the learner's own subprocesses too
            )
        )
    finally:
        os.close(to_learner_r)
        os.close(from_learner_w)
    return process, to_learner_w, from_learner_r


def guard_parent() -> None:
    """Be killed when the process that started this one ends (``PR_SET_PDEATHSIG``).

    A judge stops its learner process at its time limit, but a judge that is itself stopped (its
    client went away, its worker was killed) cannot: the learner's process would go on running
    the learner's code, a loop say, with nobody left to stop it. Its parent is the learner
    template, which ends with its judge (or the judge itself, when it was started without one)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the parent ended before the line above
        os._exit(0)
    become_subreaper()  # what the learner's code starts stays below it, for end_tree


def end_with(pid: int) -> None:
    """End this process and everything below it as soon as process ``pid`` ends.

    A judge grades for a pool in another process (a grade command, a Dask worker). When that
    process is killed outright, nobody is left to read the judge's verdict or to stop the
    learner's code it runs, a loop say, until its time limit. A thread waits on ``pid`` (a
    pidfd: woken the moment it ends) and ends the tree at once; the learner's template and
    process end with it."""
    import select
    import threading

    def watch() -> None:
        try:
            handle = os.pidfd_open(pid)
        except OSError:  # gone already, or a kernel without pidfd: look, twice a second
            while procstat.running(pid):
                time.sleep(0.5)
        else:
            select.select([handle], [], [])
        end_tree(os.getpid(), include_root=False)
        os._exit(1)

    threading.Thread(target=watch, name=f"end-with-{pid}", daemon=True).start()


# What any process on Linux reads to run Python and torch, beside Python's own folders: shared
# libraries, the loader's and the locale's settings, its own ``/proc`` entry (``/proc/self`` is
# taken by its real path, the learner's own pid) and the processor's description. Nothing here
# names another process, a user's home or the course.
SYSTEM_READS = (
    "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin",
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/timezone",
    "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/mime.types", "/etc/fonts", "/etc/matplotlibrc",
    "/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/filesystems", "/proc/sys/kernel",
    "/proc/sys/vm", "/sys/devices/system/cpu", "/sys/devices/system/node", "/sys/fs/cgroup",
)  # fmt: skip


def confine(folder: str, readable: list[str], unreadable: list[str], ports: tuple[int, ...] = ()) -> bool:
    return landlock.confine(folder, [*readable, *SYSTEM_READS], unreadable, ports)
