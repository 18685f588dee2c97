"""Known mistakes in BertLayer, BertEncoder, BertPooler and BertModel (Tasks 6.1 to 6.4).

The reference forward passes are written out below with optional flaws and run on the
pretrained weights. Each bigger module is built from the smaller ones, so a mistake made in a
small module (a layer that skips its feed-forward block) is recognised again in the modules
built from it (the encoder, the whole model), where the learner's own layer is reused.

Every simulation calls the reference layer's own submodules (``attention``, ``intermediate``,
``output``), so it computes exactly what the mistaken wiring of those submodules outputs.

Some mistakes take several forms (the pooler may read the last token or the mean of all
tokens): those list their forms in ``VARIANTS`` and are matched by ``diagnose_variants``.
"""

from __future__ import annotations

import torch

from bertlab.diagnose import MATCH_ATOL, REGISTRY, Mistake, register
from bertlab.masks import additive_mask

LESSON = "07-putting-it-together"


def flatten(hidden_states=None, last_hidden_state=None, pooler_output=None) -> dict:
    """One dict of named tensors, ``hidden_states[i]`` first (the earliest difference is reported).

    Args:
        hidden_states: a sequence of (B, T, H) tensors, the encoder's input first.
        last_hidden_state: (B, T, H).
        pooler_output: (B, H).
    """
    out = {f"hidden_states[{i}]": h for i, h in enumerate(hidden_states or ())}
    if last_hidden_state is not None:
        out["last_hidden_state"] = last_hidden_state
    if pooler_output is not None:
        out["pooler_output"] = pooler_output
    return out


def layer(module, hidden_states, attention_mask=None, flaw=None):
    """HF's BertLayer.forward (eval mode) on ``module``'s weights, with an optional flaw.

    Args:
        module: a BertLayer holding the weights (its ``attention``, ``intermediate``, ``output``).
        hidden_states: the layer's input, (B, T, H).
        attention_mask: additive, broadcastable to (B, heads, T, T), or None.

    Returns:
        (B, T, H).
    """
    if flaw == "encoder-mask-not-applied":
        attention_mask = None
    attention_output = module.attention(hidden_states, attention_mask)[0]  # (B, T, H)
    if flaw == "layer-skips-ffn":
        return attention_output
    # The feed-forward sub-layer reads the attention output; these flaws feed it something else.
    ffn_input = hidden_states if flaw == "ffn-fed-layer-input" else attention_output  # (B, T, H)
    residual = hidden_states if flaw == "second-residual-from-input" else attention_output  # (B, T, H)
    layer_output = module.output(module.intermediate(ffn_input), residual)  # (B, T, H)
    if flaw == "ffn-applied-twice":  # the whole feed-forward sub-layer again, on its own output
        layer_output = module.output(module.intermediate(layer_output), layer_output)
    return layer_output


def encoder(module, hidden_states, attention_mask=None, flaw=None):
    """HF's BertEncoder: ``(last_hidden_state, hidden_states)``, the input first in the tuple."""
    states = [hidden_states]
    for block in module.layer:
        hidden_states = layer(block, hidden_states, attention_mask, flaw)
        states.append(hidden_states)
    return hidden_states, tuple(states)


def pooler(module, hidden_states, flaw=None, variant=None):
    """HF's BertPooler: tanh(dense(hidden_states[:, 0])), (B, T, H) -> (B, H)."""
    if flaw == "pooler-wrong-token":
        token = hidden_states[:, -1] if variant == "last" else hidden_states.mean(dim=1)
    else:
        token = hidden_states[:, 0]  # [CLS]
    pooled = module.dense(token)
    return pooled if flaw == "pooler-no-tanh" else torch.tanh(pooled)


