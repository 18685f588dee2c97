"""Known mistakes: when a learner's output equals what a mistake produces, name it.

Each mistake carries a function that computes what the *mistaken* code would output on the same
weights and inputs. A failing check compares the learner's output against each mistake of its
task; a match turns "values differ" into "you forgot the 1/sqrt(head_size) scaling".
Mistakes without such a function (``outputs=None``) are detected by a dedicated check stage,
e.g. dropout left active in eval mode.

Each mistake's hint ladder (what to look at, where it is explained, the fix in words) is data,
in ``ladders``, with each task's. Importing this module loads no torch, so ``bertlab grade``
renders them (``bertlab.hints``) without the judge's libraries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bertlab.diagnose.ladders import LADDERS, Steps

if TYPE_CHECKING:
    import torch

MATCH_ATOL = 1e-4


@dataclass(frozen=True)
class Mistake:
    """A named, recognisable mistake.

    Attributes:
        id: short kebab-case name, printed in feedback and used by the mutation test.
        tasks: ids of the tasks whose output can show it (e.g. ``("3.1", "3.2")``).
        description: completes "Your output matches ...".
        lesson: lesson file stem that explains the right way.
        section: heading of that lesson's section.
        outputs: ``(reference_module, inputs) -> {name: tensor}``: what the mistaken code returns.
    """

    id: str
    tasks: tuple[str, ...]
    description: str
    lesson: str
    section: str
    outputs: Callable | None = None

    @property
    def ladder(self) -> Steps:
        """Its hint ladder's steps 1 and 3 (and step 2's equation): ``LADDERS[id]``."""
        return LADDERS[self.id]

    def hint(self, task: str | None = None) -> str:
        """What a failure of ``task`` says of this mistake; in a task that calls the learner's own
        function of an earlier one (``CALLS_EARLIER``), that the mistake may be that task's."""
        earlier = CALLS_EARLIER.get(task or "", {})
        made_in = next((t for t in self.tasks if t in earlier), None)
        again = (
            f"\n  It is Task {made_in}'s mistake: if your {earlier[made_in][1]} calls your {earlier[made_in][0]} "
            f"(Task {made_in}), fixing Task {made_in} fixes this too."
            if made_in is not None and made_in != task
            else ""
        )
        return (
            f"Your output matches {self.description} (known mistake `{self.id}`).\n"
            f'  See lessons/{self.lesson} (section "{self.section}").' + again
        )


REGISTRY: dict[str, Mistake] = {}

# Tasks whose function calls the learner's own functions of earlier tasks, which the grader does
# not replace (a module's parts it does, ``BuiltOnParts``): task -> {earlier task: (the earlier
# function, this task's function)}. A mistake of the earlier task then shows here too, and the
# message says where to fix it.
CALLS_EARLIER: dict[str, dict[str, tuple[str, str]]] = {
    "1.5": {
        t: (f, "bert_layer_forward")
        for t, f in (("1.1", "softmax"), ("1.2", "layer_norm"), ("1.3", "gelu"), ("1.4", "linear"))
    },
    "7.3": {"7.1": ("relative_residual", "residual_curves"), "7.2": ("layer_variant", "residual_curves")},
    "7.5": {"7.2": ("layer_variant", "lesion_effects"), "7.4": ("sentence_cosine", "lesion_effects")},
}


def register(mistake: Mistake) -> Mistake:
    if mistake.id in REGISTRY:
        raise ValueError(f"duplicate mistake id {mistake.id}")
    REGISTRY[mistake.id] = mistake
    return mistake


def name_also_in(mistake_id: str, tasks: tuple[str, ...], outputs: Callable) -> Mistake:
    """Name a registered mistake in more tasks, simulated there by ``outputs``.

    One mistake keeps one id wherever a learner can make it: the unbiased variance of a
    hand-written LayerNorm is the same mistake in numpy (Task 1.2) and in a module (Task 4.1).
    The simulation that runs is the one whose kind of task the check is: module tasks pass an
    ``nn.Module`` as the reference, numpy tasks do not.
    """
    first = REGISTRY[mistake_id]

    def either(reference, inputs):
        import torch

        chosen = outputs if isinstance(reference, torch.nn.Module) else first.outputs
        return chosen(reference, inputs) if chosen is not None else {}

    REGISTRY[mistake_id] = dataclasses.replace(first, tasks=first.tasks + tasks, outputs=either)
    return REGISTRY[mistake_id]


def for_task(task_id: str) -> list[Mistake]:
    return [m for m in REGISTRY.values() if task_id in m.tasks]


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    import torch

    return a.shape == b.shape and bool(torch.allclose(a, b, atol=MATCH_ATOL, rtol=MATCH_ATOL, equal_nan=True))


def diagnose(task_id: str, reference_module, inputs, got: dict, expected: dict) -> Mistake | None:
    """The first mistake of ``task_id`` whose outputs equal ``got`` (and differ from ``expected``)."""
    import torch

    from bertlab.diagnose import simulated

    for mistake in for_task(task_id):
        if mistake.outputs is None:
            continue
        try:
            with torch.no_grad():
                wrong = simulated.outputs(mistake.outputs, mistake.id, reference_module, inputs)
        # A simulation written for the usual call forms may not run on another (the arguments
        # check's inputs_embeds, scaling=None): on those inputs it explains nothing.
        except (TypeError, AttributeError, KeyError, IndexError, ValueError, RuntimeError):
            continue
        names = [n for n in wrong if n in got]
        if not names:
            continue
        # A mistake that changes nothing on these inputs proves nothing.
        if all(_close(wrong[n], expected[n]) for n in names):
            continue
        if all(_close(got[n].detach().float(), wrong[n]) for n in names):
            return mistake
    return None
