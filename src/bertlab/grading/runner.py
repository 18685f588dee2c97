"""Grade notebooks: one isolated worker process per notebook, a timeout each, read-only inputs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

from bertlab.grading import notebooks
from bertlab.grading.execute import CheckResult, grade_cell_meta


@dataclass
class TaskResult:
    task: str
    score: float
    max_score: float
    status: str  # passed | failed | error | timeout
    checks: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def first_message(self) -> str:
        failed = [c.message for c in self.checks if not c.passed]
        return (failed or [c.message for c in self.checks] or [""])[0]


@dataclass
class Report:
    tasks: list[TaskResult]

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tasks)

    @property
    def max_score(self) -> float:
        return sum(t.max_score for t in self.tasks)

    @property
    def all_passed(self) -> bool:
        return all(t.status == "passed" for t in self.tasks)

    def to_dict(self) -> dict:
        return {
            "score": self.score,
            "max_score": self.max_score,
            "tasks": [
                {
                    "task": t.task,
                    "score": t.score,
                    "max_score": t.max_score,
                    "status": t.status,
                    "checks": [asdict(c) for c in t.checks],
                }
                for t in self.tasks
            ],
        }


def _failed_all(nb, message: str) -> list[CheckResult]:
    """Every grade cell of ``nb`` at 0 points with the same message (timeouts, crashes)."""
    return [
        CheckResult(meta["grade_id"], False, 0.0, float(meta.get("points", 0)), message)
        for cell in nb.cells
        if (meta := grade_cell_meta(cell))
    ]


def _run_worker(nb, timeout: float, env: dict) -> tuple[str, list[CheckResult]]:
    """Run ``nb`` in a fresh worker process; return (status, checks)."""
    with tempfile.TemporaryDirectory(prefix="bertlab-grade-") as tmp:
        copy, result_file = Path(tmp) / "notebook.ipynb", Path(tmp) / "result.json"
        nbformat.write(nb, copy)
        proc = subprocess.Popen(
            [sys.executable, "-m", "bertlab.grading.worker", str(copy), str(result_file)],
            cwd=tmp,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # so a timeout kills learner subprocesses too
        )
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return "timeout", _failed_all(nb, f"timed out after {timeout:g} s (raise it with --timeout)")
        if not result_file.exists():
            tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            return "error", _failed_all(nb, f"the grading process died (exit {proc.returncode}): {tail[0]}")
        result = json.loads(result_file.read_text())
    checks = [CheckResult(**c) for c in result["checks"]]
    if not checks:
        return "error", []
    return ("passed" if all(c.passed for c in checks) else "failed"), checks


def grade_task(name: str, paths: list[Path], timeout: float, env: dict) -> TaskResult:
    start = time.perf_counter()
    status, checks = "passed", []
    for path in paths:
        try:
            nb = notebooks.read(path)
        except notebooks.GradingError as err:
            status = "error"
            checks.append(CheckResult(path.name, False, 0.0, 0.0, str(err)))
            continue
        source_path = notebooks.source_notebook(path)
        source = notebooks.read(source_path) if source_path else None
        missing = notebooks.restore_grade_cells(nb, source) if source else []
        if not any(grade_cell_meta(c) for c in nb.cells):
            status = "error"
            checks.append(CheckResult(path.name, False, 0.0, 0.0, f"{path.name} has no grade cells"))
            continue
        nb_status, nb_checks = _run_worker(nb, timeout, env)
        checks += nb_checks
        if missing:
            deleted = _failed_all(source, "this grade cell was deleted from your notebook; copy it back from the release")
            checks += [c for c in deleted if c.name in missing]
        if status == "passed" or nb_status in ("error", "timeout"):
            status = nb_status
    if status == "passed" and not all(c.passed for c in checks):
        status = "failed"
    return TaskResult(
        task=name,
        score=sum(c.points for c in checks),
        max_score=sum(c.max_points for c in checks),
        status=status,
        checks=checks,
        seconds=time.perf_counter() - start,
    )


def grade(
    path: Path,
    wanted: list[str],
    timeout: float = 300,
    model: str | None = None,
    jobs: int = 2,
    progress: Callable[[str], None] = lambda _: None,
) -> Report:
    """Grade the selected tasks under ``path``; raises GradingError when there is nothing to grade."""
    tasks = notebooks.select(notebooks.discover(path), wanted)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "MPLBACKEND": "Agg"}
    # Workers running side by side must share the cores, not each start one thread per core:
    # oversubscribed BLAS threads make every matmul several times slower.
    threads = str(max(1, (os.cpu_count() or 1) // max(1, jobs)))
    env.update({k: env.get(k, threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    if model:
        env["BERTLAB_MODEL"] = str(Path(model).resolve())
    progress(f"grading {len(tasks)} task(s) under {path}/ ({jobs} at a time, timeout {timeout:g} s each)")

    def one(item):
        result = grade_task(*item, timeout, env)
        progress(f"  {result.task}: {result.status}, {result.score:g}/{result.max_score:g} ({result.seconds:.0f} s)")
        return result

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return Report(list(pool.map(one, tasks.items())))
