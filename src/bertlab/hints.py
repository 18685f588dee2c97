"""Hints one step at a time: the ladders of ``bertlab.diagnose``, rendered in one place.

Every known mistake and every task has a ladder of three steps: (1) what to look at, (2) where
the course explains it (a lesson's section, and its equation), (3) the fix in words. The
notebooks show them as three folds (``folds``); ``bertlab grade`` shows one step per failure
(``advance`` and ``render``): the first failing grade of a check shows step 1, each further
failing grade of the same one the next, up to step 3, and a task that passes starts over. A check
is the same one when it fails on the same task with the same known mistake or, when it names
none, in the same grade cell. The counts are kept in the user's cache, one file per graded
folder (``bertlab.hint_steps``).

Everything here reads a verdict's fields (``CheckResult.mistake``, ``.lesson``, ``.section``,
``.tasks``, ``.cause``, ``.name``), never its message. Nothing here imports torch.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass

from bertlab.diagnose.ladders import LADDERS, TASK_LADDERS
from bertlab.grading.results import first_of_each_task, task_of
from bertlab.progress import heading_id, lesson_url

STEPS = 3
TITLES = ("what to look at", "where it is explained", "the fix in words")
# Verdicts that say nothing about the learner's code: no ladder for them.
NOT_THE_CODE = {"timeout", "memory", "tampering"}


@dataclass(frozen=True)
class Ladder:
    """Three steps about one thing: a known mistake or a task.

    Attributes:
        subject: what the ladder is about, as the grader names it ("known mistake `no-scaling`").
        look, fix: steps 1 and 3.
        lesson, section: step 2's lesson (file stem) and section heading.
        equation: step 2's equation in plain text, or "".
    """

    subject: str
    look: str
    lesson: str
    section: str
    equation: str
    fix: str

    def step(self, n: int, notebook: bool = False) -> str:
        """Step ``n`` (1 to 3) as text; ``notebook`` links the lesson as the notebooks do."""
        if n == 1:
            return self.look
        if n == 3:
            return self.fix
        if n != 2:
            raise ValueError(f"a ladder has steps 1 to {STEPS}, not {n}")
        name = f"lesson {int(self.lesson[:2])}" if self.lesson[:2].isdigit() else self.lesson
        if notebook:
            where = f"[{name}, *{self.section}*](../../lessons/{self.lesson}.py#{heading_id(self.section)})"
        else:
            where = f'{name}, section "{self.section}" (the course site\'s {lesson_url(self.lesson, self.section)})'
        text = f"Read {where}."
        return f"{text} The equation: {self.equation}." if self.equation else text

    def steps(self) -> list[str]:
        return [self.step(n) for n in range(1, STEPS + 1)]


def for_mistake(mistake_id: str, lesson: str, section: str) -> Ladder | None:
    """The ladder of a known mistake, whose lesson and section the verdict carries."""
    steps = LADDERS.get(mistake_id)
    if steps is None:
        return None
    return Ladder(f"known mistake `{mistake_id}`", steps.look, lesson, section, steps.equation, steps.fix)


def for_task(task_id: str) -> Ladder | None:
    """The ladder of Task ``task_id`` ("3.2"), for a failure that names no known mistake."""
    task = TASK_LADDERS.get(task_id)
    if task is None:
        return None
    return Ladder(f"Task {task_id}", task.look, task.lesson, task.section, task.equation, task.fix)


# -- the notebooks' folds -------------------------------------------------------------------


def folds(task_id: str) -> str:
    """Task ``task_id``'s hint ladder as the notebooks show it: three folds, labelled by step."""
    ladder = for_task(task_id)
    if ladder is None:
        raise KeyError(f"no hint ladder for Task {task_id}")
    blocks = [
        f"<details><summary>Hint {n} of {STEPS}: {TITLES[n - 1]}</summary>\n\n{_wrap(ladder.step(n, notebook=True))}"
        "\n\n</details>"
        for n in range(1, STEPS + 1)
    ]
    return "\n\n".join(blocks)


_KEEP_WHOLE = re.compile(r"\[[^\]]*\]\([^)]*\)|`[^`]*`")  # a link, a code span: one line each
_GLUE = "\u00a0"  # a space textwrap does not break at, put back after


