"""Dropout is right when its law and its place are right, however it is drawn.

A learner taught dropout from scratch draws it by hand (``rand_like(x) > p``, a Bernoulli of
``1 - p``, ``empty(...).bernoulli_``, ``uniform_``, or a normal draw above its p-quantile,
``randn_like(x) > t``), runs attention in a ``torch.jit.script`` function (whose
dropout never passes through Python), or wraps a block in ``torch.utils.checkpoint`` (whose
backward runs the forward again): each right form passes, values and train-mode gradients. The
same forms with a wrong p, no 1 / (1 - p), the wrong side of the threshold, a mask shared over an
axis, the wrong tensor, or a checkpoint that draws new masks in backward fail. Written as a
learner would, independently of ``bertlab.checks``.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import torch
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from bertlab.checks import CheckFailed, check
from tests.conftest import solution_namespace

NB03 = solution_namespace("03-self-attention")
BertSelfAttention: Any = NB03["BertSelfAttention"]
eager_attention_forward: Any = NB03["eager_attention_forward"]
BertSelfOutput: Any = solution_namespace("04-attention-output")["BertSelfOutput"]
BertOutput: Any = solution_namespace("05-feed-forward")["BertOutput"]
BertEncoder: Any = solution_namespace("06-bert-model")["BertEncoder"]


def attention_weights(query, key, attention_mask, scaling):
    scores = query @ key.transpose(-1, -2) * (query.shape[-1] ** -0.5 if scaling is None else scaling)
    return (scores if attention_mask is None else scores + attention_mask).softmax(-1)  # (B, A, T, T)


# -- Task 3.1, by hand ------------------------------------------------------------------------


def rand_like_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Right: inverted dropout as taught, ``w * (rand_like(w) > p) / (1 - p)``."""
    w = attention_weights(query, key, attention_mask, scaling)
    if module.training and dropout > 0:
        w = w * (torch.rand_like(w) > dropout) / (1 - dropout)
    return (w @ value).transpose(1, 2), w


def flax_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Right: flax's ``bernoulli(keep_prob)``, then ``where(keep, w / keep_prob, 0)``."""
    w = attention_weights(query, key, attention_mask, scaling)
    if module.training and dropout > 0.0:
        keep_prob = 1.0 - dropout
        keep = torch.empty(w.shape).bernoulli_(keep_prob)
        w = torch.where(keep.bool(), w / keep_prob, torch.zeros_like(w))
    return torch.einsum("bhqk,bhkd->bqhd", w, value), w


def uniform_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Right: ``empty_like(w).uniform_() >= p`` keeps a share 1 - p."""
    w = attention_weights(query, key, attention_mask, scaling)
    if module.training and dropout > 0:
        w = w * (torch.empty_like(w).uniform_() >= dropout) / (1 - dropout)
    return (w @ value).transpose(1, 2), w


def normal_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Right: a standard normal draw kept below its (1 - p)-quantile, a share 1 - p."""
    w = attention_weights(query, key, attention_mask, scaling)
    if module.training and dropout > 0:
        t = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(1 - dropout))
        w = w * (torch.normal(0.0, 1.0, w.shape) < t) / (1 - dropout)
    return (w @ value).transpose(1, 2), w


@torch.jit.script
def _scripted(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, p: float, training: bool
):
    scores = torch.matmul(query, key.transpose(-1, -2))
    if mask is not None:
        scores = scores + mask
    w = F.dropout(torch.softmax(scores, -1), p, training)
    return torch.matmul(w, value).transpose(1, 2).contiguous(), w


def scripted_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Right: the attention in a torch.jit.script function, its dropout run by TorchScript."""
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    return _scripted(query * scaling, key, value, attention_mask, float(dropout), module.training)


def unscaled_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Wrong: the kept weights are not scaled by 1 / (1 - p)."""
    w = attention_weights(query, key, attention_mask, scaling)
    if module.training:
        w = w * (torch.rand_like(w) >= dropout)
    return (w @ value).transpose(1, 2), w


def wrong_side_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Wrong: keeps the draws below p (a share p of the weights kept, not 1 - p)."""
    w = attention_weights(query, key, attention_mask, scaling)
    if module.training and dropout > 0:
        w = w * (torch.rand(w.shape) < dropout) / (1 - dropout)
    return (w @ value).transpose(1, 2), w


def typed_p_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Wrong: BERT's 0.1 typed in, not the ``dropout`` it is given."""
    w = attention_weights(query, key, attention_mask, scaling)
    if module.training:
        w = w * (torch.rand_like(w) > 0.1) / 0.9
    return (w @ value).transpose(1, 2), w


