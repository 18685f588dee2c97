"""Hints one step at a time: every known mistake and every task has a ladder of three steps; the
grader shows the next step at each failing grade of the same check, `--hint N` any step, a passing
task starts over; no step gives the code away; the notebooks' folds are the ladders.

Fast: the grader's side is fed ``CheckResult``s as a judge writes them (no notebook is graded).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import shutil

import pytest

from bertlab import cli, diagnose, hint_steps, hints, progress
from bertlab.checks import TASKS as CHECKED_TASKS
from bertlab.diagnose.ladders import LADDERS as MISTAKES
from bertlab.diagnose.ladders import TASK_LADDERS as TASKS
from bertlab.grading.results import CheckResult
from bertlab.grading.runner import Report, TaskResult
from tests.conftest import ROOT
from tests.test_mistake_links import headings

SCALING = ("03-multi-head-attention", "Scaled scores")


def _all_ladders() -> list[hints.Ladder]:
    found = [hints.for_task(t) for t in TASKS]
    found += [hints.for_mistake(m.id, m.lesson, m.section) for m in diagnose.REGISTRY.values()]
    assert all(found)
    return [ladder for ladder in found if ladder is not None]


# -- every mistake and every task has three steps -----------------------------------------------


def _three_steps(ladder: hints.Ladder) -> None:
    steps = ladder.steps()
    assert len(steps) == hints.STEPS == 3
    assert all(len(step.split()) >= 4 for step in steps), f"{ladder.subject}: a step says too little: {steps}"
    assert len(set(steps)) == 3, f"{ladder.subject}: two steps say the same"
    assert ladder.section in headings(ladder.lesson), (
        f"{ladder.subject}: lessons/{ladder.lesson} has no {ladder.section!r}"
    )
    assert progress.lesson_url(ladder.lesson, ladder.section) in steps[1]


@pytest.mark.parametrize("mistake", list(diagnose.REGISTRY.values()), ids=list(diagnose.REGISTRY))
def test_every_known_mistake_has_three_steps(mistake):
    assert mistake.id in MISTAKES, f"known mistake {mistake.id} has no hint ladder in bertlab.diagnose.ladders.LADDERS"
    assert mistake.ladder is MISTAKES[mistake.id]
    ladder = hints.for_mistake(mistake.id, mistake.lesson, mistake.section)
    assert ladder is not None
    _three_steps(ladder)


def test_no_ladder_for_a_mistake_that_does_not_exist():
    assert set(MISTAKES) - set(diagnose.REGISTRY) == set()
    assert hints.for_mistake("no-such-mistake", *SCALING) is None


@pytest.mark.parametrize("task", sorted(CHECKED_TASKS))
def test_every_task_has_three_steps(task):
    ladder = hints.for_task(task)
    assert ladder is not None, f"Task {task} has no hint ladder"
    _three_steps(ladder)


def test_no_ladder_for_a_task_that_does_not_exist():
    assert set(TASKS) == set(CHECKED_TASKS)
    assert hints.for_task("9.9") is None


# -- no step gives the code away ----------------------------------------------------------------

SPAN = re.compile(r"`([^`]+)`")
# a call written out in prose: `dense(x)`, nn.GELU(), torch.finfo(...) outside a code span
CALL = re.compile(r"(?<![\w.])[A-Za-z_][\w.]*\((?!\s)")


def code_given_away(step: str, equation: str = "") -> list[str]:
    """The pieces of ``step`` that are code a learner could paste: an inline code span that is more
    than a bare name or attribute (``attention_mask``, ``config.layer_norm_eps``), or a call written
    in prose outside the step's equation.

    An expression span would have to be pasted into the exercise to show that it does not pass the
    check; the ladders hold none, so every one found here fails the test.
    """
    found = []
    for span in SPAN.findall(step):
        try:
            tree = ast.parse(span.strip(), mode="eval").body
        except SyntaxError:
            continue  # not Python: a word in code font, nothing to paste
        node = tree
        while isinstance(node, ast.Attribute):
            node = node.value
        if not isinstance(node, ast.Name):
            found.append(span)
    prose = SPAN.sub("", step.replace(equation, "") if equation else step)
    found += CALL.findall(prose)
    return found


def test_the_code_finder_finds_code():
    assert code_given_away("use `nn.GELU()` here") == ["nn.GELU()"]
    assert code_given_away("add it: `x + y`") == ["x + y"]
    assert code_given_away("return LayerNorm(dense(x) + input_tensor)") == ["LayerNorm(", "dense("]
    assert code_given_away("the shape `(B, T, H)`") == ["(B, T, H)"]
    assert code_given_away("pass `attention_mask` and `config.layer_norm_eps` on (B, T, H)") == []
    assert code_given_away("softmax(z) over the keys", equation="softmax(z) over the keys") == []


@pytest.mark.parametrize("ladder", _all_ladders(), ids=lambda ladder: ladder.subject)
def test_no_step_gives_code_away(ladder):
    for n, step in enumerate(ladder.steps(), 1):
        given = code_given_away(step, ladder.equation if n == 2 else "")
        assert not given, f"{ladder.subject}, step {n} gives code away: {given}"


# -- the notebooks show the task ladders as three folds ------------------------------------------

FOLDS = re.compile(r"<details><summary>Hint 1 of 3: .*?<summary>Hint 3 of 3: .*?</details>", re.S)


def _hint_cells(folder: str) -> dict[str, str]:
    """Task -> the text of its hint folds, in every notebook of ``folder``."""
    found = {}
    for path in sorted((ROOT / folder).glob("*/*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            text = "".join(cell["source"])
            assert "Hint: the steps" not in text, f"{path.name}: a hint fold that is not a ladder"
            assert len(re.findall(r"<summary>Hint", text)) in (0, 3), f"{path.name}: a ladder without its 3 folds"
            match = FOLDS.search(text)
            if match:
                grade_id = cell["metadata"]["nbgrader"]["grade_id"]
                task = ".".join(re.match(r"task-(\d+)-(\d+)", grade_id).groups())  # type: ignore[union-attr]
                found[task] = match.group(0)
    return found


@pytest.mark.parametrize("folder", ["solutions", "exercises"])
def test_notebook_hints_are_the_task_ladders(folder):
    cells = _hint_cells(folder)
    expected = {"1.5", "2.1", "3.1", "3.2", "4.1", "4.2", "5.1", "5.2", "6.1", "6.4"}
    assert set(cells) == expected
    for task, text in cells.items():
        assert text == hints.folds(task), f"{folder}: Task {task}'s folds are not its ladder (run the release)"


def test_folds_are_labelled_by_step():
    text = hints.folds("3.1")
    assert re.findall(r"<summary>(.*?)</summary>", text) == [
        "Hint 1 of 3: what to look at",
        "Hint 2 of 3: where it is explained",
        "Hint 3 of 3: the fix in words",
    ]
    assert "](../../lessons/03-multi-head-attention.py#scaled-scores)" in text


# -- the grader's feedback: one step more at each failing grade ------------------------------------


def _failed(name="test-3-2-values", mistake="no-scaling", lesson=SCALING, cause=None) -> CheckResult:
    return CheckResult(
        name, False, 0.0, 2.0, "[Task 3.2] values differ", mistake, lesson=lesson[0], section=lesson[1], cause=cause
    )


def _passed(name="test-3-2-values", tasks=("3.2",)) -> CheckResult:
    return CheckResult(name, True, 2.0, 2.0, "passed", tasks=list(tasks))


def _report(*checks: CheckResult, status: str | None = None) -> Report:
    failed = any(not c.passed for c in checks)
    score = sum(c.points for c in checks)
    return Report(
        [TaskResult("03-self-attention", score, 6.0, status or ("failed" if failed else "passed"), list(checks))]
    )


def _grades(*reports: Report, counts=None, forced=None) -> list[list[tuple[str, int]]]:
    counts = dict(counts or {})
    shown_each = []
    for report in reports:
        shown, counts = hints.advance(report, counts, forced=forced)
        shown_each.append([(s.key, s.step) for s in shown])
    return shown_each


def test_three_failing_grades_of_a_mistake_show_steps_1_2_3_then_3():
    fail = _report(_failed())
    assert _grades(fail, fail, fail, fail) == [[("3.2 no-scaling", n)] for n in (1, 2, 3, 3)]


def test_the_steps_shown_are_the_ladders_in_order():
    counts: dict[str, int] = {}
    texts = []
    for _ in range(3):
        shown, counts = hints.advance(_report(_failed()), counts)
        texts.append(hints.render(shown))
    ladder = hints.for_mistake("no-scaling", *SCALING)
    assert ladder is not None
    for n, text in enumerate(texts, 1):
        assert text.startswith(f"Hint {n} of 3 for Task 3.2 (known mistake `no-scaling`)")
        assert " ".join(ladder.step(n).split()) in " ".join(text.split())
    assert "--hint 2 03" in texts[0] and "--hint" not in texts[2]


def test_a_passing_task_starts_its_ladder_over():
    fail, ok = _report(_failed()), _report(_passed(), _passed("test-3-2-masks"))
    assert _grades(fail, fail, ok, fail) == [
        [("3.2 no-scaling", 1)],
        [("3.2 no-scaling", 2)],
        [],
        [("3.2 no-scaling", 1)],
    ]


def test_a_task_half_passed_keeps_its_count():
    # Task 3.2's values cell passes, its masks cell fails: the task has not passed
    masks = _failed("test-3-2-masks", "mask-ignored", ("03-multi-head-attention", "The additive mask"))
    half = _report(_passed(), masks)
    assert _grades(half, half) == [[("3.2 mask-ignored", 1)], [("3.2 mask-ignored", 2)]]


def test_another_task_passing_keeps_the_count():
    _, counts = hints.advance(_report(_failed()), {})
    _, counts = hints.advance(_report(_passed("test-3-1-values", ("3.1",))), counts)
    assert counts == {"3.2 no-scaling": 1}


def test_each_mistake_and_each_grade_cell_climbs_its_own_ladder():
    other = _report(_failed(mistake="softmax-wrong-axis", lesson=("03-multi-head-attention", "Softmax over the keys")))
    unnamed = _report(_failed(mistake=None, lesson=(None, None)))
    fail = _report(_failed())
    assert _grades(fail, other, fail, unnamed, unnamed) == [
        [("3.2 no-scaling", 1)],
        [("3.2 softmax-wrong-axis", 1)],
        [("3.2 no-scaling", 2)],
        [("3.2 test-3-2-values", 1)],
        [("3.2 test-3-2-values", 2)],
    ]


def test_a_failure_naming_no_mistake_climbs_the_ladder_of_the_stage_that_failed():
    """The judge says which stage failed: two grade cells failing at the same stage are one check."""
    at_masks = [
        dataclasses.replace(_failed(name, mistake=None, lesson=(None, None)), tasks=["3.2"], stage="masks")
        for name in ("test-3-2-masks", "test-3-2-all")
    ]
    at_dropout = dataclasses.replace(at_masks[1], stage="dropout")
    assert _grades(_report(at_masks[0]), _report(at_masks[1]), _report(at_dropout)) == [
        [("3.2 masks", 1)],
        [("3.2 masks", 2)],
        [("3.2 dropout", 1)],
    ]


def test_a_failure_naming_no_mistake_shows_its_tasks_ladder():
    shown, _ = hints.advance(_report(_failed(mistake=None, lesson=(None, None))), {})
    assert [s.ladder for s in shown] == [hints.for_task("3.2")]
    # Its heading names the task once; a known mistake's names the mistake too.
    assert "Hint 1 of 3 for Task 3.2, what to look at:" in hints.render(shown)
    named, _ = hints.advance(_report(_failed()), {})
    assert "Hint 1 of 3 for Task 3.2 (known mistake `no-scaling`), what to look at:" in hints.render(named)


def test_a_stub_not_yet_written_does_not_climb():
    """`make start` grades the untouched notebooks: their "not implemented yet" is no attempt, and the
    learner's first real failure at the same stage shows step 1."""
    names = dataclasses.replace(_failed(mistake=None, lesson=(None, None)), tasks=["3.2"], stage="names")
    stub = _report(dataclasses.replace(names, stub=True))
    assert _grades(stub, stub, _report(names), _report(names)) == [[], [], [("3.2 names", 1)], [("3.2 names", 2)]]
    _, counts = hints.advance(stub, {"3.2 names": 2})
    assert counts == {"3.2 names": 2}, "a stub is no pass either"