def _wrap(text: str, indent: str = "") -> str:
    """``text`` in lines of at most 100 characters; a link or a code span stays on one line (a link's
    words are the section title a test compares with the lesson's heading)."""
    glued = _KEEP_WHOLE.sub(lambda m: m.group(0).replace(" ", _GLUE), text)
    return textwrap.fill(
        glued, 100, initial_indent=indent, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    ).replace(_GLUE, " ")


# -- the grader's feedback ------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """One step of one ladder, shown under a graded notebook's failure."""

    notebook: str  # the graded task folder, as ``bertlab grade`` names it ("03-self-attention")
    task: str  # "3.2"
    key: str  # what the count is kept under: "3.2 no-scaling", or "3.2 masks" (the stage that failed)
    step: int
    ladder: Ladder


def _ladder(task: str, check) -> tuple[str, Ladder] | None:
    """(count key, ladder) for a failed verdict of ``task``: its known mistake's, else the task's."""
    if check.mistake and check.lesson and check.section:
        ladder = for_mistake(check.mistake, check.lesson, check.section)
        if ladder is not None:
            return f"{task} {check.mistake}", ladder
    ladder = for_task(task)
    # the stage that failed, where the judge says (older results: the grade cell)
    return (f"{task} {getattr(check, 'stage', None) or check.name}", ladder) if ladder is not None else None


def advance(
    report, counts: dict[str, int], forced: int | None = None, verbose: bool = False
) -> tuple[list[Shown], dict[str, int]]:
    """The steps to show for ``report``'s failures, and the counts to keep for next time.

    Args:
        report: a ``grading.Report``.
        counts: key -> the step shown last time (``Shown.key``).
        forced: show this step (``--hint N``) and leave the counts as they were.
        verbose: a step for every failure, as ``--verbose`` prints them all (else each
            first failure of each task, the ones the table prints in full).

    A key failing again gets the next step (at most 3); every key of a task that passed (some
    grade cell checked it, none failed) is dropped.
    """
    counts = dict(counts)
    passing: set[str] = set()
    failing: set[str] = set()
    for notebook in report.tasks:
        for check in notebook.checks:
            task = task_of(check)
            if task is not None:
                (passing if check.passed else failing).add(task)
    shown: list[Shown] = []
    seen: set[str] = set()
    for notebook in report.tasks:
        if notebook.status != "failed":  # stopped or not gradable: nothing to say about the code
            continue
        # a stub not written yet is no attempt: it neither climbs a ladder nor shows a step
        failed = [c for c in notebook.checks if not c.passed and c.cause not in NOT_THE_CODE and not c.stub]
        for check in failed if verbose else first_of_each_task(failed):
            task = task_of(check)
            found = _ladder(task, check) if task is not None else None
            if task is None or found is None or found[0] in seen:
                continue
            key, ladder = found
            seen.add(key)
            if forced is not None:
                step = forced
            else:
                step = min(counts.get(key, 0) + 1, STEPS)
                counts[key] = step
            shown.append(Shown(notebook.task, task, key, step, ladder))
    for task in passing - failing:
        for key in [k for k in counts if k.split(" ", 1)[0] == task]:
            del counts[key]
    return shown, counts


def render(shown: Iterable[Shown], forced: int | None = None) -> str:
    """The hints ``bertlab grade`` prints under its table ("" when there are none)."""
    lines: list[str] = []
    for item in shown:
        task = f"Task {item.task}"
        about = task if item.ladder.subject == task else f"{task} ({item.ladder.subject})"  # a mistake's ladder
        lines += [
            "",
            f"Hint {item.step} of {STEPS} for {about}, {TITLES[item.step - 1]}:",
            _wrap(item.ladder.step(item.step), "  "),
        ]
        if item.step < STEPS and forced is None:
            prefix = item.notebook.split("-", 1)[0]
            lines.append(
                f"  (If it fails again, the next grade shows hint {item.step + 1}; "
                f"`bertlab grade --hint {item.step + 1} {prefix}` shows it now.)"
            )
    return "\n".join(lines[1:])
