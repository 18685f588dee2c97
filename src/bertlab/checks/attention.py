"""Task 3: multi-head self-attention.

- Task 3.1 ``eager_attention_forward``: scaled dot-product attention on heads already split.
- Task 3.2 ``BertSelfAttention``: ``query``/``key``/``value``, split heads, attend, merge heads.
"""

from __future__ import annotations

import torch
from torch import nn

from bertlab import diagnose
from bertlab.checks.framework import CheckFailed, Context, ModuleTask, config_sizes
from bertlab.checks.compare import allclose
from bertlab.diagnose import attention as flawed  # noqa: F401  (registers the mistakes)
from bertlab.diagnose import common as placement
from bertlab.masks import additive_mask, random_padding

CONTEXT_DIMS = ("batch", "token", "dim")
PROBS_DIMS = ("batch", "head", "query", "key")


def random_attention_batch(ctx: Context) -> tuple[dict, str]:
    """Random hidden states (B, T, H) and one of the mask forms HF may pass (or none)."""
    g = ctx.generator
    B, T = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(1, 21, (1,), generator=g))
    hidden_states = torch.randn(B, T, ctx.model.config.hidden_size, generator=g)
    form = int(torch.randint(3, (1,), generator=g))
    padding = random_padding(B, T, g)
    mask = None if form == 0 else additive_mask(padding, per_query=form == 2)
    shape = "no mask" if mask is None else f"mask {list(mask.shape)}"
    padded = int((padding.sum(1) < T).sum()) if mask is not None else 0
    return {"hidden_states": hidden_states, "attention_mask": mask}, (
        f"a random batch (batch {B}, length {T}, {padded} padded, {shape})"
    )


class BertSelfAttentionTask(ModuleTask):
    id = "3.2"
    title = "BertSelfAttention"
    lesson = "03-multi-head-attention"
    hf_path = "encoder.layer.{layer}.attention.self"
    outputs = {"context_layer": CONTEXT_DIMS, "attention_probs": PROBS_DIMS}
    computed_in_order = ["attention_probs", "context_layer"]  # the probabilities weight the values
    dropouts = {"dropout": "attention_probs_dropout_prob"}

    def captured(self, ctx, layer):
        call = ctx.capture.layer(layer, "attention.self")
        inputs = {"hidden_states": call.args[0], "attention_mask": call.kwargs["attention_mask"]}
        return inputs, dict(zip(self.outputs, call.output))

    def random_inputs(self, ctx):
        return random_attention_batch(ctx)

    def compare(self, expected, got, dims, against, diagnose_with=None):
        try:
            super().compare(expected, got, dims, against, diagnose_with)
        except CheckFailed as err:
            # BertSelfAttention calls the learner's eager_attention_forward, a function the grader
            # cannot replace by HF's: a mistake of that function shows here too, and says so.
            mistake = diagnose.REGISTRY.get(err.mistake or "")
            if self.id != "3.2" or mistake is None or "3.1" not in mistake.tasks:
                raise
            raise CheckFailed(
                f"{err}\n  If your BertSelfAttention calls your eager_attention_forward, it fails because your "
                "eager_attention_forward (task 3.1) differs; fix 3.1 first.",
                err.mistake,
            ) from None


class _Training(nn.Module):
    """Stands in for the ``module`` argument: HF's function reads only ``module.training``."""


