"""What every module task's checks build on: the learner's module built, loaded and called, and HF's.

``ModuleTask`` (``module_task.py``) puts the stage families (``stage_*.py``) together on this base.
"""

from __future__ import annotations

import torch
from torch import nn

from bertlab.checks.framework import Context, Task, _describe, is_reference
from bertlab.checks.harness import (
    load_weights,
)


class ModuleBase(Task):
    """What a module task declares (below) and the helpers every stage family calls: build the
    learner's module, load the pretrained weights into it, call it through the harness, and find
    HF's module to compare with."""

    hf_path: str  # e.g. "encoder.layer.{layer}.attention.self"; no "{layer}" for single modules
    outputs: dict[str, tuple[str, ...]]  # output name -> dim names, in the order HF returns them
    dropouts: dict[str, str] = {}  # attribute -> config field holding its probability
    grad_inputs: tuple[str, ...] = ("hidden_states",)
    random_trials: int = 4

    # -- what subclasses provide ------------------------------------------------------------

    def captured(self, ctx: Context, layer: int | None) -> tuple[dict, dict]:
        """(kwargs the pretrained module received, its outputs by name) on the corpus."""
        raise NotImplementedError

    def random_inputs(self, ctx: Context) -> tuple[dict, str]:
        """(kwargs for a random batch, a short description of it)."""
        raise NotImplementedError

    # -- helpers ----------------------------------------------------------------------------

    def layers(self, ctx: Context) -> list[int | None]:
        return list(range(ctx.model.config.num_hidden_layers)) if "{layer}" in self.hf_path else [None]

    def reference(self, ctx: Context, layer: int | None) -> nn.Module:
        return ctx.model.get_submodule(self.hf_path.format(layer=layer))

    def where(self, layer: int | None) -> str:
        return "the pretrained model" if layer is None else f"the pretrained layer {layer}"

    def build(self, cls, ctx: Context) -> nn.Module:
        if not isinstance(cls, type):
            self.fail(f'pass the class itself, e.g. check("{self.id}", {self.title}), not {cls!r}')
        module = self.call_learner(f"{cls.__name__}(config)", cls, ctx.config)
        if not isinstance(module, nn.Module):
            self.fail(f"{cls.__name__} must subclass torch.nn.Module")
        return module

    def load(self, module: nn.Module, ctx: Context, layer: int | None) -> nn.Module:
        try:
            load_weights(module, self.reference(ctx, layer).state_dict())
        except RuntimeError as err:
            self.fail(f"the pretrained weights do not load: {str(err).splitlines()[0]}")
        return module

    def call(self, module: nn.Module, inputs: dict, what: str = "forward", seed: int | None = None) -> dict:
        """``module(**inputs)`` by output name; the learner's module goes through the harness."""
        if is_reference(module):
            if seed is not None:
                torch.manual_seed(seed)
            out = module(**inputs)
        else:
            out = self.call_learner(what, module, seed=seed, **inputs)
        names = list(self.outputs)
        if len(names) == 1:
            if not isinstance(out, torch.Tensor):
                self.fail(f"forward must return one tensor ({names[0]}), like HF's; got {type(out).__name__}")
            return {names[0]: out}
        if not isinstance(out, (tuple, list)) or len(out) != len(names):
            self.fail(f"forward must return a tuple ({', '.join(names)}), like HF's; got {_describe(out)}")
        for name, value in zip(names, out, strict=True):
            if not isinstance(value, torch.Tensor):
                self.fail(f"`{name}` must be a tensor; got {type(value).__name__}")
        return dict(zip(names, out, strict=True))

    def learner_for(self, cls, ctx: Context, layer: int | None) -> nn.Module:
        return self.load(self.build(cls, ctx), ctx, layer)
