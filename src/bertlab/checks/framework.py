"""The machinery every task's checks share.

A task runs the stages that apply to it in the registry's order (``bertlab.checks.stages``) and
stops at the first failure, raising ``CheckFailed`` with a message in the course's feedback format:

```text
[Task 3.2] BertSelfAttention: values differ from the pretrained layer 2 (atol 1e-05)
  max abs diff 3.1e-01 at (batch 0, token 3, dim 7): expected 0.412, got 0.103
  Your output matches ... (known mistake `no-scaling`).
  See lessons/03-multi-head-attention (section "Scaled scores").
```
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
from torch import nn

from bertlab import capture as capture_mod
from bertlab import diagnose, reference
from bertlab.checks import heatmap, located_dropout
from bertlab.checks import stages as stages_mod
from bertlab.checks.call_forms import CallForm
from bertlab.checks.compare import Difference, allclose, diagnose_non_finite, difference, non_finite, worst_position
from bertlab.checks.feedback_traceback import learner_traceback
from bertlab.checks.harness import (
    describe_call,
    given,
    gradients_of,
    invoke_learner,
    load_weights,
    reference_package,
    state_digest,
    state_shapes,
    weighted_sum,
)
from bertlab.diagnose import common as placement
from bertlab.diagnose.common import DropoutProbe

ATOL = 1e-5


class CheckFailed(AssertionError):
    """A check failed; ``str(err)`` is the learner-facing message.

    ``values`` holds the compared tensors when values differ (for ``heatmap``), else None.
    Whatever decides on a failure reads its fields, never its text: ``mistake`` (a known
    mistake's id), ``cause`` (``"values"`` when outputs differ from HF's, ``"raised"`` when the
    learner's code raised, else None) and ``values``. The text is written once, by ``Task.fail``,
    and grows only by ``adding`` lines under it.
    """

    def __init__(
        self, message: str, mistake: str | None = None, values: Difference | None = None, cause: str | None = None
    ):
        super().__init__(message)
        self.mistake = mistake
        self.values = values
        self.cause = cause

    @property
    def headline(self) -> str:
        """The failure's first line, ``[Task 3.2] BertSelfAttention: values differ ...``."""
        return str(self).splitlines()[0]

    def adding(self, *lines: str, mistake: str | None = None, headline_only: bool = False) -> CheckFailed:
        """This failure with ``lines`` under it (under its headline alone with ``headline_only``),
        its fields kept; ``mistake`` names a known mistake found since."""
        text = self.headline if headline_only else str(self)
        return CheckFailed("\n  ".join([text, *filter(None, lines)]), mistake or self.mistake, self.values, self.cause)

    def _render_traceback_(self) -> list[str]:
        """What IPython (JupyterLab) shows for this exception: the learner's own lines, then the
        message. The grader's frames, and the source lines around them, say nothing to a learner."""
        return learner_traceback(self)


@dataclass
class Context:
    """What the checks compare against: the reference model, its config and its capture."""

    model: Any
    capture: capture_mod.Capture | None  # None for ``other()``'s random model: nothing was captured from it
    generator: torch.Generator

    @property
    def corpus(self) -> capture_mod.Capture:
        """The capture of the pretrained model on the corpus; only ``load``'s context has one."""
        if self.capture is None:
            raise RuntimeError("this context's model is a random BERT (Context.other): nothing was captured from it")
        return self.capture

    @property
    def config(self):
        # A copy per use: a learner's constructor must not be able to change the reference.
        return copy.deepcopy(self.model.config)

    @classmethod
    def load(cls, seed: int = 0, model: str | os.PathLike | None = None) -> Context:
        return cls(
            model=reference.load_model(model),
            capture=capture_mod.capture(model),
            generator=torch.Generator().manual_seed(seed),
        )

    def other(self) -> Context:
        """A context whose model is a random BERT of another config (see ``other_config``).

        Nothing was captured from it: its checks use random inputs only (``capture`` is None).
        """
        return Context(
            model=_random_model(_config_key(self.model.config)),
            capture=None,
            generator=torch.Generator().manual_seed(self.generator.initial_seed() + 1),
        )


# The checks of a module whose forward takes an optional attention mask (BertSelfAttention,
# BertAttention, BertLayer, BertEncoder): the default ones, with its call forms before dropout.
MASKED_STAGES: tuple[str, ...] = (
    "names", "shapes", "values", "masks", "calls", "config", "arguments", "dropout", "gradients"
)  # fmt: skip


class Task:
    """One numbered task (``Task 3.2``): a sequence of named checks on one learner object."""

    id: str
    title: str
    lesson: str
    stages: tuple[str, ...] = ()  # stage names, in the registry's order (each concrete task lists its own)
    atol: float = ATOL
    computed_in_order: list[str] | None = None  # outputs in the order forward makes them (default: as returned)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        stages_mod.validate(cls.__qualname__, cls.stages, lambda method: callable(getattr(cls, method, None)))

    def run(self, obj, upto: str | None = None, only: str | None = None, seed: int = 0) -> str:
        """Run the checks in order up to and including ``upto`` (default: all), or just ``only``."""
        for name in (only, upto):
            if name is not None and name not in self.stages:
                stages_mod.stage(name)  # an unknown name: say so, with the course's stages
                raise ValueError(f"Task {self.id} has no check {name!r}; it has {', '.join(self.stages)}")
        stages: tuple[str, ...]
        if only is not None:
            stages = (only,)
        else:
            stages = self.stages[: self.stages.index(upto) + 1] if upto else self.stages
        ctx = Context.load(seed)
        # Every stage runs every time: a cell between two grade cells may have changed the
        # learner's class, so nothing is answered from an earlier run.
        try:
            for name in stages:
                getattr(self, stages_mod.STAGES[name].method)(obj, ctx)
        except CheckFailed as err:
            heatmap.show_in_notebook(err)  # the picture beside the message, in a Jupyter kernel only
            raise
        finally:
            self.forget_run()
        return self.passed(stages)

    def passed(self, stages: tuple[str, ...]) -> str:
        """The line a run of ``stages`` that passed prints (the learner guide shows it, from here)."""
        if len(stages) == len(self.stages):
            return f"[Task {self.id}] {self.title} passed ({len(stages)}/{len(stages)} checks)"
        return f"[Task {self.id}] {self.title}: {', '.join(stages)} passed"

    def forget_run(self) -> None:
        """Drop what this run kept of the learner's objects: nothing of one run may answer the next,
        and a warm judge grading notebook after notebook must not keep each one's objects."""

    # -- failure messages -------------------------------------------------------------------

    def fail(
        self,
        what: str,
        *details: str | None,
        mistake: diagnose.Mistake | None = None,
        values: Difference | None = None,
        cause: str | None = None,
    ) -> NoReturn:
        lines = [f"[Task {self.id}] {self.title}: {what}", *(f"  {d}" for d in details if d)]
        if mistake is not None:
            lines.append("  " + mistake.hint())
        raise CheckFailed("\n".join(lines), mistake.id if mistake else None, values, cause)

    # Module tasks must not run transformers' own BERT code; analysis tasks (Task 7) are given it.
    forbid_shortcuts: bool = True
    tools = "torch and torch.nn.functional"  # what the task is written with, for the shortcut message

    def call_learner(self, what: str, fn: Callable, *args, seed: int | None = None, grad: bool = False, **kwargs):
        """Call learner code through the harness; turn what went wrong into feedback.

        Args:
            what: how the feedback names the call, e.g. ``"forward"`` or ``"BertLayer(config)"``.
            seed: seed of torch's generator right before the call (dropout in train mode).
            grad: keep autograd on (the gradients check).
        """
        # Inside ``located_dropout.replaying(...)`` here, the learner's process applies HF's masks.
        outcome = invoke_learner(
            fn,
            args,
            kwargs,
            seed=seed,
            forbid_shortcuts=self.forbid_shortcuts,
            grad=grad,
            threads=torch.get_num_threads(),
            located=located_dropout.active(),
        )
        return self.outcome_value(outcome, what, args, kwargs)

    def called(self, what: str) -> str:
        """How the call line names the call ``what`` describes (a task whose ``what`` is a signature
        gives the bare name, so the arguments are not shown twice)."""
        return what

    def outcome_value(self, outcome, what: str, args: tuple = (), kwargs: dict | None = None):
        """The value of a learner call's ``Outcome``, or the failure that says what went wrong."""
        if outcome.kind == "ok":
            return outcome.value
        call = f"the call: {self.called(what)}{describe_call(args, kwargs or {})}"
        if outcome.kind == "not_implemented":
            self.fail(
                f"not implemented yet: {what} raises NotImplementedError.",
                "Replace `# YOUR CODE HERE` and `raise NotImplementedError()` with your implementation.",
            )
        if outcome.kind == "shortcut":
            self.fail(
                f"{outcome.shortcut}: this task is to write {self.title} yourself.",
                f"Use {self.tools} only; transformers' modules are what the grader compares with.",
            )
        if outcome.kind == "in_place":
            self.fail(
                f"{what} changed its argument {', '.join(f'`{n}`' for n in outcome.changed)} in place",
                "The caller still needs its inputs: compute new tensors (`x = x + y`), "
                "never `x += y` or `x[...] = ...`.",
                call,
            )
        if outcome.kind == "wrong_device":
            self.fail(
                f"{what} returned a tensor on the {outcome.error} device; the inputs are on the CPU: "
                "keep the output there (no .to(...) or .cuda())",
                call,
            )
        self.fail(
            f"{what} raised {outcome.error}", f"at {outcome.where}" if outcome.where else "", call, cause="raised"
        )

    def compare(
        self, expected: dict, got: dict, dims: dict, against: str, diagnose_with: tuple[Any, dict] | None = None
    ) -> None:
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
            if have.dtype != want.dtype and want.is_floating_point():
                self.fail(
                    f"`{name}` is {str(have.dtype).removeprefix('torch.')}, expected "
                    f"{str(want.dtype).removeprefix('torch.')} like {against}",
                    "Keep the dtype of the inputs and weights: no .double(), no torch.set_default_dtype().",
                )
            if allclose(want, have, self.atol):
                continue
            what = "values" if len(expected) == 1 else f"`{name}` values"
            mistake = None
            if diagnose_with is not None:
                mistake = diagnose.diagnose(self.id, *diagnose_with, got, expected) or diagnose_non_finite(
                    self.id, *diagnose_with, got, expected
                )
            self.fail(
                f"{what} differ from {against} (atol {self.atol:g})",
                worst_position(want, have, dims[name]),
                non_finite(got, dims, self.computed_in_order),
                mistake=mistake,
                values=difference(name, expected, got, dims[name]),
                cause="values",
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

    # -- the checks, in order ---------------------------------------------------------------

    def check_names(self, cls, ctx: Context) -> None:
        module = self.build(cls, ctx)
        mine = state_shapes(module)
        theirs = state_shapes(self.reference(ctx, self.layers(ctx)[0]))
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
                self.fail(f"`{name}` has shape {list(got[name].shape)}, expected {list(want.shape)} ({dims})")

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
            self.compare(expected, got, self.outputs, f"HF's {self.title} on {description}", (hf, inputs))

    def check_calls(self, cls, ctx: Context) -> None:
        """One module called again and again, with other inputs (and another mask) of the same
        shape, answers each call as HF's does. No call may change a parameter or buffer. An
        attribute a call writes (the last probabilities kept "for visualisation", a counter) is
        the learner's own business while every answer is HF's: it fails only when it changes an
        answer, which a fourth call, on new inputs of the same shape, is there to show."""
        layer = self.layers(ctx)[0]
        module = self.learner_for(cls, ctx, layer)
        hf = self.reference(ctx, layer)
        for _ in range(20):  # a batch with a mask to change, where the task takes one
            first, description = self.random_inputs(ctx)
            mask = first.get("attention_mask", "none taken")
            if not isinstance(mask, torch.Tensor) or mask.shape[-1] > 1:
                if mask is not None:
                    break
        second = other_inputs_of_the_same_shape(first, ctx.generator)
        watched = isinstance(module, nn.Module)
        before = state_digest(module) if watched else {}
        weights = {k for k, v in before.items() if v.startswith("tensor ")}
        last = before
        calls = [
            (first, f"a first call, on {description}"),
            (second, "a second call with other inputs and mask of the same shape (another padding)"),
            (first, f"a third call, on the first call's inputs again ({description})"),
        ]
        kept: set[str] = set()  # attributes a call wrote (the first too): state, if a later answer reads it
        advice = (
            "A module's output depends on its inputs and weights only: keep nothing of a call that a later "
            "call reads (a mask, a cache by shape, a statistic), and never write to a parameter or buffer."
        )
        answers: dict[int, dict] = {}  # HF's, by inputs: the third call's are the first's
        for number, (inputs, which) in enumerate(calls):
            with torch.no_grad():
                if id(inputs) not in answers:
                    answers[id(inputs)] = {k: v.float() for k, v in self.call(hf, inputs).items()}
                expected = answers[id(inputs)]
                got = self.call(module, inputs)
            if watched:
                now = state_digest(module)
                changed = {k for k in last.keys() | now.keys() if last.get(k) != now.get(k)}
                written = sorted(changed & weights)
                if written:
                    self.fail(
                        f"forward writes to {', '.join(f'`self.{k}`' for k in written[:5])}, a parameter or buffer",
                        advice,
                    )
                kept |= changed - weights
                last = now
            try:
                self.compare(expected, got, self.outputs, f"HF's {self.title} on {which}")
            except CheckFailed as err:
                if not kept:
                    raise
                names = ", ".join(f"`self.{k}`" for k in sorted(kept)[:5])
                raise err.adding(
                    f"forward keeps {names} from one call to the next, and a later call's answer changes with it.",
                    advice,
                ) from None
            if number == 2 and kept:  # kept and, so far, never read: once more, on new inputs
                calls.append((other_inputs_of_the_same_shape(second, ctx.generator), "a fourth call, on new inputs"))

    def check_config(self, cls, ctx: Context) -> None:
        """Built from another config, the module equals HF's built from it: no size is wired in.

        The other config (``other_config``) differs in every size, in ``layer_norm_eps`` and in
        the dropout probabilities; HF's module of it has random weights (LayerNorm's too), loaded
        into the learner's module, and both run on random inputs of its sizes.
        """
        other = ctx.other()
        layer = self.layers(other)[0]
        hf = self.reference(other, layer)
        module = self.build(cls, other)
        against = f"HF's {self.title} built from another config ({describe_config(other.model.config)})"
        if isinstance(module, nn.Module):
            explain_sizes(self, module, hf, ctx.model.config, other.model.config, against)
            try:
                load_weights(module, hf.state_dict())
            except RuntimeError as err:
                self.fail(
                    f"the weights of {against} do not load: {str(err).splitlines()[0]}",
                    "Read every size from `config`, never from the pretrained model.",
                )
        for _ in range(2):
            inputs, description = self.random_inputs(other)
            with torch.no_grad():
                expected = {k: v.float() for k, v in self.call(hf, inputs).items()}
                got = self.call(module, inputs)
            if self.close_with_random_weights(expected, got):
                continue
            try:
                # Diagnosed too: a mistake the pretrained model's tiny eps hides (eps added to the
                # std, say) shows with this config's large one.
                self.compare(expected, got, self.outputs, f"{against} on {description}", diagnose_with=(hf, inputs))
            except CheckFailed as err:
                # A tiny eps typed in (the pretrained 1e-12) and torch's default 1e-5 both look alike
                # next to this config's large eps: the closer of the two is named, measured.
                if err.mistake in (None, "layernorm-eps-default"):
                    typed = self.eps_distance(hf, inputs, got, ctx.model.config.layer_norm_eps)
                    default = self.eps_distance(hf, inputs, got, nn.LayerNorm(1).eps)
                    if typed <= self.atol and typed < default:
                        mistake = diagnose.REGISTRY["layernorm-eps-typed"]
                        raise err.adding(mistake.hint(), mistake=mistake.id, headline_only=True) from None
                if err.mistake is not None:
                    raise
                hint = "Read every size from `config` (or from the inputs' shapes), never from the pretrained model."
                raise err.adding(hint) from None

    def close_with_random_weights(self, expected: dict, got: dict) -> bool:
        """Whether ``got`` equals ``expected`` (HF's, under the other config's random weights).

        Random weights give larger values than the pretrained ones: a wrong size, eps or argument
        moves them by far more than float32's relative precision, which is all this allows on
        top of the task's atol (a right softmax written another way differs by that much).
        """
        return all(
            isinstance(got.get(k), torch.Tensor)
            and got[k].shape == v.shape
            and got[k].dtype == v.dtype
            and bool(torch.allclose(got[k].detach().float(), v.float(), atol=self.atol, rtol=1e-5))
            for k, v in expected.items()
        )

    def eps_distance(self, hf: nn.Module, inputs: dict, got: dict, eps: float) -> float:
        """How far ``got`` is from HF's module with ``eps`` in every LayerNorm (inf: no LayerNorm)."""
        if not any(isinstance(m, nn.LayerNorm) for m in hf.modules()):
            return float("inf")
        other = copy.deepcopy(hf)
        for m in other.modules():
            if isinstance(m, nn.LayerNorm):
                m.eps = eps
        with torch.no_grad():
            wrong = {k: v.float() for k, v in self.call(other, inputs).items()}
        if any(not isinstance(got.get(k), torch.Tensor) or got[k].shape != v.shape for k, v in wrong.items()):
            return float("inf")
        return max(float((got[k].detach().float() - v).abs().max()) for k, v in wrong.items())

    def check_dropout(self, cls, ctx: Context) -> None:
        """Dropout is an nn.Dropout of the config's p, off in eval mode, and acts where HF's does.

        Where it acts is seen in train mode only: see ``check_dropout_placement``.
        """
        layer = self.layers(ctx)[0]
        module = self.learner_for(cls, ctx, layer)
        for attr, field in self.dropouts.items():
            sub = getattr(module, attr, None)
            p = getattr(ctx.model.config, field)
            if not isinstance(sub, nn.Dropout):
                self.fail(f"`self.{attr}` must be an nn.Dropout({field}) like HF's; got {_describe(sub)}")
            if sub.p != p:
                self.fail(f"`self.{attr}` has p={sub.p}, expected config.{field} = {p}")
        inputs, _ = self.captured(ctx, layer)
        # Two sentences of the corpus (a padded one among them) are enough to see dropout at work;
        # train mode runs the module up to five times.
        inputs = {k: v[:2] if isinstance(v, torch.Tensor) and v.dim() > 0 else v for k, v in inputs.items()}
        with torch.no_grad():
            first, second = self.call(module.eval(), inputs), self.call(module, inputs)
        if any(not torch.equal(first[k], second[k]) for k in first):
            if self.eval_dropout_is_the_cause(module, inputs):
                self.fail(
                    "two calls in eval mode give different outputs", mistake=diagnose.REGISTRY.get("dropout-in-eval")
                )
            self.fail(
                "two calls in eval mode give different outputs, and not through dropout: forward draws random "
                "numbers of its own",
                "A layer built inside forward (nn.Linear, nn.LayerNorm) gets new random weights on every call: "
                "build every layer in __init__, and draw no random numbers in forward.",
            )
        check_dropout_placement(self, cls, ctx, layer, inputs, module)
        # The pretrained model uses 0.1 for every dropout, so a probability typed in as a number,
        # or read from the other field, acts exactly like the right one on it. Another config,
        # whose probabilities differ from 0.1 and from each other, tells them apart by behaviour.
        other = ctx.other()
        other_inputs, _ = self.random_inputs(other)
        check_dropout_placement(self, cls, other, self.layers(other)[0], other_inputs, other_config=True)

    def eval_dropout_is_the_cause(self, module, inputs: dict) -> bool:
        """Whether two eval-mode calls that differ agree once every dropout draws a fixed mask:
        then dropout acts in eval mode; else something else draws random numbers in forward."""
        with torch.no_grad(), located_dropout.replaying([]):  # found nowhere: a fixed mask per shape
            first, second = self.call(module, inputs), self.call(module, inputs)
        return all(torch.equal(first[k], second[k]) for k in first)

    def call_spec(self, module, inputs: dict) -> tuple[Callable, tuple, dict]:
        """(callable, args, kwargs) that ``self.call(module, inputs)`` makes, for the gradients check."""
        return module, (), inputs

    def raw_order(self, named: dict) -> list:
        """``self.call``'s named outputs in the order the learner's forward returns its tensors."""
        return list(named.values())

    def reference_gradients(
        self,
        ctx: Context,
        layer,
        inputs: dict,
        seed: int,
        located: list | None = None,
        grad_inputs: tuple | None = None,
    ) -> dict:
        """HF's gradients under the learner's loss (``harness.weighted_sum`` of the same outputs).

        With ``located`` (HF's recorded dropout draws), in train mode, every dropout applying them.
        ``grad_inputs``: the inputs whose gradients are asked for (default: the task's).
        """
        grad_inputs = self.grad_inputs if grad_inputs is None else grad_inputs
        hf = self.reference(ctx, layer)  # frozen, in eval mode: its gradients are asked for, not kept
        params = dict(hf.named_parameters())
        kwargs = {k: (v.detach().clone().requires_grad_(True) if k in grad_inputs else v) for k, v in inputs.items()}
        given = [k for k in grad_inputs if k in kwargs]
        hf.requires_grad_(True).train(located is not None)
        try:
            with located_dropout.patched(located) if located is not None else contextlib.nullcontext():
                tensors = [t for t in self.raw_order(self.call(hf, kwargs)) if t.is_floating_point()]
            grads = torch.autograd.grad(
                weighted_sum(tensors, seed), [*params.values(), *(kwargs[k] for k in given)], allow_unused=True
            )
        finally:
            hf.requires_grad_(False).eval()
        return {
            "params": dict(zip(params, grads[: len(params)], strict=True)),
            "inputs": dict(zip(given, grads[len(params) :], strict=True)),
            "shapes": [tuple(t.shape) for t in tensors],
        }

    def check_gradients(self, cls, ctx: Context) -> None:
        """In eval mode, under the same weights, inputs and upstream gradient, every parameter's
        and every differentiable input's gradient equals HF's: a value computed right but cut
        from the graph (``.detach()``, ``torch.no_grad()``, ``.data``) fails, named."""
        layer = self.layers(ctx)[0]
        module = self.learner_for(cls, ctx, layer)
        inputs, _ = self.random_inputs(ctx)
        seed = self.gradients_as_hf(module, ctx, layer, inputs, self.grad_inputs, "")
        self.check_train_gradients(module, ctx, layer, inputs, seed)

    def gradients_as_hf(self, module, ctx: Context, layer, inputs: dict, grad_inputs: tuple, how: str) -> int:
        """Fail unless ``module``'s eval-mode gradients on ``inputs`` (its parameters' and those of
        ``grad_inputs``) are HF's; ``how`` says which call. Returns the upstream gradient's seed."""
        fn, args, kwargs = self.call_spec(module, inputs)
        seed = int(torch.randint(2**31, (1,), generator=ctx.generator))
        outcome = gradients_of(fn, args, kwargs, grad_inputs, seed, forbid_shortcuts=self.forbid_shortcuts)
        grads = self.outcome_value(outcome, "forward", args, kwargs)
        if not grads["connected"]:
            self.fail("the output does not depend on any parameter: is forward under torch.no_grad() or detached?")
        params = grads["params"]
        expected = self.reference_gradients(ctx, layer, inputs, seed, grad_inputs=grad_inputs)
        # dead where HF's is not: with inputs_embeds, no gradient reaches the word table in HF's either
        reached = lambda g: g is not None and bool(g.abs().sum() > 0)  # noqa: E731
        dead = [n for n, g in params.items() if not reached(g) and reached(expected["params"].get(n))]
        dead += [k for k in grad_inputs if k in inputs and grads["inputs"].get(k) is None]
        if dead:
            self.fail(
                f"no gradient reaches {', '.join(dead)}{how}",
                "Every parameter (and the input) must be used in forward, outside torch.no_grad() and .detach().",
            )
        bad = [n for n, g in params.items() if g is not None and not bool(torch.isfinite(g).all())]
        if bad:
            self.fail(f"gradients of {', '.join(bad)} are not finite (NaN or inf)")
        self.compare_gradients(grads, expected, f"in eval mode, same weights, inputs and upstream gradient{how}")
        return seed

    # -- the arguments check: its table of call forms is ``call_forms`` ---------------------

    def call_forms(self, ctx: Context) -> list[CallForm]:
        """Every way HF's callers call this module (``call_forms``); none for required inputs only."""
        return []

    def check_arguments(self, cls, ctx: Context) -> None:
        """Each form of ``call_forms``, under the other config: the outputs and the gradients
        equal HF's (see ``call_forms``)."""
        self.check_forms(cls, ctx, self.call_forms)

    def check_forms(
        self, cls, ctx: Context, forms_of: Callable[[Context], list[CallForm]], gradients: bool = True
    ) -> None:
        """``forms_of``'s forms, under the other config (``other_config``: every size and id differs
        from the pretrained model's, which the other checks call), compared with HF's; with
        ``gradients``, their gradients too."""
        where = ctx.other()
        layer = self.layers(where)[0]
        hf, module = self.reference(where, layer), self.learner_for(cls, where, layer)
        built = f" built from another config ({describe_config(where.model.config)})"
        for form in forms_of(where):
            how = f", called with {form.name}{built}"
            # A failure of the values says what HF does with the form (``why``); the call's own
            # failure (it raised, or returned the wrong kind of thing) names the form first.
            with torch.no_grad():
                expected = self.call(hf, form.inputs)
                try:
                    got = self.call(module, form.inputs)
                except CheckFailed as err:
                    raise _in_form(err, form, how[2:]) from None
                try:
                    if not self.close_with_random_weights(expected, got):
                        self.compare(expected, got, self.outputs, f"HF's {self.title}{how[1:]}", (hf, form.inputs))
                except CheckFailed as err:
                    raise _in_form(err, form) from None
            if gradients:
                self.gradients_as_hf(module, where, layer, form.inputs, form.grad_inputs, how)

    def compare_gradients(self, grads: dict, expected: dict, how: str) -> None:
        """Fail where the learner's gradients (``harness.gradients``'s value) differ from HF's."""
        if [tuple(s) for s in grads["shapes"]] != expected["shapes"]:
            self.fail(f"forward returns tensors of shapes {grads['shapes']}; HF's returns {expected['shapes']}")
        params = grads["params"]
        named = [(f"`{n}`", params.get(n), g) for n, g in expected["params"].items()]
        named += [(f"the input `{k}`", grads["inputs"].get(k), g) for k, g in expected["inputs"].items()]
        named = [(what, got, want) for what, got, want in named if want is not None and got is not None]
        largest = max((float(want.abs().max()) for _, _, want in named), default=0.0)
        for what, got, want in named:
            worst = float((got - want).abs().max())
            if worst > GRAD_RTOL * float(want.abs().max()) + GRAD_NOISE * largest:
                self.fail(
                    f"the gradient of {what} differs from HF's (max abs diff {worst:.1e}, largest "
                    f"{float(want.abs().max()):.1e}), {how}",
                    "The values are right, so something is cut from the graph or computed outside it: "
                    "a .detach(), .data, torch.no_grad() or a number taken out with .item().",
                )

    def check_train_gradients(self, module, ctx: Context, layer, inputs: dict, seed: int) -> None:
        """Backward in train mode too, every dropout applying HF's masks (``located_dropout``).

        The dropout checks run under no_grad, and the eval-mode gradients without dropout: a
        dropout that writes in place into a tensor autograd keeps for backward (the softmax's
        output, with ``inplace=True``) gives HF's values there, yet its backward raises in training.
        """
        hf = self.reference(ctx, layer).train()  # shared and frozen: back to eval mode below
        try:
            with torch.no_grad(), located_dropout.recording() as drawn:
                self.call(hf, inputs)
        finally:
            hf.eval()
        if not drawn:  # no dropout in this module: train mode computes what eval mode does
            return
        fn, args, kwargs = self.call_spec(module, inputs)
        outcome = gradients_of(
            fn, args, kwargs, self.grad_inputs, seed, forbid_shortcuts=self.forbid_shortcuts, train=True, located=drawn
        )
        # torch's own words for a saved tensor changed before backward used it
        if outcome.kind == "saved_tensor_changed":
            self.fail(
                "in train mode, backward raises: a tensor autograd saved for the backward pass was changed in place",
                f"at {outcome.where}" if outcome.where else "",
                "Typically dropout written in place on the softmax's output (nn.Dropout(inplace=True), "
                "F.dropout(..., inplace=True), x.mul_(mask)): the softmax's backward needs its output as it "
                "was. Use the out-of-place form: x = self.dropout(x).",
            )
        grads = self.outcome_value(outcome, "forward and backward in train mode", args, kwargs)
        expected = self.reference_gradients(ctx, layer, inputs, seed, located=drawn)
        self.compare_gradients(grads, expected, "in train mode, with HF's dropout masks")


def _in_form(err: CheckFailed, form: CallForm, *lines: str) -> CheckFailed:
    """``err`` with ``lines`` and, unless it names a known mistake, what HF does with ``form``."""
    lines += (form.why,) if form.why and err.mistake is None else ()
    return err.adding(*lines)


def other_inputs_of_the_same_shape(inputs: dict, generator: torch.Generator) -> dict:
    """``inputs`` with new random values of the same shapes and dtypes, and another padding in the mask."""
    from bertlab.masks import additive_mask

    other = {}
    for name, value in inputs.items():
        if not isinstance(value, torch.Tensor):
            other[name] = value
        elif name == "attention_mask":
            padding = value if not value.is_floating_point() else (value[:, 0, -1, :] == 0).long()  # (B, T)
            lengths = padding.sum(-1)
            new = torch.randint(1, padding.shape[-1] + 1, lengths.shape, generator=generator)
            if torch.equal(new, lengths):  # the same padding would test nothing: change one row
                new[0] = lengths[0] - 1 if lengths[0] > 1 else padding.shape[-1]
            padded = (torch.arange(padding.shape[-1])[None, :] < new[:, None]).to(padding.dtype)
            other[name] = (
                padded
                if not value.is_floating_point()
                else additive_mask(padded, value.dtype, per_query=value.shape[-2] > 1)
            )
        elif value.is_floating_point():
            other[name] = torch.randn(value.shape, generator=generator, dtype=value.dtype)
        else:  # ids: new ones in the range the first ones used
            other[name] = torch.randint(
                max(int(value.max()) + 1, 2) if value.numel() else 1,
                value.shape,
                generator=generator,
                dtype=value.dtype,
            )
    return other


# Gradients are sums over the batch and the sequence, taken in another order than HF's: float32
# leaves them agreeing to a few parts in a million of their size. A gradient that is zero in exact
# arithmetic (the key's bias: softmax ignores what all keys share) is float32 noise on both sides,
# of the order of the largest gradient's rounding: hence a floor relative to the largest.
GRAD_RTOL, GRAD_NOISE = 1e-3, 1e-5


def reference_origin(obj) -> str:
    """Whose reference code ``obj`` is (``transformers'``, ``the course's reference``: see
    ``harness.reference_package``), or "" when it is the learner's."""
    module_name = getattr(obj, "__module__", "")
    module_name = module_name if isinstance(module_name, str) else ""
    return reference_package(type(obj).__module__) or reference_package(module_name)


def is_reference(obj) -> bool:
    """Whether ``obj`` is reference code (the expected side of a comparison), not the learner's."""
    return bool(reference_origin(obj))


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__


# -- the config check: another BertConfig ------------------------------------------------------

# Sizes a learner might wire in, by the config field that holds them.
SIZE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "attention_head_size",
    "num_hidden_layers",
    "vocab_size",
    "max_position_embeddings",
    "type_vocab_size",
)


def config_sizes(config) -> dict[str, int]:
    """``SIZE_FIELDS`` of ``config``; the head size is ``hidden_size // num_attention_heads``."""
    # In SIZE_FIELDS' order: _config_key's values are read back by that order (_PretrainedSizes).
    head_size = config.hidden_size // config.num_attention_heads
    return {f: head_size if f == "attention_head_size" else getattr(config, f) for f in SIZE_FIELDS}


def _config_key(config) -> tuple:
    return (
        *config_sizes(config).values(),
        config.layer_norm_eps,
        config.hidden_dropout_prob,
        config.attention_probs_dropout_prob,
        config.pad_token_id,
    )


def _differs(options, taken) -> Any:
    """The first of ``options`` not in ``taken``: every size differs from the pretrained model's."""
    return next(o for o in options if o not in taken)


def other_config(config):
    """A BertConfig that shares no size or id with ``config`` (the pretrained model's).

    The hidden size, the number of heads and the head size all differ; the FFN is not 4x the
    hidden size; eps is large enough to move the outputs; the dropout probabilities and the
    ``pad_token_id`` differ too.
    """
    from transformers import BertConfig

    old = config_sizes(config)
    hidden, heads = next(
        (h, n)
        for h, n in [(48, 3), (60, 5), (42, 7)]
        if h != old["hidden_size"] and n != old["num_attention_heads"] and h // n != old["attention_head_size"]
    )
    intermediate = next(i for i in (hidden * 5 // 3, hidden * 2 + 6) if i not in (4 * hidden, old["intermediate_size"]))
    return BertConfig(
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        num_hidden_layers=_differs((3, 2, 4), (old["num_hidden_layers"],)),
        vocab_size=_differs((101, 97), (old["vocab_size"],)),
        max_position_embeddings=_differs((40, 36), (old["max_position_embeddings"],)),
        type_vocab_size=_differs((3, 4), (old["type_vocab_size"],)),
        layer_norm_eps=_differs((0.1, 0.2), (config.layer_norm_eps,)),
        hidden_dropout_prob=_differs((0.2, 0.3), (config.hidden_dropout_prob,)),
        attention_probs_dropout_prob=_differs((0.3, 0.4), (config.attention_probs_dropout_prob,)),
        hidden_act=config.hidden_act,
        # the [PAD] row too: a padding_idx wired to the pretrained 0 shows in the word table's gradient
        pad_token_id=_differs((1, 2), (config.pad_token_id,)),
        attn_implementation="eager",
    )


@functools.lru_cache(maxsize=2)
def _random_model(key: tuple):
    """HF's BertModel of ``other_config`` with random weights, in eval mode, frozen.

    Every parameter is random, LayerNorm's weights and biases and every bias included (HF would
    start them at 1 and 0), so a missing bias or affine, or a wrong eps, changes the outputs.
    """
    from transformers import BertModel

    config = other_config(_PretrainedSizes(key))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = BertModel(config)
        with torch.no_grad():
            for name, param in model.named_parameters():
                base = 1.0 if name.endswith("LayerNorm.weight") else 0.0
                param.copy_(base + 0.5 * torch.randn(param.shape))
    return model.eval().requires_grad_(False)


class _PretrainedSizes:
    """The fields of the pretrained config that ``other_config`` reads, rebuilt from ``_config_key``."""

    def __init__(self, key: tuple):
        sizes = dict(zip(SIZE_FIELDS, key[: len(SIZE_FIELDS)], strict=True))
        self.hidden_size, self.intermediate_size = sizes["hidden_size"], sizes["intermediate_size"]
        self.num_attention_heads, self.num_hidden_layers = sizes["num_attention_heads"], sizes["num_hidden_layers"]
        self.vocab_size, self.max_position_embeddings = sizes["vocab_size"], sizes["max_position_embeddings"]
        self.type_vocab_size = sizes["type_vocab_size"]
        (
            self.layer_norm_eps,
            self.hidden_dropout_prob,
            self.attention_probs_dropout_prob,
            self.pad_token_id,
        ) = key[len(SIZE_FIELDS) :]
        self.hidden_act = "gelu"


def describe_config(config) -> str:
    sizes = config_sizes(config)
    return (
        f"hidden_size {sizes['hidden_size']}, {sizes['num_attention_heads']} heads of size "
        f"{sizes['attention_head_size']}, intermediate_size {sizes['intermediate_size']}, "
        f"layer_norm_eps {config.layer_norm_eps:g}, {sizes['num_hidden_layers']} layers, "
        f"vocab_size {sizes['vocab_size']}, max_position_embeddings {sizes['max_position_embeddings']}"
    )


def _wired(task, field: str, value, pretrained, config, *details: str) -> None:
    """Fail: the learner's module has ``value`` where ``config.<field>`` says otherwise."""
    theirs = config_sizes(pretrained).get(field, getattr(pretrained, field, None))
    want = config_sizes(config).get(field, getattr(config, field, None))
    origin = " (the pretrained model's)" if value == theirs else ""
    task.fail(f"built with {field} {value}{origin} where config.{field} = {want}: read sizes from config", *details)


def _field_for(value: int, want: int, pretrained, config) -> str | None:
    """The size field whose other-config value is ``want`` and pretrained value is ``value`` (or just ``want``)."""
    old, new = config_sizes(pretrained), config_sizes(config)
    fields = [f for f in SIZE_FIELDS if new[f] == want]
    return next((f for f in fields if old[f] == value), fields[0] if fields else None)


def _layer_count(names) -> int:
    return len({m.group(1) for n in names if (m := re.search(r"(?:^|\.)layer\.(\d+)(?:\.|$)", n))})


def explain_sizes(task, module: nn.Module, hf: nn.Module, pretrained, config, against: str) -> None:
    """Fail naming the size the learner wired in, when ``module`` (built from ``config``) shows one.

    Compares, with HF's ``hf`` built from the same config: the number of layers, every parameter's
    shape, the attributes HF keeps sizes in (``num_attention_heads``, ``attention_head_size``,
    ``all_head_size``), each LayerNorm's eps and each Dropout's p.
    """
    mine = state_shapes(module)
    theirs = state_shapes(hf)
    have, want = _layer_count(mine), _layer_count(theirs)
    if have != want:
        _wired(task, "num_hidden_layers", have, pretrained, config)
    for key, shape in theirs.items():
        if key in mine and mine[key] != shape:
            detail = f"`{key}` has shape {list(mine[key])}, expected {list(shape)} like {against}"
            for got, expected in zip(mine[key], shape, strict=False):
                field = _field_for(got, expected, pretrained, config) if got != expected else None
                if field is not None:
                    _wired(task, field, got, pretrained, config, detail)
            task.fail(f"parameter shapes differ from {against}", detail, "Read every size from `config`.")
    mine_modules = dict(module.named_modules())
    for name, sub in hf.named_modules():
        learner = mine_modules.get(name)
        if learner is None:
            continue
        where = f"`self.{name}`" if name else "the module"
        for attr in ("num_attention_heads", "attention_head_size", "all_head_size"):
            value = getattr(learner, attr, None)
            if hasattr(sub, attr) and isinstance(value, int) and value != getattr(sub, attr):
                field = "hidden_size" if attr == "all_head_size" else attr
                _wired(task, field, value, pretrained, config, f"{where}.{attr} is {value}")
        if isinstance(sub, nn.LayerNorm):
            eps = getattr(learner, "eps", None)
            if isinstance(eps, float) and eps != sub.eps:
                typed = eps == pretrained.layer_norm_eps
                origin = " (the pretrained model's)" if typed else ""
                task.fail(
                    f"{where}: LayerNorm eps is {eps:g}{origin}, not config.layer_norm_eps = {sub.eps:g}",
                    "Pass eps=config.layer_norm_eps to nn.LayerNorm.",
                    mistake=diagnose.REGISTRY["layernorm-eps-typed"] if typed else None,
                )
        if isinstance(sub, nn.Dropout) and isinstance(learner, nn.Dropout) and learner.p != sub.p:
            field = (
                "attention_probs_dropout_prob"
                if sub.p == config.attention_probs_dropout_prob
                else "hidden_dropout_prob"
            )
            origin = " (the pretrained model's)" if learner.p == getattr(pretrained, field) else ""
            task.fail(
                f"{where}: dropout p is {learner.p:g}{origin}, not config.{field} = {sub.p:g}",
                f"Build it with nn.Dropout(config.{field}).",
            )


# -- the dropout check: where dropout acts -----------------------------------------------------


def set_submodule(module: nn.Module, path: str, value: nn.Module) -> None:
    """``module.<path> = value`` by attribute reads and one assignment (``path`` like ``output.dropout``)."""
    *parents, last = path.split(".")
    for name in parents:
        module = getattr(module, name)
    setattr(module, last, value)


def check_dropout_placement(
    task: ModuleTask, cls, ctx: Context, layer, inputs: dict, module=None, other_config: bool = False
) -> None:
    """In train mode, the learner's module equals HF's when dropout acts in the same places.

    First with every nn.Dropout of both modules (same attribute paths) replaced by a
    ``DropoutProbe``, whose masks depend on shapes only; then with HF's draws recorded and the
    learner's located among them (``located_dropout``), so right code that drops in another
    layout or in pieces (sequence-first, chunks of tokens, one head at a time) gets HF's mask
    element by element, and a mask shared over rows gets none of HF's; else, unprobed, from the
    same seed, so a rewrite that calls ``nn.functional.dropout(x, self.dropout.p, self.training)``
    passes too. Fails only when all three differ, naming the placement mistake that explains
    the outputs.

    Args:
        module: the learner's module, loaded for ``layer``, if one was built already (its
            dropouts are replaced by probes).
        other_config: ``ctx`` is another config's (``Context.other``): a failure names its
            dropout probabilities, which differ from the pretrained model's 0.1.
    """
    reference_module = task.reference(ctx, layer)
    paths = [name for name, sub in reference_module.named_modules() if isinstance(sub, nn.Dropout) and sub.p > 0]
    if not paths:
        return
    seed = placement.SEED

    def run(probes: bool, module=None) -> tuple[dict, dict]:
        hf = copy.deepcopy(reference_module).train()
        module = (module if module is not None else task.learner_for(cls, ctx, layer)).train()
        if probes:
            mine = dict(module.named_modules())
            for path in paths:
                set_submodule(hf, path, DropoutProbe(hf.get_submodule(path).p))
                if isinstance(mine.get(path), nn.Dropout):
                    set_submodule(module, path, DropoutProbe(mine[path].p))
        with torch.no_grad():
            return task.call(module, inputs, seed=seed), task.call(hf, inputs, seed=seed)

    def located(small_kept: bool = False) -> tuple[dict, dict]:
        hf = copy.deepcopy(reference_module).train()
        with torch.no_grad(), located_dropout.recording() as recorded:
            expected = task.call(hf, inputs)
        replayed = located_dropout.SmallKept(recorded) if small_kept else recorded
        with torch.no_grad(), located_dropout.replaying(replayed):
            return task.call(task.learner_for(cls, ctx, layer).train(), inputs), expected

    def same(pair) -> bool:
        got, expected = pair
        # Another config's random weights give larger values than the pretrained ones: as in the
        # config check, float32's relative precision is allowed on top (a right softmax written
        # another way differs by that much, a wrong probability by far more).
        return all(
            tuple(got[k].shape) == tuple(expected[k].shape)
            and (
                allclose(expected[k], got[k], task.atol)
                or (
                    other_config
                    and bool(torch.allclose(got[k].detach().float(), expected[k].float(), atol=task.atol, rtol=1e-5))
                )
            )
            for k in expected
        )

    probed = run(probes=True, module=module)
    if same(probed):  # HF's dropouts, at HF's places, in HF's layout: the replay is not needed
        return
    replayed = located()
    if same(replayed):
        return
    from_seed = run(probes=False)
    if same(from_seed):
        return
    mistake = placement.diagnose_placement(task.id, reference_module, inputs, probed, from_seed)
    if mistake is None and not same((located(small_kept=True)[0], replayed[0])):
        # its output moves with the mask of a tensor smaller than any HF drops: a shared mask
        mistake = diagnose.REGISTRY["dropout-mask-shared"]
    got, expected = from_seed
    name = next(
        k
        for k in expected
        if tuple(got[k].shape) != tuple(expected[k].shape) or not allclose(expected[k], got[k], task.atol)
    )
    if other_config:
        config = ctx.model.config
        task.fail(
            f"in train mode, built from another config (hidden_dropout_prob {config.hidden_dropout_prob:g}, "
            f"attention_probs_dropout_prob {config.attention_probs_dropout_prob:g}), `{name}` differs from HF's "
            f"{task.title} from the same seed, though it matched with the pretrained model's 0.1 everywhere",
            "Read each dropout probability from config: config.hidden_dropout_prob after a dense layer and on "
            "the embeddings, config.attention_probs_dropout_prob on the attention weights; never type 0.1.",
        )
    task.fail(
        f"in train mode, `{name}` differs from HF's {task.title}, both with the same fixed dropout masks "
        "and from the same seed: dropout does not act where HF's does, or not on each element on its own "
        "(a mask shared over tokens, sentences or heads is not HF's dropout)",
        worst_position(expected[name], got[name], task.outputs[name])
        if got[name].shape == expected[name].shape
        else "",
        "" if mistake is not None else placement.WHERE.get(task.id, placement.PARTS_ONLY),
        mistake=mistake,
    )


# -- tasks built on earlier tasks' modules ------------------------------------------------------


@contextlib.contextmanager
def _parts_may_run_hf_code(task):
    """While the learner's composite module is built, its parts' constructors may run HF's code.

    A part built on HF's class is that part's task's failure (and is replaced by HF's own here);
    any HF module left inside the composite is refused by ``own_module``'s scan, and calls into
    HF's code from the composite's ``forward`` are still refused.
    """
    task.forbid_shortcuts = False
    try:
        yield
    finally:
        del task.forbid_shortcuts  # back to the class's value


def _entries(module: nn.Module, stack: str) -> int:
    """How many entries ``module.<stack>`` (a ModuleList) has, counting one object as often as it appears."""
    try:
        return len(getattr(module, stack))
    except (AttributeError, TypeError, RuntimeError):
        return 0


# reference module -> the one copy of it whose tensors every part_reference shares
_PART_COPIES: weakref.WeakKeyDictionary[nn.Module, nn.Module] = weakref.WeakKeyDictionary()


class BuiltOnParts(ModuleTask):
    """Mixin for a task whose module holds earlier tasks' modules (BertAttention, BertLayer, ...).

    Its checks run the learner's module with HF's own modules in place of the learner's parts
    (``parts``: attribute -> task id), so a bug in an earlier task never fails this one. The
    learner's own classes are still refused when built on transformers' (``own_module``). When
    the learner's module cannot run with HF's parts, the failure says which part to fix first.
    """

    parts: dict[str, str] = {}  # attribute -> id of the task that writes it
    stack: str | None = None  # the attribute holding a ModuleList of num_hidden_layers parts

    def part_tasks(self) -> dict:
        """attribute -> the Task instance of that part (imported late: the task modules import this one)."""
        from bertlab.checks import TASKS

        return {attr: TASKS[task_id] for attr, task_id in self.parts.items()}

    def part_reference(self, ctx: Context, attr: str) -> nn.Module:
        """A copy of HF's module for ``attr`` (of the first layer; ``load`` loads each layer's weights).

        Each call gives new module objects (callers mark and retype them), all holding the tensors
        of one copy kept per reference module: the same tensors cross to the learner once per
        notebook, where fresh copies of every tensor sent (BertModel's encoder: 90 MB) crossed
        once per check, a gigabyte and more per notebook.
        """
        source = self.reference(ctx, self.layers(ctx)[0]).get_submodule(attr)
        kept = _PART_COPIES.get(source)
        if kept is None:
            kept = _PART_COPIES[source] = copy.deepcopy(source)
        shared = {id(t): t for t in [*kept.parameters(), *kept.buffers()]}
        return given(copy.deepcopy(kept, memo=shared))

    def own_module(self, cls, ctx: Context) -> nn.Module:
        """The learner's module as built, its parts checked to exist where HF keeps them."""
        with _parts_may_run_hf_code(self):
            module = super().build(cls, ctx)
        for name, sub in module.named_modules():
            if is_reference(sub):
                self.fail(
                    f"`{name or 'the module'}` is {reference_origin(sub)} {type(sub).__name__}: this task is to write "
                    f"{self.title} yourself.",
                    "Use your own classes of the earlier tasks; the grader puts HF's in their place itself.",
                )
        children = dict(module.named_children())
        for attr, task_id in self.parts.items():
            if not isinstance(children.get(attr), nn.Module):
                title = self.part_tasks()[attr].title
                self.fail(
                    f"`self.{attr}` is missing: HF's {self.title} keeps its {title} (Task {task_id}) there",
                    "Use HF's attribute names exactly, so the pretrained weights load.",
                )
        if self.stack is not None:
            count = len([n for n, _ in module.named_modules() if re.fullmatch(rf"{self.stack}\.\d+", n)])
            want = ctx.model.config.num_hidden_layers
            entries = _entries(module, self.stack)
            if entries > count:  # named_modules names a module once, however many entries hold it
                part = self.part_tasks()[self.stack].title
                self.fail(
                    f"the {entries} entries of `self.{self.stack}` are {count} "
                    f"module object{'s' if count > 1 else ''}: "
                    f"`[layer] * n` (or appending one layer n times) repeats the same {part}",
                    f"Entries that are one object share one set of weights: the pretrained layers 0 to {entries - 1} "
                    f"all load into it (the last one wins), so every layer computes the same. Build each anew: "
                    f"nn.ModuleList([{part}(config) for _ in range(config.num_hidden_layers)]).",
                )
            if count != want:
                if ctx.capture is None:  # the config check's other config
                    _wired(self, "num_hidden_layers", count, reference.load_config(), ctx.model.config)
                self.fail(f"`self.{self.stack}` holds {count} layers, expected config.num_hidden_layers = {want}")
        return module

    def build(self, cls, ctx: Context) -> nn.Module:
        module = self.own_module(cls, ctx)
        for attr in self.parts:
            set_submodule(module, attr, self.part_reference(ctx, attr))
        return module

    def differing_part(self, cls, ctx: Context) -> str:
        """ "fails because your X (task N) differs; fix N first" for the first part that differs from HF's, or ""."""
        try:
            own = self.own_module(cls, ctx)
        except CheckFailed:
            return ""
        for attr, task in self.part_tasks().items():
            part = getattr(own, attr)
            if attr == self.stack:
                part = getattr(part, "0")
            layer = task.layers(ctx)[0]
            try:
                part = task.load(part, ctx, layer)
                inputs, expected = task.captured(ctx, layer)
                with torch.no_grad():
                    got = task.call(part, inputs)
                if all(
                    tuple(got[k].shape) == tuple(v.shape) and allclose(v, got[k], task.atol)
                    for k, v in expected.items()
                ):
                    continue
            except (CheckFailed, KeyError, RuntimeError):
                pass
            return (
                f"{self.title} fails with HF's parts because your {task.title} (task {task.id}) differs; "
                f"fix {task.id} first."
            )
        return ""

    def _on_parts(self, stage, cls, ctx: Context) -> None:
        try:
            stage(cls, ctx)
        except CheckFailed as err:
            # Values that differ with HF's parts in place are this task's own mistake; anything else
            # (an error, a wrong type or shape) may come from a part the learner's module relies on.
            if err.mistake is not None or err.cause == "values":
                raise
            blame = self.differing_part(cls, ctx)
            if not blame:
                raise
            raise err.adding(blame) from None

    def check_shapes(self, cls, ctx):
        self._on_parts(super().check_shapes, cls, ctx)

    def check_values(self, cls, ctx):
        self._on_parts(super().check_values, cls, ctx)

    def check_masks(self, cls, ctx):
        self._on_parts(super().check_masks, cls, ctx)

    def check_calls(self, cls, ctx):
        self._on_parts(super().check_calls, cls, ctx)

    def check_config(self, cls, ctx):
        self._on_parts(super().check_config, cls, ctx)

    def check_dropout(self, cls, ctx):
        self._on_parts(super().check_dropout, cls, ctx)

    def check_gradients(self, cls, ctx):
        self._on_parts(super().check_gradients, cls, ctx)

    def check_arguments(self, cls, ctx):
        self._on_parts(super().check_arguments, cls, ctx)
