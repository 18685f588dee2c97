"""SIGTERM (what a scheduler, ``timeout`` or a CI runner sends) stops a grading command as Ctrl-C does.

Python's default for SIGTERM ends the process on the spot: no word of what was recorded, and the
folders holding learners' notebook copies stay until the next run's sweep (``grading.scratch``).
Under ``on_sigterm`` it raises ``Terminated`` in the main thread instead, a ``KeyboardInterrupt``:
the command takes every step Ctrl-C takes (judges and the learners' processes stopped, folders
removed, what was recorded kept and accounted for), then says it was terminated and exits 143, the
status a shell gives a command SIGTERM ended (Ctrl-C's is 130).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

CTRL_C_STATUS = 130  # 128 + SIGINT
SIGTERM_STATUS = 143  # 128 + SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be."""


def _raise(signum, frame):
    # Once: the cleanup it starts must not be cut short by the next one (`timeout` sends SIGTERM to
    # the command, then to its whole process group). A handler that does nothing rather than
    # SIG_IGN, which the processes started during the cleanup would inherit.
    signal.signal(signal.SIGTERM, lambda *_: None)
    raise Terminated


@contextlib.contextmanager
def on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises ``Terminated``; the previous handler is put back after it
    (a command run inside a test must not leave its handler to the test process)."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set one
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stopped_by(stop: KeyboardInterrupt) -> tuple[str, int]:
    """What the command says stopped it, and the status it exits with."""
    if isinstance(stop, Terminated):
        return "terminated (SIGTERM)", SIGTERM_STATUS
    return "stopped (Ctrl-C)", CTRL_C_STATUS
