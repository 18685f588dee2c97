"""SIGTERM inside ``terminated.on_sigterm`` raises ``Terminated`` (a KeyboardInterrupt, so it takes
Ctrl-C's way out) once; a second one, as ``timeout`` sends to the command's process group, does not
cut the cleanup short; the handler from before is back after the block."""

from __future__ import annotations

import signal

import pytest

from bertlab.terminated import Terminated, on_sigterm, stopped_by


def test_sigterm_raises_once_then_the_previous_handler_is_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt) as raised, on_sigterm():
        signal.raise_signal(signal.SIGTERM)
    assert isinstance(raised.value, Terminated)
    assert stopped_by(raised.value) == ("terminated (SIGTERM)", 143)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_sigterm_during_the_cleanup_is_not_raised():
    cleaned = False
    with pytest.raises(Terminated), on_sigterm():
        try:
            signal.raise_signal(signal.SIGTERM)
        finally:
            signal.raise_signal(signal.SIGTERM)  # would raise again here, mid-cleanup
            cleaned = True
    assert cleaned


def test_ctrl_c_keeps_its_own_words_and_status():
    assert stopped_by(KeyboardInterrupt()) == ("stopped (Ctrl-C)", 130)
