"""The dropout stage: an nn.Dropout of the config's p, off in eval mode, acting where HF's does,
on each element on its own.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from bertlab import diagnose
from bertlab.checks import located_dropout
from bertlab.checks.compare import allclose, worst_position
from bertlab.checks.framework import Context, _describe
from bertlab.checks.module_base import ModuleBase
from bertlab.diagnose import common as placement
from bertlab.diagnose.common import DropoutProbe


class DropoutChecks(ModuleBase):
    """Stage dropout (``bertlab.checks.stages``)."""

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


def set_submodule(module: nn.Module, path: str, value: nn.Module) -> None:
    """``module.<path> = value`` by attribute reads and one assignment (``path`` like ``output.dropout``)."""
    *parents, last = path.split(".")
    for name in parents:
        module = getattr(module, name)
    setattr(module, last, value)


def changed_dropout(task: DropoutChecks, reference_module, inputs: dict, replayed: dict, same):
    """The known mistake whose dropout, at HF's places, gives the learner's replayed outputs: HF's
    module replayed with its own draws unscaled, or applied twice; None when neither does."""
    with torch.no_grad(), located_dropout.recording() as recorded:
        task.call(copy.deepcopy(reference_module).train(), inputs)
    for variant, mistake in (
        (located_dropout.Unscaled, "dropout-not-scaled"),
        (located_dropout.Twice, "dropout-applied-twice"),
    ):
        with torch.no_grad(), located_dropout.patched(variant(recorded)).active():  # HF's module: here
            changed = task.call(copy.deepcopy(reference_module).train(), inputs)
        if same((replayed, changed)):
            return diagnose.REGISTRY[mistake]
    return None


def check_dropout_placement(
    task: DropoutChecks, cls, ctx: Context, layer, inputs: dict, module=None, other_config: bool = False
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
        # From one seed: a draw paired with none of HF's (a mask for another tensor) is drawn alike
        # in both replays, so only the small tensors kept whole can tell them apart.
        with torch.no_grad(), located_dropout.replaying(replayed):
            return task.call(task.learner_for(cls, ctx, layer).train(), inputs, seed=seed), expected

    def same(pair) -> bool:
        got, expected = pair
        # Another config's random weights give larger values than the pretrained ones: as in the
        # config check, float32's relative precision is allowed on top (a right softmax written
        # another way differs by that much, a wrong probability by far more).
        return all(
            tuple(got[k].shape) == tuple(expected[k].shape)
            and (
                allclose(expected[k], got[k], task.atol, task.rtol)
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
    if mistake is None:
        mistake = changed_dropout(task, reference_module, inputs, replayed[0], same)
    got, expected = from_seed
    name = next(
        k
        for k in expected
        if tuple(got[k].shape) != tuple(expected[k].shape) or not allclose(expected[k], got[k], task.atol, task.rtol)
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
    where = (
        worst_position(expected[name], got[name], task.outputs[name], task.atol, task.rtol)
        if got[name].shape == expected[name].shape
        else ""
    )
    if mistake is not None:
        task.fail(
            f"in train mode, `{name}` differs from HF's {task.title}, both with the same fixed dropout masks "
            "and from the same seed",
            where,
            mistake=mistake,
        )
    # No known mistake gives these outputs: say what was measured, and what could cause it.
    task.fail(
        f"in train mode, `{name}` differs from HF's {task.title}, with HF's keep decisions replayed wherever "
        "your dropout's input was found among HF's, and from the same seed (eval mode matched)",
        where,
        "What this measures cannot tell the cause: dropout acting elsewhere than HF's, another law than "
        "HF's (each element kept on its own with probability 1 - p, the kept ones scaled by 1 / (1 - p)), "
        "or one mask shared over tokens, sentences or heads.",
        placement.WHERE.get(task.id, placement.PARTS_ONLY),
    )
