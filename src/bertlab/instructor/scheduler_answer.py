"""Whether a Dask scheduler answers at ``--scheduler``'s address, and if not, what does.

Something other than a scheduler on that port (the dashboard's 8787 typed for 8786, another
service) made ``bertlab autograde`` wait for minutes without a word: Dask's client reads an HTTP
reply as the length of a message and waits for bytes that never come, and a port that accepts and
says nothing never answers its handshake. Here Dask is asked who is there, for a few seconds; when
no scheduler says so, a plain connection finds out what listens instead, so the instructor reads
what to fix.
"""

from __future__ import annotations

import asyncio
import socket
from concurrent.futures import ThreadPoolExecutor

ANSWER_TIMEOUT = 5.0  # seconds for a scheduler to answer; one answers in milliseconds, even from afar
SPEAKS_FIRST = 1.0  # seconds for a server that greets unasked (SSH, mail) to do so
REPLY_TIMEOUT = 2.0  # seconds for an answer to an HTTP request


def not_a_scheduler(address: str, host: str, port: int) -> str | None:
    """None when a Dask scheduler answers at ``address``, else a sentence saying what was found there."""
    try:
        # In a thread of its own: the caller's thread may already run an event loop.
        with ThreadPoolExecutor(1) as thread:
            kind = thread.submit(asyncio.run, _identity(address)).result()
    except Exception as err:  # noqa: BLE001  (whatever stops Dask's answer, the instructor reads what is there)
        # What the network did is found out below; anything else (Dask's TLS settings) is quoted.
        told = "" if isinstance(err, OSError) else f" ({type(err).__name__}: {err})"
        found = what_listens(host, port)
    else:
        if kind == "Scheduler":
            return None
        told, found = "", f"a Dask {kind.lower()} answered there, not the scheduler"
    return (
        f"nothing at {address} answered as a Dask scheduler within {ANSWER_TIMEOUT:g} s{told}: {found}; the "
        "scheduler's address is the one its log prints after `Scheduler at:`"
    )


async def _identity(address: str) -> str:
    """The type of the Dask server at ``address`` (Scheduler, Worker, Nanny), asked as Dask's client
    connects: with the security of Dask's configuration."""
    from distributed.comm import connect
    from distributed.security import Security

    async def ask() -> str:
        comm = await connect(address, **Security().get_connection_args("client"))
        try:
            await comm.write({"op": "identity", "reply": True})
            return str((await comm.read()).get("type", "server"))
        finally:
            comm.abort()

    return await asyncio.wait_for(ask(), ANSWER_TIMEOUT)


def what_listens(host: str, port: int) -> str:
    """What answers a plain connection to ``host:port``: a greeting, an HTTP reply, silence, or nothing."""
    try:
        conn = socket.create_connection((host, port), timeout=REPLY_TIMEOUT)
    except ConnectionRefusedError:
        return "nothing listens there now"
    except OSError as err:
        return f"it no longer accepts connections ({err.strerror or type(err).__name__})"
    with conn:
        first = _read(conn, SPEAKS_FIRST)
        if first is None:  # silent so far: ask as a browser would
            try:
                conn.sendall(f"HEAD / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            except OSError:
                return "it accepted the connection and closed it without a word"
            first = _read(conn, REPLY_TIMEOUT)
    if first is None:
        return "a port there accepts connections and says nothing, not even to an HTTP request"
    if not first:
        return "it accepted the connection and closed it without a word"
    if first.startswith(b"HTTP/"):
        return "an HTTP server answered there (the dashboard?)"
    if first[:1] in (b"\x15", b"\x16"):  # a TLS alert or handshake record
        return "a TLS server answered there (a scheduler using TLS is reached at tls://, with Dask's TLS settings)"
    return f"a server of another protocol answered there ({first[:40]!r})"


def _read(conn: socket.socket, timeout: float) -> bytes | None:
    """The first bytes the peer sends: b"" when it closed the connection, None when it said nothing."""
    conn.settimeout(timeout)
    try:
        return conn.recv(64)
    except TimeoutError:
        return None
    except OSError:  # reset
        return b""
