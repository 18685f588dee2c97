"""Task 3's checks: the solution notebook's code passes, on the pretrained and on a tiny random BERT;
failures read well."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from torch import nn

from bertlab import capture, reference
from bertlab.checks import CheckFailed, check
from tests.conftest import solution_namespace

# Learner-style right code: the solution notebook's (transformers' own is refused as a shortcut).
NS = solution_namespace("03-self-attention")
NS_BertSelfAttention: Any = NS["BertSelfAttention"]


@pytest.mark.parametrize("task, name", [("3.1", "eager_attention_forward"), ("3.2", "BertSelfAttention")])
def test_the_solution_passes(task, name, capsys):
    check(task, NS[name])
    assert f"[Task {task}] {name} passed" in capsys.readouterr().out


def test_nothing_hard_wired_to_the_pretrained_sizes(tiny_bert_dir, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tiny_bert_dir))
    check("3.2", NS["BertSelfAttention"])
    assert capture.capture().hidden_states[0].shape[-1] == 32


class Stub(nn.Module):
    def __init__(self, config, is_causal=False, layer_idx=None):
        super().__init__()
        raise NotImplementedError()


class Renamed(NS_BertSelfAttention):
    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        self.q = self.query
        del self.query


class ReturnsOnlyContext(NS_BertSelfAttention):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return super().forward(hidden_states, attention_mask)[0]


class Shifted(NS_BertSelfAttention):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        context, probs = super().forward(hidden_states, attention_mask)
        return context + 0.5, probs


@pytest.mark.parametrize(
    "cls, expected",
    [
        (Stub, r"not implemented yet: Stub\(config\) raises NotImplementedError"),
        (Renamed, r"parameter names differ.*\n  missing: query.bias, query.weight\n  unexpected: q.bias, q.weight"),
        (ReturnsOnlyContext, r"must return a tuple \(context_layer, attention_probs\).*got a tensor"),
        (
            Shifted,
            r"`context_layer` values differ from the pretrained layer 0 \(atol 1e-05, rtol 1.9e-06\)\n"
            r"  max abs diff 5.0e-01 at \(batch \d+, token \d+, dim \d+\): expected .*, got ",
        ),
    ],
)
def test_failures_say_what_and_where(cls, expected):
    with pytest.raises(CheckFailed, match=expected) as err:
        check("3.2", cls)
    assert str(err.value).startswith("[Task 3.2] BertSelfAttention: ")
    assert err.value.mistake is None


def test_bool_mask_added_is_not_the_right_answer():
    """The transformers 5 trap: adding a 0/1 mask runs without error and is wrong."""
    cap = capture.capture()
    call = cap.layer(0, "attention.self")
    module = reference.load_model().encoder.layer[0].attention.self
    bool_mask = cap.batch["attention_mask"][:, None, None, :].bool()
    with torch.no_grad():
        _, probs = module(call.args[0], attention_mask=bool_mask)
    b, t = (cap.batch["attention_mask"] == 0).nonzero()[0]  # a padding position
    assert call.output[1][b, :, :, t].abs().max() == 0  # the additive mask: never attended to
    assert probs[b, :, :, t].sum() > 0  # the bool mask: padding gets attention (no error raised)


# -- learner code that is wrong in a way a lesson names: written here as a learner would --------


def notebook(source: str) -> dict:
    """The names ``source`` defines, run after notebook 03's given and solution cells, as a
    learner's cell that redefines a function or class runs in their notebook."""
    namespace = dict(NS)
    exec(compile(source, "<learner cell>", "exec"), namespace)
    return namespace


def failure(task: str, obj, upto: str | None = None) -> CheckFailed:
    with pytest.raises(CheckFailed) as err:
        check(task, obj, upto=upto)
    return err.value


# The additive mask's last two axes swapped: it masks the padded queries' rows, not the padding keys.
MASK_OVER_QUERIES_3_1 = """
def eager_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask.transpose(-1, -2)  # (B, 1, T, 1) or (B, 1, T, T) "per token"
    weights = torch.softmax(scores, dim=-1)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2), weights
"""

# BertSelfAttention written in one piece, the padding mask made (B, 1, T, 1) from one row.
OWN_ATTENTION = """
class BertSelfAttention(nn.Module):
    def __init__(self, config, is_causal=False, layer_idx=None):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = config.hidden_size
        self.scaling = self.attention_head_size ** -0.5
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def heads(self, x):
        B, T, _ = x.shape
        return x.view(B, T, self.num_attention_heads, self.attention_head_size).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        B, T, H = hidden_states.shape
        q = self.heads(self.query(hidden_states))
        k = self.heads(self.key(hidden_states))
        v = self.heads(self.value(hidden_states))
        SCORES
        probs = self.dropout(torch.softmax(scores, dim=-1))
        MERGE
        return context, probs
"""
RIGHT_SCORES = """scores = q @ k.transpose(-1, -2) / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            scores = scores + attention_mask"""
RIGHT_MERGE = "context = (probs @ v).permute(0, 2, 1, 3).reshape(B, T, H)"


