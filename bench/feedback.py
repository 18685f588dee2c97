"""Benchmark: how fast the course answers "is my code right?", against the import floor.

Every figure is a median of ``--rounds`` runs (default 5), and every ratio divides two figures
of this same run, so a busy machine slows both sides alike. Merged into ``bench/results.json``:

- ``floor_s``: start Python, import torch and read the pretrained weights (``FLOOR_CODE``): what
  any grader of this course must pay, whatever it compares with; timed before and after the
  gradings, the mean of the two medians kept;
- ``transformers_floor_s``: the floor before the judge compared with the course's own BERT,
  ``python -c "import torch, transformers"``, kept beside it for comparison (a floor that holds
  transformers' import flatters every ratio over it), and ``transformers_floor_vs_floor``;
- ``reference_import_s``: what a judge loads to compare with: the course's own BERT
  (``bertlab.bert``) with the pretrained weights in it;
- ``reference_import_vs_floor``: the two above divided, the least ``grade_one_cold_vs_floor`` can be;
- ``grade_one_s``, ``grade_one_vs_floor``: ``bertlab grade 05 --path solutions``, a new command
  sent to warm judges (``bertlab judges start``, as ``make start`` runs them for the learner);
- ``grade_all_s``, ``grade_all_vs_floor``: ``bertlab grade --path solutions``, default jobs, the same;
- ``grade_one_cold_s``, ``grade_all_cold_s`` and their ``_vs_floor``: the same commands with
  ``--cold``, which start judges of their own (no goal: what grading costs without warm judges);
- ``portable_grade_one_s``, ``portable_grade_one_cold_s``, ``portable_grade_all_s``,
  ``portable_grade_all_cold_s``: the four gradings above on the portable path (``BERTLAB_PORTABLE=1``:
  what macOS runs, learner processes spawned, two spares kept warm per judge), and each divided by
  the Linux path's figure of this run (``..._vs_linux``); ``forkserver_...``: the same with
  ``BERTLAB_START_METHOD=forkserver`` (forks of a server that imported torch), the alternative
  the portable path was measured against;
- ``warm_judges_memory_mb``: what the warm judges hold after this run's gradings above (with every
  key: notebook 05 and the whole course, ``--rounds`` times each): the proportional set size of
  their server and every process under it (memory that processes share counted once), in MB;
- ``watch_latency_s``: ``bertlab grade --watch 05``, from a save to the printed result;
- ``check_latency_s``: one in-notebook check (Task 5.1, warm), as a learner's grade cell runs it;
- ``docs_build_cold_s`` / ``docs_build_warm_s``: ``mkdocs build --strict`` of a copy of the
  course with an empty lesson cache, then again with the cache it filled;
- ``start_to_serving_s``: a fresh clone's ``make start`` until the site answers (``--start``
  only: it builds a new virtual environment).

Usage::

    python -m bench.feedback [--rounds 5] [--start] [--only KEY ...] [--out bench/results.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import IO, cast

from bench.results import machine, merge, met

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
BIN = Path(PYTHON).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "NO_MKDOCS_2_WARNING": "1"}
TASK = "05-feed-forward"


def seconds_of(args: list[str], cwd: Path = ROOT, ok=(0,)) -> float:
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, env=ENV, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode not in ok:
        raise RuntimeError(f"{' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return took


def median_of(rounds: int, measure) -> float:
    return statistics.median(measure() for _ in range(rounds))


# The floor: start Python, import torch, read the weights, with the reader the course's model uses.
FLOOR_CODE = (
    "import torch; from safetensors.torch import load_file; "
    "from bertlab import model_files; load_file(model_files.weights_file(model_files.model_dir()))"
)
TRANSFORMERS_FLOOR_CODE = "import torch, transformers"
REFERENCE_CODE = "from bertlab.bert import load; load.load_model()"


def floor(rounds: int, code: str = FLOOR_CODE) -> float:
    return median_of(rounds, lambda: seconds_of([PYTHON, "-c", code]))


def reference_import(rounds: int) -> float:
    return median_of(rounds, lambda: seconds_of([PYTHON, "-c", REFERENCE_CODE]))


def grade(rounds: int, *tasks: str, cold: bool = False) -> float:
    """A new ``bertlab grade`` command's seconds; warm judges must grade it unless ``cold``."""
    command = [str(BIN / "bertlab"), "grade", *tasks, "--path", "solutions", "--no-progress"] + (
        ["--cold"] if cold else []
    )

    def once() -> float:
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True)
        took = time.perf_counter() - start
        if proc.returncode != 0 or (cold == ("by the warm judges" in proc.stderr)):
            raise RuntimeError(
                f"{' '.join(command)} exited {proc.returncode} "
                f"({'with' if cold else 'without'} warm judges):\n{proc.stderr[-3000:]}"
            )
        return took

    return median_of(rounds, once)


@contextlib.contextmanager
def grading_path(env: dict):
    """The commands run inside use ``env`` on top of the benchmark's own (a grading path)."""
    saved = {name: ENV.get(name) for name in env}
    ENV.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                ENV.pop(name, None)
            else:
                ENV[name] = value


