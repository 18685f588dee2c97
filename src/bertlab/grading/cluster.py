"""The worker's side of grading on a Dask cluster: warm judges per Dask worker, one task per submission.

``bertlab autograde --scheduler`` (``bertlab.instructor.cluster_judges``) registers ``JudgesOnDaskWorker``
with the cluster: Dask runs its ``setup`` once in every worker process, present and future, and
its ``teardown`` when the worker closes, so each worker keeps judges of its own warm for as long
as it lives, one per thread it runs tasks on. Each submission is then one call of
``judge_submission``: its notebooks and its assignment's source notebooks travel with the task as
bytes (no filesystem is shared with the instructor's machine), they are judged by that worker's
judges exactly as on the local path (``runner.grade_task``: the learner's code in its own
sandboxed process, under the same limits), and the verdict goes back as data. The gradebook is
written by the instructor's process alone.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from distributed import WorkerPlugin, get_worker

from bertlab.grading import scratch
from bertlab.grading.pool import JudgePool, Limits, judge_env
from bertlab.grading.runner import TaskResult, failed_all, grade_task

PLUGIN = "bertlab-warm-judges"


class VersionMismatch(RuntimeError):
    """A worker runs another version of bertlab than the instructor's command: its verdicts could differ."""


def installed_version() -> str:
    """The version of bertlab installed here (what ``pip install`` recorded)."""
    return metadata.version("bertlab")


class JudgesOnDaskWorker(WorkerPlugin):
    """Judges kept warm in a Dask worker process, one per thread the worker runs tasks on."""

    name = PLUGIN
    # Registered again by every `bertlab autograde` run: the judges already warm are kept.
    idempotent = True

    def setup(self, worker) -> None:
        jobs = max(1, worker.state.nthreads)
        self.pool = JudgePool(judge_env(jobs, long_lived=True))
        for _ in range(jobs):
            self.pool.warm_up()  # returns at once: the judges load in the background

    def teardown(self, worker) -> None:
        self.pool.close()


def judge_submission(
    assignment: str, submitted: dict[str, bytes], sources: dict[str, bytes], limits: Limits, version: str
) -> TaskResult:
    """Judge one submission (file name -> bytes) of ``assignment`` with this worker's warm judges.

    Raises VersionMismatch when this worker's bertlab is not ``version``, the instructor's: a worker
    that joined the cluster after the check at the start of the run is refused here.
    """
    here = installed_version()
    if here != version:
        raise VersionMismatch(
            f"the worker at {get_worker().address} has bertlab {here}, the instructor's command bertlab {version}"
        )
    pool = get_worker().plugins[PLUGIN].pool
    with scratch.folder("submission") as tmp:
        # The learner's files and the sources in folders of their own: a submitted file named like
        # a source must not replace it.
        paths, source_paths = (
            _write(Path(tmp) / "submitted" / assignment, submitted),
            _write(Path(tmp) / "source", sources),
        )
        return grade_task(assignment, paths, limits, pool, sources=source_paths)


def lost(assignment: str, sources: dict[str, bytes], reason: str) -> TaskResult:
    """The verdict of a submission no worker could judge: every grade cell of its sources at 0, with ``reason``."""
    from bertlab.grading import notebooks

    with scratch.folder("lost") as tmp:
        checks = [c for path in _write(Path(tmp), sources) for c in failed_all(notebooks.read(path), reason)]
    return TaskResult(assignment, 0.0, sum(c.max_points for c in checks), "error", checks)


def _write(folder: Path, files: dict[str, bytes]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in sorted(files.items()):
        path = folder / Path(name).name  # a name never leads out of the folder
        path.write_bytes(data)
        paths.append(path)
    return paths