def own_attention(scores: str = RIGHT_SCORES, merge: str = RIGHT_MERGE) -> type:
    source = "import math\n" + OWN_ATTENTION.replace("SCORES", scores).replace("MERGE", merge)
    return notebook(source)["BertSelfAttention"]


def test_own_attention_is_right():
    check("3.2", own_attention(), upto="masks")


@pytest.mark.parametrize(
    "task, learner",
    [
        ("3.1", lambda: notebook(MASK_OVER_QUERIES_3_1)["eager_attention_forward"]),
        (
            "3.2",
            lambda: own_attention(
                scores="""scores = q @ k.transpose(-1, -2) / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            per_token = attention_mask[:, :, -1, :].unsqueeze(-1)  # (B, 1, T, 1): one value per token
            scores = scores + per_token"""
            ),
        ),
    ],
    ids=["3.1-transposed", "3.2-one-per-token"],
)
def test_mask_over_queries_is_named(task, learner):
    err = failure(task, learner(), upto="values")
    assert err.mistake == "mask-over-queries", str(err)
    assert "The mask's shape on its way to the scores" in str(err)


@pytest.mark.parametrize(
    "merge, mistake",
    [
        ("context = (probs @ v).reshape(B, T, H)", "heads-merged-without-transpose"),
        ("context = (probs @ v).transpose(1, 2).transpose(2, 3).reshape(B, T, H)", "heads-merged-dims-swapped"),
        ("context = torch.einsum('bhqk,bhkd->bqdh', probs, v).reshape(B, T, H)", "heads-merged-dims-swapped"),
    ],
    ids=["transpose-forgotten", "last-axes-swapped", "einsum-d-before-h"],
)
def test_heads_merged_wrong_are_named(merge, mistake):
    err = failure("3.2", own_attention(merge=merge), upto="values")
    assert err.mistake == mistake, str(err)
    assert 'section "Merging the heads"' in str(err)


# -- NaN: where it first appears, and the mask multiplied named however the scores are ordered ----

MASK_MULTIPLIED_FIRST_3_1 = """
def eager_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    scores = query @ key.transpose(-1, -2)
    if attention_mask is not None:
        scores = scores * attention_mask  # before the scaling: overflows where the simulation does not
    weights = torch.softmax(scores * scaling, dim=-1)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return (weights @ value).transpose(1, 2), weights
"""


@pytest.mark.parametrize(
    "task, learner, first",
    [
        ("3.1", lambda: notebook(MASK_MULTIPLIED_FIRST_3_1)["eager_attention_forward"], "attn_weights"),
        (
            "3.2",
            lambda: own_attention(
                scores="""scores = q @ k.transpose(-1, -2)
        if attention_mask is not None:
            scores = attention_mask * scores
        scores = scores / math.sqrt(self.attention_head_size)"""
            ),
            "attention_probs",
        ),
    ],
    ids=["3.1-before-scaling", "3.2-mask-times-scores"],
)
def test_nan_says_where_it_first_appears_and_names_the_multiplied_mask(task, learner, first):
    err = failure(task, learner(), upto="values")
    assert err.mistake == "mask-multiplied", str(err)
    assert re.search(
        rf"NaN or inf first appears in `{first}` \(\d+ of \d+ values NaN, the first at \(batch \d+, "
        r"head \d+, query \d+, key \d+\)\); then in `",
        str(err),
    ), str(err)


# -- attention weights returned as None: the rest is checked, the cell fails saying so ------------


@pytest.mark.parametrize(
    "task, learner",
    [
        ("3.2", lambda: own_attention(merge=RIGHT_MERGE + "\n        probs = None  # not needed downstream")),
        (
            "3.1",
            lambda: notebook(
                MASK_OVER_QUERIES_3_1.replace(".transpose(-1, -2)  #", "  #")
                .replace(
                    "return torch.matmul(weights, value).transpose(1, 2), weights",
                    "return torch.matmul(weights, value).transpose(1, 2).contiguous(), None",
                )
                .replace("* scaling", "* (query.shape[-1] ** -0.5 if scaling is None else scaling)")
            )["eager_attention_forward"],
        ),
    ],
    ids=["3.2", "3.1"],
)
def test_weights_returned_as_none_fail_after_the_rest_is_checked(task, learner):
    err = failure(task, learner())
    assert "returns None for `" in str(err).splitlines()[0]
    assert "passed every check of this cell (" in str(err) and "gradients)" in str(err)


def test_weights_returned_as_none_do_not_hide_the_real_bug():
    learner = own_attention(
        scores=RIGHT_SCORES.replace(" / math.sqrt(self.attention_head_size)", ""),
        merge=RIGHT_MERGE + "\n        probs = None",
    )
    err = failure("3.2", learner, upto="values")
    assert err.mistake == "no-scaling", str(err)
    assert "returns None for `attention_probs`: only `context_layer` was compared" in str(err)


# -- a 3.1 mistake seen in 3.2: blamed on 3.1 only when the call of 3.1 is seen and 3.1 is wrong --

