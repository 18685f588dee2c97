"""Mistakes any task with dropout can make, and how the dropout check tells where dropout acts.

Dropout is invisible in eval mode, so its placement is checked in train mode, twice (see
``bertlab.checks.stage_dropout.check_dropout_placement``):

1. every ``nn.Dropout`` inside the learner's module and inside HF's module (same attribute
   paths) is replaced by a ``DropoutProbe``, whose mask depends only on the shape it is given;
2. both modules run, unprobed, from one seed of torch's generator, so a rewrite that calls
   ``nn.functional.dropout(x, self.dropout.p, self.training)`` draws the same masks as HF.

A module that differs from HF's both ways has dropout in the wrong place. Each task registers
here a simulation of its placement mistakes (``register_placements``); the learner's outputs are
compared with each simulation, run the same two ways, to name the mistake.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from bertlab.diagnose import MATCH_ATOL, REGISTRY, Mistake, register

register(
    Mistake(
        "dropout-in-eval",
        ("2.1", "3.1", "3.2", "4.1", "4.2", "5.2", "6.1", "6.2", "6.4"),
        "dropout applied in eval mode: two identical calls give different outputs",
        "03-multi-head-attention",
        "Dropout",
    )
)
register(
    Mistake(
        "dropout-missing",
        ("2.1", "3.2", "4.1", "5.2"),
        "the output WITHOUT dropout in train mode: `self.dropout` is never applied (or only in eval mode)",
        "03-multi-head-attention",
        "Dropout",
    )
)
# Seen by the dropout check's replay of HF's draws (``located_dropout.SmallKept``): the output
# moves with the mask of a tensor smaller than any HF drops, so that mask is broadcast.
register(
    Mistake(
        "dropout-mask-shared",
        ("2.1", "3.1", "3.2", "4.1", "4.2", "5.2", "6.1", "6.2", "6.4"),
        "one dropout mask drawn for a smaller tensor and broadcast over tokens, features, sentences or heads "
        '("locked" dropout, dropout1d or dropout2d); HF keeps each element on its own',
        "03-multi-head-attention",
        "Dropout",
    )
)
# Seen by the dropout check's replays of HF's draws on HF's own module (``located_dropout.Unscaled``,
# ``located_dropout.Twice``): the learner's output is HF's with its dropout so changed.
register(
    Mistake(
        "dropout-not-scaled",
        ("2.1", "3.1", "3.2", "4.1", "4.2", "5.2", "6.1", "6.2", "6.4"),
        "dropout that zeroes the right elements but leaves the kept ones unscaled: HF multiplies them by "
        "1 / (1 - p), so that the expected value is the eval-mode one",
        "03-multi-head-attention",
        "Dropout",
    )
)
register(
    Mistake(
        "dropout-applied-twice",
        ("2.1", "3.1", "3.2", "4.1", "4.2", "5.2", "6.1", "6.2", "6.4"),
        "dropout applied twice in a row to the same tensor, where HF applies it once",
        "03-multi-head-attention",
        "Dropout",
    )
)
# Seen by the config check (another config, whose eps is not the pretrained 1e-12): the
# learner's outputs equal HF's with the pretrained model's eps in every LayerNorm.
register(
    Mistake(
        "layernorm-eps-typed",
        ("2.1", "4.1", "4.2", "5.2", "6.1", "6.2", "6.4"),
        "every LayerNorm with the pretrained model's eps typed in (or read from elsewhere) instead of "
        "config.layer_norm_eps",
        "06-layernorm",
        "The equation",
    )
)

# The seed both sides start from in train mode, and the probes' own seed.
SEED = 0

# Where HF applies dropout, by task: the hint when a misplaced dropout is no known mistake.
WHERE = {
    "2.1": "HF applies `self.dropout` once, to the output of the LayerNorm (the last step of forward).",
    "3.2": "HF applies dropout to the attention probabilities, after the softmax and before they weight "
    "the values (`dropout=self.dropout.p if self.training else 0.0` for eager_attention_forward).",
    "4.1": "HF applies `self.dropout` to dense(hidden_states) only, before the residual add: "
    "LayerNorm(dropout(dense(hidden_states)) + input_tensor).",
    "5.2": "HF applies `self.dropout` to dense(hidden_states) only, before the residual add: "
    "LayerNorm(dropout(dense(hidden_states)) + input_tensor).",
}
PARTS_ONLY = (
    "Here dropout acts only inside the parts (HF's own, in this check): call them in train mode as "
    "they are, and add no dropout of your own."
)


class DropoutProbe(nn.Dropout):
    """A dropout whose mask depends only on the shape it is given, not on torch's global generator.

    In train mode it multiplies by a keep-mask drawn from its own fresh generator (seeded with
    ``seed``) and rescales by 1 / (1 - p), like ``nn.Dropout``; in eval mode it is the identity.
    The same shapes get the same masks in the learner's module, in HF's and in a simulation.

    Args:
        p: probability of zeroing an element.
        seed: seed of the probe's own generator.
    """

    def __init__(self, p: float, seed: int = SEED):
        super().__init__(p)
        self.seed = seed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(any shape) -> the same shape."""
        if not self.training or self.p == 0:
            return x
        keep = torch.rand(x.shape, generator=torch.Generator().manual_seed(self.seed)) >= self.p
        return x * keep.to(x.dtype) / (1 - self.p)


