"""The Performance page's tables, generated from ``bench/results.json`` when the site is built.

The figures are whatever ``make bench`` last measured and committed: the page never types a
number, and says so when the file or a key is missing. The prose quotes a figure of the current
results as ``{{ bench: key }}``, filled from the same file, so it cannot disagree with the table.
A ratio shown beside its two figures is their quotient as shown (``value``), never a number
stored apart from them, so a reader who divides the two gets the ratio printed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mkdocs.exceptions import PluginError

PAGE = "performance.md"
# The pages whose prose quotes figures: the contributor page's design notes, and the learner's
# pages that say how long a grading takes, do too.
PAGES = (PAGE, "how-it-is-built.md", "commands.md", "learner-guide.md")
MARKER = "<!-- bench results -->"
FIGURE = re.compile(r"\{\{\s*bench\s*:\s*(\w+)\s*\}\}")
# Each key's meaning, in the order the page lists them.
KEYS = {
    "floor_s": ("s", "start Python, import torch, read the pretrained weights: what any grader must pay"),
    "transformers_floor_s": (
        "s",
        '`python -c "import torch, transformers"`: the floor before the judge ran the course\'s own BERT',
    ),
    "transformers_floor_vs_floor": ("x", "that old floor over today's, this run"),
    "reference_import_s": ("s", "the course's own BERT with the pretrained weights: what a judge loads"),
    "reference_import_vs_floor": (
        "x",
        "that import over the floor: what a command that starts its own judge pays first, timed on its own",
    ),
    "grade_one_s": (
        "s",
        "`bertlab grade 05 --path solutions`, a new command, graded by the warm judges `make start` runs",
    ),
    "grade_one_vs_floor": ("x", "one notebook, over the floor"),
    "grade_all_s": ("s", "`bertlab grade --path solutions`, every notebook, default jobs, warm judges"),
    "grade_all_vs_floor": ("x", "the whole course, over the floor"),
    "grade_one_cold_s": ("s", "`bertlab grade 05 --path solutions --cold`: judges started by the command"),
    "grade_one_cold_vs_floor": ("x", "one notebook without warm judges, over the floor"),
    "grade_all_cold_s": ("s", "`bertlab grade --path solutions --cold`"),
    "grade_all_cold_vs_floor": ("x", "the whole course without warm judges, over the floor"),
    "portable_grade_one_s": (
        "s",
        "`grade_one_s` on the portable path (`BERTLAB_PORTABLE=1`, what macOS runs): "
        "warm judges, learner processes spawned",
    ),
    "portable_grade_one_vs_linux": ("x", "the portable path's warm `grade_one_s` over the Linux path's, this run"),
    "portable_grade_one_cold_s": ("s", "`grade_one_cold_s` on the portable path"),
    "portable_grade_one_cold_vs_linux": ("x", "over the Linux path's, this run"),
    "portable_grade_all_s": ("s", "`grade_all_s` on the portable path"),
    "portable_grade_all_vs_linux": ("x", "over the Linux path's, this run"),
    "portable_grade_all_cold_s": ("s", "`grade_all_cold_s` on the portable path"),
    "portable_grade_all_cold_vs_linux": ("x", "over the Linux path's, this run"),
    "forkserver_grade_one_s": ("s", "`grade_one_s` on the portable path with `BERTLAB_START_METHOD=forkserver`"),
    "forkserver_grade_one_vs_linux": ("x", "over the Linux path's, this run"),
    "forkserver_grade_one_cold_s": ("s", "`grade_one_cold_s`, the same"),
    "forkserver_grade_one_cold_vs_linux": ("x", "over the Linux path's, this run"),
    "forkserver_grade_all_s": ("s", "`grade_all_s`, the same"),
    "forkserver_grade_all_vs_linux": ("x", "over the Linux path's, this run"),
    "forkserver_grade_all_cold_s": ("s", "`grade_all_cold_s`, the same"),
    "forkserver_grade_all_cold_vs_linux": ("x", "over the Linux path's, this run"),
    "warm_judges_memory_mb": (
        "MB",
        "the warm judges' memory after this benchmark's gradings (the course and notebook 05, once per run of each; "
        "all their processes, shared pages counted once)",
    ),
    "watch_latency_s": ("s", "`bertlab grade --watch 05`: from a save to the printed result"),
    "check_latency_s": (
        "s",
        "one grade cell's check in a Jupyter kernel that ran one before, model loaded (Task 5.1, up to values)",
    ),
    "docs_build_cold_s": ("s", "`mkdocs build --strict` of a fresh clone (every lesson executed)"),
    "docs_build_warm_s": ("s", "the same build again, lessons from the cache"),
    "start_to_serving_s": ("s", "a fresh clone's `make start` (virtual environment included) until the site answers"),
    "class_speedup": ("x", "`bertlab autograde --jobs 2` over `--jobs 1`, on the benchmark's class"),
    "speedup_vs_nbgrader": ("x", "`bertlab autograde --jobs 2` over `nbgrader autograde`, same class"),
    "cluster_per_worker_efficiency": (
        "x",
        "`bertlab autograde --scheduler` on a Dask LocalCluster: submissions per worker-minute "
        "with two single-threaded workers over one's",
    ),
    "cluster_vs_jobs2": ("x", "that two-worker cluster's seconds over `--jobs 2`'s, same class, same machine"),
    "cluster_core_s_per_submission": (
        "s",
        "processor seconds a worker's processes spend per submission (judge and learner)",
    ),
    "cluster_serial_s_per_submission": (
        "s",
        "processor seconds per submission in the instructor's command (the gradebook's recording, one at a time)",
    ),
    "cluster_5000_on_1_workers_h": ("h", "a class of 5,000 projected on 1 worker"),
    "cluster_5000_on_10_workers_h": ("h", "on 10 workers, at the measured efficiency"),
    "cluster_5000_on_100_workers_h": ("h", "on 100 workers, or the serial recording's time if longer"),
}


def _goal(goal: dict | None, unit: str) -> str:
    if not goal:
        return ""
    sign = "at most" if goal["kind"] == "max" else "at least"
    return f"{sign} {goal['bound']:g}{' s' if unit == 's' else 'x'}"


def _verdict(value: float, goal: dict | None) -> str:
    if not goal:
        return ""
    ok = value <= goal["bound"] if goal["kind"] == "max" else value >= goal["bound"]
    return "met" if ok else "**missed**"


def shown(value: float, unit: str) -> str:
    return {"s": f"{value:.3g} s", "MB": f"{value:.0f} MB", "h": f"{value:.2g} h"}.get(unit, f"{value:.2f}x")


def parts(key: str) -> tuple[str, str] | None:
    """The two figures a ratio key divides, by its name (as ``bench/results.py`` names them).

    ``X_vs_floor`` is ``X_s / floor_s``; ``PATH_X_vs_linux`` is ``PATH_X_s / X_s``; None for
    other keys (``class_speedup`` and the like divide timings the page does not show).
    """
    if key.endswith("_vs_floor"):
        return key.removesuffix("_vs_floor") + "_s", "floor_s"
    match = re.fullmatch(r"(portable|forkserver)_(.+)_vs_linux", key)
    if match:
        return f"{match[1]}_{match[2]}_s", f"{match[2]}_s"
    return None


def value(results: dict, key: str) -> float | None:
    """``key``'s figure as the page shows it: a ratio whose two figures are on the page is the
    quotient of those two as shown (rounded), whatever the file stores for it."""
    named = parts(key)
    if named and all(p in KEYS and isinstance(results.get(p), (int, float)) for p in named):
        top, bottom = (float(shown(results[p], KEYS[p][0]).split()[0]) for p in named)
        return top / bottom
    return results.get(key)


def figures(markdown: str, results: dict) -> str:
    """``markdown`` with each ``{{ bench: key }}`` replaced by the key's current figure."""

    def figure(found: re.Match) -> str:
        key = found.group(1)
        measured = value(results, key) if key in KEYS else None
        if measured is None:
            raise PluginError(f"{PAGE}: {found.group(0)} names no measured figure of bench/results.json")
        return shown(measured, KEYS[key][0])

    return FIGURE.sub(figure, markdown)


