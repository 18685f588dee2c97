"""The machinery every task's checks share.

A task runs its checks in a fixed order (names -> shapes -> values -> masks -> dropout ->
gradients) and stops at the first failure, raising ``CheckFailed`` with a message in the
course's feedback format::

    [Task 3.2] BertSelfAttention: values differ from the pretrained layer 2 (atol 1e-05)
      max abs diff 3.1e-01 at (batch 0, token 3, dim 7): expected 0.412, got 0.103
      Your output matches ... (known mistake `no-scaling`).
      See lessons/03-multi-head-attention (section "Scaled scores").
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from bertlab import capture as capture_mod
from bertlab import diagnose, reference
from bertlab.checks.compare import allclose, worst_position
from bertlab.checks.harness import describe_call, invoke_learner

ATOL = 1e-5


class CheckFailed(AssertionError):
    """A check failed; ``str(err)`` is the learner-facing message."""

    def __init__(self, message: str, mistake: str | None = None):
        super().__init__(message)
        self.mistake = mistake


@dataclass
class Context:
    """What the checks compare against: the reference model, its config and its capture."""

    model: Any
    capture: capture_mod.Capture
    generator: torch.Generator

    @property
    def config(self):
        # A copy per use: a learner's constructor must not be able to change the reference.
        return copy.deepcopy(self.model.config)

    @classmethod
    def load(cls, seed: int = 0, model: str | os.PathLike | None = None) -> "Context":
        return cls(
            model=reference.load_model(model),
            capture=capture_mod.capture(model),
            generator=torch.Generator().manual_seed(seed),
        )


# Grade cells re-run the earlier checks of their task (each stops at the first failure). A check
# that already passed for this very object (same class or function, seed and model) in this
# process is not run twice; redefining the class in the notebook makes a new object.
_PASSED: dict[tuple, set[str]] = {}


def _passed_stages(task_id: str, obj, seed: int) -> set[str]:
    try:
        key = (task_id, obj, seed, reference.model_dir())
        return _PASSED.setdefault(key, set())
    except TypeError:  # an unhashable object: nothing to remember it by
        return set()


class Task:
    """One numbered task (``Task 3.2``): a sequence of named checks on one learner object."""

    id: str
    title: str
    lesson: str
    stages: tuple[str, ...] = ("names", "shapes", "values", "masks", "dropout", "gradients")
    atol: float = ATOL

    def run(self, obj, upto: str | None = None, only: str | None = None, seed: int = 0) -> str:
        """Run the checks in order up to and including ``upto`` (default: all), or just ``only``."""
        for stage in (only, upto):
            if stage is not None and stage not in self.stages:
                raise ValueError(f"Task {self.id} has no check {stage!r}; it has {', '.join(self.stages)}")
        if only is not None:
            stages = (only,)
        else:
            stages = self.stages[: self.stages.index(upto) + 1] if upto else self.stages
        ctx = Context.load(seed)
        passed = _passed_stages(self.id, obj, seed)
        for stage in stages:
            if stage not in passed:
                getattr(self, f"check_{stage}")(obj, ctx)
                passed.add(stage)
        if len(stages) == len(self.stages):
            return f"[Task {self.id}] {self.title} passed ({len(stages)}/{len(stages)} checks)"
        return f"[Task {self.id}] {self.title} passed {len(stages)}/{len(self.stages)} checks ({', '.join(stages)})"

    # -- failure messages -------------------------------------------------------------------

    def fail(self, what: str, *details: str, mistake: diagnose.Mistake | None = None):
        lines = [f"[Task {self.id}] {self.title}: {what}", *(f"  {d}" for d in details if d)]
        if mistake is not None:
            lines.append("  " + mistake.hint())
        raise CheckFailed("\n".join(lines), mistake.id if mistake else None)

    # Module tasks must not run transformers' own BERT code; analysis tasks (Task 7) are given it.
    forbid_shortcuts: bool = True

    def call_learner(self, what: str, fn: Callable, *args, seed: int | None = None, grad: bool = False, **kwargs):
        """Call learner code through the harness; turn what went wrong into feedback.

        Args:
            what: how the feedback names the call, e.g. ``"forward"`` or ``"BertLayer(config)"``.
            seed: seed of torch's generator right before the call (dropout in train mode).
            grad: keep autograd on (the gradients check).
        """
        outcome = invoke_learner(fn, args, kwargs, seed=seed, forbid_shortcuts=self.forbid_shortcuts, grad=grad)
        if outcome.kind == "ok":
            return outcome.value
        call = f"the call: {what}{describe_call(args, kwargs)}"
        if outcome.kind == "not_implemented":
            self.fail(
                f"not implemented yet: {what} raises NotImplementedError.",
                "Replace `# YOUR CODE HERE` and `raise NotImplementedError()` with your implementation.",
            )
        if outcome.kind == "shortcut":
            self.fail(
                f"{outcome.shortcut}: this task is to write {self.title} yourself.",
                "Use torch and torch.nn.functional only; transformers' modules are what the grader compares with.",
            )
        if outcome.kind == "in_place":
            self.fail(
                f"{what} changed its argument {', '.join(f'`{n}`' for n in outcome.changed)} in place",
                "The caller still needs its inputs: compute new tensors (`x = x + y`), never `x += y` or `x[...] = ...`.",
                call,
            )
        self.fail(f"{what} raised {outcome.error}", f"at {outcome.where}" if outcome.where else "", call)

    def compare(self, expected: dict, got: dict, dims: dict, against: str, diagnose_with=None):
        """Fail on the first output of ``got`` that differs from ``expected``.

        Args:
            expected, got: output name -> tensor.
            dims: output name -> a name per dimension.
            against: completes "... differ from ...", e.g. "the pretrained layer 2".
            diagnose_with: ``(reference_module, inputs)`` to look for a known mistake.
        """
        for name, want in expected.items():
            have = got[name]
            if tuple(have.shape) != tuple(want.shape):
                self.fail(
                    f"`{name}` has shape {list(have.shape)}, expected {list(want.shape)} "
                    f"({', '.join(dims[name])}), compared with {against}"
                )
            if allclose(want, have, self.atol):
                continue
            what = "values" if len(expected) == 1 else f"`{name}` values"
            mistake = None
            if diagnose_with is not None:
                mistake = diagnose.diagnose(self.id, *diagnose_with, got, expected)
            self.fail(
                f"{what} differ from {against} (atol {self.atol:g})",
                worst_position(want, have, dims[name]),
                mistake=mistake,
            )


class ModuleTask(Task):
    """A task whose learner object is an ``nn.Module`` class mirroring one of HF's.

    Subclasses name the HF module (``hf_path``), how HF calls it (``captured_inputs``), a random
    input generator and the names of its outputs.
    """

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
            self.fail(f"pass the class itself, e.g. check(\"{self.id}\", {self.title}), not {cls!r}")
        module = self.call_learner(f"{cls.__name__}(config)", cls, ctx.config)
        if not isinstance(module, nn.Module):
            self.fail(f"{cls.__name__} must subclass torch.nn.Module")
        return module

    def load(self, module: nn.Module, ctx: Context, layer: int | None) -> nn.Module:
        try:
            module.load_state_dict(self.reference(ctx, layer).state_dict(), strict=True)
        except RuntimeError as err:
            self.fail(f"the pretrained weights do not load: {str(err).splitlines()[0]}")
        return module.eval()

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
        for name, value in zip(names, out):
            if not isinstance(value, torch.Tensor):
                self.fail(f"`{name}` must be a tensor; got {type(value).__name__}")
        return dict(zip(names, out))

    def learner_for(self, cls, ctx: Context, layer: int | None) -> nn.Module:
        return self.load(self.build(cls, ctx), ctx, layer)

    # -- the checks, in order ---------------------------------------------------------------

    def check_names(self, cls, ctx: Context) -> None:
        module = self.build(cls, ctx)
        mine = {k: tuple(v.shape) for k, v in module.state_dict().items()}
        theirs = {k: tuple(v.shape) for k, v in self.reference(ctx, self.layers(ctx)[0]).state_dict().items()}
        missing = sorted(set(theirs) - set(mine))
        unexpected = sorted(set(mine) - set(theirs))
        if missing or unexpected:
            self.fail(
                "parameter names differ from HF's, so the pretrained weights cannot load",
                f"missing: {', '.join(missing)}" if missing else "",
                f"unexpected: {', '.join(unexpected)}" if unexpected else "",
                "Use HF's attribute names exactly (see the lesson's diagram).",
            )
        wrong = [f"{k}: expected {list(theirs[k])}, got {list(mine[k])}" for k in theirs if mine[k] != theirs[k]]
        if wrong:
            self.fail("parameter shapes differ from HF's", *wrong)
        self.load(module, ctx, self.layers(ctx)[0])

    def check_shapes(self, cls, ctx: Context) -> None:
        layer = self.layers(ctx)[0]
        inputs, expected = self.captured(ctx, layer)
        with torch.no_grad():
            got = self.call(self.learner_for(cls, ctx, layer), inputs)
        for name, want in expected.items():
            if tuple(got[name].shape) != tuple(want.shape):
                dims = ", ".join(self.outputs[name])
                self.fail(
                    f"`{name}` has shape {list(got[name].shape)}, expected {list(want.shape)} ({dims})"
                )

    def check_values(self, cls, ctx: Context) -> None:
        module = self.build(cls, ctx)
        for layer in self.layers(ctx):
            self.load(module, ctx, layer)
            inputs, expected = self.captured(ctx, layer)
            with torch.no_grad():
                got = self.call(module, inputs)
            self.compare(expected, got, self.outputs, self.where(layer), (self.reference(ctx, layer), inputs))

    def check_masks(self, cls, ctx: Context) -> None:
        module = self.build(cls, ctx)
        layers = self.layers(ctx)
        for _ in range(self.random_trials):
            layer = layers[int(torch.randint(len(layers), (1,), generator=ctx.generator))]
            inputs, description = self.random_inputs(ctx)
            hf = self.reference(ctx, layer)
            with torch.no_grad():
                expected = {k: v.float() for k, v in self.call(hf, inputs).items()}
                got = self.call(self.load(module, ctx, layer), inputs)
            self.compare(
                expected, got, self.outputs, f"HF's {self.title} on {description}", (hf, inputs)
            )

    def check_dropout(self, cls, ctx: Context) -> None:
        module = self.learner_for(cls, ctx, self.layers(ctx)[0])
        for attr, field in self.dropouts.items():
            layer = getattr(module, attr, None)
            p = getattr(ctx.model.config, field)
            if not isinstance(layer, nn.Dropout):
                self.fail(f"`self.{attr}` must be an nn.Dropout({field}) like HF's; got {_describe(layer)}")
            if layer.p != p:
                self.fail(f"`self.{attr}` has p={layer.p}, expected config.{field} = {p}")
        inputs, _ = self.captured(ctx, self.layers(ctx)[0])
        with torch.no_grad():
            first, second = self.call(module.eval(), inputs), self.call(module, inputs)
            if any(not torch.equal(first[k], second[k]) for k in first):
                self.fail(
                    "two calls in eval mode give different outputs",
                    mistake=diagnose.REGISTRY.get("dropout-in-eval"),
                )
            if any(getattr(ctx.model.config, f) > 0 for f in self.dropouts.values()):
                first, second = self.call(module.train(), inputs), self.call(module, inputs)
                if all(torch.equal(first[k], second[k]) for k in first):
                    self.fail(
                        "two calls in train mode give identical outputs: dropout is never applied",
                        "Call self.dropout(...) where HF does; nn.Dropout is active only in train mode.",
                    )

    def check_gradients(self, cls, ctx: Context) -> None:
        module = self.learner_for(cls, ctx, self.layers(ctx)[0])
        params = dict(module.requires_grad_(True).named_parameters()) if isinstance(module, nn.Module) else {}
        inputs, _ = self.random_inputs(ctx)
        inputs = {
            k: v.clone().requires_grad_(True) if k in self.grad_inputs else v for k, v in inputs.items()
        }
        got = self.call(module, inputs)
        loss = sum((v * torch.randn(v.shape, generator=ctx.generator)).sum() for v in got.values())
        if not loss.requires_grad:
            self.fail("the output does not depend on any parameter: is forward under torch.no_grad() or detached?")
        self.call_learner("backward", loss.backward)
        dead = [n for n, p in params.items() if p.grad is None or not bool(p.grad.abs().sum() > 0)]
        dead += [k for k in self.grad_inputs if inputs[k].grad is None]
        if dead:
            self.fail(
                f"no gradient reaches {', '.join(dead)}",
                "Every parameter (and the input) must be used in forward, outside torch.no_grad() and .detach().",
            )
        bad = [n for n, p in params.items() if not bool(torch.isfinite(p.grad).all())]
        if bad:
            self.fail(f"gradients of {', '.join(bad)} are not finite (NaN or inf)")


def is_reference(obj) -> bool:
    """Whether ``obj`` is transformers' own code (the expected side of a comparison), not the learner's."""
    return type(obj).__module__.startswith("transformers.") or getattr(obj, "__module__", "").startswith("transformers.")


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__
