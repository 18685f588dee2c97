"""Task 4: the end of the attention block, the first Add & Norm.

- Task 4.1 ``BertSelfOutput``: ``dense`` (W_O), dropout, the residual add of ``input_tensor``, LayerNorm.
- Task 4.2 ``BertAttention``: ``BertSelfAttention`` (``self``) composed with ``BertSelfOutput``
  (``output``), returning ``(attention_output, attn_weights)``; checked with HF's own two parts.

``AddNormTask`` holds what BertOutput (Task 5.2), the second Add & Norm, checks too.
"""

from __future__ import annotations

import copy

import torch

from bertlab import diagnose
from bertlab.checks import call_forms
from bertlab.checks.built_on_parts import BuiltOnParts
from bertlab.checks.compare import allclose
from bertlab.checks.framework import MASKED_STAGES, CheckFailed, Context
from bertlab.checks.module_task import ModuleTask
from bertlab.checks.self_attention import CONTEXT_DIMS, PROBS_DIMS, random_attention_batch
from bertlab.diagnose import attention_output as flawed

HIDDEN_DIMS = ("batch", "token", "dim")


def random_batch(ctx: Context, **widths: int) -> tuple[dict, str]:
    """Random (B, T, width) tensors, one per keyword, sharing one random batch size and length."""
    g = ctx.generator
    B, T = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 21, (1,), generator=g))
    inputs = {name: torch.randn(B, T, width, generator=g) for name, width in widths.items()}
    return inputs, f"a random batch (batch {B}, length {T})"


