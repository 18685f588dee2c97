"""The environment judge workers run in: cores shared between jobs, OpenMP threads that do not
spin on the core the learner's process needs."""

from __future__ import annotations

import os

from bertlab.grading.pool import judge_env


def test_jobs_share_the_cores(monkeypatch):
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert judge_env(2)["OMP_NUM_THREADS"] == "4"
    assert judge_env(1)["MKL_NUM_THREADS"] == "8"
    assert judge_env(16)["OPENBLAS_NUM_THREADS"] == "1"


def test_idle_openmp_threads_spin_briefly_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    brief = int(judge_env(1)["GOMP_SPINCOUNT"])
    assert 0 < brief < 300_000  # the GNU OpenMP runtime's own default spins 300000 times
    monkeypatch.setenv("GOMP_SPINCOUNT", "123")
    assert judge_env(1)["GOMP_SPINCOUNT"] == "123"


def test_a_user_thread_setting_is_kept(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert judge_env(2)["OMP_NUM_THREADS"] == "3"


def test_nbgrader_autograde_judges_with_the_same_spin(monkeypatch):
    """nbgrader's own process judges (its preprocessor): the course's config sets it before torch loads."""
    from traitlets.config import Config

    from tests.conftest import ROOT

    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))  # the config prepends the venv's bin/: undone after
    source = (ROOT / "nbgrader_config.py").read_text()
    exec(
        compile(source, "nbgrader_config.py", "exec"),
        {"get_config": Config, "__file__": str(ROOT / "nbgrader_config.py")},
    )
    assert os.environ["GOMP_SPINCOUNT"] == judge_env(1)["GOMP_SPINCOUNT"]
