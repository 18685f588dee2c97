"""One process that loads what every judge needs, forked once per judge.

Most of a judge's start is imports and the pretrained model: torch, IPython and the checks, then
the model (the course's own BERT: no transformers, which was 3.4 s of a 6 s start). Judges side by side each paid
that and each kept its own copy. The factory pays it once; a judge is a fork of it, made in
milliseconds, that shares its memory until it writes (two warm judges with their templates:
0.63 GB instead of 1.17 GB). Each judge gets its own learner template, forked by a process the factory
forked before loading the checks (``template.TemplateMaker``: learners hold none of their code),
and records its own activations (``judge_process.serve``).

The factory runs no judge code and no learner code, and starts no threads, so forking it is safe
and a judge gets nothing from another. A judge whose process ends (a timeout, a crash) is
replaced by another fork, not by another start.

Usage (by ``pool.JudgePool`` only):
``python -m bertlab.grading.platforms.linux.judge_factory SOCKET_FD``.
"""

from __future__ import annotations

import collections
import importlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, cast

from bertlab.grading.platforms import linux
from bertlab.grading.platforms.linux import procstat


class ForkedJudge:
    """A judge forked by the factory, seen as ``pool.JudgeProcess`` sees a ``subprocess.Popen``:
    ``stdin``, ``stdout``, ``stderr``, ``pid``, ``poll()`` and ``wait()``.

    It is handed out at once; its pid arrives when the factory has finished loading and forked
    it, so the judges' start overlaps whatever the grader does meanwhile."""

    def __init__(self, stdin_fd: int, stdout_fd: int, stderr_fd: int, factory: JudgeFactory):
        self.stdin = os.fdopen(stdin_fd, "w")
        self.stdout = os.fdopen(stdout_fd, "r")
        self.stderr = os.fdopen(stderr_fd, "r")
        self.factory = factory
        self._pid: int | None = None
        self._pidfd: int | None = None
        self._exited = False
        self._forked = threading.Event()
        self._lock = threading.Lock()

    def forked(self, pid: int | None) -> None:
        """The factory's answer: the judge's pid, or None when it ended before forking it."""
        self._pid, self._exited = pid, pid is None
        if pid is not None:
            try:  # a handle on this very process: its pid may be another's once it has ended
                self._pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                self._exited = True
            except OSError:  # a kernel without pidfd: read /proc instead
                pass
        self._forked.set()

    def abandon(self) -> None:
        """No answer will come (the factory or its reader ended): the judge counts as ended, and
        nobody waits for it. A judge whose pid came is still watched and killed through it.
        Cannot fail, so that it can end whatever failure came before."""
        self._exited = self._pid is None
        self._forked.set()

    @property
    def pid(self) -> int | None:
        self._forked.wait()
        return self._pid

    def poll(self) -> int | None:
        if not self._forked.is_set():
            return None  # still being forked: it will answer on its pipes
        with self._lock:
            if not self._exited:
                if self._pid is None:  # not reached: _exited is set whenever no pid came (forked, abandon)
                    self._exited = True
                elif self._pidfd is None:
                    self._exited = not procstat.running(self._pid)
                elif select.select([self._pidfd], [], [], 0)[0]:  # readable once the process ended
                    self._exited = True
                    os.close(self._pidfd)
                    self._pidfd = None
            return -1 if self._exited else None

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(0.01)
        return -1

    def last_words(self) -> str:
        """Why a judge never answered: the factory's last line on stderr when it failed to load."""
        if not self.factory.alive:
            self.factory.drainer.join(timeout=5)  # its last lines may still be on their way
        return self.factory.stderr[-1] if self.factory.stderr else "no output"


