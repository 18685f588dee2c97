"""Task 2: the embeddings.

- Task 2.1 ``BertEmbeddings``: word + position + token-type embeddings, then LayerNorm and dropout.
"""

from __future__ import annotations

import torch

from bertlab import diagnose
from bertlab.checks import call_forms
from bertlab.checks.framework import CheckFailed, Context
from bertlab.checks.harness import state_shapes
from bertlab.checks.module_task import ModuleTask
from bertlab.diagnose import embeddings as flawed  # registers the mistakes

EMBEDDING_DIMS = ("batch", "token", "dim")
# Buffers HF registers with persistent=False: in the module, never in its state_dict.
NON_PERSISTENT = ("position_ids", "token_type_ids")

# The random batches of the `batches` check, one per form: (token types given?, positions given?).
# Every form is used, so default and explicit positions are both exercised (token types: all-zero or random).
FORMS = ((False, False), (True, False), (True, True), (False, True))


def random_ids_batch(ctx: Context, token_types: bool, positions: bool) -> tuple[dict, str]:
    """Random token ids (B, T), random or all-zero token types, and random or default positions.

    Token types are always passed: the default ones come from the ``token_type_ids`` buffer, which
    the ``buffers`` check grades on its own, so a missing buffer hides no other mistake.
    """
    g, config = ctx.generator, ctx.model.config
    B, T = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 21, (1,), generator=g))
    inputs = {
        "input_ids": torch.randint(config.vocab_size, (B, T), generator=g),
        "token_type_ids": (
            torch.randint(config.type_vocab_size, (B, T), generator=g)
            if token_types
            else torch.zeros(B, T, dtype=torch.long)
        ),
        "position_ids": torch.randint(config.max_position_embeddings, (B, T), generator=g) if positions else None,
    }
    return inputs, (
        f"random ids (batch {B}, length {T}, {'random' if token_types else 'all-zero'} token_type_ids, "
        f"{'random position_ids' if positions else 'default positions'})"
    )


def random_embeds_batch(ctx: Context) -> tuple[dict, str]:
    """Random word vectors ``inputs_embeds`` (B, T, H) and no ``input_ids``, as a caller may pass."""
    g, config = ctx.generator, ctx.model.config
    B, T = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 21, (1,), generator=g))
    inputs_embeds = torch.randn(B, T, config.hidden_size, generator=g)
    token_type_ids = torch.zeros(B, T, dtype=torch.long)  # given: the buffer is the buffers check's
    return {
        "inputs_embeds": inputs_embeds,
        "token_type_ids": token_type_ids,
    }, f"random word vectors as inputs_embeds (batch {B}, length {T}), no input_ids"


def random_past_batch(ctx: Context) -> tuple[dict, str]:
    """Random ids (B, T) with ``past_key_values_length`` > 0: default positions start there."""
    g, config = ctx.generator, ctx.model.config
    B, T = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 21, (1,), generator=g))
    past = int(torch.randint(1, config.max_position_embeddings - T + 1, (1,), generator=g))
    inputs = {
        "input_ids": torch.randint(config.vocab_size, (B, T), generator=g),
        "token_type_ids": torch.zeros(B, T, dtype=torch.long),
        "past_key_values_length": past,
    }
    return inputs, f"random ids (batch {B}, length {T}) and past_key_values_length={past}"


