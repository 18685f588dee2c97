"""State kept by a tensor's identity or a call count fails the calls check, named; right caches pass.

Issue: every check call got fresh copies of its inputs and the calls check stopped after four
calls, so a mask cache keyed on ``data_ptr()``, an ``lru_cache`` on the mask tensor, and a layer
that switched to a copy of its weights from its sixth call earned full marks. The calls check now
calls the module as real callers do (``stage_calls_refilled``): many times, on the same tensors
refilled in place and on reused memory, checks its gradients after those calls, and loads other
weights. Each wrong module is written as a learner would, from the solution notebooks' right
pieces: on any one call it computes exactly HF's numbers, so every single-call check passes.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from bertlab.checks import CheckFailed, check
from tests.conftest import solution_namespace

NB03 = solution_namespace("03-self-attention")
NB04 = solution_namespace("04-attention-output")
BertSelfAttention: Any = NB03["BertSelfAttention"]
BertSelfOutput: Any = NB04["BertSelfOutput"]


class MaskCachedByAddress(BertSelfAttention):
    """Wrong: "the mask is the same tensor every step": its float copy kept by ``data_ptr()``."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        if attention_mask is not None:
            masks = self.__dict__.setdefault("mask_cache", {})
            key = attention_mask.data_ptr()
            if key not in masks:
                masks[key] = attention_mask.to(hidden_states.dtype).clone()
            attention_mask = masks[key]
        return super().forward(hidden_states, attention_mask, **kwargs)


@functools.lru_cache(maxsize=16)
def prepared_mask(mask):
    """The mask made contiguous once: a learner's "speed-up", cached on the tensor itself."""
    return mask.contiguous().clone()


class MaskInAnLruCache(BertSelfAttention):
    """Wrong: the mask goes through an ``lru_cache`` keyed on the tensor (tensors hash by identity)."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        if attention_mask is not None:
            attention_mask = prepared_mask(attention_mask)
        return super().forward(hidden_states, attention_mask, **kwargs)


class FrozenCopyFromTheSixthCall(BertSelfOutput):
    """Wrong: from its sixth call, a copy of its dense weights made under no_grad ("no need to
    look them up every time"): right values, until other weights are loaded; no gradient."""

    def forward(self, hidden_states, input_tensor):
        self.calls = self.__dict__.get("calls", 0) + 1
        if self.calls < 6:
            return super().forward(hidden_states, input_tensor)
        if "frozen" not in self.__dict__:
            with torch.no_grad():
                self.frozen = (self.dense.weight.clone(), self.dense.bias.clone())
        hidden_states = self.dropout(F.linear(hidden_states, *self.frozen))
        return self.LayerNorm(hidden_states + input_tensor)


class StateSnapshotAfterWarmUp(BertSelfOutput):
    """Wrong: after five warm-up calls, computes from a snapshot of its state dict (detached
    copies): right values and gradients nowhere, until other weights are loaded."""

    def forward(self, hidden_states, input_tensor):
        self.__dict__["seen"] = self.__dict__.get("seen", 0) + 1
        if self.__dict__["seen"] <= 5:
            return super().forward(hidden_states, input_tensor)
        state = self.__dict__.setdefault("snapshot", {k: v.detach().clone() for k, v in self.state_dict().items()})
        update = self.dropout(F.linear(hidden_states, state["dense.weight"], state["dense.bias"]))
        norm = self.LayerNorm
        return F.layer_norm(
            update + input_tensor, norm.normalized_shape, state["LayerNorm.weight"], state["LayerNorm.bias"], norm.eps
        )


@pytest.mark.parametrize(
    "task, cls, named",
    [
        ("3.2", MaskCachedByAddress, "`self.mask_cache`"),
        ("3.2", MaskInAnLruCache, "`prepared_mask (an lru_cache)`"),
        ("4.1", FrozenCopyFromTheSixthCall, "`self.frozen`"),
        ("4.1", StateSnapshotAfterWarmUp, "`self.snapshot`"),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else None,
)
def test_state_kept_by_identity_or_count_fails_the_calls_check_named(task, cls, named):
    check(task, cls, upto="values")  # one call each: the numbers are HF's
    with pytest.raises(CheckFailed) as err:
        check(task, cls, only="calls")
    message = str(err.value)
    assert named in message and "from one call to the next" in message, message


@pytest.mark.parametrize(
    "task, cls",
    [("4.1", FrozenCopyFromTheSixthCall), ("4.1", StateSnapshotAfterWarmUp)],
    ids=["frozen-copy", "state-snapshot"],
)
def test_a_copy_of_the_weights_fails_on_the_gradient_or_the_new_weights(task, cls):
    with pytest.raises(CheckFailed, match=r"no gradient reaches dense\.weight, after \d+ calls|after \d+ calls"):
        check(task, cls, only="calls")


class MaskCachedByValue(BertSelfAttention):
    """Right: a cache keyed on the mask's values (its bytes), as careful code keys one."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        if attention_mask is not None:
            masks = self.__dict__.setdefault("by_value", {})
            key = (tuple(attention_mask.shape), attention_mask.numpy().tobytes())
            attention_mask = masks.setdefault(key, attention_mask.clone())
        return super().forward(hidden_states, attention_mask, **kwargs)


@functools.lru_cache(maxsize=32)
def padding_pattern(lengths: tuple, length: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask of rows of ``lengths`` tokens: cached on plain values, never on a tensor."""
    keep = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]
    return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)[:, None, None, :]


class PatternInAnLruCacheOfValues(BertSelfAttention):
    """Right: rebuilds a padding mask from its row lengths through an lru_cache keyed on them."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        if attention_mask is not None and attention_mask.shape[-2] == 1:
            lengths = tuple(int(n) for n in (attention_mask[:, 0, 0, :] == 0).sum(-1))
            rebuilt = padding_pattern(lengths, attention_mask.shape[-1], attention_mask.dtype)
            if torch.equal(rebuilt, attention_mask):  # a padding mask indeed (not any additive one)
                attention_mask = rebuilt
        return super().forward(hidden_states, attention_mask, **kwargs)


@pytest.mark.parametrize("cls", [MaskCachedByValue, PatternInAnLruCacheOfValues], ids=lambda c: c.__name__)
def test_a_cache_keyed_on_values_passes_the_calls_check(cls, capsys):
    check("3.2", cls, only="calls")
    assert "calls passed" in capsys.readouterr().out