def table(results: dict) -> str:
    goals = results.get("goals", {})
    rows = ["| Figure | What is timed | Measured | Goal | |", "|---|---|---|---|---|"]
    for key, (unit, what) in KEYS.items():
        figure = value(results, key)
        text = "not measured yet" if figure is None else shown(figure, unit)
        verdict = "" if figure is None else _verdict(figure, goals.get(key))
        rows.append(f"| `{key}` | {what} | {text} | {_goal(goals.get(key), unit)} | {verdict} |")
    machine = results.get("feedback_machine") or (results.get("class_grading") or {}).get("machine") or {}
    if machine:
        rows += [
            "",
            f"Measured on {machine.get('cpus')} CPUs ({machine.get('processor')}, "
            f"{machine.get('platform')}, Python {machine.get('python')}), 1-minute load average "
            f"{machine.get('load_average_1min', 0):.1f} when the run ended; "
            + (
                f"each figure the median of {machine['rounds']} runs."
                if machine.get("rounds")
                else "one run of each command."
            ),
        ]
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri not in PAGES:
        return markdown
    path = Path(config.config_file_path).parent / "bench" / "results.json"
    if not path.is_file():
        return FIGURE.sub("(not measured yet)", markdown.replace(MARKER, "No results yet: run `make bench`."))
    results = json.loads(path.read_text())
    return figures(markdown.replace(MARKER, table(results)), results)