def test_no_ladder_when_the_notebook_was_stopped_or_tampered_with():
    timeout = _report(_failed(mistake=None, lesson=(None, None), cause="timeout"), status="timeout")
    tampered = _report(_failed(mistake=None, lesson=(None, None), cause="tampering"))
    assert _grades(timeout, tampered) == [[], []]


def test_hint_n_shows_step_n_and_keeps_the_count():
    fail = _report(_failed())
    assert _grades(fail, forced=3) == [[("3.2 no-scaling", 3)]]
    shown, counts = hints.advance(fail, {"3.2 no-scaling": 1}, forced=1)
    assert [s.step for s in shown] == [1] and counts == {"3.2 no-scaling": 1}
    assert "--hint" not in hints.render(shown, forced=1)


def test_verbose_gives_every_failure_a_step_once():
    masks = _failed("test-3-2-masks", mistake=None, lesson=(None, None))
    report = _report(_failed(), masks, _failed("test-3-1-values", mistake="softmax-wrong-axis"))
    shown, _ = hints.advance(report, {}, verbose=True)
    assert [s.key for s in shown] == ["3.2 no-scaling", "3.2 test-3-2-masks", "3.1 softmax-wrong-axis"]
    # Without it, the first failure of each task, as the table prints them: Task 3.1's too.
    shown, _ = hints.advance(report, {})
    assert [(s.task, s.key) for s in shown] == [("3.2", "3.2 no-scaling"), ("3.1", "3.1 softmax-wrong-axis")]


