"""``bertlab autograde``: grade a class's collected submissions in parallel, into nbgrader's gradebook.

``nbgrader autograde`` grades one submission after another, each by running its notebook in a
kernel and then (with the course's ``JudgeVerdicts``) judging it. Here the judging, the only step
that decides a score, runs for several submissions at once in warm judges: on this
machine (``local_judges``), or on a Dask cluster's workers (``cluster_judges``). As each verdict
arrives, in this process whichever judged it, nbgrader's own Autograde converter records
it: the same sanitizing, the same autograded notebook, the same gradebook rows, with the judge's
verdicts in place of the kernel run. What ``nbgrader export``, ``generate_feedback`` and the
formgrader read is therefore what ``nbgrader autograde`` would have left.

A submission nbgrader cannot read (not a notebook) gets 0 on every grade cell with the reason; a
hang or a crash costs only its own submission. A run regrades only submissions whose files (or
whose assignment's source) changed since they were last graded here, unless ``force``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bertlab.instructor import course
from bertlab.instructor.progress import Progress
from bertlab.settings import DEFAULT_JOBS, DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT

if TYPE_CHECKING:
    from bertlab.instructor.cluster_judges import ClusterJudges
    from bertlab.instructor.local_judges import LocalJudges

STATE_FILE = ".bertlab-autograde.json"  # in autograded/: fingerprints of what was graded here
PENDING = "pending"  # the fingerprint of a submission a run set out to grade and has not recorded
JUDGE_STEPS = (
    "nbgrader.preprocessors.Execute",
    "nbgrader.preprocessors.execute.Execute",
    "bertlab.nbgrader_execute.Execute",  # the course's configuration: nbgrader's, naming a killed kernel
    "bertlab.nbgrader_verdicts.JudgeVerdicts",
)


@dataclass
class Outcome:
    """What one submission got; ``reason`` says why a submission that was not judged scored 0."""

    student: str
    assignment: str
    score: float
    max_score: float
    status: str  # passed | failed | error | timeout | skipped (unchanged: the scores are those recorded)
    reason: str = ""
    seconds: float = 0.0
    cause: str | None = None  # the limit that stopped it: "timeout" or "memory" (``CheckResult.cause``)


class _Collect(logging.Handler):
    """Keeps the converter's error lines: the reason a submission could not be recorded."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def autograde(
    root: Path,
    assignments: list[str],
    students: list[str] | None = None,
    jobs: int = DEFAULT_JOBS,
    timeout: float = DEFAULT_TIMEOUT,
    memory_limit: float = DEFAULT_MEMORY_MB,
    force: bool = False,
    progress: bool = True,
    scheduler: str | None = None,
) -> list[Outcome]:
    """Grade every collected submission of ``assignments`` (all when empty) in course ``root``.

    Args:
        students: grade only these students' submissions (everyone's when empty).
        jobs: submissions judged at once, each in its own warm worker process (on this machine).
        timeout: seconds per notebook for all its cells and checks.
        memory_limit: MB the learner's process may use.
        force: regrade submissions whose files did not change since their last grading.
        scheduler: a Dask scheduler's address: the submissions are judged by its workers, not here.

    Returns:
        One outcome per submission, in the order they were found (skipped ones included).
    """
    from bertlab.grading.pool import Limits

    judges: ClusterJudges | LocalJudges
    if scheduler:
        from bertlab.instructor.cluster_judges import ClusterJudges

        judges = ClusterJudges(scheduler)
    else:
        from bertlab.instructor.local_judges import LocalJudges

        judges = LocalJudges(jobs)
    try:
        return _grade_all(root, assignments, students, Limits(timeout, memory_limit), force, progress, judges)
    finally:
        judges.close()


