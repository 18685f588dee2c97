"""The Progress page: `bertlab grade` writes progress.json and failure heatmaps; the site shows them.

A copy of exercises/ is graded with three tasks in three states: Task 5 solved, Task 3 with a
known values mistake (no 1/sqrt(head_size) scaling), Task 4 as released (stubs). The browser
test serves a copy of the built site (the ``site`` fixture, ``tests/site_build.py``: built once per run), first
without progress.json, then with the files the grading wrote, and reads the page as a learner.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shutil
import threading
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from bertlab import progress
from tests.conftest import solution_namespace
from tests.progress_grading import ADD_NORM, ATTENTION, FFN
from tests.site_build import ARTIFACTS, Reader, _Quiet

PNG = b"\x89PNG\r\n\x1a\n"
# Beside the site's tests: the page test needs both the built site and the graded exercises, so
# each is built once, on one worker.
pytestmark = pytest.mark.xdist_group("site")


def _first_failure(task: dict) -> dict | None:
    return next((c for c in task["checks"] if not c["passed"]), None)


def test_progress_json_has_every_graded_task(graded):
    report, out, _ = graded
    data = json.loads((out / progress.FILE).read_text())
    entries = {t["task"]: t for t in data["tasks"]}
    assert sorted(entries) == sorted(t["task"] for t in report["tasks"]) == [ATTENTION, ADD_NORM, FFN]
    assert data["score"] == report["score"] and data["max_score"] == report["max_score"]
    assert not list(out.rglob(".*")), "a temporary file was left behind"
    for task in report["tasks"]:
        entry, first = entries[task["task"]], _first_failure(task)
        assert (entry["score"], entry["max_score"], entry["status"]) == (
            task["score"],
            task["max_score"],
            task["status"],
        )
        assert entry["exercise"] == f"exercises/{task['task']}/{task['task']}/"
        datetime.fromisoformat(entry["graded_at"])  # a timestamp
        if first is None:
            assert entry["message"].startswith("all ") and entry["heatmap"] is None and entry["lesson"] is None
        else:
            assert entry["message"] == first["message"] and entry["mistake"] == first["mistake"]

    solved, stub, mistaken = entries[FFN], entries[ADD_NORM], entries[ATTENTION]
    assert solved["status"] == "passed" and solved["score"] == solved["max_score"] > 0
    assert stub["score"] == 0 and "not implemented" in stub["message"] and stub["heatmap"] is None

    # The values mistake: named, linked to its lesson section, with the judge's heatmap beside it.
    from bertlab import diagnose
    from bertlab.checks import TASKS  # noqa: F401  (registers the mistakes)

    mistake = diagnose.REGISTRY["no-scaling"]
    assert 0 < mistaken["score"] < mistaken["max_score"] and mistaken["mistake"] == mistake.id
    assert re.search(r"values differ .*\n  max abs diff \S+ at \(batch \d+, ", mistaken["message"])
    assert mistaken["lesson"] == f"lessons/{mistake.lesson}/#{progress.heading_id(mistake.section)}"
    assert mistaken["section"] == mistake.section
    first_failed = _first_failure(next(t for t in report["tasks"] if t["task"] == ATTENTION))
    assert first_failed["stage"] == "values" and first_failed["tasks"] and first_failed["tasks"][0].startswith("3.")
    image = (out / mistaken["heatmap"]).read_bytes()
    assert image.startswith(PNG)
    first = _first_failure(next(t for t in report["tasks"] if t["task"] == ATTENTION))
    assert base64.b64decode(first["heatmap"]) == image, "the page's heatmap is not the one the judge drew"


def test_only_a_first_failure_whose_values_differ_carries_a_heatmap(graded):
    """The page shows a task's first failure: the judge draws that one's heatmap and no other."""
    report, _, _ = graded
    later_failures = 0
    for task in report["tasks"]:
        first = _first_failure(task)
        for check in task["checks"]:
            differs = check is first and "max abs diff" in check["message"]
            assert bool(check["heatmap"]) == differs, check["name"]
            later_failures += check is not first and "max abs diff" in check["message"]
    assert any(_first_failure(t) and _first_failure(t)["heatmap"] for t in report["tasks"])
    assert later_failures, "no later failure's values differ: nothing shows that it goes without a heatmap"


# -- progress.write on its own: merging, stale pictures ------------------------------------------


def _report(**tasks):
    from bertlab.grading import Report, TaskResult
    from bertlab.grading.results import CheckResult

    results = []
    for name, (points, heatmap) in tasks.items():
        passed = heatmap is None and points == 2
        message = "[Task 9.9] X passed" if passed else "[Task 9.9] X: values differ"
        picture = base64.b64encode(heatmap).decode() if heatmap else None
        # the judge writes a known mistake's lesson and section into the verdict
        explained = {} if passed else {"lesson": "01-anatomy", "section": "The two dots"}
        results.append(
            TaskResult(
                name,
                points,
                2.0,
                "passed" if passed else "failed",
                [CheckResult("c", passed, points, 2.0, message, None, picture, **explained)],
            )
        )
    return Report(results)


def test_write_merges_tasks_and_removes_a_stale_heatmap(tmp_path):
    first = progress.write(_report(**{"01-a": (0.0, PNG + b"a"), "02-b": (0.0, PNG + b"b")}), tmp_path)
    data = json.loads(first.read_text())
    assert [t["heatmap"] for t in data["tasks"]] == ["heatmaps/01-a.png", "heatmaps/02-b.png"]
    assert (data["tasks"][0]["lesson"], data["tasks"][0]["section"]) == (
        "lessons/01-anatomy/#the-two-dots",
        "The two dots",
    )
    later = datetime(2030, 1, 2, tzinfo=UTC)
    progress.write(_report(**{"01-a": (2.0, None)}), tmp_path, now=later)  # Task 01 fixed, 02 not regraded
    data = json.loads(first.read_text())
    entries = {t["task"]: t for t in data["tasks"]}
    assert entries["01-a"]["status"] == "passed" and entries["01-a"]["heatmap"] is None
    assert entries["01-a"]["graded_at"] == later.isoformat(timespec="seconds")
    assert (
        entries["02-b"]["heatmap"] == "heatmaps/02-b.png"
        and entries["02-b"]["graded_at"] != entries["01-a"]["graded_at"]
    )
    assert not (tmp_path / "heatmaps" / "01-a.png").exists(), "the fixed task's old heatmap is still served"
    assert (tmp_path / "heatmaps" / "02-b.png").read_bytes() == PNG + b"b"
    assert data["score"] == 2.0 and data["max_score"] == 4.0


def test_grade_writes_no_progress_for_other_paths_or_when_told(tmp_path, monkeypatch):
    from bertlab.cli import _parser, _progress_dir

    course = (tmp_path / "course").resolve()
    (course / "exercises").mkdir(parents=True)
    (course / "site").mkdir()
    (course / "nbgrader_config.py").write_text("")
    monkeypatch.chdir(course)
    parse = lambda *a: _parser().parse_args(["grade", *a])  # noqa: E731
    assert _progress_dir(parse()) == course / "site"
    assert _progress_dir(parse("--no-progress")) is None
    assert _progress_dir(parse("--path", "solutions")) is None
    assert _progress_dir(parse("--path", "solutions", "--progress-dir", "x")) == Path("x")
    shutil.rmtree(course / "site")
    assert _progress_dir(parse()) is None, "no built site: nothing to write into"


# -- the heatmap, drawn where the values are compared --------------------------------------------


def _relu_intermediate():
    from torch import nn

    base = solution_namespace(FFN)["BertIntermediate"]

    class BertIntermediate(base):
        def __init__(self, config):
            super().__init__(config)
            self.intermediate_act_fn = nn.ReLU()  # the known mistake `relu-instead-of-gelu`

    return BertIntermediate


def test_failed_values_check_keeps_the_tensors_its_message_describes(monkeypatch):
    import IPython
    import IPython.display
    import numpy as np

    from bertlab.checks import CheckFailed, check, heatmap

    shown = []
    # A Jupyter kernel's shell (it has a `kernel`): the picture is displayed beside the message.
    shell = type("Shell", (), {"kernel": object()})()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    monkeypatch.setattr(IPython.display, "display", shown.append)
    with pytest.raises(CheckFailed) as failure:
        check("5.1", _relu_intermediate(), upto="values")
    err = failure.value
    values = heatmap.values_of(err)
    assert values is not None
    where = re.search(r"max abs diff (\S+) at \(batch (\d+), token (\d+), dim (\d+)\)", str(err))
    assert where, str(err)
    diff = (values.got - values.expected).abs()
    index = tuple(int(i) for i in where.groups()[1:])
    assert f"{diff[index].item():.1e}" == where.group(1) == f"{diff.max().item():.1e}"
    assert len(shown) == 1 and shown[0].data.startswith(PNG)
    assert shown[0].data == heatmap.png(values)  # the same picture grading puts on the page

    # Outside a kernel (the judge, a script) nothing is displayed.
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    with pytest.raises(CheckFailed):
        check("5.1", _relu_intermediate(), upto="values")
    assert len(shown) == 1

    # A per-layer output: a second panel, layers x tokens.
    import torch

    from bertlab.checks.compare import difference

    expected = {f"hidden_states[{i}]": torch.zeros(2, 5, 200) for i in range(4)}
    got = {k: v.clone() for k, v in expected.items()}
    got["hidden_states[2]"][1, 3, 150] = 1.0
    layered = difference("hidden_states[2]", expected, got, ("batch", "token", "dim"))
    assert [name for name, _, _ in layered.layers] == list(expected)
    figure = heatmap.figure(layered)
    images = [ax.images[0].get_array() for ax in figure.axes if ax.images]
    assert len(images) == 2
    main, layers = (np.asarray(i) for i in images)
    assert main.shape == (5, 200 // 4) and main.max() == 1.0 and main[3, 150 // 4] == 1.0  # bins of 4
    assert layers.shape == (4, 5) and layers[2, 3] == 1.0 and layers.sum() == 1.0


def test_values_of_keeps_a_failures_own_values_only():
    import torch

    from bertlab.checks import CheckFailed, heatmap
    from bertlab.checks.compare import Difference

    values = Difference("x", ("dim",), torch.zeros(3), torch.ones(3))
    try:
        try:
            raise CheckFailed("[Task 1.1] f: values differ", None, values)
        except CheckFailed as err:
            raise err.adding("a hint") from None  # re-raised with more lines: the same failure
    except CheckFailed as wrapped:
        assert heatmap.values_of(wrapped) is values
    try:
        try:
            raise CheckFailed("[Task 1.1] f: values differ", None, values)
        except CheckFailed:
            raise CheckFailed("[Task 1.1] f: another failure") from None
    except CheckFailed as other:
        assert heatmap.values_of(other) is None


# -- the page in a browser -----------------------------------------------------------------------


@pytest.fixture
def served(site, tmp_path):
    """A copy of the built site (hard links: nothing of the original changes), served locally."""
    root = tmp_path / "site"
    shutil.copytree(site, root, copy_function=os.link)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_every_hint_links_a_heading_of_the_built_lesson(site):
    """progress.heading_id gives the id the built lesson page really has, for every known mistake."""
    from bertlab import diagnose
    from bertlab.checks import TASKS  # noqa: F401  (registers the mistakes)

    assert diagnose.REGISTRY
    missing = []
    for mistake in diagnose.REGISTRY.values():
        url, section = progress.lesson_url(mistake.lesson, mistake.section), mistake.section
        page, anchor = url.split("#")
        ids = set(re.findall(r'\bid="([^"]+)"', (site / page / "index.html").read_text(encoding="utf-8")))
        if anchor not in ids:
            missing.append(f"{mistake.id}: {url} ({section!r})")
    assert not missing, missing


@pytest.mark.slow
def test_progress_page_shows_the_grades(browser, served, graded):
    report, out, _ = graded
    root, url = served
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    reader = Reader(context, url)
    try:
        page = reader.visit("progress/")
        page.wait_for_selector("#bertlab-progress .admonition")
        text = page.inner_text("#bertlab-progress")
        assert "Not graded yet: run bertlab grade" in " ".join(text.split())
        # The build's empty file: no failed request before the first grade.
        assert reader.problems == [], reader.problems

        # Grading writes into the served site; a refresh shows it, nothing rebuilt.
        (root / progress.FILE).unlink()  # a hard link to the built site: never write through it
        shutil.copy(out / progress.FILE, root / progress.FILE)
        shutil.copytree(out / progress.IMAGES, root / progress.IMAGES)
        page = reader.visit("progress/")
        page.wait_for_selector("#bertlab-progress table")
        for task in report["tasks"]:
            row = page.locator(f'#bertlab-progress tr[data-task="{task["task"]}"]')
            assert row.count() == 1, task["task"]
            cells = row.locator("td").all_inner_texts()
            assert cells[1].strip() == f"{task['score']:g}/{task['max_score']:g}"
            assert cells[2].strip() == task["status"]
            first = _first_failure(task)
            if first is not None:
                assert first["message"].splitlines()[0] in cells[3]
        assert reader.broken_images() == []
        heatmaps = page.locator("#bertlab-progress img")
        assert heatmaps.count() == sum(1 for t in report["tasks"] if (_first_failure(t) or {}).get("heatmap"))
        assert heatmaps.count() >= 1
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "progress.png"), full_page=True)
        heatmaps.first.screenshot(path=str(ARTIFACTS / "progress-heatmap.png"))

        # A badge per graded exercise in the navigation.
        badges = page.eval_on_selector_all(
            "nav.md-nav--primary a.md-nav__link .bertlab-badge",
            "bs => bs.map(b => [b.closest('a').getAttribute('href'), b.textContent])",
        )
        for task in report["tasks"]:
            want = f"{task['score']:g}/{task['max_score']:g}"
            assert any(f"exercises/{task['task']}/" in href and text == want for href, text in badges), task["task"]

        # The lesson link lands on a heading of the lesson page.
        link = page.locator("#bertlab-progress td a[href*='lessons/']").first
        href = link.get_attribute("href")
        page = reader.visit(href.removeprefix(url))
        anchor = href.split("#", 1)[1]
        assert page.evaluate("id => document.getElementById(id) !== null", anchor), f"no heading #{anchor} on {href}"
        assert not reader.problems, reader.problems
    finally:
        context.close()