# -- the command: counts kept in the user's cache, site or no site, --hint N ----------------------


@pytest.fixture
def grading(monkeypatch, tmp_path):
    """``bertlab grade`` whose grading returns the next of ``reports`` (no judge runs), in a copy of
    the course with no site built, and a cache folder of its own."""
    import bertlab.grading

    reports: list[Report] = []
    monkeypatch.setattr(bertlab.grading, "grade", lambda *a, **k: reports.pop(0))
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path / "cache"))
    course = tmp_path / "course"
    shutil.copytree(ROOT / "exercises" / "03-self-attention", course / "exercises" / "03-self-attention")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    monkeypatch.chdir(course)
    return reports


def _run(capsys, *args: str) -> str:
    cli.main(["grade", *args])
    return capsys.readouterr().out


def _steps_shown(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"^Hint (\d) of 3 for Task 3.2", text, re.M)]


def test_the_ladder_climbs_without_a_built_site(grading, capsys, tmp_path):
    """`make grade` after `make lab`, before `make start` built the site: the counts are kept all the same."""
    course = tmp_path / "course"
    before = sorted(course.rglob("*"))
    grading += [_report(_failed()) for _ in range(4)]
    assert [_steps_shown(_run(capsys)) for _ in range(4)] == [[1], [2], [3], [3]]
    assert sorted(course.rglob("*")) == before, "grading wrote into the course"
    assert hint_steps.read(hint_steps.path(course / "exercises")) == {"3.2 no-scaling": 3}


