"""The stages a task's checks run in: one registry for the dispatch, the docs and the notebooks.

A task lists the stages that apply to it (``Task.stages``, by name, as the notebooks' grade cells
pass them: ``check("3.2", BertSelfAttention, upto="values")``) and implements each as a method
``check_<name>(obj, ctx)``. The order is this registry's, the same for every task, so "up to
values" means the same checks everywhere. A task class that names an unknown stage, lists them
out of order or lacks a stage's method fails when it is defined; a grade cell that names a stage
its task lacks fails at once, before anything runs. The learner guide's table of checks is
rendered from ``ORDER`` at build time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    """One kind of check.

    Attributes:
        name: what grade cells pass as ``upto=`` or ``only=``.
        question: what it asks of the learner's code, as the learner guide's table shows it.
    """

    name: str
    question: str

    @property
    def method(self) -> str:
        """The task method that runs it."""
        return f"check_{self.name}"


ORDER: tuple[Stage, ...] = (
    Stage("names", "Do your parameter names and shapes match Hugging Face's, so the weights load?"),
    Stage("shapes", "Does your code run and return outputs of the right shapes?"),
    Stage(
        "values",
        "Do your outputs equal the pretrained model's, in every layer, to the task's tolerance (1e-5 for a "
        "module; for numpy and Task 7, what the reference computes from the same weights)?",
    ),
    Stage("batches", "On random batch sizes and lengths, do your outputs equal Hugging Face's module's?"),
    Stage(
        "masks",
        "Are random batch sizes, lengths and padding handled as Hugging Face's model handles them (every mask "
        "form it accepts)?",
    ),
    Stage(
        "edge_cases",
        "On inputs real activations never give (another axis, huge scores, constant rows, few features), "
        "are your numpy functions still right?",
    ),
    Stage("random_init", "Does your measurement give the reference's answer on a freshly initialised model too?"),
    Stage(
        "calls",
        "Called again with other inputs and another mask of the same shape, and once more with the first, "
        "does your module answer each call right and leave its weights as they were? And called many more "
        "times on the same tensors refilled in place and on reused memory, then with other weights loaded? A "
        "value you keep for yourself (the last probabilities, for a plot) is fine while no later call's answer "
        "depends on it.",
    ),
    Stage(
        "config",
        "Built from another `BertConfig` (other sizes, heads, eps, layers), do your outputs equal Hugging "
        "Face's? Sizes must come from `config`, never typed as numbers.",
    ),
    Stage(
        "arguments",
        "Called in every form Hugging Face's callers use (each optional argument left out, None, or given: "
        "`inputs_embeds` instead of `input_ids`, no token types, every mask form, another `scaling`), built "
        "from another config (every size and id differs), do your outputs and gradients equal Hugging Face's?",
    ),
    Stage(
        "dropout",
        "Is dropout where Hugging Face has it (checked in train mode), each element dropped on its own (any "
        "memory layout, any split into pieces; not one mask shared over tokens, sentences or heads), with the "
        "config's probabilities (checked on another config too), and off in eval mode?",
    ),
    Stage(
        "gradients",
        "Does every parameter and input get the gradient Hugging Face's module gives it (same weights, inputs "
        "and upstream gradient), in eval mode and in train mode (with Hugging Face's dropout masks)?",
    ),
    Stage(
        "buffers",
        "Are the default token types a `(1, max_position_embeddings)` buffer of zeros, and is a call without "
        "them answered as Hugging Face's?",
    ),
    Stage(
        "sentences",
        "Do your model's mean-pooled, normalised outputs equal sentence-transformers' embeddings (to 1e-5)?",
    ),
    Stage(
        "conclusions",
        "Does your measurement lead to the same conclusion as the reference's, wherever that one is clear?",
    ),
)
STAGES: dict[str, Stage] = {s.name: s for s in ORDER}
# The stages that ask whether a module has HF's form; a task's first grade cell ends in one of
# them ("names and shapes"). A failure there that names one attribute of a module that still
# loads the pretrained weights and runs (an eps, a padding_idx) blocks nothing: it costs a run
# that ends here, and a run that goes on is judged by the later checks, each failing on its own
# where that attribute shows. A module that cannot be built, loaded or run blocks them all.
FORM: tuple[str, ...] = ("names", "shapes")


def stage(name: str) -> Stage:
    """The stage called ``name``; an unknown name fails with the list of known ones."""
    try:
        return STAGES[name]
    except KeyError:
        raise ValueError(f"no check stage is called {name!r}; the stages are {', '.join(STAGES)}") from None


def validate(owner: str, names: tuple[str, ...], has_method) -> None:
    """Fail unless ``names`` are known stages, in the registry's order, each with its method.

    Args:
        owner: the task class, for the message.
        names: the stages the task lists.
        has_method: ``name -> bool``: whether the task implements ``check_<name>``.
    """
    positions = [ORDER.index(stage(n)) for n in names]
    if positions != sorted(set(positions)):
        order = ", ".join(n for n in STAGES if n in names)
        raise TypeError(f"{owner} lists its stages as {', '.join(names)}; in the course's order they are {order}")
    missing = [STAGES[n].method for n in names if not has_method(STAGES[n].method)]
    if missing:
        raise TypeError(f"{owner} lists stages it has no method for: {', '.join(missing)}")
