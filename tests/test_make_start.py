"""`make start` ends as a learner ends it, with Ctrl-C or a signal: quietly, saying the course
stopped, the server and the judges stopped with it; a server that stops on its own fails loudly.

The Makefile's own recipe runs, with a site and a ``bertlab`` of the test's (no site is built, no
notebook graded): ``BIN`` names a folder holding a ``python`` that runs this one and that fake.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

FAKE_BERTLAB = """#!/bin/sh
echo "bertlab $*" >> "$LOG"
[ "$1" = grade ] && exit 1  # a failing grade: the course is served all the same
exit 0
"""
# The server fails at once when asked to (a real error); else this Python runs it.
FAKE_PYTHON = f"""#!/bin/sh
case "$*" in *http.server*) [ -n "$SERVER_FAILS" ] && exit 3;; esac
exec {sys.executable} "$@"
"""
# A command started in the background ignores SIGINT, and keeps ignoring it through exec: as a
# terminal starts it, Ctrl-C's SIGINT must reach make and its recipe.
AS_FROM_A_TERMINAL = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def start(tmp_path):
    """``make start`` (its recipe only) in a session of its own, as a terminal starts it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("bertlab", FAKE_BERTLAB), ("python", FAKE_PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "site").mkdir()

    def run(**env: str) -> subprocess.Popen:
        port = _free_port()
        stamp = ".venv/.installed"  # `-o`: neither set up nor built, whatever their age
        command = ["make", "-o", "site", "-o", stamp, "start", f"BIN={bin_dir}", f"PORT={port}"]
        return subprocess.Popen(
            [sys.executable, "-c", AS_FROM_A_TERMINAL, *command, f"SITE_DIR={tmp_path / 'site'}"],
            cwd=ROOT,
            env={**os.environ, "LOG": str(tmp_path / "log"), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # a process group of its own, as a terminal's foreground job
        )

    return run


def _served(proc: subprocess.Popen) -> str:
    """The output up to the line saying the course is served (the grade printed above it)."""
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if not line or "the course is served" in line:
            break
    return "".join(lines)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_stops_the_course_quietly(start, tmp_path, sig):
    proc = start()
    shown = _served(proc)
    assert "the course is served" in shown, shown
    os.killpg(proc.pid, sig)  # as the terminal sends Ctrl-C: to make and everything it started
    rest, _ = proc.communicate(timeout=30)
    assert "==> the course stopped" in rest, rest
    assert "Error" not in rest and "Interrupt" not in rest and "Terminated" not in rest, rest
    called = (tmp_path / "log").read_text().splitlines()
    assert called == ["bertlab judges start", "bertlab grade", "bertlab judges stop"]
    time.sleep(0.2)
    assert subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True).returncode == 1, "a process was left"


def test_a_server_that_stops_on_its_own_fails_loudly(start):
    proc = start(SERVER_FAILS="1")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2, out
    assert "web server stopped on its own (exit status 3)" in out and "Error 3" in out, out
    assert "the course stopped" not in out