def extended_mask(attention_mask, flaw=None, variant=None):
    """The mask BertModel hands to its encoder, built from the (B, T) 0/1 ``attention_mask``.

    Args:
        attention_mask: (B, T), 1 for tokens and 0 for padding, or None.

    Returns:
        (B, 1, 1, T) additive mask (with ``flaw``, what the mistaken code builds instead), or None.

    Raises:
        WouldRaise: the mistaken mask does not broadcast against the (B, heads, T, T) scores,
            so the mistaken code raises instead of returning numbers.
    """
    if attention_mask is None or flaw == "encoder-mask-not-applied":
        return None
    if flaw == "bool-mask-added":
        return attention_mask[:, None, None, :].float()  # 1 for tokens, 0 for padding: wrong
    right = additive_mask(attention_mask, per_query=False)  # (B, 1, 1, T): 0 for tokens, finfo.min for padding
    if flaw == "extended-mask-wrong-sign":
        keep = attention_mask[:, None, None, :].float()  # (B, 1, 1, T)
        if variant == "negated":  # (m - 1) * finfo.min: padding gets the most POSITIVE float
            return -right
        return keep * torch.finfo(torch.float32).min  # tokens removed, padding kept
    if flaw == "extended-mask-not-broadcast":
        B, T = attention_mask.shape
        # (B, T) + scores (B, heads, T, T) aligns the mask's batch axis with the QUERY axis: it runs
        # only when B == T (or B == 1, where it is right), and then query q gets sentence q's mask.
        if B != T and B != 1:
            raise WouldRaise
        return right[:, 0, 0, :][None, None]  # (1, 1, B, T), what broadcasting makes of (B, T)
    return right


class WouldRaise(Exception):
    """The mistaken code raises on these inputs, so it cannot explain a learner's numbers."""


def model(
    module,
    input_ids=None,
    attention_mask=None,
    token_type_ids=None,
    position_ids=None,
    inputs_embeds=None,
    flaw=None,
    variant=None,
    **kwargs,
):
    """HF's BertModel with every hidden state, flattened by ``flatten``."""
    embedding_output = module.embeddings(
        input_ids=input_ids, token_type_ids=token_type_ids, position_ids=position_ids, inputs_embeds=inputs_embeds
    )
    try:
        mask = extended_mask(attention_mask, flaw, variant)
    except WouldRaise:
        return {}
    last, states = encoder(module.encoder, embedding_output, mask, flaw)
    return flatten(states, last, pooler(module.pooler, last, flaw, variant))


def outputs(module, inputs, flaw=None, variant=None) -> dict:
    """What ``module`` (HF's layer, encoder, pooler or model) returns with ``flaw``, by output name."""
    if hasattr(module, "embeddings"):
        return model(module, **inputs, flaw=flaw, variant=variant)
    if hasattr(module, "layer"):
        last, states = encoder(module, inputs["hidden_states"], inputs.get("attention_mask"), flaw)
        return flatten(states, last)
    if hasattr(module, "attention"):
        return {"layer_output": layer(module, inputs["hidden_states"], inputs.get("attention_mask"), flaw)}
    return {"pooled_output": pooler(module, inputs["hidden_states"], flaw, variant)}


def _flawed(flaw):
    def run(module, inputs):
        return outputs(module, inputs, flaw)

    return run


# Mistakes with several forms: they are matched here, form by form, not by ``diagnose.diagnose``.
VARIANTS = {
    "pooler-wrong-token": ("last", "mean"),
    "extended-mask-wrong-sign": ("keep-removed", "negated"),
}


def _close(a, b) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, atol=MATCH_ATOL, rtol=MATCH_ATOL, equal_nan=True))


def diagnose_variants(task_id: str, module, inputs, got: dict, expected: dict) -> Mistake | None:
    """The first mistake in ``VARIANTS`` for ``task_id`` one of whose forms produces ``got``."""
    for mistake_id, forms in VARIANTS.items():
        if task_id not in REGISTRY[mistake_id].tasks:
            continue
        for form in forms:
            with torch.no_grad():
                wrong = outputs(module, inputs, mistake_id, form)
            names = [n for n in wrong if n in got]
            if not names or all(_close(wrong[n], expected[n]) for n in names):
                continue  # this form changes nothing on these inputs: proves nothing
            if all(_close(got[n].detach().float(), wrong[n]) for n in names):
                return REGISTRY[mistake_id]
    return None


