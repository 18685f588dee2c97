"""Warm judges kept running between ``bertlab grade`` commands (``bertlab judges start``).

A cold ``bertlab grade 05`` spends most of its time before the first check: its judge imports
torch, IPython and the checks and loads the model (the course's own BERT, never transformers').
``bertlab judges start`` starts ``jobs`` judges once, in a background process that hands them
out over a Unix socket only this user can open; ``bertlab grade`` sends its notebooks there when
judges started from the same code, libraries and model are running, and starts its own
otherwise. The verdicts are the same: the judges are the same worker processes
(``judge_process.py``), and each notebook still runs in a newly forked learner process with a new
namespace, as a warm worker of ``bertlab grade`` always did.

``make start`` starts them while the site is served and stops them with it; they also stop after
``idle`` seconds without a request. ``bertlab autograde`` never uses them: an instructor's class
is graded by judges of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

from bertlab.grading import platforms
from bertlab.grading.pool import JudgePool, Limits, judge_env
from bertlab.settings import DEFAULT_JOBS

DIR_ENV = "BERTLAB_JUDGES_DIR"  # where the socket lives (tests point it at a folder of their own)
DEFAULT_IDLE_MINUTES = 60.0
STARTED_WITHIN = 15.0  # seconds for a new server to answer; its judges warm up after that
# The settings that choose torch's kernels and thread counts. Judges keep the ones they started
# under: under another kernel set (``ATEN_CPU_CAPABILITY=default``, say) they would round otherwise
# than the command asked for.
KERNEL_SETTINGS = ("ATEN_", "TORCH_", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_")


class JudgesError(RuntimeError):
    """The warm judges cannot be started or reached; the message says why."""


def folder() -> Path:
    """This user's private folder for the socket and the log (created 0700, refused if shared)."""
    base = (
        os.environ.get(DIR_ENV)
        or Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()) / f"bertlab-{os.getuid()}"
    )
    path = Path(base)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    stat = path.stat()
    if stat.st_uid != os.getuid() or stat.st_mode & 0o077:
        # Anyone who can write here could answer in the judges' place.
        raise JudgesError(f"{path} must belong to you and be private (chmod 700 {path}), or set {DIR_ENV}")
    return path


def socket_path() -> Path:
    """One socket per environment and course (``notebooks.course_key``): `bertlab judges stop` in
    one clone of the course leaves another's judges running."""
    from bertlab.grading.notebooks import course_key

    return folder() / f"judges-{course_key()}.sock"


