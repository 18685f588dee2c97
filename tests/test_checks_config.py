"""The config check: a module built from another BertConfig must equal HF's built from it.

Modules that wire in the pretrained model's sizes (read here from the pretrained config, never
typed in) pass every check on the pretrained model and fail this one, naming the size.
"""

from __future__ import annotations

import math

import pytest
from torch import nn

from bertlab import reference
from bertlab.checks import CheckFailed, check
from bertlab.checks.other_config import config_sizes, other_config
from tests.conftest import solution_namespace

PRETRAINED = reference.load_config()
SIZES = config_sizes(PRETRAINED)
OTHER = config_sizes(other_config(PRETRAINED))


@pytest.fixture(scope="module")
def learner() -> dict:
    return solution_namespace(
        "02-embeddings", "03-self-attention", "04-attention-output", "05-feed-forward", "06-bert-model"
    )


def test_the_other_config_shares_no_size_with_the_pretrained_one():
    other = other_config(PRETRAINED)
    assert all(OTHER[f] != SIZES[f] for f in SIZES), (OTHER, SIZES)
    assert other.intermediate_size != 4 * other.hidden_size
    assert other.layer_norm_eps != PRETRAINED.layer_norm_eps


@pytest.mark.parametrize(
    "task, name",
    [
        ("2.1", "BertEmbeddings"),
        ("3.1", "eager_attention_forward"),
        ("3.2", "BertSelfAttention"),
        ("4.1", "BertSelfOutput"),
        ("4.2", "BertAttention"),
        ("5.1", "BertIntermediate"),
        ("5.2", "BertOutput"),
        ("6.1", "BertLayer"),
        ("6.2", "BertEncoder"),
        ("6.3", "BertPooler"),
        ("6.4", "BertModel"),
    ],
)
def test_the_solutions_pass(learner, task, name, capsys):
    check(task, learner[name], only="config")
    assert f"[Task {task}] {name}: config passed" in capsys.readouterr().out


def wired(base: type, build) -> type:
    """``base`` whose __init__ then runs ``build(self, config)``: a size taken from the pretrained model."""

    def __init__(self, config, *args, **kwargs):
        base.__init__(self, config, *args, **kwargs)
        build(self, config)

    return type(f"{base.__name__}_wired", (base,), {"__init__": __init__})


def set_dense(out_features: int | None = None, in_features: int | None = None):
    def build(self, config):
        self.dense = nn.Linear(in_features or self.dense.in_features, out_features or self.dense.out_features)

    return build


def test_a_literal_hidden_size_is_named(learner):
    H = SIZES["hidden_size"]
    cls = wired(learner["BertSelfOutput"], set_dense(H, H))
    check("4.1", cls, upto="batches")  # the pretrained model cannot tell
    with pytest.raises(CheckFailed) as err:
        check("4.1", cls, only="config")
    first = str(err.value).splitlines()[0]
    assert (
        f"built with hidden_size {H} (the pretrained model's) where config.hidden_size = "
        f"{OTHER['hidden_size']}: read sizes from config"
    ) in first


def test_a_literal_intermediate_size_is_named(learner):
    cls = wired(learner["BertIntermediate"], set_dense(SIZES["intermediate_size"]))
    with pytest.raises(
        CheckFailed,
        match=rf"built with intermediate_size {SIZES['intermediate_size']} "
        r"\(the pretrained model's\) where config\.intermediate_size",
    ):
        check("5.1", cls, only="config")


def test_a_literal_head_count_is_named(learner):
    def build(self, config):
        self.num_attention_heads = PRETRAINED.num_attention_heads
        self.attention_head_size = config.hidden_size // PRETRAINED.num_attention_heads
        self.scaling = self.attention_head_size**-0.5

    with pytest.raises(
        CheckFailed,
        match=rf"built with num_attention_heads {SIZES['num_attention_heads']} "
        r"\(the pretrained model's\)",
    ):
        check("3.2", wired(learner["BertSelfAttention"], build), only="config")


def test_a_literal_eps_is_named(learner):
    def build(self, config):
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=PRETRAINED.layer_norm_eps)

    with pytest.raises(
        CheckFailed,
        match=rf"LayerNorm eps is {PRETRAINED.layer_norm_eps:g} \(the pretrained "
        r"model's\), not config\.layer_norm_eps",
    ):
        check("5.2", wired(learner["BertOutput"], build), only="config")


def test_a_literal_layer_count_is_named(learner):
    def build(self, config):
        self.layer = nn.ModuleList(self.layer[0].__class__(config) for _ in range(PRETRAINED.num_hidden_layers))

    with pytest.raises(
        CheckFailed,
        match=rf"built with num_hidden_layers {SIZES['num_hidden_layers']} \(the "
        r"pretrained model's\) where config\.num_hidden_layers = ",
    ):
        check("6.2", wired(learner["BertEncoder"], build), only="config")


def test_a_literal_position_count_is_named(learner):
    def build(self, config):
        self.position_embeddings = nn.Embedding(PRETRAINED.max_position_embeddings, config.hidden_size)

    with pytest.raises(CheckFailed, match=rf"built with max_position_embeddings {SIZES['max_position_embeddings']}"):
        check("2.1", wired(learner["BertEmbeddings"], build), only="config")


def test_a_literal_dropout_probability_is_named(learner):
    def build(self, config):
        self.dropout = nn.Dropout(PRETRAINED.hidden_dropout_prob)

    with pytest.raises(
        CheckFailed,
        match=rf"dropout p is {PRETRAINED.hidden_dropout_prob:g} \(the pretrained "
        r"model's\), not config\.hidden_dropout_prob",
    ):
        check("4.1", wired(learner["BertSelfOutput"], build), only="config")


def test_a_function_scaled_by_the_pretrained_head_size_is_named(learner):
    right = learner["eager_attention_forward"]
    head = SIZES["attention_head_size"]

    def eager_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        return right(module, query, key, value, attention_mask, scaling=1 / math.sqrt(head), dropout=dropout)

    check("3.1", eager_attention_forward, upto="masks")
    with pytest.raises(
        CheckFailed,
        match=rf"scaled by 1/sqrt\({head}\) \(the pretrained model's head size\) "
        rf"where these heads have size {OTHER['attention_head_size']}",
    ):
        check("3.1", eager_attention_forward, only="config")
