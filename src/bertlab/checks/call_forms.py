"""The ``arguments`` check: every way HF's callers may call a task's module, values and gradients.

A random draw of inputs calls whole forms never (``inputs_embeds`` without token types, a
``scaling`` other than the head size's), so each task lists its forms here, as a table: every
optional argument left out, given as None where HF accepts None, and given a value that changes
HF's answer. Each form runs under ``other_config``, whose every size and id differs from the
pretrained model's (``pad_token_id`` too), with random weights: its outputs are compared with
HF's, then the gradients of every parameter and every floating-point input (an
``inputs_embeds`` detached on the way in fails). The pretrained model is what the other checks
call: a form handled right under one config and wrong under the other would have to read a size
or an id from somewhere other than ``config``, which the config check looks for.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

from bertlab.masks import additive_mask, random_padding

# Small batches: the table is long, and a form's mistake shows at any size.
BATCH, LENGTH = 3, 7
OTHER_SCALING = 0.3  # far from every head size's 1/sqrt(d) here: (12, 16, 20, 32, 64) -> 0.29 .. 0.13


@dataclass(frozen=True)
class CallForm:
    """One way of calling a task's module: its keyword arguments, named for the feedback."""

    name: str  # what is given and what is left out, e.g. "inputs_embeds, no token_type_ids"
    inputs: dict
    why: str = ""  # what HF does with this form, said when the learner's answer differs
    grad_inputs: tuple[str, ...] = field(default=())  # the floating-point inputs whose gradient is compared


def _ids(config, generator: torch.Generator) -> torch.Tensor:
    """Random ids (BATCH, LENGTH) holding the config's ``pad_token_id`` and 0 too: a ``padding_idx``
    wired to another id shows in the gradient of those rows."""
    ids = torch.randint(config.vocab_size, (BATCH, LENGTH), generator=generator)
    ids[0, -1], ids[1, 1] = config.pad_token_id, 0
    return ids


def _padding(generator: torch.Generator) -> torch.Tensor:
    """A (BATCH, LENGTH) 0/1 mask with at least one padded position."""
    while True:
        mask = random_padding(BATCH, LENGTH, generator)
        if bool((mask == 0).any()):
            return mask


def embeddings_forms(ctx, token_types: bool) -> list[CallForm]:
    """BertEmbeddings: ids or word vectors, with and without positions, and after a past length.

    ``token_types``: the forms that pass token types (the ``arguments`` check) or leave them out
    (the ``buffers`` check, which grades the default token types alone).
    """
    g, config = ctx.generator, ctx.model.config
    embeds = torch.randn(BATCH, LENGTH, config.hidden_size, generator=g)
    types = {"token_type_ids": torch.randint(config.type_vocab_size, (BATCH, LENGTH), generator=g)}
    if not token_types:
        types = {}
    left_out = "" if token_types else ", no token_type_ids"
    positions = torch.randint(config.max_position_embeddings, (BATCH, LENGTH), generator=g)
    past = config.max_position_embeddings - LENGTH - 1
    from_embeds = (
        "With `inputs_embeds` and no `input_ids`, the word vectors are `inputs_embeds`: take B and T "
        "from inputs_embeds.shape[:-1], and keep it in the graph (its gradient is compared too)."
    )
    forms = [
        CallForm(f"input_ids{left_out}", {"input_ids": _ids(config, g), **types}),
        CallForm(
            f"input_ids, position_ids{left_out}", {"input_ids": _ids(config, g), "position_ids": positions, **types}
        ),
        CallForm(f"inputs_embeds{left_out}", {"inputs_embeds": embeds, **types}, from_embeds, ("inputs_embeds",)),
        CallForm(
            f"inputs_embeds, position_ids{left_out}",
            {"inputs_embeds": embeds, "position_ids": positions, **types},
            from_embeds,
            ("inputs_embeds",),
        ),
        CallForm(
            f"input_ids, past_key_values_length={past}{left_out}",
            {"input_ids": _ids(config, g), "past_key_values_length": past, **types},
            "The default positions start at past_key_values_length: past_key_values_length, ..., "
            "past_key_values_length + T - 1.",
        ),
    ]
    if token_types:
        nones = {"input_ids": _ids(config, g), "position_ids": None, "inputs_embeds": None, **types}
        forms.append(CallForm("input_ids, position_ids=None, inputs_embeds=None", nones))
    return forms


