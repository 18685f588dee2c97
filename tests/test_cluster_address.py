"""A wrong ``--scheduler`` address is refused at once, naming the part that is wrong (its form,
its host, its port, what answers there instead of a scheduler), before anything else is done:
Dask's client alone waits a minute, then says to start a scheduler, or waits for ever."""

from __future__ import annotations

import contextlib
import http.server
import socket
import subprocess
import sys
import threading

import pytest

from bertlab.instructor.cluster_judges import ClusterError, check_address


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # free, and nothing listens once the probe is closed


@pytest.mark.parametrize(
    "address, said",
    [
        ("http://127.0.0.1:8786", "starts with tcp:// or tls://, not http://"),
        ("tcp://127.0.0.1", "has no port"),
        ("127.0.0.1", "has no port"),
        ("tcp://no-such-host.invalid:8786", "the host 'no-such-host.invalid'"),
        ("tcp://127.0.0.1:{closed}", "nothing listens on port"),
        ("127.0.0.1:{closed}", "nothing listens on port"),  # no scheme: tcp, checked alike
    ],
)
def test_a_wrong_address_is_named_at_once(address, said):
    # The port is chosen here, not in the test's id: parallel workers must collect the same tests.
    with pytest.raises(ClusterError) as err:
        check_address(address.format(closed=_closed_port()))
    assert said in str(err.value), str(err.value)


def test_a_scheduler_passes_and_a_worker_is_named():
    from distributed import LocalCluster

    # In this process, on loopback: its scheduler and its worker answer Dask's identity request.
    with LocalCluster(
        n_workers=1, processes=False, protocol="tcp://", host="127.0.0.1", scheduler_port=0, dashboard_address=None
    ) as cluster:
        check_address(cluster.scheduler_address)
        worker = next(iter(cluster.scheduler_info["workers"]))
        with pytest.raises(ClusterError, match="a Dask worker answered there, not the scheduler"):
            check_address(worker)


class _Quiet(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the dashboard's requests are no test output
        pass


@contextlib.contextmanager
def _http_server():
    """A port where an HTTP server answers, as the scheduler's dashboard does at 8787."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def _silent_listener():
    """A port that accepts connections and never says a word."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.mark.parametrize(
    "listener, said",
    [
        (_http_server, "an HTTP server answered there (the dashboard?)"),
        (_silent_listener, "accepts connections and says nothing"),
    ],
    ids=["http-server", "silent-port"],
)
def test_a_port_where_no_scheduler_answers_is_named_within_seconds(tmp_path, listener, said):
    """Dask's client waited there for ever, the command silent; it now ends, naming what it found.
    The bound only catches a hang: the command answers in a few seconds."""
    with listener() as port:
        address = f"tcp://127.0.0.1:{port}"
        command = [sys.executable, "-m", "bertlab.cli", "autograde", "--course", str(tmp_path), "--scheduler", address]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"nothing at {address} answered as a Dask scheduler within" in proc.stderr, proc.stderr
    assert said in proc.stderr and "Scheduler at:" in proc.stderr, proc.stderr


def test_the_command_checks_the_address_before_the_course(tmp_path, capsys):
    from bertlab.cli import main

    code = main(["autograde", "--course", str(tmp_path / "no-course"), "--scheduler", f"127.0.0.1:{_closed_port()}"])
    assert code == 2
    assert "nothing listens on port" in capsys.readouterr().err