# The portable path as macOS runs it, and the start method it was measured against.
PORTABLE_PATHS = {
    "portable": {"BERTLAB_PORTABLE": "1"},
    "forkserver": {"BERTLAB_PORTABLE": "1", "BERTLAB_START_METHOD": "forkserver"},
}
GRADINGS = ("grade_one", "grade_one_cold", "grade_all", "grade_all_cold")


def gradings(
    rounds: int, report: dict, prefix: str = "", one: bool = True, all_: bool = True, memory: bool = False
) -> None:
    """The four gradings (one notebook and the course; cold, then warm) into ``report``."""
    if one:
        report[f"{prefix}grade_one_cold_s"] = grade(rounds, TASK, cold=True)
    if all_:
        report[f"{prefix}grade_all_cold_s"] = grade(rounds, cold=True)
    if one or all_ or memory:
        with warm_judges():
            if one:
                report[f"{prefix}grade_one_s"] = grade(rounds, TASK)
            if all_:
                report[f"{prefix}grade_all_s"] = grade(rounds)
            if memory:
                report[f"{prefix}warm_judges_memory_mb"] = warm_judges_memory()


@contextlib.contextmanager
def warm_judges():
    """Warm judges in a folder of this run's own, ready: both have graded a notebook."""
    saved = ENV.get("BERTLAB_JUDGES_DIR")
    with tempfile.TemporaryDirectory(prefix="bertlab-bench-judges-") as folder:
        ENV["BERTLAB_JUDGES_DIR"] = folder
        bertlab = str(BIN / "bertlab")
        try:
            seconds_of([bertlab, "judges", "start"])
            seconds_of([bertlab, "grade", "03", "05", "--path", "solutions", "--no-progress"])
            yield
        finally:
            subprocess.run([bertlab, "judges", "stop"], env=ENV, capture_output=True)
            ENV.pop("BERTLAB_JUDGES_DIR")
            if saved is not None:
                ENV["BERTLAB_JUDGES_DIR"] = saved


def _process_tree(pid: int) -> list[int]:
    from bertlab.grading.platforms.linux.procstat import parent

    parents = {int(entry): parent(int(entry)) for entry in os.listdir("/proc") if entry.isdigit()}
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += [child for child, parent in parents.items() if parent == tree[-1]]
    return tree


def _pss_mb(pid: int) -> float:
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("Pss:"))
    return 0.0  # ended meanwhile


def warm_judges_memory() -> float:
    """MB the running warm judges hold: every process of their server's tree, shared pages shared out."""
    status = subprocess.run([str(BIN / "bertlab"), "judges", "status"], env=ENV, capture_output=True, text=True)
    found = re.search(r"\(pid (\d+)\)", status.stdout)
    if not found:
        raise RuntimeError(f"no warm judges to measure: {status.stdout.strip()}")
    return sum(_pss_mb(pid) for pid in _process_tree(int(found.group(1))))


def watch_latency(rounds: int) -> float:
    """Seconds from rewriting a notebook to ``bertlab grade --watch`` printing its result."""
    with tempfile.TemporaryDirectory(prefix="bertlab-watch-bench-") as tmp:
        folder = Path(tmp) / "exercises" / TASK
        folder.mkdir(parents=True)
        notebook = folder / f"{TASK}.ipynb"
        shutil.copy(ROOT / "solutions" / TASK / f"{TASK}.ipynb", notebook)
        proc = subprocess.Popen(
            [str(BIN / "bertlab"), "grade", "--watch", TASK, "--path", str(Path(tmp) / "exercises"), "--no-progress"],
            cwd=ROOT,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        results: list[float] = []  # time.time() of each printed total line
        stdout = cast(IO[str], proc.stdout)  # stdout=PIPE, text=True: a text stream, never None

        def record_totals() -> None:
            for line in stdout:
                if line.startswith("total"):
                    results.append(time.time())

        threading.Thread(target=record_totals, daemon=True).start()
        try:
            _wait(lambda: len(results) >= 1, 600, "the first grade")
            latencies = []
            for round_ in range(rounds):
                time.sleep(0.5)
                saved = time.time()
                text = notebook.read_text()
                notebook.write_text(text)  # a save: same content, new time stamp
                _wait(lambda round_=round_: len(results) >= round_ + 2, 600, "a grade after a save")
                latencies.append(results[round_ + 1] - saved)
            return statistics.median(latencies)
        finally:
            proc.terminate()
            proc.wait(30)


def _wait(done, limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no result for {what} within {limit:g} s")
        time.sleep(0.01)


def check_latency(rounds: int) -> float:
    """One grade cell's check in a warm kernel: the learner's own class, checked in-process."""
    code = f"""
import json, statistics, time
from tests.conftest import solution_namespace
from bertlab.checks import check
ns = solution_namespace("{TASK}")
check("5.1", ns["BertIntermediate"], upto="values")  # warm: the model and its capture are loaded once per kernel
times = []
for _ in range({rounds}):
    start = time.perf_counter()
    check("5.1", ns["BertIntermediate"], upto="values")
    times.append(time.perf_counter() - start)
print(json.dumps(statistics.median(times)))
"""
    proc = subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=ENV, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _course_copy(into: Path) -> Path:
    """The tracked files of the course, as a fresh clone has them (no site, no lesson cache)."""
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(into)], check=True, env=ENV)
    return into