def fingerprint(model: str | None) -> str:
    """What the verdicts depend on: this Python, bertlab's code, the installed libraries, the model,
    torch's kernel and thread settings; and the grading path, which the verdicts do not depend on
    but a learner who chose one expects.

    Judges started before any of these changed would grade with the old one, so they are used
    only while the fingerprint is the same. The files' sizes and times stand for their contents
    (a few milliseconds for the whole package), and the folder of installed packages changes its
    time whenever a package is installed or removed.
    """
    import bertlab

    digest = hashlib.sha256(f"{sys.executable}\n{platforms.current().name}\n".encode())
    package = Path(bertlab.__file__).parent
    for path in sorted(package.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(package)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    digest.update(str(os.stat(sysconfig.get_paths()["purelib"]).st_mtime_ns).encode())
    digest.update(repr(sorted((k, v) for k, v in os.environ.items() if k.startswith(KERNEL_SETTINGS))).encode())
    chosen = model or os.environ.get("BERTLAB_MODEL")
    digest.update(str(Path(chosen).expanduser().resolve()).encode() if chosen else b"bundled")
    return digest.hexdigest()


def _ask(request: dict, timeout: float | None = 5.0) -> dict | None:
    """The server's JSON answer to ``request``, or None when no server answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(socket_path()))
            conn.sendall((json.dumps(request) + "\n").encode())
            line = conn.makefile("r").readline()
    except (OSError, JudgesError):
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None


def status() -> dict | None:
    """The running server's state (``fingerprint``, ``jobs``, ``pid``, ``graded``, ...), or None."""
    return _ask({"op": "status"})


# --- the client side: what ``bertlab grade`` uses in place of its own JudgePool ----------------


class WarmJudge:
    """One notebook judged by a warm judge; the same answers as ``pool.JudgeProcess.judge``."""

    def __init__(self, conn: socket.socket):
        self.conn = conn

    def judge(self, notebook: Path, result: Path, limits: Limits) -> str:
        request = {
            "op": "grade",
            "notebook": str(notebook),
            "result": str(result),
            "timeout": limits.timeout,
            "memory_mb": limits.memory_mb,
        }
        # The judge stops the learner at the limit and answers; this is the backstop.
        self.conn.settimeout(limits.timeout + 90)
        try:
            self.conn.sendall((json.dumps(request) + "\n").encode())
            answer = self.conn.makefile("r").readline().strip()
        except OSError as err:
            return f"died: the warm judges stopped answering ({err})"
        return answer or "died: the warm judges stopped (see `bertlab judges status`)"


class WarmJudges:
    """Hands out warm judges, or judges of its own while none answer (they may have stopped)."""

    def __init__(self, local: JudgePool):
        self.local, self.lock = local, threading.Lock()
        self.open: set[socket.socket] = set()

    @contextlib.contextmanager
    def take(self):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(str(socket_path()))
        except (OSError, JudgesError):
            conn.close()
            with self.local.take() as worker:
                yield worker
            return
        with self.lock:
            self.open.add(conn)
        try:
            with conn:
                yield WarmJudge(conn)
        finally:
            with self.lock:
                self.open.discard(conn)

    def close(self) -> None:
        """Hang up on the warm judges still grading (Ctrl-C): they stop those notebooks."""
        with self.lock:
            hung_up, self.open = list(self.open), set()
        for conn in hung_up:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self.local.close()


def connect(model: str | None, local: JudgePool) -> WarmJudges | None:
    """The running warm judges when they grade as this process would, else None."""
    running = status()
    if not running or running.get("fingerprint") != fingerprint(model):
        return None
    return WarmJudges(local)


# --- the commands: start, stop, status ------------------------------------------------------


def start(jobs: int, model: str | None, idle_minutes: float, say=print) -> dict:
    """Start the server unless judges with this fingerprint and jobs already run; its status."""
    wanted = fingerprint(model)
    running = status()
    if running and running.get("fingerprint") == wanted and running.get("jobs") == jobs:
        say(f"warm judges already running ({jobs}, pid {running['pid']})")
        return running
    if running:
        say("stopping the warm judges started from other code, libraries, model, kernel settings or jobs")
        stop()
    log = socket_path().with_suffix(".log")
    command = [
        sys.executable,
        "-m",
        "bertlab.grading.warm_judges",
        "--socket",
        str(socket_path()),  # the server runs in /: the course it serves is named here
        "--jobs",
        str(jobs),
        "--idle",
        str(idle_minutes * 60),
    ]
    if model:
        command += ["--model", str(Path(model).expanduser().resolve())]
    with open(log, "w") as out:
        # A session of its own: Ctrl-C in the terminal that started it does not reach it.
        subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd="/"
        )
    deadline = time.monotonic() + STARTED_WITHIN
    while time.monotonic() < deadline:
        running = status()
        if running:
            say(
                f"warm judges started ({jobs}, pid {running['pid']}): `bertlab grade` uses them; they stop "
                f"after {idle_minutes:g} idle minutes or with `bertlab judges stop`. They are still loading "
                "torch and the model: a grade in the next few seconds waits for them, later ones do not"
            )
            return running
        time.sleep(0.1)
    tail = log.read_text().strip().splitlines()[-5:] if log.exists() else []
    raise JudgesError("the warm judges did not start" + (":\n  " + "\n  ".join(tail) if tail else ""))


def stop(wait: float = 10.0) -> bool:
    """Stop the running server (its idle judges with it) and wait until it is gone; False when none ran."""
    running = _ask({"op": "stop"})
    if not running:
        return False
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and platforms.current().running(running["pid"]):
        time.sleep(0.05)
    return True


# --- the server -----------------------------------------------------------------------------


