"""The machinery every task's checks share.

A task runs the stages that apply to it in the registry's order (``bertlab.checks.stages``) and
stops at the first failure, raising ``CheckFailed`` with a message in the course's feedback format:

```text
[Task 3.2] BertSelfAttention: values differ from the pretrained layer 2 (atol 1e-05, rtol 1.9e-06)
  max abs diff 3.1e-01 at (batch 0, token 3, dim 7): expected 0.412, got 0.103
  Your output matches ... (known mistake `no-scaling`).
  See lessons/03-multi-head-attention (section "Scaled scores").
```
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import torch

from bertlab import bert, diagnose
from bertlab import capture as capture_mod
from bertlab.checks import heatmap, located_dropout, precision
from bertlab.checks import stages as stages_mod
from bertlab.checks.compare import (
    RTOL,
    Difference,
    allclose,
    diagnose_non_finite,
    difference,
    non_finite,
    worst_position,
)
from bertlab.checks.feedback_traceback import learner_traceback
from bertlab.checks.harness import (
    describe_call,
    invoke_learner,
    reference_package,
)
from bertlab.checks.other_config import _config_key, _random_model

ATOL = 1e-5


class CheckFailed(AssertionError):
    """A check failed; ``str(err)`` is the learner-facing message.

    ``values`` holds the compared tensors when values differ (for ``heatmap``), else None.
    Whatever decides on a failure reads its fields, never its text: ``mistake`` (a known
    mistake's id), ``cause`` (``"values"`` when outputs differ from HF's, ``"raised"`` when the
    learner's code raised, ``"not_implemented"`` when it raised NotImplementedError, a stub not
    written yet, else None), ``values``, ``stage`` (the stage that failed, set by
    ``Task.run``) and ``blocking`` (False when it names one attribute of a module that still builds,
    loads the pretrained weights and runs: the checks after it can judge the rest, see ``Task.run``).
    The text is written once, by ``Task.fail``, and grows only by ``adding`` lines under it.
    """

    stage: str | None = None

    def __init__(
        self,
        message: str,
        mistake: str | None = None,
        values: Difference | None = None,
        cause: str | None = None,
        blocking: bool = True,
    ):
        super().__init__(message)
        self.mistake = mistake
        self.values = values
        self.cause = cause
        self.blocking = blocking

    @property
    def headline(self) -> str:
        """The failure's first line, ``[Task 3.2] BertSelfAttention: values differ ...``."""
        return str(self).splitlines()[0]

    def adding(
        self, *lines: str, mistake: str | None = None, headline_only: bool = False, first: bool = False
    ) -> CheckFailed:
        """This failure with ``lines`` under it (under its headline alone with ``headline_only``;
        right under its headline, before its details, with ``first``), its fields kept;
        ``mistake`` names a known mistake found since."""
        text = self.headline if headline_only else str(self)
        head, _, rest = text.partition("\n") if first else (text, "", "")
        joined = "\n  ".join([head, *filter(None, lines)]) + (f"\n{rest}" if rest else "")
        added = CheckFailed(joined, mistake or self.mistake, self.values, self.cause, self.blocking)
        added.stage = self.stage
        return added

    def _render_traceback_(self) -> list[str]:
        """What IPython (JupyterLab) shows for this exception: the learner's own lines, then the
        message. The grader's frames, and the source lines around them, say nothing to a learner."""
        return learner_traceback(self)


@dataclass
class Context:
    """What the checks compare against: the reference model (the course's own ``bertlab.bert``,
    bit-equal to transformers' as ``tests/test_course_bert.py`` and ``tests/test_judge_reference.py``
    prove), its config and its capture."""

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
            model=bert.load_model(model),
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
    rtol: float = RTOL  # on top of atol, relative to each expected value (compare.RTOL says why)
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
        # A form stage's failure that blocks nothing costs the run that ends in the form stages
        # (the "names and shapes" cell); a run that goes on is judged by the checks after it,
        # each of which still fails on its own wherever that attribute changes what it checks.
        kept: CheckFailed | None = None
        # Every stage runs every time: a cell between two grade cells may have changed the
        # learner's class, so nothing is answered from an earlier run.
        try:
            for name in stages:
                try:
                    getattr(self, stages_mod.STAGES[name].method)(obj, ctx)
                except CheckFailed as err:
                    err.stage = err.stage or name
                    if not err.blocking and name in stages_mod.FORM and stages[-1] not in stages_mod.FORM:
                        kept = kept or err
                        continue
                    if kept is not None:
                        note = f"(Before it, the {kept.stage} check failed: {_what(kept)})"
                        raise err.adding(note, first=True) from None
                    raise
        except CheckFailed as err:
            heatmap.show_in_notebook(err)  # the picture beside the message, in a Jupyter kernel only
            raise
        finally:
            self.forget_run()
        return self.passed(stages, kept)

    def passed(self, stages: tuple[str, ...], kept: CheckFailed | None = None) -> str:
        """The line a run of ``stages`` that passed prints (the learner guide shows it, from here);
        ``kept``: a form stage's failure that blocked nothing, said too (its own cell counts it)."""
        if kept is not None:
            ran = ", ".join(s for s in stages if s != kept.stage)
            return (
                f"[Task {self.id}] {self.title}: {ran} passed; {kept.stage} failed, which the cell that "
                f"checks {' and '.join(stages_mod.FORM)} counts: {_what(kept)}"
            )
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
        blocking: bool = True,
    ) -> NoReturn:
        """Fail saying ``what``; ``blocking=False`` when the module still builds, loads the pretrained
        weights and runs, so the checks after this one can judge the rest (``Task.run``)."""
        lines = [f"[Task {self.id}] {self.title}: {what}", *(f"  {d}" for d in details if d)]
        if mistake is not None:
            lines.append("  " + mistake.hint(self.id))
        raise CheckFailed("\n".join(lines), mistake.id if mistake else None, values, cause, blocking)

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
                cause="not_implemented",
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
                    f"`{name}` is {precision.name(have.dtype)}, expected {precision.name(want.dtype)} like {against}",
                    precision.advice(have.dtype)
                    if have.dtype in precision.HALF
                    # a wider dtype inside is right (float64 is more exact); only the result's dtype is HF's
                    else "Return the dtype of the inputs and weights (compute in float64 if you like, then cast "
                    "back with .to(...)); no torch.set_default_dtype().",
                )
            if allclose(want, have, self.atol, self.rtol):
                continue
            what = "values" if len(expected) == 1 else f"`{name}` values"
            mistake = None
            if diagnose_with is not None:
                mistake = diagnose.diagnose(self.id, *diagnose_with, got, expected) or diagnose_non_finite(
                    self.id, *diagnose_with, got, expected
                )
            half = None if mistake else precision.output_precision(have)
            computed = f": every value is a {precision.name(half)} number, computed in it" if half else ""
            self.fail(
                f"{what} differ from {against} ({self.tolerance()}){computed}",
                worst_position(want, have, dims[name], self.atol, self.rtol),
                precision.advice(half) if half else None,
                non_finite(got, dims, self.computed_in_order),
                mistake=mistake,
                values=difference(name, expected, got, dims[name]),
                cause="values",
            )

    def tolerance(self) -> str:
        """The values tolerance as the messages give it: ``atol 1e-05, rtol 1.9e-06``."""
        return f"atol {self.atol:g}" + (f", rtol {self.rtol:.1e}" if self.rtol else "")


def _what(err: CheckFailed) -> str:
    """A failure's headline without its ``[Task 2.1] BertEmbeddings: `` prefix."""
    return err.headline.split(": ", 1)[-1]


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
