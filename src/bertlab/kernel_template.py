"""Jupyter kernels forked from a template that has imported torch, the course and, for lessons, transformers.

A notebook of the course starts by importing torch, transformers' BERT and ``bertlab``: four to six
seconds of every kernel. A template (``serve``) imports them once and forks a kernel per request.
Jupyter starts each kernel with a kernelspec's command: ``connect``, a stand-in that asks the
template for a kernel, passes its environment, directory and standard streams to it, forwards
signals (an interrupt), and exits when the kernel does; the kernel exits when its stand-in is
killed. Each notebook still runs in a process of its own, with a new namespace and no model
loaded: a fork of a process that only imported, and ran no torch operation (so no thread pool
is forked half-made).

The template itself forks, so it lives with Linux's other process machinery
(``bertlab.grading.platforms.linux.kernel_forks``); this module is what Jupyter and the two
users below run. Two users:

- the site build (``docs/hooks/lesson_render.py``) starts a template for its lessons (``start``);
- ``nbgrader autograde`` (``nbgrader_config.py`` calls ``use_in_nbgrader``): the kernelspec's
  stand-in (``connect-lazily``) starts the template itself when the first notebook runs, one per
  nbgrader process, and the template ends with that process. These kernels run learners' code:
  ``--confined`` has each confined and kept as ``bertlab grade``'s learner process is
  (``bertlab.grading.platforms.linux.confined_kernel``), and their template imports no
  transformers (the notebooks run on the course's own modules); the lessons' kernels are not
  confined.

Where forking after torch's imports is not safe (macOS, and the portable path that stands in for
it) or no template answers, the stand-in becomes an ordinary kernel: the notebook runs as before,
only slower to start.

Usage: ``python -m bertlab.kernel_template serve SOCKET OWNER_PID``,
``... connect SOCKET CONNECTION_FILE [KERNEL_ARGS...]`` or ``... connect-lazily CONNECTION_FILE
[KERNEL_ARGS...]`` (``--help`` for details).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bertlab.settings import DEFAULT_TIMEOUT

NBGRADER_KERNEL = "bertlab-forked"  # the kernelspec nbgrader's Execute runs the notebooks in
STARTUP_TIMEOUT = int(DEFAULT_TIMEOUT)  # seconds nbgrader waits for a kernel: the template's imports included


def start(directory: Path, name: str) -> subprocess.Popen:
    """Start a template in ``directory`` and point kernelspec ``name`` at it, for this process and
    the kernels it starts (``JUPYTER_PATH``). Returns the template's process, to be killed."""
    socket_path = directory / "template.sock"
    template = _spawn_template(str(socket_path), os.getpid())
    kernelspec(directory, name, ["connect", str(socket_path)])
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(directory), os.environ.get("JUPYTER_PATH")]))
    return template


def use_in_nbgrader(config, directory: str) -> None:
    """Make nbgrader's ``Execute`` run each notebook in a forked kernel (``config``: nbgrader's
    ``c``; ``directory``: where the kernelspec is written, put on ``JUPYTER_PATH``)."""
    # Confined: these kernels run learners' code (``connect``), the site's lessons do not.
    kernelspec(Path(directory), NBGRADER_KERNEL, ["connect-lazily", "--confined"])
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [directory, os.environ.get("JUPYTER_PATH")]))
    config.Execute.kernel_name = NBGRADER_KERNEL
    # The first kernel is ready only when the template has imported torch and the course, which
    # on a busy machine can take longer than Jupyter's 60 s; nbgrader then drops the whole first
    # submission (a test class lost one so). Those imports used to count against the first
    # cell's timeout; here they get as long. An instructor's own setting, made after this call, wins.
    config.Execute.startup_timeout = STARTUP_TIMEOUT


def kernelspec(directory: Path, name: str, command: list[str]) -> Path:
    """Write kernelspec ``name`` under ``directory`` (a ``JUPYTER_PATH`` entry) that runs ``command``."""
    spec = directory / "kernels" / name
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "bertlab.kernel_template", *command, "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Python 3 (bertlab)", "language": "python"})
    )
    return spec


