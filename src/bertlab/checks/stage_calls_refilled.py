"""The calls stage's long run: many calls on the same tensors refilled, then new weights.

The first calls of the calls stage each get fresh copies of their inputs, and stop after four:
state kept by a tensor's identity (a mask cache keyed on ``data_ptr()``, an ``lru_cache`` on the
mask) never meets a repeated key there, and a forward that changes what it does after its fifth
call (a copy of its weights taken under ``no_grad``, reused from then on) never shows. Here the
module is called as real callers call it (``refilled_calls``, in the learner's process): many
times, a count drawn anew each run, on one set of tensors refilled in place with new values and
then on tensors allocated where freed ones were; its gradients are checked after those calls;
then other weights are loaded and it is called again. Every answer must be HF's.
"""

from __future__ import annotations

import contextlib
import random
import re

import torch
from torch.nn.utils.stateless import _reparametrize_module

from bertlab.checks.framework import CheckFailed, Context
from bertlab.checks.harness import Outcome, invoke_beside, load_weights
from bertlab.checks.refilled_calls import refilled_calls
from bertlab.checks.stage_gradients import GradientChecks

# How many calls the long run makes: more than a learner would wait for before a forward changes
# what it does, drawn each run (not seeded) so that no count typed in is safe; each call is on
# one sentence of the check's small random batch, a few milliseconds.
MANY = (12, 24)

ADVICE = (
    "A module's output depends on its inputs and weights only. Callers refill the same tensors in "
    "place, memory is reused and weights are loaded again: never key a cache on a tensor's identity "
    "(`id`, `data_ptr()`, an lru_cache on a tensor), on a call count or on a copy of the weights."
)


class RefilledCallChecks(GradientChecks):
    """The long run of stage calls (``stage_calls.CallChecks``)."""

    def check_refilled_calls(self, module, ctx: Context, layer, sets: list[dict], kept) -> None:
        """``sets``: inputs of one shape (three, at least), each differing from the next;
        ``kept``: the attributes the earlier calls of the stage changed."""
        hf = self.reference(ctx, layer)
        with torch.no_grad():
            expected = [{k: v.float() for k, v in self.call(hf, inputs).items()} for inputs in sets]
        count = random.SystemRandom().randint(*MANY)
        order = [(i + 1) % len(sets) for i in range(count)]  # never the same values twice in a row
        fresh_from = count // 2
        result = self.refilled(module, sets, order, fresh_from)
        names = kept_names(kept, result)
        if result["written"]:
            self.fail(
                f"forward writes to {', '.join(f'`self.{k}`' for k in result['written'][:5])}, a parameter or buffer",
                ADVICE,
            )

        def which(number: int) -> str:
            if number < fresh_from:
                return f"call {number + 1} of {count}, on the same input tensors as the call before, refilled in place"
            return f"call {number + 1} of {count}, on new input tensors allocated after the last ones were freed"

        with self.blaming(names):
            self.answers_as_hf(module, result, [(sets[i], expected[i]) for i in order], which)
            self.gradients_as_hf(module, ctx, layer, sets[0], self.grad_inputs, f", after {count} calls")
        self.check_new_weights(module, ctx, layer, sets, count, names)

    def check_new_weights(self, module, ctx: Context, layer, sets: list[dict], count: int, names: list[str]) -> None:
        """Other weights loaded after the long run: the next answers must follow them."""
        hf = self.reference(ctx, layer)
        state = other_weights(hf.state_dict())
        try:
            load_weights(module, state)
        except RuntimeError as err:
            self.fail(f"after {count} calls, other weights do not load: {str(err).splitlines()[0]}")
        with torch.no_grad(), _reparametrize_module(hf, state):
            expected = [{k: v.float() for k, v in self.call(hf, inputs).items()} for inputs in sets]
        order = list(range(len(sets)))
        result = self.refilled(module, sets, order, len(order))
        loaded = f"with other weights loaded after {count} calls"
        with self.blaming(names + kept_names((), result)):
            self.answers_as_hf(module, result, list(zip(sets, expected, strict=True)), lambda n: f"a call {loaded}")

    def refilled(self, module, sets: list[dict], order: list[int], fresh_from: int) -> dict:
        """``refilled_calls`` where the module lives; a grader's failure there is reported as one."""
        outcome = invoke_beside(module, refilled_calls, (module, sets, order, fresh_from, self.forbid_shortcuts))
        if outcome.kind != "ok":
            self.fail(f"the repeated calls could not run: {outcome.error or outcome.kind}")
        return outcome.value

    def answers_as_hf(self, module, result: dict, calls: list[tuple[dict, dict]], which) -> None:
        """Compare each answer of ``result`` with HF's; then fail as the call that did not return."""
        with self.replayed(module, iter(result["answers"])):
            for number, (inputs, want) in enumerate(calls[: len(result["answers"])]):
                got = self.call(module, inputs)
                self.compare(want, got, self.outputs, f"HF's {self.title} on {which(number)}")
        if result["failed"] is not None:
            number = len(result["answers"])
            try:
                self.outcome_value(Outcome(**result["failed"]), "forward", (), calls[number][0])
            except CheckFailed as err:
                raise err.adding(f"(on {which(number)})") from None

    @contextlib.contextmanager
    def replayed(self, module, answers):
        """While inside, ``call_learner`` on ``module`` returns the next of ``answers`` (made by
        ``refilled_calls``) instead of calling: ``self.call`` reads each answer as it reads a call's."""
        real = self.call_learner

        def replay(what, fn, *args, **kwargs):
            return next(answers) if fn is module else real(what, fn, *args, **kwargs)

        self.call_learner = replay  # type: ignore[method-assign]
        try:
            yield
        finally:
            del self.call_learner

    @contextlib.contextmanager
    def blaming(self, names: list[str]):
        """A failure inside names what the calls kept, where anything was kept."""
        try:
            yield
        except CheckFailed as err:
            if not names:
                raise err.adding(ADVICE) from None
            kept = ", ".join(dict.fromkeys(names[:6]))
            raise err.adding(
                f"forward keeps {kept} from one call to the next, and a later call's answer changes with it.", ADVICE
            ) from None


def kept_names(kept, result: dict) -> list[str]:
    """What kept state, as the message names it: the module's attributes (``kept``, and those the
    long run changed), then what outside the module the long run changed."""
    return [f"`self.{k}`" for k in sorted(set(kept) | set(result["kept"]))] + [f"`{k}`" for k in result["outside"]]


_LAYER = re.compile(r"^(.*\blayer\.)(\d+)(\..*)$")


# The word embeddings' table (12 million numbers) stays as it is: each new tensor crosses to the
# learner's process and stays held there, and a copy of that table kept by a forward run under
# the check's no_grad is found by the gradients after the long run anyway.
LARGEST_CHANGED = 4_000_000


def other_weights(state: dict) -> dict:
    """Weights of the same names and shapes, each different: a stack's layers rotated (each gets
    the next one's, tensors the learner's process holds already), every other floating tensor
    rolled by one row and scaled (but the largest, ``LARGEST_CHANGED``)."""
    layers = {int(m.group(2)) for m in map(_LAYER.match, state) if m}
    other = {}
    for name, value in state.items():
        match = _LAYER.match(name)
        if match and len(layers) > 1:
            index = (int(match.group(2)) + 1) % len(layers)
            other[name] = state[f"{match.group(1)}{index}{match.group(3)}"]
        elif value.is_floating_point() and value.dim() > 0 and value.numel() <= LARGEST_CHANGED:
            other[name] = value.roll(1, 0) * 0.9
        else:
            other[name] = value
    return other
