"""Submissions judged on this machine: ``jobs`` at once, by warm judges of this command's own."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed


class LocalJudges:
    """Judges started here; ``judged`` yields each submission's verdict as it finishes."""

    def __init__(self, jobs: int):
        from bertlab.grading.pool import JudgePool, judge_env

        self.jobs = max(1, jobs)
        # The judges start first: their imports and model load (seconds each) then overlap
        # nbgrader's import and the reading of the gradebook and the submissions.
        self.pool = JudgePool(judge_env(self.jobs))
        for _ in range(self.jobs):
            self.pool.warm_up()
        self.threads = ThreadPoolExecutor(max_workers=self.jobs)

    def describe(self) -> str:
        return f"{self.jobs} at a time on this machine"

    def judged(self, todo: list, limits) -> Iterator[tuple[object, object]]:
        """(submission, TaskResult) pairs, in the order they finish."""
        from bertlab.grading.runner import grade_task

        self.pool.expect(len(todo))  # a notebook each, as an assignment has
        futures = {self.threads.submit(grade_task, s.assignment, s.notebooks(), limits, self.pool): s for s in todo}
        for future in as_completed(futures):
            yield futures[future], future.result()

    def close(self) -> None:
        """Stop everything (Ctrl-C, or a recording that failed): no submission starts any more, and
        those being judged end now, with their judges, not at their notebooks' time limit."""
        self.threads.shutdown(wait=False, cancel_futures=True)
        self.pool.close()
        self.threads.shutdown(wait=True)
        self.pool.close()  # a judge started by a thread that was between two notebooks as the first close ran
