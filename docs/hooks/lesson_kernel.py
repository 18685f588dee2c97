"""Lesson kernels forked from a template that has imported torch, transformers and the course.

Every lesson's first cell imports torch, transformers' BERT modules and the course: four seconds
of each kernel, nine kernels a cold build. A renderer (``lesson_render.py``) starts one template,
``python lesson_kernel.py serve SOCKET``, which imports them once and forks a kernel per lesson.
Jupyter starts each kernel with the command of the kernelspec ``kernelspec()`` writes,
``python lesson_kernel.py connect SOCKET CONNECTION_FILE``: a stand-in that asks the template for a
kernel, passes signals on to it (an interrupt), and exits when the kernel does; the kernel exits
when its stand-in is killed. Each lesson still runs in a process of its own, with a new
namespace and no model loaded: a fork of a process that only imported. Without a template the
stand-in becomes an ordinary kernel.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path


def start(directory: Path, name: str):
    """Start a template in ``directory`` and point kernelspec ``name`` at it, for this process and
    the kernels it starts (``JUPYTER_PATH``). Returns the template's process, to be killed."""
    socket_path = directory / "template.sock"
    template = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "serve", str(socket_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while not socket_path.exists() and template.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # it listens before it imports: a kernel asked for early waits for it
    kernelspec(directory, str(socket_path), name)
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(directory), os.environ.get("JUPYTER_PATH")]))
    return template


def kernelspec(directory: Path, socket_path: str, name: str) -> Path:
    """Write a kernelspec ``name`` under ``directory`` (a ``JUPYTER_PATH`` entry) that connects to the template."""
    spec = directory / "kernels" / name
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(Path(__file__).resolve()), "connect", socket_path, "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Python 3 (lesson)", "language": "python"})
    )
    return spec


def serve(socket_path: str) -> None:
    """The template: listen first (a stand-in that comes early waits), import, then fork on demand."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    server.listen(16)
    # What every lesson's first cell imports. The course's reference module first: it keeps
    # Hugging Face offline before transformers is imported. Not pyplot: the kernel chooses
    # matplotlib's backend. (isort: off keeps that order: sorted, bertlab would come last.)
    # isort: off
    import bertlab.reference
    import ipykernel.kernelapp  # noqa: F401
    import matplotlib  # noqa: F401
    import torch  # noqa: F401
    import transformers.models.bert.modeling_bert  # noqa: F401

    import bertlab.corpus
    import bertlab.experiments
    import bertlab.masks  # noqa: F401
    # isort: on

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # kernels are reaped by the system
    renderer = os.getppid()
    server.settimeout(1.0)
    while os.getppid() == renderer:  # a template outlives no renderer, however it ended
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 5)
        if not message or len(fds) != 5:
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            server.close()
            conn.close()
            _kernel(json.loads(message), *fds)
        for fd in fds:
            os.close(fd)
        conn.sendall(f"{pid}\n".encode())
        conn.close()


def _kernel(request: dict, stand_in_alive: int, kernel_alive: int, stdin: int, stdout: int, stderr: int) -> None:
    """The forked kernel: the stand-in's environment, directory and standard streams, then ipykernel."""
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])

        def exit_with_stand_in() -> None:
            os.read(stand_in_alive, 1)  # returns when the stand-in is gone: its end of the pipe closed
            os._exit(1)

        threading.Thread(target=exit_with_stand_in, daemon=True).start()
        # ``kernel_alive`` stays open until this process ends: the stand-in waits for that.
        from ipykernel.kernelapp import IPKernelApp

        sys.argv = [sys.argv[0], "-f", request["connection_file"]]
        IPKernelApp.launch_instance(argv=sys.argv[1:])
    finally:
        os._exit(0)


def connect(socket_path: str, connection_file: str) -> None:
    """The stand-in Jupyter starts: a kernel forked by the template, or an ordinary one."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(socket_path)
    except OSError:
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file])
    stand_in_r, _stand_in_w = os.pipe()  # the kernel reads EOF when this process ends
    kernel_r, kernel_w = os.pipe()  # this process reads EOF when the kernel ends
    request = {"connection_file": connection_file, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(sock, [json.dumps(request).encode()], [stand_in_r, kernel_w, 0, 1, 2])
    os.close(stand_in_r)
    os.close(kernel_w)
    answer = sock.makefile().readline().strip()
    if not answer.isdigit():
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file])
    pid = int(answer)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: os.kill(pid, number))
    while os.read(kernel_r, 1):
        pass
    sys.exit(0)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif sys.argv[1] == "connect":
        connect(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"usage: {Path(__file__).name} serve SOCKET | connect SOCKET CONNECTION_FILE")