def _spawn_template(socket_path: str, owner: int, confined: bool = False) -> subprocess.Popen:
    template = subprocess.Popen(
        [sys.executable, "-m", "bertlab.kernel_template", "serve", socket_path, str(owner)]
        + (["--confined"] if confined else []),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while not os.path.exists(socket_path) and template.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # it listens before it imports: a kernel asked for early waits for it
    return template


def _ordinary_kernel(connection_file: str, arguments: list[str], confine: dict | None = None):
    """A kernel that starts anew; confined under a keeper in this process when ``confine`` asks
    for it and the platform can (Linux)."""

    def launch():
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", "-f", connection_file, *arguments])

    if confine is not None and _forking_is_safe():
        from bertlab.grading.platforms.linux import confined_kernel

        sys.exit(confined_kernel.keep({"connection_file": connection_file, "confine": confine}, None, launch))
    launch()


def confinement(connection_file: str) -> dict:
    """What a kernel running a learner's notebook (in this directory) is confined to: what the
    judge's learner process reads (``bertlab.grading.confinement``) and its connection file, and
    the course's memory and process limits (``bertlab.toml``)."""
    from bertlab.grading import confinement as lists
    from bertlab.grading.notebooks import course_root
    from bertlab.settings import DEFAULT_MEMORY_MB, PROCESS_LIMIT, SettingsError, grade_settings

    try:
        memory = grade_settings(course_root(Path.cwd().resolve())).get("memory_limit", DEFAULT_MEMORY_MB)
    except SettingsError:  # the judge that follows the kernel says what is wrong with the file
        memory = DEFAULT_MEMORY_MB
    return {
        "readable": [*lists.readable(), os.path.abspath(connection_file)],
        "unreadable": lists.unreadable(),
        "memory_mb": memory,
        "processes": PROCESS_LIMIT,
    }


def _forking_is_safe() -> bool:
    from bertlab.grading import platforms

    return hasattr(os, "fork") and not platforms.is_portable()


def connect(socket_path: str, connection_file: str, arguments: list[str], confined: bool = False) -> None:
    """The stand-in Jupyter starts: a kernel forked by the template, or an ordinary one.
    ``confined``: the kernel runs a learner's code, and gets only what ``bertlab grade``'s
    learner process gets (``confinement``; its environment: ``bertlab.grading.confinement``)."""
    confine = None
    if confined:
        from bertlab.grading.confinement import environment

        confine = confinement(connection_file)
        if not any(a.startswith("--HistoryManager.hist_file") for a in arguments):  # given twice, IPython fails
            arguments = [*arguments, "--HistoryManager.hist_file=:memory:"]  # not in the home it cannot write
        kept = environment()
        os.environ.clear()
        os.environ.update(kept)
    if not _forking_is_safe():
        _ordinary_kernel(connection_file, arguments, confine)
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(socket_path)
    except OSError:
        _ordinary_kernel(connection_file, arguments, confine)
    stand_in_r, _stand_in_w = os.pipe()  # the kernel reads EOF when this process ends
    kernel_r, kernel_w = os.pipe()  # this process reads EOF when the kernel ends
    request = {"connection_file": connection_file, "cwd": os.getcwd(), "env": dict(os.environ), "arguments": arguments}
    if confine is not None:
        request["confine"] = confine
    socket.send_fds(sock, [json.dumps(request).encode()], [stand_in_r, kernel_w, 0, 1, 2])
    os.close(stand_in_r)
    os.close(kernel_w)
    answer = sock.makefile().readline().strip()
    if not answer.isdigit():
        _ordinary_kernel(connection_file, arguments, confine)
    pid = int(answer)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: os.kill(pid, number))
    said = b""
    while chunk := os.read(kernel_r, 64):
        said += chunk
    # A confined kernel's keeper says how the kernel ended: Jupyter sees it as this exit status.
    sys.exit(int(said) if said.strip().isdigit() else 0)


def owner_socket(owner: int) -> str:
    """Where the template of the kernels for process ``owner`` listens: a folder of this user's."""
    folder = Path(tempfile.gettempdir()) / f"bertlab-kernels-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return str(folder / f"{owner}.sock")


def connect_lazily(connection_file: str, arguments: list[str], confined: bool = False) -> None:
    """The stand-in for the process that started it (nbgrader): its template, started here when
    this is that process's first kernel."""
    if _forking_is_safe():
        owner = os.getppid()
        socket_path = owner_socket(owner)
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(socket_path)
        except OSError:  # none yet, or one left by an earlier process of the same pid
            Path(socket_path).unlink(missing_ok=True)
            _spawn_template(socket_path, owner, confined)
        finally:
            probe.close()
        connect(socket_path, connection_file, arguments, confined)
    connect("", connection_file, arguments, confined)  # not forked: an ordinary kernel, confined alike


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bertlab.kernel_template",
        description="Jupyter kernels forked from a template that has imported torch, the course and, for "
        "lessons, transformers.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="run a template: fork a kernel for each stand-in that asks")
    serve_parser.add_argument("socket", help="the Unix socket to listen on")
    serve_parser.add_argument(
        "owner", type=int, help="the pid of the process the kernels are for: the template ends with it"
    )
    serve_parser.add_argument(
        "--confined",
        action="store_true",
        help="its kernels run learners' code (nbgrader's): import the course's modules, not transformers'",
    )
    for name, text in (
        ("connect", "the stand-in a kernelspec runs: a kernel from the template at SOCKET"),
        ("connect-lazily", "the stand-in nbgrader runs: a kernel from its process's template, started if need be"),
    ):
        sub = commands.add_parser(name, help=text)
        if name == "connect":
            sub.add_argument("socket", help="the template's Unix socket")
        sub.add_argument(
            "--confined",
            action="store_true",
            help="the kernel runs a learner's code: confine it as `bertlab grade` does",
        )
        sub.add_argument("connection_file", help="the kernel's connection file, from Jupyter")
        sub.add_argument("arguments", nargs=argparse.REMAINDER, help="more arguments for the kernel")
    args = parser.parse_args(argv)
    if args.command == "serve":
        from bertlab.grading.platforms.linux.kernel_forks import serve

        serve(args.socket, args.owner, args.confined)
    elif args.command == "connect":
        connect(args.socket, args.connection_file, args.arguments, args.confined)
    else:
        connect_lazily(args.connection_file, args.arguments, args.confined)


if __name__ == "__main__":
    main()
