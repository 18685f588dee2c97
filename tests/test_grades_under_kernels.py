"""Grades do not depend on the learner's CPU kernels: right code passes and wrong code fails on each.

- Every grade cell of the solution notebooks passes, in process, under every capability this
  CPU dispatches but its own (every other test of the suite grades under that one), and the
  reference stays within half of every tolerance: its largest
  difference over each check's comparisons, under its thinnest condition, is at most
  ``1 / FLOOR`` of the tolerance (``tests/tolerance_sweep.py`` prints the table); so do the
  right forms that round otherwise (float64 cast back, einsum, addmm), and every known mistake
  the captured values show stays ``FLOOR`` times over it.
- End to end (``grade()``, its judges and learner processes all started under the condition),
  the bad-submission cases whose verdict rests on values keep their verdicts. These runs take
  minutes per condition, so they run under one: ``default``, the kernel set furthest from the one
  this CPU would pick (the native set is what every other test of the suite grades under). The
  solutions' full marks under it are proved by the portable path's grading of the course, which
  runs under ``default`` too (``test_portable_path.py``): grading them a second time here, on the
  other path, would prove nothing the two runs do not already.
"""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from tests.kernels import Condition, capabilities, native
from tests.submissions import CASES, build_course
from tests.test_bad_submissions import problems_with
from tests.tolerance_sweep import FLOOR, margins, mistake_margins, sweep

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

# Cases whose verdict is decided by comparing values: the forms of right code that round
# differently (a head at a time, log-sum-exp, a chunked FFN), and mistakes close to a tolerance.
VALUE_CASES = (
    "05-right-feed-forward",
    "05-dropout-on-residual-sum",
    "06-second-residual-from-layer-input",
    "06-layer-calls-attention-children",
    "06-layer-ffn-in-chunks",
    "03-self-attention-one-head-at-a-time",
    "03-query-scaled-in-init",
    "03-mask-over-queries",
    "04-layernorm-stats-detached",
    "01-log-sum-exp-softmax",
    "03-log-sum-exp-softmax",
    "01-gelu-returns-float64",
    "05-nan-output",
    "05-global-thread-count",
    "05-intermediate-in-float64",
    "05-intermediate-in-float16",
)
END_TO_END = Condition("default", 1)

CHILD = """
import pickle, sys
from pathlib import Path
from bertlab.grading import grade
graded = {t.task: t for t in grade(Path(sys.argv[2]), [], timeout=300.0, jobs=2).tasks}
Path(sys.argv[1]).write_bytes(pickle.dumps(graded))
"""


@pytest.fixture(scope="module")
def in_process() -> dict[str, dict]:
    return sweep([Condition(c, 1) for c in capabilities() if c != native()])


def test_every_grade_cell_of_the_solutions_passes_under_every_capability(in_process):
    assert set(in_process) == {Condition(c, 1).name for c in capabilities() if c != native()}
    assert in_process, "this machine dispatches no kernel set but its own: nothing was run"
    failed = [f"{condition}: {line}" for condition, r in in_process.items() for line in r["failed"]]
    assert failed == []


def test_the_reference_stays_within_half_of_every_tolerance(in_process):
    found = margins(in_process)
    assert len(found) >= 40, f"too few checks measured: {sorted(found)}"
    thin = [f"{key}: margin {m:.3g} under {where}" for key, (m, where) in found.items() if m < FLOOR]
    assert thin == []


def test_every_known_mistake_stays_twice_over_the_tolerance(in_process):
    """The tolerance's relative part swallows no mistake that the captured values show."""
    found = mistake_margins(in_process)
    assert "5.1 tanh-gelu" in found, sorted(found)
    thin = [f"{key}: {s:.3g} times the tolerance under {where}" for key, (s, _, where) in found.items() if s < FLOOR]
    assert thin == []


@pytest.fixture(scope="module")
def end_to_end(tmp_path_factory) -> dict:
    """The value cases graded end to end under ``END_TO_END``: {folder: TaskResult}."""
    root = tmp_path_factory.mktemp("kernels")
    course = build_course(root, [c for c in CASES if c.folder in VALUE_CASES])
    from tests.conftest import ROOT

    out = root / "graded.pickle"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(out), str(course["main"])],
        env={**END_TO_END.env(), "MPLBACKEND": "Agg", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return pickle.loads(out.read_bytes())


def test_the_solutions_full_marks_under_other_kernels_are_proved_by_the_portable_path():
    from tests import test_portable_path

    assert test_portable_path.COURSE_CONDITION == END_TO_END
    assert "solutions" in test_portable_path.KINDS


@pytest.mark.parametrize("folder", VALUE_CASES)
def test_a_value_case_keeps_its_verdict_under_other_kernels(folder, end_to_end):
    case = next(c for c in CASES if c.folder == folder)
    task = end_to_end.get(folder)
    assert task is not None, sorted(end_to_end)
    assert problems_with(case, task) == [], f"{case.why} (under {END_TO_END.name})"