def mask_forms(ctx, hidden: str = "hidden_states") -> list[CallForm]:
    """A module taking (B, T, H) hidden states and an optional additive mask: every mask form HF passes."""
    g = ctx.generator
    states = lambda: torch.randn(BATCH, LENGTH, ctx.model.config.hidden_size, generator=g)  # noqa: E731
    why = "HF adds the mask to the scores as it comes: (B, 1, 1, T) or (B, 1, T, T), or nothing when it is None."
    return [
        CallForm("no attention_mask", {hidden: states()}, why, (hidden,)),
        CallForm("attention_mask=None", {hidden: states(), "attention_mask": None}, why, (hidden,)),
        CallForm(
            "attention_mask (B, 1, 1, T)",
            {hidden: states(), "attention_mask": additive_mask(_padding(g))},
            why,
            (hidden,),
        ),
        CallForm(
            "attention_mask (B, 1, T, T)",
            {hidden: states(), "attention_mask": additive_mask(_padding(g), per_query=True)},
            why,
            (hidden,),
        ),
    ]


def eager_forms(ctx, heads) -> list[CallForm]:
    """eager_attention_forward: every mask form, and ``scaling`` left out, None, the head size's and
    another; ``dropout`` always left out (its default, 0.0). ``heads(inputs)`` projects the hidden
    states into query/key/value (B, A, T, d), with the head size's ``scaling``."""
    grads = ("query", "key", "value")
    without = lambda inputs, *names: {k: v for k, v in inputs.items() if k not in ("dropout", *names)}  # noqa: E731
    forms = [
        CallForm(f"{form.name}, scaling=1/sqrt(head size)", without(heads(form.inputs)), form.why, grads)
        for form in mask_forms(ctx)[1:]  # `attention_mask` has no default: None, or a mask
    ]
    base = without(forms[1].inputs, "scaling")
    default = "HF's function uses query.size(-1) ** -0.5 when `scaling` is None or left out."
    return [
        *forms,
        CallForm("scaling left out", base, default, grads),
        CallForm("scaling=None", {**base, "scaling": None}, default, grads),
        CallForm(
            f"scaling={OTHER_SCALING}",
            {**base, "scaling": OTHER_SCALING},
            "The scores are multiplied by the `scaling` the caller passes, whatever the head size.",
            grads,
        ),
    ]


def model_forms(ctx) -> list[CallForm]:
    """BertModel: ids or word vectors, each with and without a mask, token types and positions."""
    g, config = ctx.generator, ctx.model.config
    forms = []
    for embeds, mask, types, positions in itertools.product((False, True), repeat=4):
        inputs: dict = (
            {"inputs_embeds": torch.randn(BATCH, LENGTH, config.hidden_size, generator=g)}
            if embeds
            else {"input_ids": _ids(config, g)}
        )
        if mask:
            inputs["attention_mask"] = _padding(g)
        if types:
            inputs["token_type_ids"] = torch.randint(config.type_vocab_size, (BATCH, LENGTH), generator=g)
        if positions:
            inputs["position_ids"] = torch.randint(config.max_position_embeddings, (BATCH, LENGTH), generator=g)
        given = [
            k for k in ("inputs_embeds", "input_ids", "attention_mask", "token_type_ids", "position_ids") if k in inputs
        ]
        left = [k for k in ("attention_mask", "token_type_ids", "position_ids") if k not in inputs]
        name = ", ".join(given) + (f"; no {', no '.join(left)}" if left else "")
        why = (
            "HF's BertModel passes input_ids, token_type_ids, position_ids and inputs_embeds on to its "
            "embeddings as it gets them (None where left out), and builds an all-ones mask when none is given"
            + (": take B and T from inputs_embeds.shape[:-1] when there are no input_ids." if embeds else ".")
        )
        forms.append(CallForm(name, inputs, why, ("inputs_embeds",) if embeds else ()))
    nones = {"input_ids": _ids(config, g), "attention_mask": None, "token_type_ids": None, "position_ids": None}
    forms.append(CallForm("input_ids, every other argument None", {**nones, "inputs_embeds": None}))
    return forms
