"""Known mistakes in the Add & Norm sub-layers: BertSelfOutput (Task 4.1), BertAttention (Task 4.2)
and BertOutput (Task 5.2).

BertSelfOutput and BertOutput share one computation, ``LayerNorm(dropout(dense(x)) + input_tensor)``,
so their mistakes share ids. Each is simulated by a flawed copy of that computation on the
pretrained weights. BertAttention is checked with HF's own parts in place of the learner's, so its
mistakes are those of the composition (arguments swapped, mask not passed, wrong residual).

Two kinds of mistakes escape ``bertlab.diagnose.diagnose``: torch's default LayerNorm eps moves
some LayerNorms' outputs by less than the diagnosis's match tolerance (``MATCH_ATOL``), though by
more than the check's atol (lesson 6 measures it per LayerNorm), so ``diagnose_near_miss``
compares at the check's own tolerance; and dropout in the wrong place is invisible in eval mode
(``PLACEMENT_FLAWS``, named by the dropout check in train mode through ``bertlab.diagnose.common``).
"""

from __future__ import annotations

import copy
import inspect

import torch
from torch import nn

from bertlab.diagnose import REGISTRY, Mistake, name_also_in, register
from bertlab.diagnose import numpy_bert as by_hand
from bertlab.diagnose.common import register_placements

LESSON = "04-add-and-norm"
# BertAttention (Task 4.2) is checked with HF's own BertSelfOutput in ``output``: a mistake made
# inside BertSelfOutput is Task 4.1's, never 4.2's. Only the composition's mistakes name 4.2.
ADD_NORM = ("4.1", "5.2")

# torch's own default, read from nn.LayerNorm's signature rather than typed in.
TORCH_LAYER_NORM_EPS = inspect.signature(nn.LayerNorm).parameters["eps"].default


def add_norm(module, hidden_states, input_tensor, flaw=None, training=False, make_drop=None):
    """HF's BertSelfOutput / BertOutput forward on ``module``'s weights, with an optional flaw.

    Args:
        module: HF's BertSelfOutput or BertOutput (``dense``, ``dropout``, ``LayerNorm``).
        hidden_states: the sub-layer's output, (B, T, H) or (B, T, intermediate_size).
        input_tensor: the sub-layer's input, the residual, (B, T, H).
        flaw: a mistake id, or None for the right computation.
        training: apply dropout (with the global RNG), as a module in train mode would.
        make_drop: ``p -> callable`` applying dropout in train mode (a probe, say); overrides
            ``training``.

    Returns:
        (B, T, H).
    """
    p = module.dropout.p
    if make_drop is not None:
        drop = make_drop(p)
    else:
        drop = lambda x: nn.functional.dropout(x, p, training)  # noqa: E731
    if flaw == "dropout-missing":
        drop = lambda x: x  # noqa: E731
    if flaw == "dropout-on-sublayer-input":
        hidden_states = drop(hidden_states)
    x = module.dense(hidden_states)  # (B, T, H)
    if flaw not in ("dropout-after-layernorm", "dropout-on-residual-sum", "dropout-on-sublayer-input"):
        x = drop(x)

    def norm(y):
        eps = TORCH_LAYER_NORM_EPS if flaw == "layernorm-eps-default" else module.LayerNorm.eps
        if flaw in STATISTICS_FLAWS:  # a LayerNorm written by hand, as in Task 1.2
            return by_hand.layer_norm(y, module.LayerNorm.weight, module.LayerNorm.bias, eps, flaw)
        return nn.functional.layer_norm(y, y.shape[-1:], module.LayerNorm.weight, module.LayerNorm.bias, eps)

    if flaw == "layernorm-before-residual":
        out = norm(x) + input_tensor
    elif flaw == "pre-ln-order":
        # Pre-LN, x + dropout(sublayer(norm(x))): the norm moved onto the sub-layer's input, and the
        # sum returned as it is. Only Task 4.1's input has the width the LayerNorm normalises.
        out = input_tensor + drop(module.dense(norm(hidden_states)))
    elif flaw == "residual-missing":
        out = norm(x)
    elif flaw == "residual-wrong-tensor":
        out = norm(x + hidden_states)  # the tensor before `dense`; only possible when its width is H
    elif flaw == "dropout-on-residual-sum":
        out = norm(drop(x + input_tensor))  # the residual path is dropped too
    else:
        out = norm(x + input_tensor)
    if flaw == "dropout-after-layernorm":
        out = drop(out)
    return out


def attention(module, hidden_states, attention_mask=None, flaw=None, training=False):
    """HF's BertAttention forward on ``module``'s weights, the flaw in its Add & Norm part.

    ``training`` runs HF's self-attention in train mode too (on a copy: the reference stays frozen).

    Returns:
        {"attention_output": (B, T, H), "attn_weights": (B, heads, T, T)}.
    """
    self_attention = module.self
    if training:
        self_attention = copy.deepcopy(self_attention).train()
    mask = None if flaw == "attention-mask-not-passed" else attention_mask
    context, probs = self_attention(hidden_states, attention_mask=mask)  # (B, T, H), (B, A, T, T)
    if flaw == "attention-output-wrong-order":
        out = add_norm(module.output, hidden_states, context, training=training)
    else:
        out = add_norm(module.output, context, hidden_states, flaw, training)
    return {"attention_output": out, "attn_weights": probs}


def simulate(module, inputs, flaw=None, training=False) -> dict:
    """What the module with ``flaw`` returns on ``inputs`` (the kwargs of a Task 4.1, 4.2 or 5.2 check)."""
    if hasattr(module, "self"):  # BertAttention: self-attention, then its BertSelfOutput
        return attention(module, inputs["hidden_states"], inputs.get("attention_mask"), flaw, training)
    out = add_norm(module, inputs["hidden_states"], inputs["input_tensor"], flaw, training)
    return {"hidden_states": out}