class Server:
    """Accepts one request per connection; ``jobs`` notebooks are judged at once, the others wait."""

    def __init__(self, jobs: int, model: str | None, idle_seconds: float):
        self.jobs, self.idle_seconds = jobs, idle_seconds
        self.fingerprint = fingerprint(model)
        self.pool = JudgePool(judge_env(jobs, model, long_lived=True))
        self.slots = threading.BoundedSemaphore(jobs)
        self.lock = threading.Lock()
        self.busy = self.graded = 0
        self.last = time.monotonic()
        self.started = time.time()
        self.stopping = False

    def status(self) -> dict:
        return {
            "fingerprint": self.fingerprint,
            "jobs": self.jobs,
            "pid": os.getpid(),
            "graded": self.graded,
            "busy": self.busy,
            "started": self.started,
            "idle_seconds": self.idle_seconds,
        }

    def answer(self, conn: socket.socket) -> None:
        """One request per connection: a status, a stop, or a notebook to grade."""
        with conn:
            line = conn.makefile("r").readline()
            try:
                request = json.loads(line)
                reply = self.grade(request, conn) if request["op"] == "grade" else self.handle(request)
            except (ValueError, KeyError, TypeError) as err:
                reply = f"died: bad request to the warm judges ({err})"
            with contextlib.suppress(OSError):
                conn.sendall(((reply if isinstance(reply, str) else json.dumps(reply)) + "\n").encode())

    def handle(self, request: dict) -> dict:
        if request["op"] == "status":
            return self.status()
        if request["op"] == "stop":
            self.stopping = True
            return self.status()
        raise KeyError(request["op"])

    def grade(self, request: dict, conn: socket.socket) -> str:
        """``pool.JudgeProcess.judge``'s answer for the notebook; a client that goes away (Ctrl-C)
        stops its notebook's grading, so a hanging notebook does not hold a judge to its limit."""
        notebook, result = Path(request["notebook"]), Path(request["result"])
        limits = Limits(float(request["timeout"]), float(request["memory_mb"]))
        with self.slots:
            with self.lock:
                self.busy += 1
            try:
                with self.pool.take() as worker:
                    judging = _Judging(worker)
                    threading.Thread(target=judging.stop_when_gone, args=(conn,), daemon=True).start()
                    try:
                        outcome = worker.judge(notebook, result, limits)
                    finally:
                        judging.over()
                if not worker.alive:
                    self.pool.warm_up()  # the next notebook must not wait for a new judge's imports
            finally:
                with self.lock:
                    self.busy -= 1
                    self.graded += 1
                    self.last = time.monotonic()
        return outcome

    def idle_too_long(self) -> bool:
        return self.busy == 0 and time.monotonic() - self.last > self.idle_seconds

    def serve(self, path: Path) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if path.exists():
            if status():
                return  # another server answers there already
            path.unlink()
        listener.bind(str(path))
        os.chmod(path, 0o600)
        inode = path.stat().st_ino
        listener.listen(16)
        listener.settimeout(1.0)
        for _ in range(self.jobs):
            self.pool.warm_up()
        try:
            while not self.stopping and not self.idle_too_long():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    if not _still_ours(path, inode):
                        return
                    continue
                conn.settimeout(None)
                threading.Thread(target=self.answer, args=(conn,), daemon=True).start()
        finally:
            listener.close()
            if _still_ours(path, inode):
                path.unlink()
            self.pool.close()


class _Judging:
    """Stops a worker whose client went away while it judged, and never once it has answered
    (it may be judging another client's notebook by then)."""

    def __init__(self, worker):
        self.worker, self.lock, self.judging = worker, threading.Lock(), True

    def stop_when_gone(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.recv(1)  # the client sends nothing after its request: this returns when it is gone
        with self.lock:
            if self.judging:
                self.worker.close()

    def over(self) -> None:
        with self.lock:
            self.judging = False


def _still_ours(path: Path, inode: int) -> bool:
    try:
        return path.stat().st_ino == inode
    except OSError:
        return False


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The warm judges' server; start it with `bertlab judges start`.")
    parser.add_argument("--socket", type=Path, required=True, help="where to answer (socket_path() of the course)")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS)
    parser.add_argument("--model")
    parser.add_argument("--idle", type=float, default=DEFAULT_IDLE_MINUTES * 60, help="seconds")
    args = parser.parse_args(argv)
    Server(args.jobs, args.model, args.idle).serve(args.socket)


if __name__ == "__main__":
    main()
