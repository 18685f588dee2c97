"""Task 3: multi-head self-attention.

- Task 3.1 ``eager_attention_forward``: scaled dot-product attention on heads already split.
- Task 3.2 ``BertSelfAttention``: ``query``/``key``/``value``, split heads, attend, merge heads.
"""

from __future__ import annotations

import torch
from torch import nn

from bertlab import diagnose
from bertlab.checks import call_forms, located_dropout
from bertlab.checks.compare import allclose
from bertlab.checks.eager_call_watch import Training, answers_as_hf, eager_call_seen, hf_eager_attention_forward
from bertlab.checks.framework import MASKED_STAGES, CheckFailed, Context, is_reference
from bertlab.checks.module_task import ModuleTask
from bertlab.checks.other_config import config_sizes
from bertlab.diagnose import common as placement
from bertlab.diagnose import self_attention as flawed  # importing it registers the mistakes
from bertlab.diagnose.dropout_measured import measured
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
    stages = MASKED_STAGES
    dropouts = {"dropout": "attention_probs_dropout_prob"}

    def captured(self, ctx, layer):
        call = ctx.corpus.layer(layer, "attention.self")
        inputs = {"hidden_states": call.args[0], "attention_mask": call.kwargs["attention_mask"]}
        return inputs, dict(zip(self.outputs, call.output, strict=False))

    def random_inputs(self, ctx):
        return random_attention_batch(ctx)

    def call_forms(self, ctx):
        return call_forms.mask_forms(ctx)

    # -- attention weights returned as None: what can be checked without them still is ---------

    weights_missing = False  # this run's learner returned None for the attention weights

    @property
    def weights_name(self) -> str:
        return list(self.outputs)[-1]  # attention_probs (3.2), attn_weights (3.1)

    def run(self, obj, upto=None, only=None, seed=0):
        """Every check runs on the context alone when the weights come back as None (a bug in the
        context is found and named as usual); then the cell fails, for the weights' sake."""
        self.weights_missing = False
        passed = super().run(obj, upto=upto, only=only, seed=seed)
        if self.weights_missing:
            ran = (only,) if only else self.stages[: self.stages.index(upto) + 1] if upto else self.stages
            self.fail(
                f"{'forward' if self.id == '3.2' else self.title} returns None for `{self.weights_name}`, "
                f"where HF's returns the attention probabilities ({', '.join(self.outputs[self.weights_name])})",
                f"Checked without them, `{next(iter(self.outputs))}` passed every check of this cell "
                f"({', '.join(ran)}); "
                f"the points need `{self.weights_name}` too: return the softmax's output (after dropout) as the "
                "second value.",
            )
        return passed

    def named_outputs(self, module, inputs, what="forward", seed=None):
        """``ModuleTask.call``, but a learner's None in place of the attention weights is noted
        (``weights_missing``) and both sides' weights are left out of every comparison."""
        if is_reference(module):
            named = super().call(module, inputs, what, seed)
        else:
            out = self.call_learner(what, module, seed=seed, **inputs)
            if (
                isinstance(out, (tuple, list))
                and len(out) == len(self.outputs)
                and out[-1] is None
                and isinstance(out[0], torch.Tensor)
            ):
                self.weights_missing = True
                out = (out[0], torch.empty(0))  # a stand-in, dropped below
            named = super().call(_Returns(out), {}, what)
        if self.weights_missing:
            named.pop(self.weights_name, None)
        return named

    def check_shapes(self, cls, ctx):
        layer = self.layers(ctx)[0]
        inputs, expected = self.captured(ctx, layer)
        with torch.no_grad():
            got = self.call(self.learner_for(cls, ctx, layer), inputs)
        for name, want in expected.items():
            if name in got and tuple(got[name].shape) != tuple(want.shape):
                self.fail(
                    f"`{name}` has shape {list(got[name].shape)}, expected {list(want.shape)} "
                    f"({', '.join(self.outputs[name])})"
                )

    def compare(self, expected, got, dims, against, diagnose_with=None):
        if self.weights_missing:  # the context alone, and the failure says so
            expected = {k: v for k, v in expected.items() if k in got}
        try:
            self.compare_given(expected, got, dims, against, diagnose_with)
        except CheckFailed as err:
            if not self.weights_missing:
                raise
            raise err.adding(
                f"(Your forward returns None for `{self.weights_name}`: only "
                f"`{next(iter(self.outputs))}` was compared.)"
            ) from None

    def compare_given(self, expected, got, dims, against, diagnose_with=None):
        try:
            super().compare(expected, got, dims, against, diagnose_with)
        except CheckFailed as err:
            # BertSelfAttention may call the learner's eager_attention_forward, a function the grader
            # cannot replace by HF's: a mistake of that function would show here too. Whether it is
            # that function's is seen by watching the call, not guessed.
            # An unnamed difference may be 3.1's too (its mistakes are not all known): watched as well.
            mistake = diagnose.REGISTRY.get(err.mistake or "")
            if self.id != "3.2" or diagnose_with is None or (mistake is not None and "3.1" not in mistake.tasks):
                raise
            blame = self.whose_mistake(mistake, diagnose_with[1])
            if not blame:
                raise
            raise err.adding(blame) from None

    def call(self, module, inputs, what="forward", seed=None):
        if not is_reference(module) and not isinstance(module, _Returns):
            self.last_module = module  # the module a failing comparison was made with (whose_mistake)
        return self.named_outputs(module, inputs, what, seed)

    def forget_run(self):
        super().forget_run()
        self.last_module = None

    last_module = None

    def whose_mistake(self, mistake, inputs: dict) -> str:
        """Where a mistake 3.1 can make (or an unnamed difference, ``mistake`` None) comes from in
        this BertSelfAttention: its call of the learner's eager_attention_forward, watched while it
        runs on ``inputs``, says. For an unnamed difference only a wrong 3.1 is worth saying."""
        if self.last_module is None:
            return ""
        seen = eager_call_seen(self.last_module, inputs)
        if seen is None:
            return ""
        if mistake is None:
            wrong_31 = seen["called"] and not answers_as_hf(seen["args"], seen["returned"])
            return (
                "Your BertSelfAttention calls your eager_attention_forward, which answers otherwise than HF's on "
                "the very arguments it is given: fix 3.1 first."
                if wrong_31
                else ""
            )
        lost = (
            " The grader builds your module, then loads the pretrained weights into it (again for each layer): "
            "a scaling folded into `query`'s weights, in __init__ or once on a first call, is lost. Scale "
            "the scores in forward."
            if mistake.id == "no-scaling"
            else ""
        )
        if not seen["called"]:
            return (
                f"Your BertSelfAttention does not call your eager_attention_forward (watched while it ran): "
                f"this mistake is in its own code.{lost}"
            )
        args = seen["args"]
        if not answers_as_hf(args, seen["returned"]):
            return (
                "Your BertSelfAttention calls your eager_attention_forward, which answers otherwise than HF's on "
                "the very arguments it is given: fix 3.1 first."
            )
        scaling = args[5] if len(args) > 5 else None
        passed = (
            ""
            if isinstance(scaling, float) and abs(scaling - self.head_scaling(inputs)) < 1e-6
            else (f" It is passed scaling={scaling!r}; HF passes self.scaling = {self.head_scaling(inputs):.4g}.")
        )
        return (
            "Your BertSelfAttention calls your eager_attention_forward, which answers as HF's on the arguments "
            f"it is given: the mistake is in what forward passes it, or does with its answer.{passed}{lost}"
        )

    def head_scaling(self, inputs: dict) -> float:
        model = self.last_module
        return float(getattr(model, "attention_head_size", 0) or 1) ** -0.5