def docs_build(rounds: int) -> tuple[float, float]:
    cold, warm = [], []
    with tempfile.TemporaryDirectory(prefix="bertlab-docs-bench-") as tmp:
        copy = _course_copy(Path(tmp) / "course")
        build = [PYTHON, "-m", "mkdocs", "build", "--strict", "--site-dir", str(Path(tmp) / "site")]
        for _ in range(rounds):
            shutil.rmtree(copy / ".cache", ignore_errors=True)
            cold.append(seconds_of(build, cwd=copy))
            warm.append(seconds_of(build, cwd=copy))
    return statistics.median(cold), statistics.median(warm)


def start_to_serving(rounds: int) -> float:
    """A fresh clone's ``make start``, venv included, until the site answers on its port."""
    times = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="bertlab-start-bench-") as tmp:
            copy = _course_copy(Path(tmp) / "course")
            port = _free_port()
            start = time.perf_counter()
            proc = subprocess.Popen(
                ["make", "start", f"PORT={port}"],
                cwd=copy,
                env=ENV,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                _wait(lambda port=port, proc=proc: _answers(port) or proc.poll() is not None, 1800, "make start")
                if proc.poll() is not None:
                    raise RuntimeError(f"make start exited {proc.returncode} before serving")
                times.append(time.perf_counter() - start)
            finally:
                os.killpg(proc.pid, 15)
                proc.wait(30)
    return statistics.median(times)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def run(rounds: int, only: set[str], start: bool) -> dict:
    wanted = lambda key: not only or key in only  # noqa: E731
    report: dict = {}
    portable = wanted("portable_grade_one_vs_linux")
    if wanted("grade_one_vs_floor") or wanted("grade_all_vs_floor") or wanted("floor_s") or portable:
        report["floor_s"] = floor(rounds)
    if "floor_s" in report or wanted("reference_import_s"):  # its ratio is shown beside the floor
        report.setdefault("floor_s", floor(rounds))
        report["transformers_floor_s"] = floor(rounds, TRANSFORMERS_FLOOR_CODE)
        report["reference_import_s"] = reference_import(rounds)
    gradings(
        rounds,
        report,
        one=wanted("grade_one_vs_floor") or portable,
        all_=wanted("grade_all_vs_floor") or portable,
        memory=wanted("warm_judges_memory_mb"),
    )
    if portable:
        for prefix, env in PORTABLE_PATHS.items():
            with grading_path(env):
                gradings(rounds, report, prefix=f"{prefix}_")
            for key in GRADINGS:
                report[f"{prefix}_{key}_vs_linux"] = report[f"{prefix}_{key}_s"] / report[f"{key}_s"]
    if "floor_s" in report:
        # Timed again after the gradings, the two medians averaged: a load that changes over the
        # minutes of the run weighs on the floor as on the figures divided by it.
        report["floor_s"] = (report["floor_s"] + floor(rounds)) / 2
    for key in ("grade_one_s", "grade_one_cold_s", "grade_all_s", "grade_all_cold_s", "transformers_floor_s"):
        if key in report:
            report[key[:-2] + "_vs_floor"] = report[key] / report["floor_s"]
    if "reference_import_s" in report:
        # The least a command that starts its own judge can take: it loads the model it compares with.
        report["reference_import_vs_floor"] = report["reference_import_s"] / report["floor_s"]
    if wanted("watch_latency_s"):
        report["watch_latency_s"] = watch_latency(rounds)
    if wanted("check_latency_s"):
        report["check_latency_s"] = check_latency(rounds)
    if wanted("docs_build_cold_s") or wanted("docs_build_warm_s"):
        report["docs_build_cold_s"], report["docs_build_warm_s"] = docs_build(rounds)
    if start:
        report["start_to_serving_s"] = start_to_serving(rounds)
    report["feedback_machine"] = {**machine(), "rounds": rounds}
    return report


def main(argv=None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="runs per figure, the median kept (default 5)")
    parser.add_argument("--only", nargs="+", default=[], metavar="KEY", help="measure only these keys")
    parser.add_argument("--start", action="store_true", help="also time a fresh clone's `make start` (minutes)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results.json", help="results file, merged into")
    args = parser.parse_args(argv)
    report = run(args.rounds, set(args.only), args.start)
    merge(args.out, report)
    for key, value in report.items():
        if isinstance(value, float):
            verdict = {True: "goal met", False: "GOAL MISSED", None: ""}[met(key, value)]
            print(f"{key:22} {value:8.3f}  {verdict}")
    print(f"written to {args.out}")
    return args.out


if __name__ == "__main__":
    main()