class AddNormTask(ModuleTask):
    """A module ending in ``LayerNorm(dropout(dense(x)) + input_tensor)``: Tasks 4.1, 4.2, 5.2.

    Beyond ModuleTask's checks: the LayerNorm's eps is compared with the config (the message
    measures what that eps alone changes, and what the learner's module changes); values that
    differ because dropout stays on in eval mode
    say so. Where dropout acts (ModuleTask's dropout check) names the Add & Norm placements:
    on the residual sum, after the LayerNorm, on the sub-layer's input, missing.
    """

    # Position-wise modules have no mask: their random-input check is called "batches".
    stages: tuple[str, ...] = ("names", "shapes", "values", "batches", "calls", "config", "dropout", "gradients")
    dropouts = {"dropout": "hidden_dropout_prob"}
    grad_inputs: tuple[str, ...] = ("hidden_states", "input_tensor")

    def check_batches(self, cls, ctx: Context) -> None:
        """Random batch sizes and lengths against HF's module with the same weights."""
        self.check_masks(cls, ctx)

    def check_names(self, cls, ctx: Context) -> None:
        super().check_names(cls, ctx)
        want = ctx.model.config.layer_norm_eps
        for name, sub in self.build(cls, ctx).named_modules():
            eps = getattr(sub, "eps", None)
            if name.split(".")[-1] == "LayerNorm" and eps is not None and eps != want:
                default = eps == flawed.TORCH_LAYER_NORM_EPS
                effect, beyond = self.eps_effect(cls, ctx, name, eps)
                eps_line = f"`self.{name}.eps` is {eps:g}, expected config.layer_norm_eps = {want:g}"
                advice = "The pretrained weights were trained with config.layer_norm_eps: pass it to nn.LayerNorm."
                if beyond is not None:
                    # Past the eps, a known mistake is the thing to fix first: it is named first,
                    # in the headline (a Pre-LN port with its own eps 1e-6 is Pre-LN before all).
                    try:
                        self.fail(
                            beyond.hint(self.id),
                            f"Also {eps_line}. {effect.removesuffix(':')}.",
                            advice,
                            blocking=False,
                        )
                    except CheckFailed as err:
                        err.mistake = beyond.id
                        raise
                mistake = diagnose.REGISTRY["layernorm-eps-default"] if default else None
                self.fail(
                    eps_line,
                    effect,
                    advice,
                    mistake=mistake,
                    blocking=False,  # the weights loaded: the later checks judge the rest (Task.run)
                )

    def eps_effect(self, cls, ctx: Context, name: str, eps: float) -> tuple[str, diagnose.Mistake | None]:
        """What ``eps`` alone changes in HF's module on the pretrained layer 0, and what the
        learner's module changes: measured, since a LayerNorm written by hand may differ in more.
        When it differs in more, the learner's module with the config's eps is measured again and
        compared with the known mistakes: the one it matches is returned, else only numbers are said."""
        layer = self.layers(ctx)[0]
        inputs, expected = self.captured(ctx, layer)
        output = next(iter(self.outputs))  # (B, T, H): the Add & Norm's own output
        hf = copy.deepcopy(self.reference(ctx, layer))
        hf.get_submodule(name).eps = eps
        with torch.no_grad():
            alone = float((self.call(hf, inputs)[output] - expected[output]).abs().max())
            yours = float(
                (self.call(self.learner_for(cls, ctx, layer), inputs)[output].float() - expected[output]).abs().max()
            )
        measured = (
            f"On {self.where(layer)}'s input, that eps alone moves HF's outputs by up to {alone:.1e}; "
            f"yours differ by up to {yours:.1e}"
        )
        if yours <= 2 * alone + self.atol:
            return measured + ".", None
        module = self.learner_for(cls, ctx, layer)
        module.get_submodule(name).eps = ctx.model.config.layer_norm_eps  # the rest of it, measured
        with torch.no_grad():
            got = {k: v.float() for k, v in self.call(module, inputs).items()}
        left = float((got[output] - expected[output]).abs().max())
        mistake = diagnose.diagnose(self.id, self.reference(ctx, layer), inputs, got, expected)
        return (
            measured + f"; with eps = config.layer_norm_eps yours still differ by up to {left:.1e}, so more than "
            "the eps differs" + (":" if mistake else " (no known mistake matches that).")
        ), mistake

    def compare(self, expected, got, dims, against, diagnose_with=None):
        try:
            super().compare(expected, got, dims, against, diagnose_with)
        except CheckFailed as err:
            if err.mistake is not None or diagnose_with is None:
                raise
            mistake = flawed.diagnose_near_miss(self.id, *diagnose_with, got, expected, self.atol)
            if mistake is None:
                raise
            raise err.adding(mistake.hint(), mistake=mistake.id) from None

    def check_calls(self, cls, ctx: Context) -> None:
        self.values_mistake_first(super().check_calls, cls, ctx)

    def check_config(self, cls, ctx: Context) -> None:
        self.values_mistake_first(super().check_config, cls, ctx)

    def check_dropout(self, cls, ctx: Context) -> None:
        self.values_mistake_first(super().check_dropout, cls, ctx)

    def check_gradients(self, cls, ctx: Context) -> None:
        self.values_mistake_first(super().check_gradients, cls, ctx)

    def values_mistake_first(self, stage, cls, ctx: Context) -> None:
        """Run ``stage``; when it fails without a known mistake and the module's eval-mode values
        match one (a Pre-LN order), name that mistake first: it is the one to fix, and the stage's
        own symptom (an eps, a dropout, a gradient) follows from it or comes after it."""
        try:
            stage(cls, ctx)
        except CheckFailed as err:
            if err.mistake is not None:
                raise
            mistake = self.values_mistake(cls, ctx)
            if mistake is None:
                raise
            head, _, rest = str(err).partition("\n")
            symptom = head.split(": ", 1)[-1]  # the stage's own headline, after "[Task 4.1] BertSelfOutput"
            text = "\n  ".join(
                [
                    f"[Task {self.id}] {self.title}: {mistake.hint(self.id)}",
                    "It shows in eval mode, on the pretrained layer's input; this check's own finding follows "
                    f"from it: {symptom}",
                ]
            )
            named = CheckFailed(text + (f"\n{rest}" if rest else ""), mistake.id, err.values, err.cause, err.blocking)
            named.stage = err.stage
            raise named from None

    def values_mistake(self, cls, ctx: Context) -> diagnose.Mistake | None:
        """The known mistake the module's eval-mode outputs on the pretrained layer 0 match, if any."""
        layer = self.layers(ctx)[0]
        inputs, expected = self.captured(ctx, layer)
        try:
            with torch.no_grad():
                got = {k: v.float() for k, v in self.call(self.learner_for(cls, ctx, layer), inputs).items()}
        except CheckFailed:
            return None
        if all(got[k].shape == v.shape and allclose(v, got[k], self.atol, self.rtol) for k, v in expected.items()):
            return None
        return diagnose.diagnose(self.id, self.reference(ctx, layer), inputs, got, expected)

    def check_values(self, cls, ctx: Context) -> None:
        try:
            super().check_values(cls, ctx)
        except CheckFailed as err:
            if err.mistake is not None or not self.random_in_eval(cls, ctx):
                raise
            mistake = diagnose.REGISTRY["dropout-in-eval"]
            raise err.adding(mistake.hint(), mistake=mistake.id) from None

    def random_in_eval(self, cls, ctx: Context) -> bool:
        """Whether two calls in eval mode on the same input differ through dropout (left on).

        Randomness of another kind (a layer built inside forward, with new random weights) is not
        named as dropout: its values failure stands as it is."""
        layer = self.layers(ctx)[0]
        inputs, _ = self.captured(ctx, layer)
        module = self.learner_for(cls, ctx, layer)
        with torch.no_grad():
            first, second = self.call(module, inputs), self.call(module, inputs)
        differ = any(not torch.equal(first[k], second[k]) for k in first)
        return differ and self.eval_dropout_is_the_cause(module, inputs)


