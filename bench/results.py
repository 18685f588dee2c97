"""The benchmarks' shared file: each merges its keys into ``bench/results.json`` with the machine it ran on."""

from __future__ import annotations

import json
import math
import os
import platform
import re
from pathlib import Path

# The goals each key is held to: ("max", x) the figure must stay at or under x, ("min", x) reach x.
GOALS = {
    "grade_one_vs_floor": ("max", 2.0),
    "grade_all_vs_floor": ("max", 5.0),
    "portable_grade_one_vs_linux": ("max", 1.5),
    "watch_latency_s": ("max", 1.5),
    "check_latency_s": ("max", 0.1),
    "docs_build_cold_s": ("max", 60.0),
    "docs_build_warm_s": ("max", 10.0),
    "start_to_serving_s": ("max", 180.0),
    "class_speedup": ("min", 1.8),
    "speedup_vs_nbgrader": ("min", 3.0),
    "cluster_per_worker_efficiency": ("min", 0.85),
}


def met(key: str, value: float) -> bool | None:
    """Whether ``value`` meets ``key``'s goal (None: the key has none)."""
    if key not in GOALS:
        return None
    kind, bound = GOALS[key]
    return value <= bound if kind == "max" else value >= bound


def machine() -> dict:
    """What the figures were measured on, and how busy it was."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_1min": os.getloadavg()[0],
    }


def parts(key: str) -> tuple[str, str] | None:
    """The two figures a ratio key is the quotient of, by its name; None for other keys.

    ``X_vs_floor`` is ``X_s / floor_s``; ``PATH_X_vs_linux`` is ``PATH_X_s / X_s``. The pages show
    a ratio beside its two figures, so the three must come from one run (``merge`` sees to it).
    """
    if key.endswith("_vs_floor"):
        return key.removesuffix("_vs_floor") + "_s", "floor_s"
    match = re.fullmatch(r"(portable|forkserver)_(.+)_vs_linux", key)
    if match:
        return f"{match[1]}_{match[2]}_s", f"{match[2]}_s"
    return None


def stale_ratios(results: dict) -> list[str]:
    """Ratios that are not the quotient of their two stored figures (measured in different runs)."""
    stale = []
    for key, value in results.items():
        named = parts(key)
        if named and all(isinstance(results.get(p), (int, float)) for p in named):
            if not math.isclose(value, results[named[0]] / results[named[1]], rel_tol=1e-9):
                stale.append(key)
    return stale


def merge(out: Path, report: dict) -> None:
    """Write ``report``'s keys into ``out``, keeping the other benchmarks' keys.

    A ratio left from an earlier run whose figure this run replaced is dropped, not shown beside
    figures it was not computed from (the page then says it was not measured)."""
    merged = json.loads(out.read_text()) if out.is_file() else {}
    merged.update(report)
    for key in stale_ratios(merged):
        del merged[key]
    merged["goals"] = {key: {"kind": kind, "bound": bound} for key, (kind, bound) in GOALS.items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(merged, indent=2) + "\n")
