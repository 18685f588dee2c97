"""The order of a grading run: the costliest task first, by its last grading's seconds."""

from __future__ import annotations

import json

from bertlab.grading import durations


def test_seconds_recorded_are_read_back_and_merged(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path))
    durations.save({"06-bert-model": 8.5, "01-numpy-bert": 2.9})
    durations.save({"01-numpy-bert": 3.1})
    assert durations.load() == {"06-bert-model": 8.5, "01-numpy-bert": 3.1}


def test_a_task_never_graded_is_estimated_from_its_grade_cells(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path))
    last = {"06-bert-model": 8.5}
    assert durations.estimate("06-bert-model", last, lambda: 10) == 8.5
    assert durations.estimate("01-numpy-bert", last, lambda: 12) == 12 * durations.SECONDS_PER_GRADE_CELL


def test_an_unusable_record_only_means_no_record(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path))
    for text in ("not json", "[1, 2]", json.dumps({"05": "fast", "06": -1, "07": 2.5})):
        durations.path().write_text(text)
        assert durations.load() == ({"07": 2.5} if "07" in text else {})
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(blocked / "sub"))  # a folder that cannot be made
    durations.save({"05": 1.0})  # skipped, no error
    assert durations.load() == {}


def test_grade_starts_the_task_that_took_longest_last_time(tmp_path, monkeypatch):
    """With one job, the start order is the order of the record (longest first), not the course's."""
    from bertlab.grading import runner
    from tests.conftest import solution_notebook

    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path / "cache"))
    course = tmp_path / "course"
    names = ["01-numpy-bert", "05-feed-forward", "06-bert-model"]
    for name in names:
        (course / name).mkdir(parents=True)
        (course / name / f"{name}.ipynb").write_bytes(solution_notebook(name).read_bytes())
    started = []

    def fake_grade_task(task, paths, limits, pool):
        started.append(task)
        return runner.TaskResult(task, 1.0, 1.0, "passed", seconds=took[task])

    took = {"06-bert-model": 8.0, "01-numpy-bert": 3.0, "05-feed-forward": 9.0}  # this time

    monkeypatch.setattr(runner, "grade_task", fake_grade_task)
    durations.save({"06-bert-model": 8.0, "01-numpy-bert": 3.0, "05-feed-forward": 1.0})
    runner.grade(course, [], jobs=1, warm=False)
    assert started == ["06-bert-model", "01-numpy-bert", "05-feed-forward"]
    started.clear()
    runner.grade(course, [], jobs=1, warm=False)  # 05 took 9 s in the run before
    assert started == ["05-feed-forward", "06-bert-model", "01-numpy-bert"]