for _id, _tasks, _description, _section in [
    (
        "layer-skips-ffn",
        ("6.1", "6.2", "6.4"),
        "the attention output alone: the layer skips its feed-forward block (intermediate, then output)",
        "The layer",
    ),
    (
        "encoder-mask-not-applied",
        ("6.1", "6.2", "6.4"),
        "attention run WITHOUT the attention mask, so every token also attends to the padding",
        "The attention mask",
    ),
    (
        "bool-mask-added",
        ("6.4",),
        "the 0/1 attention_mask ADDED to the scores as it is (+1 for tokens, +0 for padding) instead of the "
        "additive mask (0 for tokens, finfo.min for padding): no error, wrong numbers",
        "The attention mask",
    ),
    (
        "extended-mask-not-broadcast",
        ("6.4",),
        "the additive mask left at shape (B, T) instead of (B, 1, 1, T): added to the (B, heads, T, T) "
        "scores, its batch axis lines up with the QUERY axis, so query q is masked with sentence q's "
        "padding (when B != T it raises a size mismatch instead)",
        "The attention mask",
    ),
    (
        "pooler-no-tanh",
        ("6.3", "6.4"),
        "the pooler WITHOUT the tanh: dense(hidden_states[:, 0]) alone",
        "The pooler",
    ),
]:
    register(Mistake(_id, _tasks, _description, LESSON, _section, _flawed(_id)))

register(
    Mistake(
        "pooler-wrong-token",
        ("6.3", "6.4"),
        "the pooler applied to the wrong token (the last one, or the mean of all tokens) instead of [CLS] at index 0",
        LESSON,
        "The pooler",
    )
)
register(
    Mistake(
        "extended-mask-wrong-sign",
        ("6.4",),
        "an additive mask of the WRONG SIGN: finfo.min on the real tokens and 0 on padding (m * finfo.min), "
        "or the most positive float on padding ((m - 1) * finfo.min), so attention goes to the padding",
        LESSON,
        "The attention mask",
    )
)
register(
    Mistake(
        "hidden-states-missing-embeddings",
        ("6.2", "6.4"),
        "hidden_states without the embeddings output: one entry per layer, but hidden_states[0] must be "
        "the encoder's input",
        LESSON,
        "The encoder",
    )
)


# The wiring of a layer's two blocks (lesson 4): which tensor goes where.
for _id, _description, _section in [
    (
        "second-residual-from-input",
        "the second residual taken from the LAYER'S INPUT, output(intermediate(h), hidden_states), instead of "
        "from the attention block's output",
        "The second Add & Norm",
    ),
    (
        "ffn-fed-layer-input",
        "the feed-forward network fed the LAYER'S INPUT, intermediate(hidden_states), instead of the attention "
        "block's output",
        "One layer by four calls",
    ),
    (
        "ffn-applied-twice",
        "the feed-forward block applied TWICE: y = output(intermediate(h), h), then output(intermediate(y), y); "
        "a layer has one attention block and one feed-forward block",
        "One layer by four calls",
    ),
]:
    # Task 6.1 only: Tasks 6.2 and 6.4 run the learner's module with HF's layers in place of theirs.
    register(Mistake(_id, ("6.1",), _description, "04-add-and-norm", _section, _flawed(_id)))


def square_inputs(inputs: dict) -> dict:
    """``inputs`` cut to as many tokens as sentences, n = min(B, T): every (B, T) tensor to (n, n).

    A mask left at (B, T) raises on most batches (its B lines up with the scores' query axis) and
    runs, with wrong numbers, only when B == T: on this batch ``extended-mask-not-broadcast`` can
    be told apart from other errors.
    """
    B, T = inputs["input_ids"].shape
    n = min(B, T)
    return {k: v[:n, :n] if isinstance(v, torch.Tensor) and v.dim() == 2 else v for k, v in inputs.items()}
