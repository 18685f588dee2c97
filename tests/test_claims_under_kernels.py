"""The lessons' claims hold on every learner's CPU, as far as this machine can play one.

Each lesson that makes claims runs under every ``ATEN_CPU_CAPABILITY`` this CPU dispatches
(``default``, ``avx2``, ``avx512`` where it has it) with the one thread every build gives a lesson
(``tests/claims_sweep.py``). A claim must hold in every run, with the same verdict, and a claim
between measured quantities must hold by ``FLOOR`` at least in its thinnest run; the margins
the contributor page lists (``tests/claim_margins.json``) must name exactly the claims made.

A thread count changes how sums are split, and so the last bits of a number: the build runs every
lesson on one thread whatever the environment asks for (``lessons_parallel.lesson_env``), so that
learners' builds meet the kernel sets' differences only. The test below that a hand-set thread
count is overridden is what lets the sweep leave thread counts out.

One of the conditions is the learner's own build, this CPU's kernels: the run's site (the ``site``
fixture, the ``make site`` a learner runs) executed every lesson under it, so its pages' records
stand for that run rather than the lessons run again under it; each page says which condition it
ran under, and a page that ran under another fails. Where the site was built under no condition
of the list (a kernel set asked for by hand), every condition is run here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.claims_sweep import (
    FLOOR,
    MARGINS_FILE,
    built_condition,
    lessons_with_claims,
    site_run,
    summarise,
    sweep,
    thin,
)
from tests.conftest import learner_env
from tests.kernels import lesson_conditions

# On the worker that builds the site: the sweep reads the site's pages for this CPU's own kernels,
# and another worker would sit waiting for the build.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800), pytest.mark.xdist_group("site")]


@pytest.fixture(scope="module")
def runs(request) -> dict[str, dict[str, dict]]:
    conds, built = lesson_conditions(), built_condition(learner_env())
    if built not in conds:
        return sweep(conds)
    swept = sweep([c for c in conds if c != built])
    built_run = site_run(request.getfixturevalue("site"), lessons_with_claims(), built)
    return {c.name: built_run if c == built else swept[c.name] for c in conds}


def test_more_than_one_condition_is_run():
    conds = lesson_conditions()
    assert {c.capability for c in conds} >= {"default"} and len(conds) >= 2, [c.name for c in conds]


def test_a_build_runs_its_lessons_on_one_thread_whatever_the_environment_asks():
    """Measured in a process started as a build starts a lesson's (``built_condition``): torch's
    own count of its threads, with each variable it reads set to another count by hand."""
    asked = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    for each in ({"OMP_NUM_THREADS": "2"}, {"MKL_NUM_THREADS": "2"}, asked):
        assert built_condition({**learner_env(), **each}).threads == 1, each
    # The probe sees more than one thread where nothing overrides the count asked for.
    code = "import torch; print(torch.get_num_threads())"
    probe = subprocess.run([sys.executable, "-c", code], env={**learner_env(), **asked}, capture_output=True, text=True)
    assert probe.stdout.split() == ["2"], probe.stderr


def test_every_lesson_runs_through_under_every_condition(runs):
    errors = [
        f"{c}, {stem}: {found['error']}"
        for c, lessons in runs.items()
        for stem, found in lessons.items()
        if found["error"]
    ]
    assert errors == []


def test_every_claim_holds_with_the_same_verdict_everywhere(runs):
    summary = summarise(runs)
    assert len(summary) >= 25, f"too few claims recorded: {len(summary)}"
    differing = [f"{key}: {s['holds']}" for key, s in summary.items() if len(set(s["holds"].values())) > 1]
    assert differing == [], "claims whose verdict depends on the CPU's kernels or threads"
    failing = [f"{key}: {s['says']}" for key, s in summary.items() if not all(s["holds"].values())]
    assert failing == []


def test_the_deep_post_ln_stall_is_wide_under_every_condition(runs):
    """Lesson 6's deepest Post-LN stacks without warm-up end more than five times above the same
    stacks with warm-up, and above Pre-LN without it: a stall, not a difference in rounding. The
    same claims' other halves (warm-up and Pre-LN learn, at every depth) are lesson claims that
    ``test_every_claim_holds_with_the_same_verdict_everywhere`` checks; this is the training's
    only test that trains lesson 6's stacks at full size, and so it reads the lesson's runs."""
    summary = summarise(runs)
    for name in ("deep_post_ln_fails_without_warmup", "deep_post_ln_behind_pre_ln"):
        found = summary[f"06-layernorm: {name}"]
        assert found["margin"] > 5, f"{name}: {found['says']}, by {found['margin']:.3g} only"


def test_no_measured_claim_is_thinner_than_the_floor(runs):
    assert thin(summarise(runs)) == [], f"reword these claims or measure them on more (floor {FLOOR})"


def test_the_recorded_margins_name_every_claim_and_none_is_thin(runs):
    """The contributor page's table lists what the lessons claim (``python -m tests.claims_sweep --write``)."""
    recorded = json.loads(MARGINS_FILE.read_text())
    assert set(recorded["claims"]) == set(summarise(runs)), "run python -m tests.claims_sweep --write"
    assert recorded["floor"] == FLOOR
    assert [k for k, c in recorded["claims"].items() if c["kind"] == "measured" and (c["margin"] or 0) < FLOOR] == []