class _Returns:
    """A callable that returns what the learner's call returned, for ``ModuleTask.call``'s checks of it."""

    def __init__(self, value):
        self.value = value

    def __call__(self, **_):
        return self.value


class EagerAttentionForwardTask(BertSelfAttentionTask):
    """The function is checked through HF's own BertSelfAttention projections and heads."""

    id = "3.1"
    title = "eager_attention_forward"
    stages = ("shapes", "values", "masks", "config", "arguments", "dropout", "gradients")
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
        """Project with the pretrained layer's query/key/value and split into (B, A, T, d)."""
        module = self.reference(ctx, layer)
        B, T, _ = inputs["hidden_states"].shape
        split = lambda x: x.view(B, T, module.num_attention_heads, -1).transpose(1, 2)  # noqa: E731
        return {
            "query": split(module.query(inputs["hidden_states"])),
            "key": split(module.key(inputs["hidden_states"])),
            "value": split(module.value(inputs["hidden_states"])),
            "attention_mask": inputs["attention_mask"],
            "scaling": module.scaling,
            "dropout": 0.0,  # passed as HF's BertSelfAttention does in eval mode (the arguments check leaves it out)
        }

    def call(self, fn, inputs, what="eager_attention_forward(...)", training=False, seed=None):
        # HF's module in train mode (the train-mode gradients check) runs HF's function in training
        module = Training().train(training or (isinstance(fn, nn.Module) and fn.training))
        if isinstance(fn, nn.Module):  # HF's module, when the masks check asks for the expected output
            if seed is not None:
                torch.manual_seed(seed)
            out = hf_eager_attention_forward()(module, **inputs)
        else:
            out = self.call_learner(what, fn, module, seed=seed, **inputs)
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
            wrong = flawed.attention(
                inputs["query"], inputs["key"], inputs["value"], inputs["attention_mask"], pretrained_head**-0.5
            )[1]
            with torch.no_grad():
                got = self.call(fn, inputs).get("attn_weights")  # None: returned as None, compared without
            if got is None or got.shape != wrong.shape or not allclose(wrong, got, diagnose.MATCH_ATOL):
                raise
            raise err.adding(
                f"Your weights match scores scaled by 1/sqrt({pretrained_head}) (the pretrained model's "
                f"head size) where these heads have size {head}: use `scaling`, or query.shape[-1]."
            ) from None

    def call_spec(self, fn, inputs):
        return fn, (Training().train(inputs.get("dropout", 0.0) > 0),), inputs

    def check_train_gradients(self, fn, ctx, layer, inputs, seed):
        """In training: ``module.training`` set and ``dropout`` the config's, on both sides."""
        p = ctx.model.config.attention_probs_dropout_prob
        super().check_train_gradients(fn, ctx, layer, {**inputs, "dropout": p}, seed)

    def captured(self, ctx, layer):
        call = ctx.corpus.layer(layer, "attention.self")
        context, probs = call.output
        B, T, _ = context.shape
        inputs = self.heads(
            ctx, layer, {"hidden_states": call.args[0], "attention_mask": call.kwargs["attention_mask"]}
        )
        return inputs, {"attn_output": context.view(B, T, probs.shape[1], -1), "attn_weights": probs}

    def random_inputs(self, ctx):
        inputs, description = random_attention_batch(ctx)
        with torch.no_grad():
            return self.heads(ctx, 0, inputs), description

    def call_forms(self, ctx):
        with torch.no_grad():
            return call_forms.eager_forms(ctx, lambda inputs: self.heads(ctx, 0, inputs))

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
            dropped = "attn_weights" if "attn_weights" in first else "attn_output"  # the weights may be missing
            if p > 0 and torch.equal(first[dropped], second[dropped]):
                self.fail(
                    f"with module.training=True and dropout={p}, the attention weights never change",
                    "Apply nn.functional.dropout(attn_weights, p=dropout, training=module.training).",
                )
            # The pretrained model's 0.1 typed in acts like `dropout` when dropout is 0.1: another p
            # tells them apart. HF's function drops first, its draws recorded; the learner's then
            # drops each element as HF did, however it draws (``located_dropout``, ``hand_drawn``).
            other = {**inputs, "dropout": OTHER_DROPOUT}
            hf = ctx.model.get_submodule(self.hf_path.format(layer=0))
            with located_dropout.recording() as recorded:
                expected = self.call(hf, other, training=True)
            with located_dropout.replaying(recorded):
                got = self.call(fn, other, training=True)
            if all(allclose(expected[k], got[k], self.atol) for k in expected):
                return
            seeded = self.call(fn, other, training=True, seed=placement.SEED)
            hf_seeded = self.call(hf, other, training=True, seed=placement.SEED)
            if all(allclose(v, seeded[k], self.atol) for k, v in hf_seeded.items()):
                return
            plain = self.call(hf, {**other, "dropout": 0.0})["attn_weights"]
            self.fail(
                f"with module.training=True and dropout={OTHER_DROPOUT}, the attention weights differ from "
                "HF's, with HF's dropout decisions given to every random draw of yours",
                measured(got[dropped], plain, expected["attn_weights"], OTHER_DROPOUT, PROBS_DIMS)
                if dropped == "attn_weights"
                else "",
                "Apply nn.functional.dropout(attn_weights, p=dropout, training=module.training) to the "
                "softmax's output.",
            )


OTHER_DROPOUT = 0.3  # not the pretrained model's 0.1


TASKS = [EagerAttentionForwardTask(), BertSelfAttentionTask()]
