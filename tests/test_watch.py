"""``bertlab grade --watch``: a saved notebook is graded again, from the same warm worker, in a fresh namespace."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from bertlab.grading.pool import Limits
from bertlab.grading.watch import watch
from tests.conftest import ROOT, solution_notebook
from tests.grading_paths import PATHS, path_env

TASK = "01-numpy-bert"
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("path", PATHS)
def test_a_saved_notebook_is_graded_again(tmp_path, monkeypatch, path):
    for name in ("BERTLAB_PORTABLE", "PYTHONPATH"):  # the watch's judge starts with this environment
        monkeypatch.delenv(name, raising=False)
        if name in path_env(path):
            monkeypatch.setenv(name, path_env(path)[name])
    folder = tmp_path / "exercises" / TASK
    folder.mkdir(parents=True)
    notebook = folder / f"{TASK}.ipynb"
    shutil.copy(ROOT / "exercises" / TASK / f"{TASK}.ipynb", notebook)  # the released stubs
    shown, done = [], threading.Event()

    def show(report, seconds):
        shown.append((report.tasks[0].score, report.tasks[0].max_score, seconds))
        if len(shown) == 1:
            # The learner solves the task and saves: the whole notebook is replaced at once.
            time.sleep(0.2)
            shutil.copy(solution_notebook(TASK), notebook)
        else:
            done.set()

    thread = threading.Thread(
        target=watch,
        args=(tmp_path / "exercises", [TASK], Limits(300, 4096), show),
        kwargs={"say": lambda _: None, "stop": done.is_set},
        daemon=True,
    )
    thread.start()
    thread.join(600)
    assert not thread.is_alive(), f"the watch did not grade the saved notebook: {shown}"
    (stubs, total, _), (solved, total_again, latency) = shown
    assert stubs == 0 and solved == total == total_again > 0
    assert 0 < latency < 600  # from the save to the result
