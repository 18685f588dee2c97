"""Warm start for learner processes: one template that has imported torch, IPython and the course,
forked once per notebook.

Starting a learner process costs seconds of imports; a fork of a process that already holds
them costs milliseconds. Each fork is a new process with a new IPython namespace, so nothing
of one notebook reaches the next. The template only imports and loads the pretrained model
(``learner.preload``): it never runs learner code, and starts no threads before it forks.

A judge forks its template itself, right after its imports and ``preload`` (``judge_process.load``)
and before it loads the checks and records the reference activations (``LearnerTemplate.fork_here``):
the template then costs no imports at all, and holds nothing of the judge's own. A judge forked by
the judge factory, which has loaded the checks, gets a template from the factory's
``TemplateMaker`` instead, forked before the factory loaded them. Any other
judge (nbgrader's preprocessor, a test) starts one as ``python -m
bertlab.grading.platforms.linux.template SOCKET_FD`` on first use.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading


class LearnerTemplate:
    """The judge's handle on its template process (one per judge process, started on first use)."""

    _instance: LearnerTemplate | None = None
    _owner_pid = 0
    _lock = threading.Lock()

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bertlab.grading.platforms.linux.template", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        theirs.close()
        self.sock = ours
        self.replies = ours.makefile("r")

    @classmethod
    def fork_here(cls) -> LearnerTemplate:
        """Make a fork of this process the template. Call it with torch, IPython and the checks
        imported, before the judge records its own objects (the activations its verdicts compare
        with), and before any thread starts."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            try:
                ours.close()
                _serve_detached(theirs)
            finally:
                os._exit(0)
        theirs.close()
        server = cls.__new__(cls)
        server.proc, server.sock, server.replies = _Forked(pid), ours, ours.makefile("r")
        with cls._lock:
            cls._instance, cls._owner_pid = server, os.getpid()
        return server

    @classmethod
    def adopt(cls, sock: socket.socket, pid: int) -> None:
        """Make the template ``TemplateMaker.new_template`` started this judge's (in a judge forked
        by the factory, before ``prepare_learners``)."""
        server = cls.__new__(cls)
        server.proc, server.sock, server.replies = _Adopted(pid), sock, sock.makefile("r")
        with cls._lock:
            cls._instance, cls._owner_pid = server, os.getpid()

    @classmethod
    def here(cls) -> bool:
        """Whether this process has a template already (adopted, or forked)."""
        with cls._lock:
            return cls._instance is not None and cls._owner_pid == os.getpid()

    @classmethod
    def shared(cls) -> LearnerTemplate:
        with cls._lock:
            if cls._instance is None or cls._owner_pid != os.getpid() or cls._instance.proc.poll() is not None:
                cls._instance, cls._owner_pid = LearnerTemplate(), os.getpid()
            return cls._instance

    def spawn(self, request_fd: int, answer_fd: int, cwd: str | None) -> int:
        """Fork a learner process serving on the two pipe ends; its pid (also its process group)."""
        with self._lock:
            socket.send_fds(self.sock, [json.dumps({"cwd": cwd}).encode()], [request_fd, answer_fd])
            line = self.replies.readline()
        if not line.strip().isdigit():
            raise OSError("the learner template stopped")
        return int(line)


class _Forked:
    """``poll()`` of a template forked by ``fork_here``, as ``subprocess.Popen`` has it."""

    def __init__(self, pid: int):
        self.pid = pid

    def poll(self):
        try:
            done, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return -1
        return None if done == 0 else status


class _Adopted:
    """``poll()`` of a template that is not this process's child (``TemplateMaker``'s)."""

    def __init__(self, pid: int):
        self.pid = pid

    def poll(self):
        from bertlab.grading.platforms.linux import procstat

        return None if procstat.running(self.pid) else -1


class TemplateMaker:
    """In the judge factory: a process forked before the factory loads the judge's side (the checks),
    which forks one learner template per judge. The factory's judges then start in milliseconds
    with the checks loaded, while their learner templates (and every learner process) hold none of
    the judge's code. Neither holds transformers: the judge compares with the course's own BERT."""

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            try:
                ours.close()
                _make_templates(theirs)
            finally:
                os._exit(0)
        theirs.close()
        self.sock, self.replies = ours, ours.makefile("r")

    def close(self) -> None:
        """This process's end of the channel (a forked judge drops the copy it inherited)."""
        self.replies.close()
        self.sock.close()

    def new_template(self) -> tuple[socket.socket, int]:
        """A new template's socket and pid (for one judge: it ends when that judge is gone)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            socket.send_fds(self.sock, [b"template"], [theirs.fileno()])
        finally:
            theirs.close()
        line = self.replies.readline()
        if not line.strip().isdigit():
            ours.close()
            raise OSError("the learner template maker stopped")
        return ours, int(line)


def _make_templates(sock: socket.socket) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # templates are reaped by the system
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 64, 1)
        except OSError:
            message = b""
        if not message:  # the factory is gone; each template ends with its judge
            return
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _serve_detached(socket.socket(fileno=fds[0]))
            finally:
                os._exit(0)
        os.close(fds[0])
        sock.sendall(f"{pid}\n".encode())


def _serve_detached(sock: socket.socket) -> None:
    """``_serve`` in a forked template, detached from the process that forked it."""
    # A session of its own: a judge killed with its process group leaves the template alive for
    # the moment it takes to see the judge gone and end what it adopted.
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the judge's pipes must see EOF when the judge itself dies
        os.dup2(devnull, fd)
    _serve(sock)


def _serve(sock: socket.socket) -> None:
    # Everything a notebook's first cells import and load, so that a fork starts with it in memory.
    import bertlab.grading.learner as learner
    from bertlab.grading.platforms import linux

    learner.preload()
    linux.become_subreaper()  # a learner's detached children come here when the learner ends
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks are reaped by the system
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 4096, 2)
        except OSError:
            message = b""
        if not message:  # the judge is gone: nothing of its learners' may outlive it
            linux.end_tree(os.getpid(), include_root=False)
            return
        options = json.loads(message)
        pid = os.fork()
        if pid == 0:
            try:
                sock.close()
                os.setsid()  # its own process group, so the judge's kill takes its subprocesses too
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                if options.get("cwd"):
                    os.chdir(options["cwd"])
                request_fd, answer_fd = fds  # the judge sends the learner's two pipe ends
                learner.main(str(request_fd), str(answer_fd), linux)
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        sock.sendall(f"{pid}\n".encode())


if __name__ == "__main__":
    _serve(socket.socket(fileno=int(sys.argv[1])))