SCALED_IN_INIT = """
class BertSelfAttention(BertSelfAttention):
    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        with torch.no_grad():  # scale once, here, instead of on every call
            self.query.weight *= self.scaling
            self.query.bias *= self.scaling
        self.scaling = 1.0
"""
SCALED_ON_FIRST_CALL = """
class BertSelfAttention(BertSelfAttention):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        if not getattr(self, "query_scaled", False):
            self.query.weight.data.mul_(self.attention_head_size ** -0.5)
            self.query.bias.data.mul_(self.attention_head_size ** -0.5)
            self.query_scaled = True
        B, T, H = hidden_states.shape
        q, k, v = (x.view(B, T, self.num_attention_heads, -1).transpose(1, 2)
                   for x in (self.query(hidden_states), self.key(hidden_states), self.value(hidden_states)))
        scores = q @ k.transpose(-1, -2)
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = scores.softmax(-1)
        return (probs @ v).transpose(1, 2).reshape(B, T, H), probs
"""
UNSCALED_3_1 = """
def eager_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    scores = query @ key.transpose(-1, -2)  # scaling forgotten
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = torch.softmax(scores, dim=-1)
    return (weights @ value).transpose(1, 2), weights
"""


def test_scaling_folded_into_weights_is_not_blamed_on_3_1():
    err = failure("3.2", notebook(SCALED_IN_INIT)["BertSelfAttention"], upto="values")
    assert err.mistake == "no-scaling"
    assert "fix 3.1 first" not in str(err)
    assert "answers as HF's on the arguments it is given" in str(err) and "scaling=1.0" in str(err)
    assert "a scaling folded into `query`'s weights" in str(err)


def test_scaling_on_a_first_call_is_not_blamed_on_3_1():
    err = failure("3.2", notebook(SCALED_ON_FIRST_CALL)["BertSelfAttention"], upto="values")
    assert err.mistake == "no-scaling"
    assert "fix 3.1 first" not in str(err)
    assert "does not call your eager_attention_forward" in str(err)
    assert "a scaling folded into `query`'s weights" in str(err)


def solution_cell(grade_id: str) -> str:
    import nbformat

    from tests.conftest import solution_notebook

    cells = nbformat.read(solution_notebook("03-self-attention"), as_version=4).cells
    return next(c.source for c in cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def test_a_wrong_3_1_called_by_3_2_is_blamed_on_3_1():
    # The 3.1 cell as the learner wrote it, then the right 3.2 cell, which calls it.
    learner = notebook(UNSCALED_3_1 + solution_cell("bert-self-attention"))["BertSelfAttention"]
    err = failure("3.2", learner, upto="values")
    assert err.mistake == "no-scaling"
    assert "calls your eager_attention_forward, which answers otherwise than HF's" in str(err)
    assert "fix 3.1 first" in str(err)


# -- lesson 3's multiplicative masks, written as a learner would, are named ----------------------


def attention_keep_times_scores(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    scores = torch.matmul(query, key.transpose(2, 3)) * (scaling or query.size(-1) ** -0.5)  # (B, A, T, T)
    if attention_mask is not None:
        keep = attention_mask.ge(0).to(scores.dtype)  # 1 where the additive mask is 0
        scores = scores * keep
    weights = nn.functional.dropout(scores.softmax(-1), dropout, module.training)
    return torch.matmul(weights, value).permute(0, 2, 1, 3), weights


def attention_keep_times_probs(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    weights = torch.softmax(query @ key.mT * (scaling or query.size(-1) ** -0.5), dim=-1)  # (B, A, T, T)
    if attention_mask is not None:
        weights = weights.masked_fill(attention_mask < 0, 0.0)  # padding zeroed after the softmax
    weights = nn.functional.dropout(weights, dropout, module.training)
    return (weights @ value).transpose(1, 2), weights


@pytest.mark.parametrize(
    ("learner", "mistake"),
    [(attention_keep_times_scores, "keep-mask-times-scores"), (attention_keep_times_probs, "keep-mask-times-probs")],
)
def test_a_keep_mask_multiplied_in_is_named_with_its_lesson_section(learner, mistake):
    err = failure("3.1", learner, upto="values")
    assert err.mistake == mistake, str(err)
    assert 'section "The additive mask"' in str(err), str(err)


def test_a_wrong_31_that_no_known_mistake_explains_is_blamed_in_32():
    """The learner guide promises it: 3.2 fails because the learner's 3.1 answers otherwise than HF's."""
    ns = solution_namespace("03-self-attention")  # a namespace of its own: its function is replaced
    right = ns["eager_attention_forward"]

    def sharper(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        return right(module, query, key, value, attention_mask, 1.25 * (scaling or query.shape[-1] ** -0.5), dropout)

    ns["eager_attention_forward"] = sharper  # what BertSelfAttention.forward finds by name
    err = failure("3.2", ns["BertSelfAttention"], upto="values")
    assert "fix 3.1 first" in str(err), str(err)
