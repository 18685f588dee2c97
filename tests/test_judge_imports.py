"""A judge never imports transformers: it compares with the course's own BERT (``bertlab.bert``),
which ``tests/test_course_bert.py`` and ``tests/test_judge_reference.py`` prove equal to
transformers' bit for bit, and reads sentence-transformers' embeddings of Task 6.4 from the file the
course ships. transformers' import was most of a judge's start (about 3.4 s of 6 s).

Each judge here starts as the grader starts it (``pool.JudgePool``: the judge factory, a judge
forked from it) with a ``sitecustomize`` on its path that writes down every import of transformers
or sentence-transformers, in any process of the pool, with the stack that made it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bertlab.grading.pool import WARM_ALL, JudgePool, Limits, judge_env
from bertlab.grading.runner import grade_task
from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # judges started and notebooks graded

WATCHED = ("transformers", "sentence_transformers")

SITECUSTOMIZE = """
import os, sys, traceback

class _Watch:
    # Asked first for every module imported; notes the watched ones. A look-up alone (such as
    # importlib.util.find_spec locating a package's folder, to confine it) imports nothing.
    def find_spec(self, name, path=None, target=None):
        caller = sys._getframe(1)
        importing = any(f.f_code.co_name == "_find_and_load_unlocked" for f in (caller, caller.f_back) if f)
        if importing and name.split(".")[0] in {watched!r}:
            with open(os.environ["BERTLAB_IMPORT_LOG"], "a") as log:
                log.write(f"{{os.getpid()}} imports {{name}}\\n" + "".join(traceback.format_stack()[:-1]) + "\\n")
        return None

sys.meta_path.insert(0, _Watch())
"""


def _watched_env(tmp_path: Path, long_lived: bool) -> tuple[dict, Path]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(watched=WATCHED))
    log = tmp_path / "imports.log"
    log.touch()
    env = judge_env(1, long_lived=long_lived)
    env["PYTHONPATH"] = str(site) + (f":{env['PYTHONPATH']}" if env.get("PYTHONPATH") else "")
    env["BERTLAB_IMPORT_LOG"] = str(log)
    return env, log


def test_a_judge_started_as_the_grader_starts_it_imports_no_transformers(tmp_path):
    """A long-lived judge (it computes, at start, all that some notebooks need: Task 6.4's sentence
    embeddings among them) starts, then grades Task 6's notebook, sentence-transformers' check
    included, and Task 7's, which measures whole models: nothing imports transformers."""
    env, log = _watched_env(tmp_path, long_lived=True)
    assert env.get(WARM_ALL) == "1"
    pool = JudgePool(env)
    try:
        pool.warm_up()
        assert pool.factory is not None and pool.factory.alive, "no judge factory: not the grader's way"
        judge = next(iter(pool.idle))
        assert judge.alive, judge._last_words()
        assert log.read_text() == "", f"a judge's start imported transformers:\n{log.read_text()[-4000:]}"
        for task in ("06-bert-model", "07-why-measured"):
            result = grade_task(task, [ROOT / "solutions" / task / f"{task}.ipynb"], Limits(timeout=600), pool)
            assert result.status == "passed", [c.message for c in result.checks if not c.passed]
    finally:
        pool.close()
    assert log.read_text() == "", f"grading imported transformers:\n{log.read_text()[-4000:]}"


PROBE = textwrap.dedent(
    """
    import sys
    from bertlab.grading import judge_process
    judge_process.load()
    judge_process.load_judge_side()
    judge_process._warm_up()
    from bertlab.checks.bert_model import sentence_transformer_embeddings
    from bertlab.checks.other_config import _random_model
    from bertlab import capture
    done = [capture._capture.cache_info().currsize, _random_model.cache_info().currsize,
            sentence_transformer_embeddings.cache_info().currsize]
    print(done, sorted(m for m in sys.modules if m.split(".")[0] in {watched!r}))
    """
)


@pytest.mark.parametrize("long_lived", [True, False])
def test_what_a_judge_loads_at_start_holds_no_transformers(long_lived):
    """The judge's start, step by step in one process: what it loaded is there, transformers is not."""
    env = judge_env(1, long_lived=long_lived)
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(watched=WATCHED)], env=env, capture_output=True, text=True, check=True
    )
    computed = "[1, 1, 1]" if long_lived else "[1, 0, 0]"
    assert out.stdout.strip() == f"{computed} []", out.stderr[-3000:]
