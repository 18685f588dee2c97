"""A Dask cluster on loopback started with Dask's own commands, as the instructor guide starts one
on several machines: ``dask scheduler``, then ``dask worker ADDRESS`` processes."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from pathlib import Path

DASK = Path(sys.executable).parent / "dask"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def loopback_cluster(workers: int, folder: Path, env: dict | None = None):
    """Yield the scheduler's address once ``workers`` single-threaded workers have joined it."""
    from distributed import Client

    address = f"tcp://127.0.0.1:{_free_port()}"
    env = {**os.environ, **(env or {})}
    logs = [open(folder / f"dask-{name}.log", "w") for name in ["scheduler", *(f"worker-{i}" for i in range(workers))]]
    # The guide's commands, on loopback; the dashboard on a port of its own (8787 may be taken).
    commands = [
        [
            str(DASK),
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            address.rsplit(":", 1)[1],
            "--dashboard-address",
            f"127.0.0.1:{_free_port()}",
        ]
    ]
    # --host binds the worker's Dask port only: its HTTP port (dashboard, health) needs its own
    # --dashboard-address, or it listens on every address (the guide says so).
    worker = [str(DASK), "worker", address, "--nthreads", "1", "--host", "127.0.0.1"]
    commands += [[*worker, "--dashboard-address", "127.0.0.1:0"]] * workers
    procs = []
    try:
        for command, log in zip(commands, logs, strict=True):
            procs.append(
                subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            )
        with Client(address, timeout=60, set_as_default=False) as client:
            client.wait_for_workers(workers, timeout=120)
        exposed = [f"{where} (pid {pid})" for pid, where in listening(procs) if not where.startswith("127.")]
        assert not exposed, f"the guide's cluster listens beyond loopback: {exposed}"
        yield address
    finally:
        for proc in reversed(procs):  # workers first: each closes its judges as it stops
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()


def listening(procs: list[subprocess.Popen]) -> list[tuple[int, str]]:
    """(pid, "address:port") of every TCP port the processes, or those they started, listen on."""
    import psutil

    found = []
    for proc in procs:
        try:
            family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for member in family:
            try:
                found += [
                    (member.pid, f"{c.laddr.ip}:{c.laddr.port}")
                    for c in member.net_connections(kind="inet")
                    if c.status == psutil.CONN_LISTEN
                ]
            except psutil.Error:
                continue
    return found


def log_tail(folder: Path, lines: int = 20) -> str:
    return "\n".join(
        f"{path.name}: " + " | ".join(path.read_text().splitlines()[-lines:])
        for path in sorted(folder.glob("dask-*.log"))
    )