class BertSelfOutputTask(AddNormTask):
    id = "4.1"
    title = "BertSelfOutput"
    lesson = "04-add-and-norm"
    hf_path = "encoder.layer.{layer}.attention.output"
    outputs = {"hidden_states": HIDDEN_DIMS}

    def captured(self, ctx, layer):
        call = ctx.corpus.layer(layer, "attention.output")
        hidden_states, input_tensor = call.args  # self-attention's context (B, T, H), the layer's input (B, T, H)
        return {"hidden_states": hidden_states, "input_tensor": input_tensor}, {"hidden_states": call.output}

    def random_inputs(self, ctx):
        H = ctx.model.config.hidden_size
        return random_batch(ctx, hidden_states=H, input_tensor=H)


class BertAttentionTask(BuiltOnParts, AddNormTask):
    """Checked with HF's BertSelfAttention in ``self`` and HF's BertSelfOutput in ``output``: a
    mistake in the learner's Task 3.2 or 4.1 class fails that task only."""

    id = "4.2"
    title = "BertAttention"
    lesson = "04-add-and-norm"
    hf_path = "encoder.layer.{layer}.attention"
    outputs = {"attention_output": CONTEXT_DIMS, "attn_weights": PROBS_DIMS}
    stages = MASKED_STAGES
    parts = {"self": "3.2", "output": "4.1"}
    # Its dropouts belong to its parts (HF's here); the dropout check sees that it runs them in train mode.
    dropouts = {}
    grad_inputs = ("hidden_states",)

    def captured(self, ctx, layer):
        call = ctx.corpus.layer(layer, "attention")
        hidden_states, attention_mask = call.args  # (B, T, H), additive (B, 1, T, T)
        return {"hidden_states": hidden_states, "attention_mask": attention_mask}, dict(
            zip(self.outputs, call.output, strict=False)
        )

    def random_inputs(self, ctx):
        return random_attention_batch(ctx)

    def call_forms(self, ctx):
        return call_forms.mask_forms(ctx)


TASKS = [BertSelfOutputTask(), BertAttentionTask()]
