"""The arguments stage: every form HF's callers call the module in, under another config,
values and gradients.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bertlab.checks.call_forms import CallForm
from bertlab.checks.framework import CheckFailed, Context
from bertlab.checks.other_config import describe_config
from bertlab.checks.stage_config import ConfigChecks
from bertlab.checks.stage_gradients import GradientChecks


class ArgumentChecks(GradientChecks, ConfigChecks):
    """Stage arguments (``bertlab.checks.stages``): its table of call forms is ``call_forms``."""

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


def _in_form(err: CheckFailed, form: CallForm, *lines: str) -> CheckFailed:
    """``err`` with ``lines`` and, unless it names a known mistake, what HF does with ``form``."""
    lines += (form.why,) if form.why and err.mistake is None else ()
    return err.adding(*lines)