def _grade_all(root, assignments, students, limits, force, progress, judges) -> list[Outcome]:
    from bertlab.grading.runner import grade_cells
    from bertlab.instructor import lighter_nbgrader

    lighter_nbgrader.install()
    config, coursedir = course.load(root)
    found = course.submissions(coursedir, assignments, students)
    if not found:
        where = coursedir.format_path(coursedir.submitted_directory, "<student>", "<assignment>")
        raise course.CourseError(f"no submissions to grade (expected notebooks in {where}/)")
    _require_assignments(coursedir, {s.assignment for s in found})

    state_path = Path(coursedir.format_path(coursedir.autograded_directory, ".", ".")) / STATE_FILE
    state = json.loads(state_path.read_text()) if state_path.is_file() else {}
    source_root = Path(coursedir.format_path(coursedir.source_directory, ".", "."))
    prints = {s.key: course.fingerprint(s, source_root / s.assignment) for s in found}
    unchanged = [s for s in found if not force and not _changed(state.get(s.key), prints[s.key], _graded(coursedir, s))]
    # A skipped submission reports the score its last grading recorded: a script summing the
    # outcomes reads the class's grades, not zeros. One the gradebook no longer holds is regraded.
    recorded = _recorded(coursedir, unchanged)
    todo = [s for s in found if s.key not in recorded]
    outcomes = {
        s.key: Outcome(s.student, s.assignment, *recorded[s.key], "skipped", "unchanged since its last autograde")
        for s in found
        if s.key in recorded
    }
    # Longest first: a long submission left for the end keeps one worker busy while the others idle.
    todo.sort(key=lambda sub: grade_cells(sub.notebooks()), reverse=True)
    bar = Progress(len(todo)) if progress and todo else None
    if bar:
        bar.say(f"grading {len(todo)} submission(s), {judges.describe()}")

    def save() -> None:
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps(state, indent=1, sort_keys=True))

    # Each is marked not graded until its verdict is recorded: a run stopped half-way (Ctrl-C, a
    # worker refused, --force or not) leaves every other to the next run, as the run says.
    for sub in todo:
        state[sub.key] = {**state.get(sub.key, {}), "fingerprint": PENDING}
    save()
    left = {sub.key for sub in todo}
    try:
        for sub, result in judges.judged(todo, limits):  # record each as it comes, while the others are judged
            outcome = _record(config, coursedir, sub, result)
            outcomes[sub.key] = outcome
            # A file nbgrader cannot read leaves no autograded copy: that is not a reason to regrade it.
            state[sub.key] = {"fingerprint": prints[sub.key], "autograded": _graded(coursedir, sub)}
            save()
            left.discard(sub.key)
            if bar:
                bar.step(f"{sub.key}: {outcome.score:g}/{outcome.max_score:g} {outcome.status}")
    except BaseException:
        if left:
            say = bar.say if bar else lambda line: print(line, file=sys.stderr, flush=True)
            say(stopped(len(todo), sorted(left)))
        raise
    return [outcomes[s.key] for s in found]


def stopped(total: int, left: list[str]) -> str:
    """The line a run stopped half-way ends with: every submission it had to grade accounted for."""
    shown = ", ".join(left[:8]) + (f" and {len(left) - 8} more" if len(left) > 8 else "")
    return (
        f"stopped: {total - len(left)} of {total} submission(s) graded and recorded; the other "
        f"{len(left)} are left for the next run, which grades them with or without --force: {shown}"
    )


def _require_assignments(coursedir, names: set[str]) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        known = {a.name for a in gb.assignments}
    missing = sorted(names - known)
    if missing:
        raise course.CourseError(
            f"not in the gradebook yet: {', '.join(missing)}; run `nbgrader generate_assignment "
            f"{missing[0]}` first (it records the assignment's grade cells)"
        )


def _changed(last: dict | None, fingerprint: str, graded: bool) -> bool:
    """Whether a submission needs grading: new files, or its autograded copy deleted since."""
    if not isinstance(last, dict) or last.get("fingerprint") != fingerprint:
        return True
    return bool(last.get("autograded")) and not graded


def _graded(coursedir, sub: course.Submission) -> bool:
    return os.path.isdir(coursedir.format_path(coursedir.autograded_directory, sub.student, sub.assignment))