class EagerAttentionForwardTask(BertSelfAttentionTask):
    """The function is checked through HF's own BertSelfAttention projections and heads."""

    id = "3.1"
    title = "eager_attention_forward"
    stages = ("shapes", "values", "masks", "config", "dropout", "gradients")
    outputs = {"attn_output": ("batch", "token", "head", "dim"), "attn_weights": PROBS_DIMS}
    computed_in_order = ["attn_weights", "attn_output"]
    grad_inputs = ("query", "key", "value")

    def build(self, fn, ctx):
        if not callable(fn) or isinstance(fn, type):
            self.fail(f'pass your function itself, e.g. check("3.1", eager_attention_forward); got {fn!r}')
        return fn

    def load(self, fn, ctx, layer):
        return fn

    def heads(self, ctx, layer, inputs) -> dict:
        """Project with the pretrained layer's query/key/value and split into (B, h, T, d)."""
        module = self.reference(ctx, layer)
        B, T, _ = inputs["hidden_states"].shape
        split = lambda x: x.view(B, T, module.num_attention_heads, -1).transpose(1, 2)  # noqa: E731
        return {
            "query": split(module.query(inputs["hidden_states"])),
            "key": split(module.key(inputs["hidden_states"])),
            "value": split(module.value(inputs["hidden_states"])),
            "attention_mask": inputs["attention_mask"],
            "scaling": module.scaling,
        }

    def call(self, fn, inputs, what="eager_attention_forward(...)", training=False, seed=None):
        module = _Training().train(training)
        dropout = inputs.get("dropout", 0.0)
        args = {k: v for k, v in inputs.items() if k != "dropout"}
        if isinstance(fn, nn.Module):  # HF's module, when the masks check asks for the expected output
            if seed is not None:
                torch.manual_seed(seed)
            out = _hf_eager_attention_forward()(module, dropout=dropout, **args)
        else:
            out = self.call_learner(what, fn, module, dropout=dropout, seed=seed, **args)
        return super().call(lambda **_: out, {}, what)

    def check_config(self, fn, ctx):
        """Heads of another size and number (from another config): nothing read from the pretrained model."""
        try:
            super().check_config(fn, ctx)
        except CheckFailed as err:
            other = ctx.other()
            inputs, _ = self.random_inputs(other)
            pretrained_head = config_sizes(ctx.model.config)["attention_head_size"]
            head = inputs["query"].shape[-1]
            wrong = flawed.attention(inputs["query"], inputs["key"], inputs["value"], inputs["attention_mask"],
                                     pretrained_head**-0.5)[1]
            with torch.no_grad():
                got = self.call(fn, inputs)["attn_weights"]
            if got.shape != wrong.shape or not allclose(wrong, got, diagnose.MATCH_ATOL):
                raise
            raise CheckFailed(
                f"{err}\n  Your weights match scores scaled by 1/sqrt({pretrained_head}) (the pretrained model's "
                f"head size) where these heads have size {head}: use `scaling`, or query.shape[-1].",
                err.mistake,
            ) from None

    def call_spec(self, fn, inputs):
        args = {k: v for k, v in inputs.items() if k != "dropout"}
        return fn, (_Training().eval(),), {"dropout": inputs.get("dropout", 0.0), **args}

    def captured(self, ctx, layer):
        call = ctx.capture.layer(layer, "attention.self")
        context, probs = call.output
        B, T, _ = context.shape
        inputs = self.heads(ctx, layer, {"hidden_states": call.args[0], "attention_mask": call.kwargs["attention_mask"]})
        return inputs, {"attn_output": context.view(B, T, probs.shape[1], -1), "attn_weights": probs}

    def random_inputs(self, ctx):
        inputs, description = random_attention_batch(ctx)
        with torch.no_grad():
            return self.heads(ctx, 0, inputs), description

    def check_dropout(self, fn, ctx):
        inputs, _ = self.captured(ctx, 0)
        with torch.no_grad():
            p = ctx.model.config.attention_probs_dropout_prob
            inputs = {**inputs, "dropout": p}
            first, second = self.call(fn, inputs), self.call(fn, inputs)
            if any(not torch.equal(first[k], second[k]) for k in first):
                self.fail(
                    "two calls with module.training=False give different outputs",
                    mistake=diagnose.REGISTRY["dropout-in-eval"],
                )
            first, second = self.call(fn, inputs, training=True), self.call(fn, inputs, training=True)
            if p > 0 and torch.equal(first["attn_weights"], second["attn_weights"]):
                self.fail(
                    f"with module.training=True and dropout={p}, the attention weights never change",
                    "Apply nn.functional.dropout(attn_weights, p=dropout, training=module.training).",
                )
            # The pretrained model's 0.1 typed in acts like `dropout` when dropout is 0.1: another p
            # tells them apart. From one seed, HF's function and the learner's must drop alike.
            other = {**inputs, "dropout": OTHER_DROPOUT}
            got = self.call(fn, other, training=True, seed=placement.SEED)
            expected = self.call(ctx.model.get_submodule(self.hf_path.format(layer=0)), other, training=True,
                                 seed=placement.SEED)
            if not all(allclose(expected[k], got[k], self.atol) for k in expected):
                self.fail(
                    f"with module.training=True and dropout={OTHER_DROPOUT}, the attention weights differ from "
                    "HF's from the same seed: is the probability typed in instead of read from `dropout`?",
                    "Apply nn.functional.dropout(attn_weights, p=dropout, training=module.training).",
                )


OTHER_DROPOUT = 0.3  # not the pretrained model's 0.1


def _hf_eager_attention_forward():
    from transformers.models.bert.modeling_bert import eager_attention_forward

    return eager_attention_forward


TASKS = [EagerAttentionForwardTask(), BertSelfAttentionTask()]
