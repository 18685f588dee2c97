"""The benchmarks' shared file: each merges its keys into ``bench/results.json`` with the machine it ran on."""

from __future__ import annotations

import json
import os
import platform
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


def merge(out: Path, report: dict) -> None:
    """Write ``report``'s keys into ``out``, keeping the other benchmarks' keys."""
    merged = json.loads(out.read_text()) if out.is_file() else {}
    merged.update(report)
    merged["goals"] = {key: {"kind": kind, "bound": bound} for key, (kind, bound) in GOALS.items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(merged, indent=2) + "\n")
