"""Known mistakes in the numpy BERT layer (Tasks 1.1 to 1.5).

Each mistake is simulated in torch, float32, by a flawed copy of the right computation: the
four primitives below take a ``flaw`` argument, and ``bert_layer`` builds a whole layer out of
them, so a flaw in a primitive is also recognised in the learner's whole layer (Task 1.5),
where it shows up once the learner reuses that primitive.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from bertlab.diagnose import Mistake, register


def softmax(x, axis=-1, flaw=None):
    """Softmax of ``x`` along ``axis``."""
    if flaw == "softmax-wrong-axis-numpy":
        axis = 0
    if flaw == "softmax-unstable":
        exps = torch.exp(x)  # overflows to inf above ~88 in float32, then inf / inf = NaN
        return exps / exps.sum(axis, keepdim=True)
    return torch.softmax(x, dim=axis)


def layer_norm(x, weight, bias, eps, flaw=None):
    """LayerNorm over the last axis."""
    axis = -2 if flaw == "layernorm-wrong-axis" else -1
    mean = x.mean(axis, keepdim=True)
    var = x.var(axis, keepdim=True, correction=1 if flaw == "unbiased-variance" else 0)
    if flaw == "layernorm-eps-missing":
        std = var.sqrt()  # 0 on a constant row: 0 / 0 = NaN
    elif flaw == "layernorm-eps-outside-sqrt":
        std = var.sqrt() + eps
    else:
        std = (var + eps).sqrt()
    return (x - mean) / std * weight + bias


def gelu(x, flaw=None):
    """GELU, exact (erf) unless a flaw says otherwise."""
    if flaw == "relu-instead-of-gelu-numpy":
        return torch.relu(x)
    return F.gelu(x, approximate="tanh" if flaw == "tanh-gelu-numpy" else "none")


def linear(x, weight, bias, flaw=None):
    """``x Wᵀ + b`` with PyTorch's weight layout (out, in); None when the flawed code would raise."""
    if flaw == "weight-not-transposed":
        if weight.shape[0] != weight.shape[1]:
            return None  # x @ W on a rectangular weight raises a shape error instead
        return x @ weight + bias
    return x @ weight.T + bias