def probe_drop(p: float) -> Callable:
    """Dropout as the probe applies it: ``x -> DropoutProbe(p)(x)`` in train mode."""
    probe = DropoutProbe(p).train()
    return probe


def seeded_drop(p: float) -> Callable:
    """Dropout as ``nn.Dropout(p)`` applies it in train mode, drawing from torch's global generator."""
    return lambda x: nn.functional.dropout(x, p, True)


def seeded(fn, seed: int = SEED):
    """``fn()`` with the global generator seeded, leaving the caller's generator state untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return fn()


# task id -> (simulate, flaws): ``simulate(module, inputs, flaw, make_drop)`` returns the outputs
# by name of HF's ``module`` in train mode with the placement ``flaw`` (None: HF's own), every
# dropout applied through ``make_drop(p)``.
PLACEMENTS: dict[str, tuple[Callable, tuple[str, ...]]] = {}


def register_placements(task_ids: tuple[str, ...], simulate: Callable, flaws: tuple[str, ...]) -> None:
    for task_id in task_ids:
        PLACEMENTS[task_id] = (simulate, flaws)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a.detach().float(), b, atol=MATCH_ATOL, rtol=MATCH_ATOL))


def _matches(got: dict, wrong: dict, expected: dict) -> bool:
    names = [n for n in wrong if n in got]
    return (
        bool(names)
        and any(not _close(wrong[n], expected[n]) for n in names)
        and all(_close(got[n], wrong[n]) for n in names)
    )


def diagnose_placement(task_id: str, module, inputs: dict, probed: tuple[dict, dict], from_seed: tuple[dict, dict]):
    """The placement mistake of ``task_id`` that explains the learner's train-mode outputs, or None.

    Args:
        module: HF's module (eval mode; the simulations run it by hand in train mode).
        inputs: the kwargs both modules were called with.
        probed: (learner's outputs, HF's outputs) with every dropout replaced by a probe.
        from_seed: (learner's outputs, HF's outputs), unprobed, from ``SEED``.
    """
    if task_id not in PLACEMENTS:
        return None
    simulate, flaws = PLACEMENTS[task_id]
    for flaw in flaws:
        with torch.no_grad():
            wrong = simulate(module, inputs, flaw, probe_drop)
            if _matches(probed[0], wrong, probed[1]):
                return REGISTRY[flaw]
            wrong = seeded(lambda flaw=flaw: simulate(module, inputs, flaw, seeded_drop))
            if _matches(from_seed[0], wrong, from_seed[1]):
                return REGISTRY[flaw]
    return None


# -- Task 2.1, BertEmbeddings: LayerNorm, then dropout (diagnose.embeddings holds its eval mistakes)

register(
    Mistake(
        "embeddings-dropout-before-layernorm",
        ("2.1",),
        "dropout applied to the sum of the three embeddings BEFORE the LayerNorm (in train mode), "
        "instead of to the LayerNorm's output",
        "02-embeddings",
        "The equation",
    )
)


def embeddings(module, inputs, flaw, make_drop) -> dict:
    """HF's BertEmbeddings in train mode on ``module``'s tables, with a placement ``flaw``.

    Args:
        module: HF's BertEmbeddings.
        inputs: ``input_ids`` (B, T) and optional ``token_type_ids``, ``position_ids`` (B, T).

    Returns:
        ``{"embeddings": (B, T, H)}``.
    """
    from bertlab.diagnose.embeddings import embeddings as by_hand

    drop = make_drop(module.dropout.p)
    total = by_hand(module, **inputs, flaw="embeddings-no-layernorm")["embeddings"]  # (B, T, H), before LayerNorm
    if flaw == "embeddings-dropout-before-layernorm":
        return {"embeddings": module.LayerNorm(drop(total))}
    out = module.LayerNorm(total)
    return {"embeddings": out if flaw == "dropout-missing" else drop(out)}


register_placements(("2.1",), embeddings, ("embeddings-dropout-before-layernorm", "dropout-missing"))
