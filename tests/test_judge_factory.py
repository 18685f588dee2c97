"""Judges side by side are forks of one factory that loaded the imports and the model once."""

from __future__ import annotations

import os
import signal

import pytest

from bertlab.grading.platforms.linux.procstat import parent
from bertlab.grading.pool import JudgePool, Limits, judge_env
from bertlab.grading.runner import grade_task
from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # judges started and notebooks graded

TASK = "02-embeddings"  # the quickest notebook to grade
LIMITS = Limits(timeout=120, memory_mb=4096)


def _grade(pool: JudgePool):
    return grade_task(TASK, [ROOT / "solutions" / TASK / f"{TASK}.ipynb"], LIMITS, pool)


def test_judges_side_by_side_are_forks_of_one_factory_and_grade_alike():
    pool = JudgePool(judge_env(2))
    try:
        pool.warm_up()
        pool.warm_up()
        judges = list(pool.idle)
        pids = [judge.proc.pid for judge in judges]
        assert len(set(pids)) == 2, pids
        assert all(parent(pid) == pool.factory.proc.pid for pid in pids), "a judge was not forked by the factory"
        results = [_grade(pool), _grade(pool)]
        assert all(r.status == "passed" and r.score == r.max_score > 0 for r in results), results
        assert [c.points for c in results[0].checks] == [c.points for c in results[1].checks]
    finally:
        pool.close()
    assert not pool.idle and all(not judge.alive for judge in judges), "closing the pool left a judge running"


def test_a_judge_that_dies_while_idle_is_replaced_by_a_new_fork_and_costs_no_notebook():
    pool = JudgePool(judge_env(1))
    try:
        pool.warm_up()
        first = pool.idle[0]
        os.killpg(first.proc.pid, signal.SIGKILL)
        first.proc.wait()
        result = _grade(pool)
        assert result.status == "passed", result.first_message
        replacement = pool.idle[0]
        assert replacement is not first and parent(replacement.proc.pid) == pool.factory.proc.pid
    finally:
        pool.close()


def test_a_factory_that_cannot_load_says_why(tmp_path):
    (tmp_path / "torch.py").write_text("raise ImportError('planted: this torch cannot be imported')\n")
    env = judge_env(1)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT / "src")])
    pool = JudgePool(env)
    try:
        result = _grade(pool)
    finally:
        pool.close()
    assert result.status == "error" and result.score == 0, result
    assert "planted: this torch cannot be imported" in result.first_message, result.first_message


def test_a_defect_in_the_factory_reader_ends_nothing_in_waiting_and_leaves_no_judge(monkeypatch):
    """The reader thread that hands out judges' pids fails (here: a planted defect; on a system
    without pidfd it was an AttributeError). Before, every judge it owed waited forever and so
    did the command. Now the notebook is graded all the same, the failure is kept as the
    factory's last words, and closing the pool ends every process it started."""
    import threading
    import time
    import uuid

    from bertlab.grading.platforms.linux import judge_factory
    from tests.grading_paths import processes_with

    def planted(self, pid):
        raise AttributeError("planted defect")

    monkeypatch.setattr(judge_factory.ForkedJudge, "forked", planted)
    marker = uuid.uuid4().hex
    pool = JudgePool({**judge_env(1), "BERTLAB_TEST_RUN": marker})
    results = []
    try:
        grading = threading.Thread(target=lambda: results.append(_grade(pool)), daemon=True)
        grading.start()
        grading.join(300)
        assert not grading.is_alive(), "grading waited for a judge that was never handed out"
        assert results[0].status == "passed" and results[0].score == results[0].max_score, results[0]
        assert any("planted defect" in line for line in pool.factory.stderr), pool.factory.stderr
    finally:
        pool.close()
    deadline = time.monotonic() + 30
    while processes_with("BERTLAB_TEST_RUN", marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_with("BERTLAB_TEST_RUN", marker)
