"""Tasks built on earlier tasks' modules: the learner's module runs with HF's own parts in place."""

from __future__ import annotations

import contextlib
import copy
import re
import weakref

import torch
from torch import nn

from bertlab import bert
from bertlab.checks.compare import allclose
from bertlab.checks.framework import CheckFailed, Context, is_reference, reference_origin
from bertlab.checks.harness import (
    given,
)
from bertlab.checks.module_task import ModuleTask
from bertlab.checks.stage_config import _wired
from bertlab.checks.stage_dropout import set_submodule


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
        notebook, where fresh copies of every tensor sent (BertModel's encoder: 43 MB) crossed
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
            try:
                module = super().build(cls, ctx)
            except CheckFailed:
                # A reference class may refuse the checks' config (transformers' BertModel wants its
                # own config class, and the checks hand it the course's): refused as what it is.
                base = next((k for k in getattr(cls, "__mro__", ()) if reference_origin(k)), None)
                if base is None:
                    raise
                self.fail(
                    f"{cls.__name__} is {reference_origin(base)} {base.__name__}: this task is to write "
                    f"{self.title} yourself.",
                    f"Use {self.tools} only; HF's modules are what the grader compares with.",
                )
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
                    _wired(self, "num_hidden_layers", count, bert.load_config(), ctx.model.config)
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
                    tuple(got[k].shape) == tuple(v.shape) and allclose(v, got[k], task.atol, task.rtol)
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
