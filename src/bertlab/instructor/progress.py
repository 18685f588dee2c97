"""A one-line progress bar on stderr (one line per step where stderr is not a terminal): the
submissions done, the rate, and the time left at that rate."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, stream=None, width: int = 30):
        # stderr as it is now, not as it was on import (a test's captured stream, since closed)
        stream = sys.stderr if stream is None else stream
        self.total, self.done, self.stream, self.width = total, 0, stream, width
        self.start = time.perf_counter()
        self.live = getattr(stream, "isatty", lambda: False)()

    def say(self, line: str) -> None:
        """A line of its own, above the bar."""
        self.stream.write(line + "\n")
        self.stream.flush()

    def step(self, label: str) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.start
        per_minute = 60.0 * self.done / max(elapsed, 1e-9)
        left = (self.total - self.done) * elapsed / self.done
        filled = self.width * self.done // max(1, self.total)
        bar = "#" * filled + "-" * (self.width - filled)
        line = f"[{bar}] {self.done}/{self.total} {elapsed:5.0f} s, {per_minute:.1f}/min, {left:.0f} s left  {label}"
        if self.live:
            self.stream.write("\r" + line[:120].ljust(120))
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