class BertEmbeddingsTask(ModuleTask):
    id = "2.1"
    title = "BertEmbeddings"
    lesson = "02-embeddings"
    hf_path = "embeddings"
    outputs = {"embeddings": EMBEDDING_DIMS}
    dropouts = {"dropout": "hidden_dropout_prob"}
    grad_inputs = ()  # the inputs are integer ids: gradients flow to the tables only
    # No attention mask here: the random-batch check is named for what it varies. The default
    # token types (the `token_type_ids` buffer) come last, graded by a cell of their own: every
    # other check passes token types, so a missing buffer costs its point only.
    stages = ("names", "shapes", "values", "batches", "calls", "config", "arguments", "dropout", "gradients", "buffers")

    def captured(self, ctx, layer):
        call = ctx.corpus.calls["embeddings"]
        # HF's BertModel passes position_ids=None, so the default positions are checked here too;
        # it passes the tokenizer's token_type_ids (the buffer's default is the buffers check's).
        inputs = {k: call.kwargs.get(k) for k in ("input_ids", "token_type_ids", "position_ids")}
        if inputs["token_type_ids"] is None:
            inputs["token_type_ids"] = torch.zeros_like(inputs["input_ids"])
        return inputs, {"embeddings": call.output}

    def random_inputs(self, ctx):
        form = FORMS[int(torch.randint(len(FORMS), (1,), generator=ctx.generator))]
        return random_ids_batch(ctx, *form)

    def check_names(self, cls, ctx):
        module = self.build(cls, ctx)
        names = state_shapes(module)
        saved = [name for name in NON_PERSISTENT if name in names]
        if saved:
            self.fail(
                f"the buffer {' and '.join(saved)} is saved in the state_dict, so the pretrained weights cannot load",
                "HF keeps these buffers out of the state_dict: register them with "
                f'`self.register_buffer("{saved[0]}", ..., persistent=False)`.',
            )
        super().check_names(cls, ctx)
        # The module loaded the pretrained weights: what follows names one attribute, and blocks
        # no later check (each fails on its own where the attribute shows: framework's Task.run).
        eps, want = getattr(module.LayerNorm, "eps", None), ctx.model.config.layer_norm_eps
        if eps is not None and eps != want:
            default = eps == flawed.TORCH_LAYER_NORM_EPS
            self.fail(
                f"`self.LayerNorm` has eps={eps:g}, expected config.layer_norm_eps = {want:g}",
                "nn.LayerNorm's default eps is 1e-05; pass eps=config.layer_norm_eps like HF.",
                mistake=diagnose.REGISTRY["embeddings-layernorm-eps-default"] if default else None,
                blocking=False,
            )
        padding_idx, pad = getattr(module.word_embeddings, "padding_idx", None), ctx.model.config.pad_token_id
        if padding_idx != pad:
            self.fail(
                f"`self.word_embeddings` has padding_idx={padding_idx}, expected config.pad_token_id = {pad}",
                "padding_idx keeps the [PAD] row out of training (its gradient stays 0): "
                "nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id), like HF.",
                blocking=False,
            )
        self.check_buffer(module, ctx, "position_ids", "0, 1, ..., max_position_embeddings - 1", blocking=False)

    def check_buffers(self, cls, ctx: Context) -> None:
        """The default token types: ``token_type_ids`` (1, P) = 0, like HF's, and a call without
        token types answers as HF's. Its own check: the others pass token types explicitly."""
        module = self.learner_for(cls, ctx, None)
        self.check_buffer(
            module,
            ctx,
            "token_type_ids",
            "all zeros",
            "HF's BertEmbeddings reads the token types there when it is called without them (and its "
            "BertModel does too); the other checks of Task 2.1 pass token types, and need it not.",
        )
        hf = self.reference(ctx, None)
        inputs, description = random_ids_batch(ctx, token_types=False, positions=False)
        inputs["token_type_ids"] = None
        with torch.no_grad():
            expected, got = self.call(hf, inputs), self.call(module, inputs)
        self.compare(
            expected, got, self.outputs, f"HF's {self.title} on {description.replace('all-zero', 'no')}", (hf, inputs)
        )
        # Values only: the gradients of these forms are the arguments check's, with token types.
        self.check_forms(cls, ctx, lambda where: call_forms.embeddings_forms(where, token_types=False), gradients=False)

    def call_forms(self, ctx):
        return call_forms.embeddings_forms(ctx, token_types=True)

    def compare_gradients(self, grads: dict, expected: dict, how: str, hint: str = "") -> None:
        """A ``padding_idx`` on another row than HF's shows as two rows of the word table's gradient:
        named so, where the generic message would look for a cut graph."""
        try:
            super().compare_gradients(grads, expected, how, hint)
        except CheckFailed:
            got, want = grads["params"].get("word_embeddings.weight"), expected["params"]["word_embeddings.weight"]
            if got is None or got.shape != want.shape:
                raise
            zero = lambda g: set((g.abs().sum(1) == 0).nonzero().flatten().tolist())  # noqa: E731
            theirs, mine = zero(want) - zero(got), zero(got) - zero(want)
            if not theirs and not mine:
                raise
            differ = set(((got - want).abs().amax(1) > 1e-5 * float(want.abs().max())).nonzero().flatten().tolist())
            if not differ <= theirs | mine:
                raise
            rows = lambda r: ", ".join(map(str, sorted(r))) or "none"  # noqa: E731
            self.fail(
                f"the gradient of `word_embeddings.weight` differs from HF's in the [PAD] rows only, {how}: HF keeps "
                f"row {rows(theirs)} out of training (gradient 0), yours row {rows(mine)}",
                "HF's row is config.pad_token_id: nn.Embedding(config.vocab_size, config.hidden_size, "
                "padding_idx=config.pad_token_id), never a number typed in.",
            )

    def check_buffer(self, module, ctx: Context, name: str, what: str, why: str = "", blocking: bool = True) -> None:
        """HF's buffer ``name`` (1, P), whose entries are ``what``, is in ``module`` alike (``why``: what uses it;
        ``blocking``: as ``Task.fail``'s)."""
        hf = self.reference(ctx, None)
        want, have = getattr(hf, name), getattr(module, name, None)
        if not isinstance(have, torch.Tensor):
            self.fail(
                f"`self.{name}` is missing: the default {name} are a buffer of shape {list(want.shape)} "
                f"(1, max_position_embeddings), {what}",
                f'Register it in __init__: `self.register_buffer("{name}", ..., persistent=False)`.',
                why,
                blocking=blocking,
            )
        if tuple(have.shape) != tuple(want.shape) or not torch.equal(have.long(), want):
            self.fail(
                f"`self.{name}` must be {what}, of shape {list(want.shape)} (1, max_position_embeddings); "
                f"got {str(have.dtype).removeprefix('torch.')} {list(have.shape)}"
                + (f" starting {have.flatten()[:4].tolist()}" if have.numel() else ""),
                blocking=blocking,
            )

    def check_batches(self, cls, ctx):
        """Every form of random batch once: all-zero and random token types, default and given positions, word
        vectors given as ``inputs_embeds``, and default positions after ``past_key_values_length``."""
        module = self.learner_for(cls, ctx, None)
        hf = self.reference(ctx, None)
        batches = [(*random_ids_batch(ctx, *form), None) for form in FORMS]
        batches.append(
            (
                *random_embeds_batch(ctx),
                "With `inputs_embeds` given and no `input_ids`, the word vectors are `inputs_embeds` (step 1 of "
                "forward): take B and T from it, not from input_ids.",
            )
        )
        batches.append(
            (
                *random_past_batch(ctx),
                "The default positions start at past_key_values_length: past_key_values_length, ..., "
                "past_key_values_length + T - 1 (step 2 of forward).",
            )
        )
        for inputs, description, hint in batches:
            with torch.no_grad():
                expected = self.call(hf, inputs)
                try:
                    got = self.call(module, inputs)
                    self.compare(expected, got, self.outputs, f"HF's {self.title} on {description}", (hf, inputs))
                except CheckFailed as err:
                    if hint is None or err.mistake is not None:
                        raise
                    raise err.adding(hint) from None


TASKS = [BertEmbeddingsTask()]