class JudgeFactory:
    """The pool's handle on its factory process, started at once and loading in the background."""

    def __init__(self, env: dict):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bertlab.grading.platforms.linux.judge_factory", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        theirs.close()
        self.sock = ours
        self.stderr: list[str] = []
        self.pending: collections.deque[ForkedJudge] = collections.deque()
        self.lock = threading.Lock()
        threading.Thread(target=self._read_pids, daemon=True).start()
        self.drainer = threading.Thread(target=self._drain, daemon=True)
        self.drainer.start()

    def _drain(self) -> None:
        # started with stderr=PIPE and text=True: a text stream, never None
        for line in cast(IO[str], self.proc.stderr):  # an import that fails is reported by the judges it owed
            self.stderr = [*self.stderr, line.rstrip()][-20:]

    def _read_pids(self) -> None:
        # The factory answers requests in the order they came: one pid per line.
        try:
            for line in self.sock.makefile("r"):
                with self.lock:
                    judge = self.pending.popleft() if self.pending else None
                if judge is not None:
                    try:
                        judge.forked(int(line) if line.strip().isdigit() else None)
                    except BaseException:
                        judge.abandon()
                        raise
        except OSError:  # a factory that dies with requests unread resets the connection
            pass
        except BaseException as err:  # noqa: BLE001  (a defect here must end the judges it owes with its reason, not hang them)
            self.stderr.append(f"the judge factory's reader failed: {type(err).__name__}: {err}")
            self.close()
        finally:
            with self.lock:  # the factory ended, or its reader did: what it did not fork, it never will
                owed, self.pending = list(self.pending), collections.deque()
            for judge in owed:
                judge.abandon()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self) -> ForkedJudge:
        """A new judge: forked as soon as the factory has loaded (at once after that)."""
        to_judge_r, to_judge_w = os.pipe()
        from_judge_r, from_judge_w = os.pipe()
        errors_r, errors_w = os.pipe()
        judge = ForkedJudge(to_judge_w, from_judge_r, errors_r, self)
        try:
            with self.lock:
                self.pending.append(judge)
                try:
                    socket.send_fds(self.sock, [b"judge"], [to_judge_r, from_judge_w, errors_w])
                except OSError:
                    self.pending.remove(judge)
                    judge.forked(None)
        finally:
            for fd in (to_judge_r, from_judge_w, errors_w):  # the judge holds them now
                os.close(fd)
        return judge

    def close(self) -> None:
        """Stop the factory; the judges it forked stop when their pool closes their pipes."""
        self.sock.close()
        if self.alive:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


# The program each forked judge runs, by name, as `python -m` names it: it sits above the platform
# (it starts learners through it), so the platform does not import it.
JUDGE_PROGRAM = "bertlab.grading.judge_process"


def _serve(sock: socket.socket) -> None:
    pool = os.getppid()  # the process whose pool asked for this factory: judges end with it
    judge = importlib.import_module(JUDGE_PROGRAM)

    from bertlab.grading.platforms.linux.template import LearnerTemplate, TemplateMaker

    judge.load()
    templates = TemplateMaker()  # before the checks are loaded here: learners must not hold them
    judge.load_judge_side()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # judges are reaped by the system
    while True:
        message, fds, _, _ = socket.recv_fds(sock, 64, 3)
        if not message:
            return  # the pool closed: no more judges
        sys.stderr.flush()  # nothing of the factory's own output may reach a judge's pipe
        grouped_r, grouped_w = os.pipe()
        template, template_pid = templates.new_template()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                sock.close()
                templates.close()  # the maker's channel is the factory's: its end must follow the factory's
                LearnerTemplate.adopt(template, template_pid)
                os.close(grouped_r)
                os.setsid()  # its own process group: killing it takes its learner template too
                os.close(grouped_w)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                linux.end_with(pool)  # a killed grade command or Dask worker leaves no judge grading
                for fd, std in zip(fds, (0, 1, 2), strict=True):  # sys.stdin and co. now read and write the pipes
                    os.dup2(fd, std)
                    os.close(fd)
                judge.serve()
            except BaseException:  # noqa: BLE001  (reported on the judge's stderr, read by its pool)
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                sys.stderr.flush()
                os._exit(code)
        template.close()  # the judge holds it: the template ends when that judge is gone
        for fd in (*fds, grouped_w):
            os.close(fd)
        os.read(grouped_r, 1)  # EOF once the judge leads its group: the pool may then kill the group
        os.close(grouped_r)
        sock.sendall(f"{pid}\n".encode())


if __name__ == "__main__":
    _serve(socket.socket(fileno=int(sys.argv[1])))
