"""The CPU conditions a learner's machine may differ in, as this machine can reproduce them.

PyTorch picks its CPU kernels when it starts, by the instructions the CPU has
(``torch.backends.cpu.get_cpu_capability()``); ``ATEN_CPU_CAPABILITY`` asks for a lower set, so
one machine runs the kernels of older CPUs too. The number of threads changes how reductions are
split. A run of each ``Condition`` is a run on another learner's machine, as far as this one can
tell; what it cannot run (Apple silicon's NEON kernels, another BLAS) is named on the Setup page.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# Lowest first. ATEN_CPU_CAPABILITY's values on x86_64; elsewhere only "default" is another set.
CANDIDATES = ("default", "avx2", "avx512")


@dataclass(frozen=True)
class Condition:
    capability: str  # a value of ATEN_CPU_CAPABILITY
    threads: int  # torch's intra-op threads (OMP_NUM_THREADS)

    @property
    def name(self) -> str:
        return f"{self.capability}, {self.threads} thread{'s' if self.threads > 1 else ''}"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) run under this condition."""
        return {
            **(os.environ if base is None else base),
            "ATEN_CPU_CAPABILITY": self.capability,
            "OMP_NUM_THREADS": str(self.threads),
        }


@functools.cache  # a probe starts torch: seconds each, and the answer cannot change within a run
def _dispatched(capability: str) -> str:
    """The kernel set torch uses when asked for ``capability`` (a lower one where the CPU lacks it)."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


@functools.cache
def capabilities() -> tuple[str, ...]:
    """The values of ``ATEN_CPU_CAPABILITY`` this machine runs as asked (torch falls back silently)."""
    return tuple(c for c in CANDIDATES if _dispatched(c).strip().lower() == c)


def native() -> str:
    """The kernel set this run's other tests use: the one asked for, or torch's own pick."""
    return _dispatched(os.environ.get("ATEN_CPU_CAPABILITY", "")).strip().lower()


def conditions() -> list[Condition]:
    """Every capability this machine can dispatch, each with one thread and with all of them."""
    threads = sorted({1, os.cpu_count() or 1})
    return [Condition(c, t) for c in capabilities() for t in threads]


def lesson_conditions() -> list[Condition]:
    """Every capability this machine can dispatch, with the one thread every build gives a lesson
    (``docs/hooks/lessons_parallel.lesson_env``, whatever the environment asks for): the conditions
    a lesson's claims meet on learners' machines, as far as this one can play them."""
    return [Condition(c, 1) for c in capabilities()]


def run_all(work: Callable[[Condition], T], conds: list[Condition]) -> dict[str, T]:
    """``work`` under each condition, by name: one-thread runs side by side, one per core, and
    runs of several threads alone (two of them side by side would oversubscribe the cores, and
    OpenMP's waiting threads would spin on the cores the other needs: several times slower)."""
    single = [c for c in conds if c.threads == 1]
    results: dict[str, T] = {}
    with ThreadPoolExecutor(max(1, os.cpu_count() or 1)) as pool:
        results.update(zip((c.name for c in single), pool.map(work, single), strict=True))
    results.update((c.name, work(c)) for c in conds if c.threads != 1)
    return {c.name: results[c.name] for c in conds}