def test_grading_with_path_climbs_the_same_ladder(grading, capsys, tmp_path, monkeypatch):
    exercises = tmp_path / "course" / "exercises"
    grading += [_report(_failed()) for _ in range(3)]
    assert _steps_shown(_run(capsys)) == [1]
    monkeypatch.chdir(tmp_path)  # anywhere else: --path names the notebooks
    assert _steps_shown(_run(capsys, "--path", str(exercises))) == [2]
    monkeypatch.chdir(exercises)
    assert _steps_shown(_run(capsys, "--path", ".")) == [3]


def test_other_notebooks_climb_ladders_of_their_own(grading, capsys, tmp_path):
    """An instructor grading solutions/ leaves the learner's ladder where it was."""
    (tmp_path / "course" / "solutions").mkdir()
    grading += [_report(_failed()) for _ in range(3)]
    assert _steps_shown(_run(capsys)) == [1]
    assert _steps_shown(_run(capsys, "--path", "solutions")) == [1]
    assert _steps_shown(_run(capsys)) == [2]


def test_counts_kept_beside_the_site_move_to_the_cache(grading, capsys, tmp_path):
    """A learner who graded with an older version keeps their place on the ladder."""
    site = tmp_path / "course" / "site"
    site.mkdir()
    (site / hint_steps.BESIDE_PROGRESS).write_text(json.dumps({"version": 1, "steps": {"3.2 no-scaling": 1}}))
    grading += [_report(_failed()), _report(_failed())]
    assert _steps_shown(_run(capsys)) == [2]
    assert not (site / hint_steps.BESIDE_PROGRESS).exists(), "the old copy would be read again"
    assert _steps_shown(_run(capsys)) == [3]
    assert sorted(p.name for p in site.iterdir()) == ["progress.json"], "the Progress page lost its data"


