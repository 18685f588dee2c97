"""The kernel template's own process (Linux): it imports what a notebook of the course imports
first, then forks a Jupyter kernel for each stand-in that asks, until the process it serves ends.

Started by ``bertlab.kernel_template`` (``python -m bertlab.kernel_template serve``), which also
holds the stand-in Jupyter runs and says why kernels are forked at all.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import threading
from pathlib import Path


def _watch(owner: int) -> int | None:
    """A descriptor that becomes readable when process ``owner`` ends (None: it has ended)."""
    try:
        return os.pidfd_open(owner)
    except ProcessLookupError:
        return None


def serve(socket_path: str, owner: int, confined: bool = False) -> None:
    """The template: listen first (a stand-in that comes early waits), import, then fork on demand
    until ``owner`` (the process the kernels are for) is gone. ``confined``: its kernels run
    learners' code (nbgrader's), which gets the course's own modules and never transformers'."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(socket_path)
    except OSError:  # another template of the same owner won the race: its stand-ins use that one
        return
    try:
        server.listen(16)
        _preload(confined)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # kernels are reaped by the system
        owner_gone = _watch(owner)
        while owner_gone is not None:  # a template outlives no owner, however it ended
            ready, _, _ = select.select([server.fileno(), owner_gone], [], [])
            if owner_gone in ready:
                break
            conn, _ = server.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 5)
            try:
                # Read here, not in the fork: a child that raised would run this function's
                # clean-up and remove the socket every later stand-in needs.
                request = json.loads(message) if len(fds) == 5 else None
            except ValueError:
                request = None
            if not isinstance(request, dict):
                for fd in fds:
                    os.close(fd)
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                server.close()
                conn.close()
                _kernel(request, *fds)
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())
            conn.close()
    finally:
        server.close()
        Path(socket_path).unlink(missing_ok=True)


def _preload(confined: bool) -> None:
    """What a notebook of the course imports first. The course's reference module first: it keeps
    Hugging Face offline before transformers is imported. Not pyplot: the kernel chooses
    matplotlib's backend. (isort: off keeps that order: sorted, bertlab would come last.)

    Transformers' BERT only for the lessons' kernels: a confined kernel runs a learner's notebook
    on the course's own modules (``confined_kernel``), must not find transformers in its memory,
    as the judge's learner process must not, and would pay seconds of every nbgrader command's
    template for it."""
    # isort: off
    import bertlab.reference
    import ipykernel.kernelapp  # noqa: F401
    import matplotlib  # noqa: F401
    import torch  # noqa: F401

    if not confined:
        import transformers.models.bert.modeling_bert  # noqa: F401

    import bertlab.checks
    import bertlab.corpus
    import bertlab.experiments
    import bertlab.masks  # noqa: F401
    # isort: on


def _kernel(request: dict, stand_in_alive: int, kernel_alive: int, stdin: int, stdout: int, stderr: int) -> None:
    """The forked kernel: the stand-in's environment, directory, arguments and standard streams,
    then ipykernel; confined under a keeper (``confined_kernel``) when the request asks for it."""
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = [sys.argv[0], "-f", request["connection_file"], *request.get("arguments", [])]
        if request.get("confine") is not None:  # nbgrader's: the learner's code, confined and kept
            from bertlab.grading.platforms.linux import confined_kernel

            status = confined_kernel.keep(request, stand_in_alive, _launch, (kernel_alive,))
            os.write(kernel_alive, f"{status}\n".encode())  # how it ended, for the stand-in's exit status
            os._exit(0)

        def exit_with_stand_in() -> None:
            os.read(stand_in_alive, 1)  # returns when the stand-in is gone: its end of the pipe closed
            os._exit(1)

        threading.Thread(target=exit_with_stand_in, daemon=True).start()
        # ``kernel_alive`` stays open until this process ends: the stand-in waits for that.
        _launch()
    finally:
        os._exit(0)


def _launch() -> None:
    from ipykernel.kernelapp import IPKernelApp

    IPKernelApp.launch_instance(argv=sys.argv[1:])
