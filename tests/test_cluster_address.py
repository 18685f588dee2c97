"""A wrong ``--scheduler`` address is refused at once, naming the part that is wrong (its form,
its host, its port), before anything else is done: Dask's client alone waits a minute, then
says to start a scheduler."""

from __future__ import annotations

import socket

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


def test_a_listening_address_passes():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_address(f"tcp://127.0.0.1:{server.getsockname()[1]}")


def test_the_command_checks_the_address_before_the_course(tmp_path, capsys):
    from bertlab.cli import main

    code = main(["autograde", "--course", str(tmp_path / "no-course"), "--scheduler", f"127.0.0.1:{_closed_port()}"])
    assert code == 2
    assert "nothing listens on port" in capsys.readouterr().err