def bert_layer(hidden_states, attention_mask, params, config, flaw=None, variant=None):
    """One BertLayer in eval mode from its ``state_dict`` (HF names), with an optional flaw.

    Args:
        hidden_states: (B, T, H).
        attention_mask: additive, broadcastable to (B, heads, T, T), or None.
        params: parameter name -> tensor, e.g. ``"attention.self.query.weight"``.
        config: provides ``num_attention_heads`` and ``layer_norm_eps``.
        variant: the form of a flaw that takes several (see ``VARIANTS``); None for the first.

    Returns:
        (B, T, H), or None when the flawed code would raise.
    """
    B, T, H = hidden_states.shape
    heads = config.num_attention_heads
    d = H // heads
    eps = config.layer_norm_eps

    def dense(x, name):
        out = linear(x, params[f"{name}.weight"], params[f"{name}.bias"], flaw)
        if out is None:
            raise _WouldRaise
        return out

    def split(x):  # (B, T, H) -> (B, heads, T, d)
        return x.reshape(B, T, heads, d).transpose(1, 2)

    def norm(x, name):
        return layer_norm(x, params[f"{name}.weight"], params[f"{name}.bias"], eps, flaw)

    def add_norm(x, residual, name):  # Post-LN: LayerNorm(x + residual), unless normalised before the add
        first = name.startswith("attention.")
        if flaw == "numpy-layer-layernorm-before-add" and variant in (None, "both", "first" if first else "second"):
            return norm(x, name) + residual
        return norm(x + residual, name)

    try:
        q, k, v = (split(dense(hidden_states, f"attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(-1, -2)  # (B, heads, T, T)
        if flaw != "numpy-layer-no-scaling":
            scores = scores / d**0.5
        if attention_mask is not None and flaw != "numpy-layer-mask-ignored":
            scores = scores + attention_mask
        context = (softmax(scores, -1, flaw) @ v).transpose(1, 2).reshape(B, T, H)  # merge the heads
        attention_output = add_norm(
            dense(context, "attention.output.dense"), hidden_states, "attention.output.LayerNorm"
        )

        def feed_forward(x, residual):  # (B, T, H) -> (B, T, H): W_1, GELU, W_2, second Add & Norm
            intermediate = gelu(dense(x, "intermediate.dense"), flaw)  # (B, T, I)
            return add_norm(dense(intermediate, "output.dense"), residual, "output.LayerNorm")

        # The feed-forward sub-layer reads the attention output, and adds it back as its residual.
        ffn_input = hidden_states if flaw == "numpy-layer-ffn-fed-layer-input" else attention_output
        residual = hidden_states if flaw == "numpy-layer-second-residual-from-input" else attention_output
        layer_output = feed_forward(ffn_input, residual)
        if flaw == "numpy-layer-ffn-applied-twice":
            layer_output = feed_forward(layer_output, layer_output)
        return layer_output
    except _WouldRaise:
        return None


class _WouldRaise(Exception):
    """The flawed code raises on these inputs, so it cannot explain a learner's numbers."""


def _flawed(primitive, flaw):
    def outputs(_module, inputs):
        if "params" in inputs:  # Task 1.5: the whole layer
            out = bert_layer(**inputs, flaw=flaw)
            return {} if out is None else {"layer_output": out}
        if primitive is None:
            return {}
        out = primitive(**inputs, flaw=flaw)
        return {} if out is None else {"output": out}

    return outputs


# Mistakes with several forms, matched form by form by ``diagnose_variants``: LayerNorm before
# the add in both Add & Norms (the registered simulation), or in one of them only.
VARIANTS = {"numpy-layer-layernorm-before-add": ("first", "second")}


def diagnose_variants(task_id: str, inputs: dict, got: dict, expected: dict):
    """The first mistake of ``VARIANTS`` for ``task_id`` one of whose other forms produces ``got``."""
    from bertlab.diagnose import MATCH_ATOL, REGISTRY

    def close(a, b):
        return a.shape == b.shape and bool(torch.allclose(a, b, atol=MATCH_ATOL, rtol=MATCH_ATOL, equal_nan=True))

    if "params" not in inputs or "layer_output" not in got:
        return None
    for mistake_id, forms in VARIANTS.items():
        if task_id not in REGISTRY[mistake_id].tasks:
            continue
        for form in forms:
            with torch.no_grad():
                wrong = bert_layer(**inputs, flaw=mistake_id, variant=form)
            if wrong is None or close(wrong, expected["layer_output"]):
                continue  # this form raises, or changes nothing on these inputs: proves nothing
            if close(got["layer_output"].float(), wrong):
                return REGISTRY[mistake_id]
    return None


SOFTMAX, LAYERNORM, GELU, LINEAR = "1.1", "1.2", "1.3", "1.4"
LAYER = "1.5"
ATTENTION, FFN, NORM, ANATOMY = "03-multi-head-attention", "05-feed-forward", "06-layernorm", "01-anatomy"
ADD_NORM = "04-add-and-norm"

for _id, _tasks, _primitive, _description, _lesson, _section in [
    (
        "softmax-unstable",
        (SOFTMAX, LAYER),
        softmax,
        "a softmax WITHOUT subtracting each row's maximum: exp of large scores overflows to inf, and inf / inf = NaN",
        ATTENTION,
        "A numerically stable softmax",
    ),
    (
        "softmax-wrong-axis-numpy",
        (SOFTMAX, LAYER),
        softmax,
        "a softmax normalised over axis 0 instead of over `axis` (the keys, axis -1)",
        ATTENTION,
        "Softmax over the keys",
    ),
    (
        "unbiased-variance",
        (LAYERNORM, LAYER),
        layer_norm,
        "LayerNorm with the UNBIASED variance (divided by H - 1: ddof=1 in numpy, unbiased=True or torch.std in "
        "torch) instead of the biased one (divided by H)",
        NORM,
        "LayerNorm by hand",
    ),
    (
        "layernorm-wrong-axis",
        (LAYERNORM, LAYER),
        layer_norm,
        "LayerNorm with its mean and variance taken over the TOKENS (axis -2) instead of over each token's "
        "features (axis -1)",
        NORM,
        "LayerNorm by hand",
    ),
    (
        "layernorm-eps-missing",
        (LAYERNORM,),
        layer_norm,
        "LayerNorm WITHOUT eps: a constant row gives 0 / 0 = NaN",
        NORM,
        "LayerNorm by hand",
    ),
    (
        "layernorm-eps-outside-sqrt",
        (LAYERNORM, LAYER),
        layer_norm,
        "LayerNorm dividing by sqrt(var) + eps instead of sqrt(var + eps)",
        NORM,
        "LayerNorm by hand",
    ),
    (
        "tanh-gelu-numpy",
        (GELU, LAYER),
        gelu,
        "the tanh APPROXIMATION of GELU instead of the exact x * Phi(x) with erf",
        FFN,
        "Exact GELU",
    ),
    ("relu-instead-of-gelu-numpy", (GELU, LAYER), gelu, "ReLU instead of GELU", FFN, "Exact GELU"),
    (
        "weight-not-transposed",
        (LINEAR,),
        linear,
        "x @ W instead of x @ W.T: PyTorch stores a Linear's weight as (out_features, in_features)",
        ANATOMY,
        "What `intermediate.dense` is",
    ),
    (
        "numpy-layer-no-scaling",
        (LAYER,),
        None,
        "a layer whose attention scores are NOT divided by sqrt(head_size)",
        ATTENTION,
        "Scaled scores",
    ),
    (
        "numpy-layer-mask-ignored",
        (LAYER,),
        None,
        "a layer that ignores `attention_mask`, so padding tokens are attended to",
        ATTENTION,
        "The additive mask",
    ),
    # The wiring of the two blocks (lesson 4): which tensor goes where.
    (
        "numpy-layer-second-residual-from-input",
        (LAYER,),
        None,
        "a layer whose second residual is the LAYER'S INPUT, layer_norm(W_2(...) + hidden_states), instead of "
        "the attention block's output",
        ADD_NORM,
        "The second Add & Norm",
    ),
    (
        "numpy-layer-ffn-fed-layer-input",
        (LAYER,),
        None,
        "a layer whose feed-forward network reads the LAYER'S INPUT, linear(hidden_states, intermediate.dense), "
        "instead of the attention block's output",
        ADD_NORM,
        "One layer by four calls",
    ),
    (
        "numpy-layer-ffn-applied-twice",
        (LAYER,),
        None,
        "a layer that applies the feed-forward sub-layer (W_1, GELU, W_2, Add & Norm) TWICE, the second time "
        "on its own output; a layer has one of each sub-layer",
        ADD_NORM,
        "One layer by four calls",
    ),
    (
        "numpy-layer-layernorm-before-add",
        (LAYER,),
        None,
        "a layer that normalises BEFORE the residual add, layer_norm(W(...)) + residual, instead of "
        "normalising the sum (Post-LN), in one Add & Norm or both",
        ADD_NORM,
        "Post-LN",
    ),
]:
    register(Mistake(_id, _tasks, _description, _lesson, _section, _flawed(_primitive, _id)))