def _record(config, coursedir, sub: course.Submission, result) -> Outcome:
    """Write ``result`` (a judged TaskResult) for ``sub`` with nbgrader's Autograde converter."""
    from nbgrader.converters import Autograde
    from nbgrader.converters.base import NbGraderException

    from bertlab.instructor.recorded import RecordedVerdicts

    start = time.perf_counter()
    verdicts: dict[str, dict] = {}
    for nb in sub.notebooks():
        verdicts[nb.stem] = {c.name: [c.passed, c.message] for c in result.checks}
    steps = list(config.Autograde.get("autograde_preprocessors", [])) or list(
        Autograde.autograde_preprocessors.default_value
    )
    recorded = RecordedVerdicts(verdicts=verdicts)
    names = [step if isinstance(step, str) else f"{step.__module__}.{step.__name__}" for step in steps]
    judge_at = next((i for i, n in enumerate(names) if n in JUDGE_STEPS), 0)
    steps = [s for s, n in zip(steps, names, strict=True) if n not in JUDGE_STEPS]
    steps.insert(judge_at, recorded)

    coursedir = _for(coursedir, sub)
    _forget_feedback(coursedir, sub)
    # nbgrader's gradebook code warns about its own session use on every submission; it is noise here.
    warnings.filterwarnings("ignore", module="nbgrader.api")
    log = logging.getLogger(f"bertlab.autograde.{sub.key}")
    log.propagate, collect = False, _Collect()
    log.addHandler(collect)
    converter = Autograde(coursedir=coursedir, config=config, log=log)
    converter.force = True  # what changed was decided above; nbgrader would skip existing output
    converter.autograde_preprocessors = steps
    reason = ""
    try:
        converter.start()
    except NbGraderException:
        reason = _reason(result, collect.lines)
        _zero(coursedir, sub, reason)
    finally:
        log.removeHandler(collect)
    score, max_score = _scores(coursedir, sub)
    status = "error" if reason else result.status
    return Outcome(
        sub.student,
        sub.assignment,
        score,
        max_score,
        status,
        reason or _first_failure(result),
        result.seconds + time.perf_counter() - start,
        next((c.cause for c in result.checks if c.cause), None),
    )


def _forget_feedback(coursedir, sub: course.Submission) -> None:
    """Remove the feedback made from the submission's last grade, which this grading replaces.

    ``nbgrader generate_feedback`` makes it again from the new autograded copy; a submission
    regraded into an error has none, and nbgrader would skip it and leave the old feedback (and
    its old score) for the learner to read.
    """
    shutil.rmtree(coursedir.format_path(coursedir.feedback_directory, sub.student, sub.assignment), ignore_errors=True)


def _for(coursedir, sub: course.Submission):
    """A copy of ``coursedir`` narrowed to one submission (nbgrader's converters work on globs)."""
    from nbgrader.coursedir import CourseDirectory

    one = CourseDirectory(config=coursedir.config)
    one.root = coursedir.root
    one.student_id, one.assignment_id = sub.student, sub.assignment
    return one


def _reason(result, errors: list[str]) -> str:
    judged = _first_failure(result)
    if judged:
        return judged
    lines = [line for line in errors if line.strip() and not line.startswith("Traceback")]
    return lines[0] if lines else "nbgrader could not record this submission"


def _first_failure(result) -> str:
    failed = [c.message for c in result.checks if not c.passed]
    return failed[0].splitlines()[0] if failed else ""


def _zero(coursedir, sub: course.Submission, reason: str) -> None:
    """Every grade of a submission nbgrader could not convert at 0, and marked as graded."""
    from nbgrader.api import Gradebook

    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        gb.update_or_create_student(sub.student)
        submission = gb.update_or_create_submission(sub.assignment, sub.student)
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                grade.auto_score = 0.0
                grade.needs_manual_grade = False
        gb.db.commit()


def _recorded(coursedir, subs: list[course.Submission]) -> dict[str, tuple[float, float]]:
    """The gradebook's (score, max_score) of each of ``subs`` it holds, by submission key."""
    from nbgrader.api import Gradebook, MissingEntry

    found: dict[str, tuple[float, float]] = {}
    if not subs:
        return found
    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        for sub in subs:
            try:
                submission = gb.find_submission(sub.assignment, sub.student)
            except MissingEntry:
                continue
            found[sub.key] = float(submission.score), float(submission.max_score)
    return found


def _scores(coursedir, sub: course.Submission) -> tuple[float, float]:
    from nbgrader.api import Gradebook

    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        submission = gb.find_submission(sub.assignment, sub.student)
        return float(submission.score), float(submission.max_score)


def summary(outcomes: list[Outcome]) -> str:
    """One line per submission: student, assignment, score, status and the first reason."""
    rows = [("student", "assignment", "score", "status", "first failure or reason")]
    rows += [
        (
            o.student,
            o.assignment,
            f"{o.score:g}/{o.max_score:g}",
            o.status,
            o.reason.splitlines()[0][:80] if o.reason else "",
        )
        for o in outcomes
    ]
    from bertlab.grading.table import limit_advice

    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    advice = limit_advice({o.cause for o in outcomes if o.status != "skipped"})
    return "\n".join(
        ["  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
        + [""] * bool(advice)
        + advice
    )


def to_json(outcomes: list[Outcome]) -> str:
    return json.dumps([asdict(o) for o in outcomes], indent=2)
