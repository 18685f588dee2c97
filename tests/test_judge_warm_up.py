"""A judge that outlives its command computes, at start, what only some notebooks need; a judge of
one command does not spend its start on it (``judge_process._warm_up``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bertlab.grading.pool import WARM_ALL, judge_env

pytestmark = pytest.mark.slow

PROBE = """
from bertlab.checks.other_config import _random_model
from bertlab.checks.bert_model import sentence_transformer_embeddings
from bertlab.grading import judge_process
judge_process._warm_up()
print(sentence_transformer_embeddings.cache_info().currsize, _random_model.cache_info().currsize)
"""


@pytest.mark.parametrize(("long_lived", "computed"), [(True, "1 1"), (False, "0 0")])
def test_only_a_long_lived_judge_computes_the_reference_only_values_at_start(long_lived, computed):
    env = judge_env(1, long_lived=long_lived)
    assert (env.get(WARM_ALL) == "1") is long_lived
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[-2:] == computed.split(), out.stderr[-2000:]
