"""Task 5: the position-wise feed-forward network.

- Task 5.1 ``BertIntermediate``: ``dense`` (H -> intermediate_size, W_1) and the exact erf GELU,
  ``intermediate_act_fn``.
- Task 5.2 ``BertOutput``: ``dense`` (back to H, W_2), dropout, the residual add of
  ``input_tensor`` (the attention block's output) and LayerNorm: the second Add & Norm.
"""

from __future__ import annotations

from bertlab.checks.attention_output import HIDDEN_DIMS, AddNormTask, random_batch
from bertlab.checks.framework import Context
from bertlab.checks.module_task import ModuleTask
from bertlab.diagnose import feed_forward as flawed  # noqa: F401  (registers the mistakes)


class BertIntermediateTask(ModuleTask):
    id = "5.1"
    title = "BertIntermediate"
    lesson = "05-feed-forward"
    hf_path = "encoder.layer.{layer}.intermediate"
    outputs = {"hidden_states": HIDDEN_DIMS}
    # No dropout in this half of the FFN; its random-input check is called "batches" (no mask).
    stages = ("names", "shapes", "values", "batches", "calls", "config", "gradients")

    def check_names(self, cls, ctx: Context) -> None:
        super().check_names(cls, ctx)
        act = getattr(self.build(cls, ctx), "intermediate_act_fn", None)
        if not callable(act):
            self.fail(
                "`self.intermediate_act_fn` is missing or not callable",
                "HF keeps the activation in an attribute of that name, e.g. nn.GELU(); forward calls it after `dense`.",
                blocking=False,  # the weights loaded, and forward may call a GELU of its own (Task.run)
            )

    def check_batches(self, cls, ctx: Context) -> None:
        """Random batch sizes and lengths against HF's module with the same weights."""
        self.check_masks(cls, ctx)

    def captured(self, ctx, layer):
        call = ctx.corpus.layer(layer, "intermediate")
        return {"hidden_states": call.args[0]}, {"hidden_states": call.output}  # (B, T, H) -> (B, T, I)

    def random_inputs(self, ctx):
        return random_batch(ctx, hidden_states=ctx.model.config.hidden_size)


class BertOutputTask(AddNormTask):
    id = "5.2"
    title = "BertOutput"
    lesson = "05-feed-forward"
    hf_path = "encoder.layer.{layer}.output"
    outputs = {"hidden_states": HIDDEN_DIMS}

    def captured(self, ctx, layer):
        call = ctx.corpus.layer(layer, "output")
        hidden_states, input_tensor = call.args  # BertIntermediate's output (B, T, I), the attention output (B, T, H)
        return {"hidden_states": hidden_states, "input_tensor": input_tensor}, {"hidden_states": call.output}

    def random_inputs(self, ctx):
        config = ctx.model.config
        return random_batch(ctx, hidden_states=config.intermediate_size, input_tensor=config.hidden_size)


TASKS = [BertIntermediateTask(), BertOutputTask()]