def normal_at_p_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Wrong: a normal draw compared with p itself, as if it were uniform: keeps about 38%, not 70%."""
    w = attention_weights(query, key, attention_mask, scaling)
    if module.training and dropout > 0:
        w = w * (torch.randn_like(w) > dropout) / (1 - dropout)
    return (w @ value).transpose(1, 2), w


def per_head_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Wrong: F.dropout2d, one mask per sentence and head shared over every weight."""
    w = F.dropout2d(attention_weights(query, key, attention_mask, scaling), dropout, module.training)
    return (w @ value).transpose(1, 2), w


def on_scores_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Wrong: the scores dropped, before the softmax."""
    scores = query @ key.transpose(-1, -2) * (query.shape[-1] ** -0.5 if scaling is None else scaling)
    if attention_mask is not None:
        scores = scores + attention_mask
    if module.training:
        scores = scores * torch.bernoulli(torch.full_like(scores, 1 - dropout)) / (1 - dropout)
    w = scores.softmax(-1)
    return (w @ value).transpose(1, 2), w


@pytest.mark.parametrize(
    "fn",
    [rand_like_attention, flax_attention, uniform_attention, normal_attention, scripted_attention],
    ids=lambda f: f.__name__,
)
def test_right_attention_dropout_however_drawn_passes(fn, capsys):
    for stage in ("dropout", "gradients"):
        check("3.1", fn, only=stage)
    out = capsys.readouterr().out
    assert "dropout passed" in out and "gradients passed" in out, out


@pytest.mark.parametrize(
    "fn, measured",
    [
        (unscaled_attention, r"the softmax's times 1 \("),
        (wrong_side_attention, r"30\.0%|2\d\.\d% of your|7\d\.\d% of your"),
        (per_head_attention, r"the same along query, key"),
        (on_scores_attention, r"not the softmax's weights times one number"),
        (typed_p_attention, r"\d\.\d% of your weights are zero(?s:.*)a p of 0\.1: is the probability typed in"),
        (normal_at_p_attention, r"6\d\.\d% of your weights are zero \(HF zeroes each with probability p = 0\.3\)"),
    ],
    ids=["unscaled", "wrong-side", "dropout2d", "on-scores", "typed-p", "normal-at-p"],
)
def test_wrong_attention_dropout_fails_saying_what_was_measured(fn, measured):
    with pytest.raises(CheckFailed) as err:
        check("3.1", fn, only="dropout")
    message = str(err.value)
    assert "Measured with HF's dropout decisions" in message, message
    assert ("typed in" in message) == (fn is typed_p_attention), message
    assert re.search(measured, message), message


# -- Tasks 4.1 and 5.2, by hand ----------------------------------------------------------------


class RandLikeSelfOutput(BertSelfOutput):
    """Right: ``x * (rand_like(x) > p) / (1 - p)``."""

    def forward(self, hidden_states, input_tensor):
        x, p = self.dense(hidden_states), self.dropout.p
        if self.training:
            x = x * (torch.rand_like(x) > p) / (1 - p)
        return self.LayerNorm(x + input_tensor)


class KeepBelowOutput(BertOutput):
    """Right: keep where ``rand < 1 - p``, zero the rest with masked_fill, then scale."""

    def forward(self, hidden_states, input_tensor):
        x, keep = self.dense(hidden_states), 1 - self.dropout.p
        if self.training:
            x = x.masked_fill(torch.rand(x.shape) >= keep, 0.0) / keep
        return self.LayerNorm(x + input_tensor)


class EmptyLikeBernoulliSelfOutput(BertSelfOutput):
    """Right: ``torch.empty_like(x).bernoulli_(1 - p)``, a keep-mask, then 1 / (1 - p)."""

    def forward(self, hidden_states, input_tensor):
        x, p = self.dense(hidden_states), self.dropout.p
        if self.training:
            x = x * torch.empty_like(x).bernoulli_(1 - p) / (1 - p)
        return self.LayerNorm(x + input_tensor)


class UniformOutput(BertOutput):
    """Right: ``uniform_(0, 1) < 1 - p`` chooses between x / (1 - p) and 0."""

    def forward(self, hidden_states, input_tensor):
        x, p = self.dense(hidden_states), self.dropout.p
        if self.training:
            x = torch.where(torch.empty(x.shape).uniform_(0, 1) < 1 - p, x / (1 - p), torch.zeros_like(x))
        return self.LayerNorm(x + input_tensor)


class RandnQuantileSelfOutput(BertSelfOutput):
    """Right: ``randn_like(x) > t``, t the p-quantile of N(0, 1): each element kept with 1 - p."""

    def forward(self, hidden_states, input_tensor):
        x, p = self.dense(hidden_states), self.dropout.p
        if self.training:
            t = math.sqrt(2) * torch.erfinv(torch.tensor(2 * p - 1)).item()
            x = x * (torch.randn_like(x) > t) / (1 - p)
        return self.LayerNorm(x + input_tensor)


class NormalQuantileOutput(BertOutput):
    """Right: ``empty_like(x).normal_(0, 2) > 2 t``, the same law scaled."""

    def forward(self, hidden_states, input_tensor):
        x, p = self.dense(hidden_states), self.dropout.p
        if self.training:
            t = torch.distributions.Normal(0.0, 2.0).icdf(torch.tensor(p))
            x = x * (torch.empty_like(x).normal_(0.0, 2.0) > t) / (1 - p)
        return self.LayerNorm(x + input_tensor)


class RandnAtPSelfOutput(BertSelfOutput):
    """Wrong: a normal draw compared with p itself: keeps about 46%, not 1 - p."""

    def forward(self, hidden_states, input_tensor):
        x, p = self.dense(hidden_states), self.dropout.p
        if self.training:
            x = x * (torch.randn_like(x) > p) / (1 - p)
        return self.LayerNorm(x + input_tensor)


class SharedOverTokensOutput(BertOutput):
    """Wrong: one mask per sentence, shared by every token."""

    def forward(self, hidden_states, input_tensor):
        x, p = self.dense(hidden_states), self.dropout.p
        if self.training:
            x = x * (torch.rand(x.shape[0], 1, x.shape[2]) > p) / (1 - p)
        return self.LayerNorm(x + input_tensor)


class OnTheSumSelfOutput(BertSelfOutput):
    """Wrong: the residual sum dropped by hand."""

    def forward(self, hidden_states, input_tensor):
        x, p = self.dense(hidden_states) + input_tensor, self.dropout.p
        if self.training:
            x = x * torch.bernoulli(torch.full_like(x, 1 - p)) / (1 - p)
        return self.LayerNorm(x)


class TypedOutput(BertOutput):
    """Wrong: 0.1 typed in, drawn by hand."""

    def forward(self, hidden_states, input_tensor):
        x = self.dense(hidden_states)
        if self.training:
            x = x * (torch.rand_like(x) > 0.1) / 0.9
        return self.LayerNorm(x + input_tensor)


@pytest.mark.parametrize(
    "task, cls",
    [
        ("4.1", RandLikeSelfOutput),
        ("5.2", KeepBelowOutput),
        ("4.1", EmptyLikeBernoulliSelfOutput),
        ("5.2", UniformOutput),
        ("4.1", RandnQuantileSelfOutput),
        ("5.2", NormalQuantileOutput),
    ],
    ids=["4.1-rand-like", "5.2-masked-fill", "4.1-empty-like-bernoulli", "5.2-uniform", "4.1-randn", "5.2-normal"],
)
def test_right_add_norm_dropout_drawn_by_hand_passes(task, cls, capsys):
    for stage in ("dropout", "gradients"):
        check(task, cls, only=stage)
    out = capsys.readouterr().out
    assert "dropout passed" in out and "gradients passed" in out, out


@pytest.mark.parametrize(
    "task, cls, words",
    [
        ("5.2", SharedOverTokensOutput, "dropout-mask-shared"),
        ("4.1", OnTheSumSelfOutput, "HF applies `self.dropout` to dense(hidden_states) only"),
        ("5.2", TypedOutput, "hidden_dropout_prob 0.2"),
        ("4.1", RandnAtPSelfOutput, "What this measures cannot tell the cause: dropout acting elsewhere"),
    ],
    ids=["shared-over-tokens", "on-the-sum", "typed-p", "randn-at-p"],
)
def test_wrong_add_norm_dropout_drawn_by_hand_fails(task, cls, words):
    with pytest.raises(CheckFailed) as err:
        check(task, cls, only="dropout")
    assert words in str(err.value), str(err.value)
    if cls is not SharedOverTokensOutput:  # a mask for another tensor is drawn alike in every replay
        assert "dropout-mask-shared" not in str(err.value), str(err.value)


# -- torch.utils.checkpoint --------------------------------------------------------------------


class CheckpointedAttention(BertSelfAttention):
    """Right: the attention block under checkpoint (torch's dropout, random state preserved)."""

    preserve = True

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        B, T, _ = hidden_states.shape
        q, k, v = (
            f(hidden_states).view(B, T, self.num_attention_heads, -1).transpose(1, 2)
            for f in (self.query, self.key, self.value)
        )

        def attend(q, k, v):
            p = self.dropout.p if self.training else 0.0
            return eager_attention_forward(self, q, k, v, attention_mask, scaling=self.scaling, dropout=p)

        context, probs = checkpoint(attend, q, k, v, use_reentrant=False, preserve_rng_state=self.preserve)
        return context.reshape(B, T, -1), probs


class CheckpointedAttentionNewMasks(CheckpointedAttention):
    """Wrong: the checkpoint does not preserve the random state: backward draws other masks."""

    preserve = False


class CheckpointedHandDrawn(BertSelfAttention):
    """Right: a reentrant checkpoint around attention whose dropout is a Bernoulli drawn by hand."""

    preserve = True

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        B, T, _ = hidden_states.shape
        q, k, v = (
            f(hidden_states).view(B, T, self.num_attention_heads, -1).transpose(1, 2)
            for f in (self.query, self.key, self.value)
        )

        def attend(q, k, v):
            w = attention_weights(q, k, attention_mask, self.scaling)
            if self.training:
                keep = 1 - self.dropout.p
                w = w * torch.bernoulli(torch.full_like(w, keep)) / keep
            return w @ v, w

        context, probs = checkpoint(attend, q, k, v, use_reentrant=True, preserve_rng_state=self.preserve)
        return context.transpose(1, 2).reshape(B, T, -1), probs


class CheckpointedHandDrawnNewMasks(CheckpointedHandDrawn):
    """Wrong: the same, its random state not preserved."""

    preserve = False


class CheckpointedEncoder(BertEncoder):
    """Right: every layer under checkpoint."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        states = (hidden_states,)
        for layer in self.layer:
            hidden_states = checkpoint(layer, hidden_states, attention_mask, use_reentrant=False)
            states = (*states, hidden_states)
        return hidden_states, states


@pytest.mark.parametrize(
    "task, cls",
    [("3.2", CheckpointedAttention), ("3.2", CheckpointedHandDrawn), ("6.2", CheckpointedEncoder)],
    ids=["attention", "attention-by-hand", "every-layer"],
)
def test_checkpoint_that_preserves_the_random_state_passes_in_train_mode(task, cls, capsys):
    for stage in ("dropout", "gradients"):
        check(task, cls, only=stage)
    out = capsys.readouterr().out
    assert "dropout passed" in out and "gradients passed" in out, out


@pytest.mark.parametrize(
    "cls", [CheckpointedAttentionNewMasks, CheckpointedHandDrawnNewMasks], ids=["torch-dropout", "by-hand"]
)
def test_checkpoint_that_draws_new_masks_in_backward_fails_the_gradients(cls):
    check("3.2", cls, only="dropout")  # the forward is right
    with pytest.raises(CheckFailed) as err:
        check("3.2", cls, only="gradients")
    message = str(err.value)
    assert "in train mode" in message and "preserve_rng_state" in message, message
    assert "cut from the graph" not in message, message


def test_a_learners_own_generator_is_a_fair_draw_too(capsys):
    """Right: the mask drawn from a generator the module keeps (its state moves on each call)."""

    class OwnGenerator(BertSelfOutput):
        def forward(self, hidden_states, input_tensor):
            x, p = self.dense(hidden_states), self.dropout.p
            if self.training:
                self.__dict__.setdefault("generator", torch.Generator().manual_seed(1))
                x = x * (torch.rand(x.shape, generator=self.generator) >= p) / (1 - p)
            return self.LayerNorm(x + input_tensor)

    check("4.1", OwnGenerator, only="dropout")
    assert "dropout passed" in capsys.readouterr().out


class UnscaledSelfOutput(BertSelfOutput):
    """Wrong: the right elements dropped by hand, the kept ones not scaled."""

    def forward(self, hidden_states, input_tensor):
        x = self.dense(hidden_states)
        if self.training:
            x = x * (torch.rand_like(x) > self.dropout.p)
        return self.LayerNorm(x + input_tensor)


class TwiceOutput(BertOutput):
    """Wrong: `self.dropout` applied twice; the placement hint must not describe what it does already."""

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dropout(self.dense(hidden_states))) + input_tensor)


class TokensDroppedOutput(BertOutput):
    """Wrong: dropout1d over (B, T, H): one mask per token, shared by its features."""

    def forward(self, hidden_states, input_tensor):
        x = F.dropout1d(self.dense(hidden_states), self.dropout.p, self.training)
        return self.LayerNorm(x + input_tensor)


@pytest.mark.parametrize(
    "task, cls, mistake",
    [
        ("4.1", UnscaledSelfOutput, "dropout-not-scaled"),
        ("5.2", TwiceOutput, "dropout-applied-twice"),
        ("5.2", TokensDroppedOutput, "dropout-mask-shared"),
    ],
    ids=["unscaled", "twice", "dropout1d"],
)
def test_a_dropout_at_its_place_but_wrong_is_named(task, cls, mistake):
    with pytest.raises(CheckFailed) as err:
        check(task, cls, only="dropout")
    assert err.value.mistake == mistake, str(err.value)
    assert "HF applies `self.dropout` to dense" not in str(err.value), str(err.value)