def test_grading_the_untouched_notebooks_first_leaves_the_first_real_failure_at_step_1(grading, capsys):
    stub = dataclasses.replace(_failed(), stub=True)
    grading += [_report(stub), _report(_failed()), _report(_failed())]
    assert [_steps_shown(_run(capsys)) for _ in range(3)] == [[], [1], [2]]


def test_grade_shows_the_next_step_each_time_and_starts_over_after_a_pass(grading, capsys, tmp_path):
    out = tmp_path / "site"
    fail, ok = _report(_failed()), _report(_passed(), _passed("test-3-2-masks"))
    grading += [fail, fail, fail, ok, fail]
    seen = [_run(capsys, "--progress-dir", str(out)) for _ in range(5)]
    for n, text in zip((1, 2, 3), seen, strict=False):
        assert f"Hint {n} of 3 for Task 3.2" in text and text.count("Hint ") == 1
    assert "Hint " not in seen[3]
    assert "Hint 1 of 3 for Task 3.2" in seen[4]
    kept = hint_steps.path(tmp_path / "course" / "exercises")
    assert hint_steps.read(kept) == {"3.2 no-scaling": 1}
    assert sorted(p.name for p in kept.parent.iterdir()) == [kept.name], "a temporary file was left"
    assert sorted(p.name for p in out.iterdir()) == ["progress.json"]


def test_grade_hint_n_shows_that_step(grading, capsys, tmp_path):
    grading += [_report(_failed()), _report(_failed())]
    assert "Hint 3 of 3 for Task 3.2" in _run(capsys, "--hint", "3")
    assert hint_steps.read(hint_steps.path(tmp_path / "course" / "exercises")) == {}, "--hint N moved the count"
    assert "Hint 1 of 3 for Task 3.2" in _run(capsys)


def test_grade_hint_takes_1_to_3_and_says_so_in_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["grade", "--hint", "4"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["grade", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--hint N" in text and "hint ladder" in text


def test_hint_counts_are_read_safely(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTLAB_CACHE_DIR", str(tmp_path / "cache"))
    kept = hint_steps.path(tmp_path)
    assert kept.parent == tmp_path / "cache"
    assert hint_steps.read(kept) == {}
    kept.parent.mkdir()
    kept.write_text("{not json")
    assert hint_steps.read(kept) == {}
    hint_steps.save(tmp_path, {"3.2 no-scaling": 2, "3.1 bad": True})  # type: ignore[dict-item]
    assert hint_steps.read(kept) == {"3.2 no-scaling": 2}


# -- the same, from a graded notebook's verdicts --------------------------------------------------


@pytest.mark.slow
@pytest.mark.xdist_group("site")  # where test_progress.py's tests are given the same grading
def test_a_graded_notebooks_verdicts_climb_their_ladders(graded):
    """Task 3 graded with the scaling left out, Task 4 as released (stubs), Task 5 solved: the
    judge's verdicts name what the ladders need (mistake, lesson, section, grade cell, stub)."""
    data, _, _ = graded
    report = Report(
        [
            TaskResult(t["task"], t["score"], t["max_score"], t["status"], [CheckResult(**c) for c in t["checks"]])
            for t in data["tasks"]
        ]
    )
    stubs = {t["task"]: {c["stub"] for c in t["checks"] if not c["passed"]} for t in data["tasks"]}
    assert stubs == {"03-self-attention": {False}, "04-attention-output": {True}, "05-feed-forward": set()}
    # Task 5 failed before and passes now; Task 4.1 failed once, then went back to its stub
    counts = {"5.1 test-5-1-values": 2, "4.1 names": 1}
    for n in (1, 2, 3):
        shown, counts = hints.advance(report, counts)
        seen = {s.key: (s.step, s.ladder.subject) for s in shown}
        assert seen["3.1 no-scaling"] == (n, "known mistake `no-scaling`")
        assert not [key for key in seen if key.startswith("4.")], "Task 4's stubs climbed a ladder"
    assert "5.1 test-5-1-values" not in counts
    assert counts["4.1 names"] == 1, "a stub left where it was"