def _flawed(flaw):
    def outputs(module, inputs):
        try:
            return simulate(module, inputs, flaw)
        except RuntimeError:  # a flaw that cannot happen here (e.g. widths that cannot be added)
            return {}

    return outputs


for _id, _tasks, _description, _lesson, _section in [
    (
        "layernorm-before-residual",
        ADD_NORM,
        "LayerNorm applied BEFORE the residual add, LayerNorm(dense(hidden_states)) + input_tensor, instead of "
        "to the sum",
        LESSON,
        "Post-LN",
    ),
    (
        "residual-missing",
        ADD_NORM,
        "LayerNorm(dense(hidden_states)) with NO residual: `input_tensor` is never added (adding the "
        "dense output to itself is the same mistake: LayerNorm cancels the factor 2)",
        LESSON,
        "The first Add & Norm",
    ),
    (
        "pre-ln-order",
        ("4.1",),
        "a Pre-LN sub-layer, input_tensor + dropout(dense(LayerNorm(hidden_states))): the LayerNorm moved "
        "onto the sub-layer's input and the sum returned unnormalised, where BERT is Post-LN and "
        "normalises the sum, LayerNorm(input_tensor + dropout(dense(hidden_states)))",
        "06-layernorm",
        "Post-LN and Pre-LN",
    ),
    (
        "residual-wrong-tensor",
        (*ADD_NORM, "4.2"),
        "LayerNorm(dense(hidden_states) + hidden_states): the residual is the tensor that entered `dense`, not "
        "`input_tensor`, the input of the whole sub-layer",
        LESSON,
        "The first Add & Norm",
    ),
    (
        "attention-output-wrong-order",
        ("4.2",),
        "self.output(hidden_states, self_output): the arguments swapped, so `dense` sees the layer's "
        "input and the attention output becomes the residual",
        LESSON,
        "The first Add & Norm",
    ),
    (
        "attention-mask-not-passed",
        ("4.2",),
        "self-attention called WITHOUT the attention mask, so padding tokens are attended to",
        "03-multi-head-attention",
        "The additive mask",
    ),
]:
    register(Mistake(_id, _tasks, _description, _lesson, _section, _flawed(_id)))

# A LayerNorm written by hand can get its statistics wrong as in numpy (Task 1.2): the same ids.
STATISTICS_FLAWS = ("unbiased-variance", "layernorm-eps-outside-sqrt", "layernorm-wrong-axis")
for _id in STATISTICS_FLAWS:
    name_also_in(_id, ADD_NORM, _flawed(_id))

# Detected by the names check (the LayerNorm's ``eps``); when there is no ``eps`` to read, by
# ``diagnose_near_miss``: its outputs are too close to the right ones for ``diagnose``.
register(
    Mistake(
        "layernorm-eps-default",
        ADD_NORM,
        f"nn.LayerNorm with torch's default eps={TORCH_LAYER_NORM_EPS:g} instead of config.layer_norm_eps",
        LESSON,
        "The first Add & Norm",
    )
)
NEAR_MISSES = ("layernorm-eps-default",)

for _id, _description in [
    (
        "dropout-after-layernorm",
        "dropout applied AFTER the LayerNorm (in train mode), which also drops the residual path, "
        "instead of on dense(hidden_states) before the add",
    ),
    (
        "dropout-on-residual-sum",
        "dropout applied to the residual SUM, LayerNorm(dropout(dense(hidden_states) + input_tensor)) (in train mode), "
        "which also drops the residual path, instead of to the dense output alone",
    ),
    (
        "dropout-on-sublayer-input",
        "dropout applied to the sub-layer's input, dense(dropout(hidden_states)) (in train mode), instead of to "
        "dense(hidden_states), the update added to the residual",
    ),
]:
    register(Mistake(_id, ADD_NORM, _description, LESSON, "Where dropout sits"))

# Where dropout acts, seen in train mode (bertlab.diagnose.common): the learner's outputs are
# compared with these placements, each simulated with probes and from the same seed.
PLACEMENT_FLAWS = ("dropout-on-residual-sum", "dropout-after-layernorm", "dropout-on-sublayer-input", "dropout-missing")


def _placement(module, inputs, flaw, make_drop) -> dict:
    out = add_norm(module, inputs["hidden_states"], inputs["input_tensor"], flaw, make_drop=make_drop)
    return {"hidden_states": out}


register_placements(ADD_NORM, _placement, PLACEMENT_FLAWS)


def _matches(got: dict, wrong: dict, expected: dict, atol: float, rtol: float) -> bool:
    """``got`` equals ``wrong``, and ``wrong`` differs from ``expected`` (else it proves nothing)."""

    def close(a, b):
        return a.shape == b.shape and bool(torch.allclose(a.detach().float(), b, atol=atol, rtol=rtol))

    names = [n for n in wrong if n in got]
    return (
        bool(names)
        and any(not close(wrong[n], expected[n]) for n in names)
        and all(close(got[n], wrong[n]) for n in names)
    )


def diagnose_near_miss(task_id: str, module, inputs, got: dict, expected: dict, atol: float) -> Mistake | None:
    """The ``NEAR_MISSES`` mistake of ``task_id`` whose outputs equal ``got`` at the check's own
    ``atol``, without relative tolerance (``diagnose``'s looser match cannot tell them apart)."""
    for flaw in NEAR_MISSES:
        if task_id in REGISTRY[flaw].tasks:
            with torch.no_grad():
                wrong = _flawed(flaw)(module, inputs)
            if _matches(got, wrong, expected, atol, rtol=0):
                return REGISTRY[flaw]
    return None
