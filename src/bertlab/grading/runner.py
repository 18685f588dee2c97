"""Grade notebooks: one isolated worker process per notebook, a timeout each, read-only inputs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bertlab.grading import notebooks, scratch
from bertlab.grading.pool import JudgePool, Judges, Limits, judge_env
from bertlab.grading.results import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT, CheckResult, grade_cell_meta


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
        if failed:
            return failed[0]
        if not self.checks:
            return ""
        # A grade cell's own line may name only the stages it ran: say the task passed whole.
        tasks = dict.fromkeys(task for c in self.checks for task in c.tasks)
        named = f" (Task {', '.join(tasks)})" if tasks else ""
        return f"all {len(self.checks)} grade cells passed{named}"


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


def failed_all(nb, message: str, cause: str | None = None) -> list[CheckResult]:
    """Every grade cell of ``nb`` at 0 points with the same message (timeouts, crashes)."""
    return [
        CheckResult(meta["grade_id"], False, 0.0, float(meta.get("points", 0)), message, cause=cause)
        for cell in nb.cells
        if (meta := grade_cell_meta(cell))
    ]


def _run_worker(nb, limits: Limits, pool: Judges) -> tuple[str, list[CheckResult]]:
    """Judge ``nb`` in a warm worker process; return (status, checks)."""
    with scratch.folder("grade") as tmp:
        # The learner's process may write in the notebook's folder only: the result is kept apart.
        (Path(tmp) / "work").mkdir()
        copy, result_file = Path(tmp) / "work" / "notebook.ipynb", Path(tmp) / "result.json"
        notebooks.write(nb, copy)
        with pool.take() as worker:
            outcome = worker.judge(copy, result_file, limits)
        if outcome == "timeout":
            return "timeout", failed_all(nb, f"timed out after {limits.timeout:g} s", "timeout")
        if outcome != "done" or not result_file.exists():
            return "error", failed_all(nb, f"the grading process {outcome}")
        result = json.loads(result_file.read_text())
    checks = [CheckResult(**c) for c in result["checks"]]
    if not checks:
        return "error", []
    if result.get("stopped"):
        return result["stopped"], checks
    return ("passed" if all(c.passed for c in checks) else "failed"), checks


def _expected_notebooks(
    name: str, paths: list[Path], sources: list[Path] | None = None
) -> list[tuple[Path, Path | None]]:
    """(learner notebook, its source) pairs to grade for task folder ``name``.

    Where the course has a source for this task, its notebooks are the ones graded, found by
    name in the learner's folder (a missing one scores 0); others in the folder are skipped.
    ``sources``, when given, are the task's source notebooks (else found in the course's
    ``solutions/`` above the learner's folder).
    """
    if not paths:
        return []
    if sources is None:
        sources = notebooks.source_notebooks(paths[0].parent)
    if not sources:
        return [(path, None) for path in paths]
    return [(paths[0].parent / src.name, src) for src in sources]


def grade_task(
    name: str, paths: list[Path], limits: Limits, pool: Judges, sources: list[Path] | None = None
) -> TaskResult:
    """Judge task ``name``'s notebooks ``paths`` against its ``sources`` (see ``_expected_notebooks``)."""
    start = time.perf_counter()
    status, checks = "passed", []
    for path, source_path in _expected_notebooks(name, paths, sources):
        source = notebooks.read(source_path) if source_path else None
        problem = None
        if not path.is_file():
            others = ", ".join(p.name for p in paths) or "nothing"
            problem = f"{path.name} is missing from {name}/ (found {others}); this task's notebook must keep its name"
        else:
            try:
                nb = notebooks.read(path)
            except notebooks.GradingError as err:
                problem = str(err)
        if problem is not None:
            status = "error"
            checks += failed_all(source, problem) if source else [CheckResult(path.name, False, 0.0, 0.0, problem)]
            continue
        missing = notebooks.restore_locked_cells(nb, source) if source else []
        nb_checks: list[CheckResult]
        if not any(grade_cell_meta(c) for c in nb.cells):
            if not missing:
                status = "error"
                checks.append(CheckResult(path.name, False, 0.0, 0.0, f"{path.name} has no grade cells"))
                continue
            nb_status, nb_checks = "failed", []
        else:
            nb_status, nb_checks = _run_worker(nb, limits, pool)
        checks += nb_checks
        if missing:
            deleted = failed_all(
                source, "this grade cell was deleted from your notebook; copy it back from the release"
            )
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


def grade_cells(paths: list[Path]) -> int:
    """How many grade cells the notebooks at ``paths`` hold: what grading them costs, roughly
    (an unreadable notebook counts 0). The graders start the costliest first: one left for the
    end keeps a job busy while the others idle."""
    cells = 0
    for path in paths:
        try:
            cells += sum(1 for c in notebooks.read(path).cells if grade_cell_meta(c))
        except (notebooks.GradingError, OSError):
            pass
    return cells


def grade(
    path: Path,
    wanted: list[str],
    timeout: float = DEFAULT_TIMEOUT,
    model: str | None = None,
    jobs: int = 2,
    progress: Callable[[str], None] = lambda _: None,
    memory_limit: float = DEFAULT_MEMORY_MB,
    warm: bool = True,
) -> Report:
    """Grade the selected tasks under ``path``; raises GradingError when there is nothing to grade.

    Args:
        timeout: seconds per notebook, for all its cells and checks.
        memory_limit: MB the learner's process may use before it is stopped.
        warm: send the notebooks to the warm judges of ``bertlab judges start`` when they run
            and grade as this process would (same code, libraries and model).
    """
    from bertlab.grading import durations, warm_judges

    limits = Limits(timeout, memory_limit)
    tasks = notebooks.select(notebooks.discover(path), wanted)
    # Fewer tasks than jobs leave cores free: the workers that do run may use them.
    local = JudgePool(judge_env(min(jobs, max(1, len(tasks))), model))
    local.expect(len(tasks))  # a notebook each, as the course's tasks have
    judges = warm_judges.connect(model, local) if warm else None
    progress(
        f"grading {len(tasks)} notebook(s) under {path}/ ({jobs} at a time, "
        f"limits {timeout:g} s and {memory_limit:g} MB per notebook"
        f"{', by the warm judges' if judges else ''})"
    )
    pool: Judges = judges or local
    stopping = threading.Event()  # Ctrl-C: the judges are being stopped, so no ending is a verdict

    def one(item):
        result = grade_task(*item, limits, pool)
        if stopping.is_set():
            progress(f"  {result.task}: interrupted")
        else:
            progress(
                f"  {result.task}: {result.status}, {result.score:g}/{result.max_score:g} ({result.seconds:.0f} s)"
            )
        return result

    last = durations.load()
    costliest_first = sorted(
        tasks.items(), reverse=True, key=lambda item: durations.estimate(item[0], last, lambda: grade_cells(item[1]))
    )
    threads = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        done = {result.task: result for result in threads.map(one, costliest_first)}
        durations.save({name: result.seconds for name, result in done.items()})
        return Report([done[name] for name in tasks])  # in the course's order, as selected
    except BaseException:
        stopping.set()
        raise
    finally:
        # Before waiting for the threads: on Ctrl-C they wait for judges that must be stopped first.
        pool.close()
        threads.shutdown(cancel_futures=True)
