"""Known mistakes in scaled dot-product attention (Task 3.1) and BertSelfAttention (Task 3.2).

Each mistake is simulated by a flawed copy of the reference computation below, run on the
pretrained weights, so a learner whose numbers equal the flawed ones can be told which flaw.
"""

from __future__ import annotations

import torch

from bertlab.diagnose import Mistake, register
from bertlab.diagnose.common import register_placements

LESSON = "03-multi-head-attention"


def attention(query, key, value, attention_mask, scaling, flaw=None):
    """HF's eager attention with an optional flaw.

    Args:
        query, key, value: (B, heads, T, d).
        attention_mask: additive, broadcastable to (B, heads, T, T), or None.

    Returns:
        context (B, T, heads, d) and probabilities (B, heads, T, T).
    """
    scores = query @ key.transpose(-1, -2)  # (B, A, T, T)
    if flaw != "no-scaling":
        scores = scores * scaling
    keep = None if attention_mask is None else (attention_mask == 0).to(scores.dtype)  # 1 real key, 0 padding
    if attention_mask is not None:
        if flaw == "mask-multiplied":
            scores = scores * attention_mask
        elif flaw == "keep-mask-times-scores":
            scores = scores * keep  # a padding key's score becomes 0, not minus infinity
        elif flaw == "mask-wrong-sign":
            scores = scores - attention_mask
        elif flaw == "mask-over-queries":
            # A padding mask depends on the key only (its rows are alike): transposed, it masks
            # the padded queries' rows instead, and every query attends to the padding keys.
            scores = scores + attention_mask.transpose(-1, -2)
        elif flaw not in ("mask-ignored", "keep-mask-times-probs"):
            scores = scores + attention_mask
    probs = torch.softmax(scores, dim=-2 if flaw == "softmax-wrong-axis" else -1)
    if flaw == "keep-mask-times-probs" and keep is not None:
        probs = probs * keep  # padding removed after the softmax: the rows no longer sum to 1
    context = (probs @ value).transpose(1, 2)  # (B, T, A, d)
    return context, probs


def self_attention(module, hidden_states, attention_mask=None, flaw=None):
    """HF's BertSelfAttention.forward (eval mode) on ``module``'s weights, with an optional flaw."""
    B, T, _ = hidden_states.shape
    A, d = module.num_attention_heads, module.attention_head_size

    def split(x):  # (B, T, A*d) -> (B, A, T, d)
        if flaw == "heads-split-wrong":
            return x.reshape(B, A, T, d)  # reinterprets memory: tokens and heads get mixed
        return x.view(B, T, A, d).transpose(1, 2)

    q, k, v = (split(layer(hidden_states)) for layer in (module.query, module.key, module.value))
    context, probs = attention(q, k, v, attention_mask, module.attention_head_size**-0.5, flaw)  # (B, T, A, d)
    return {"context_layer": merge(context, flaw), "attention_probs": probs}


def merge(context, flaw=None):
    """(B, T, A, d) -> (B, T, A*d), head i on features i*d .. (i+1)*d - 1, with an optional flaw."""
    B, T, A, d = context.shape
    if flaw == "heads-merged-without-transpose":
        # The heads' axis never moved back after the tokens': (B, A, T, d) memory read as (B, T, A*d).
        return context.transpose(1, 2).reshape(B, T, A * d)
    if flaw == "heads-merged-dims-swapped":
        return context.transpose(-1, -2).reshape(B, T, A * d)  # features in (d, A) order: heads interleaved
    return context.reshape(B, T, A * d)


def _flawed(flaw):
    def outputs(module, inputs):
        if "query" in inputs:  # Task 3.1: the function on already split heads
            context, probs = attention(
                inputs["query"],
                inputs["key"],
                inputs["value"],
                inputs["attention_mask"],
                inputs["scaling"],
                flaw,
            )
            return {"attn_output": context, "attn_weights": probs}
        return self_attention(module, inputs["hidden_states"], inputs.get("attention_mask"), flaw)

    return outputs


BOTH = ("3.1", "3.2")

for _id, _tasks, _description, _section in [
    ("no-scaling", BOTH, "the scores computed WITHOUT the 1/sqrt(head_size) scaling", "Scaled scores"),
    (
        "softmax-wrong-axis",
        BOTH,
        "a softmax over the queries (dim -2) instead of the keys (dim -1)",
        "Softmax over the keys",
    ),
    ("mask-ignored", BOTH, "attention that ignores the mask, so padding tokens are attended to", "The additive mask"),
    ("mask-multiplied", BOTH, "the mask MULTIPLIED with the scores instead of added to them", "The additive mask"),
    (
        "keep-mask-times-scores",
        BOTH,
        "the scores multiplied by a 0/1 keep mask instead of adding the additive mask: a padding key gets "
        "the score 0, not minus infinity, and keeps a share of the attention",
        "The additive mask",
    ),
    (
        "keep-mask-times-probs",
        BOTH,
        "the probabilities multiplied by a 0/1 keep mask after the softmax, without renormalising: each "
        "row sums to less than 1",
        "The additive mask",
    ),
    (
        "mask-wrong-sign",
        BOTH,
        "the mask SUBTRACTED from the scores, so only padding is attended to",
        "The additive mask",
    ),
    (
        "mask-over-queries",
        BOTH,
        "the mask broadcast over the QUERIES instead of the keys (its last two axes "
        "swapped, e.g. `attention_mask.transpose(-1, -2)` or a (B, 1, T, 1) mask): padded queries are masked, "
        "padding keys are attended to",
        "The mask's shape on its way to the scores",
    ),
    (
        "heads-split-wrong",
        ("3.2",),
        "heads split by `reshape(B, A, T, d)` (or `view`) without the transpose: tokens and heads get mixed",
        "Splitting into heads",
    ),
    (
        "heads-merged-without-transpose",
        ("3.2",),
        "the heads merged from (B, heads, T, d) without moving the heads' "
        "axis back after the tokens' (a transpose forgotten): tokens and heads get mixed",
        "Merging the heads",
    ),
    (
        "heads-merged-dims-swapped",
        ("3.2",),
        "the heads merged in (B, T, d, heads) order (a transpose of the last "
        "two axes before the reshape): the heads' features are interleaved",
        "Merging the heads",
    ),
]:
    register(Mistake(_id, _tasks, _description, LESSON, _section, _flawed(_id)))


# -- where dropout acts (Task 3.2), seen in train mode through bertlab.diagnose.common ---------

register(
    Mistake(
        "attention-dropout-on-context",
        ("3.2",),
        "dropout applied to the context layer, after the probabilities weight the values (in train mode), "
        "instead of to the attention probabilities",
        LESSON,
        "Dropout",
    )
)


def self_attention_train(module, inputs, flaw, make_drop) -> dict:
    """HF's BertSelfAttention in train mode on ``module``'s weights, with a dropout placement ``flaw``.

    Args:
        module: HF's BertSelfAttention.
        inputs: ``hidden_states`` (B, T, H) and ``attention_mask`` (additive, or None).
        flaw: ``attention-dropout-on-context``, ``dropout-missing`` or None (HF's placement).
        make_drop: ``p -> callable`` applying dropout in train mode.

    Returns:
        {"context_layer": (B, T, H), "attention_probs": (B, heads, T, T)}.
    """
    hidden_states = inputs["hidden_states"]
    B, T, _ = hidden_states.shape
    A, d = module.num_attention_heads, module.attention_head_size
    drop = make_drop(module.dropout.p)
    q, k, v = (
        layer(hidden_states).view(B, T, A, d).transpose(1, 2) for layer in (module.query, module.key, module.value)
    )
    scores = (q @ k.transpose(-1, -2)) * module.scaling  # (B, A, T, T)
    if inputs.get("attention_mask") is not None:
        scores = scores + inputs["attention_mask"]
    probs = torch.softmax(scores, dim=-1)
    if flaw is None:
        probs = drop(probs)  # HF: the weights of the values are dropped, and returned dropped
    context = (probs @ v).transpose(1, 2).reshape(B, T, A * d)  # (B, T, H)
    if flaw == "attention-dropout-on-context":
        context = drop(context)
    return {"context_layer": context, "attention_probs": probs}


register_placements(("3.2",), self_attention_train, ("attention-dropout-on-context", "dropout-missing"))
