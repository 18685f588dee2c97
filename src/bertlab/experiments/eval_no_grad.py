"""What ``model.eval()`` and ``torch.no_grad()`` each change, measured on BERT.

``model.eval()`` sets every module's ``training`` flag to False. In transformers' BERT that flag
is read by dropout and by nothing else: each ``nn.Dropout`` module, and the dropout of the
attention probabilities (``training_reads`` lists the lines of the library's source that read
it). ``torch.no_grad()`` leaves every module as it is and stops autograd from recording: no
graph is built, and no tensor is kept for a backward pass that will not come.

Measured here: the outputs in train mode against eval mode (``train_mode_outputs``), the outputs
with every dropout probability set to 0 (``dropout_probability``), and what a forward pass with
gradients keeps for the backward pass, counted by ``torch.autograd.graph.saved_tensors_hooks``
(``saved_for_backward``).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType

import torch
from torch import nn

_READS_TRAINING = re.compile(r"\.training\b|\btraining=")


def training_reads(module: ModuleType) -> list[str]:
    """The lines of ``module``'s source that read a ``training`` flag, stripped, in order."""
    return [line.strip() for line in inspect.getsource(module).splitlines() if _READS_TRAINING.search(line)]


def dropouts(model: nn.Module) -> dict[str, float]:
    """``{module name: p}`` for every ``nn.Dropout`` in ``model``."""
    return {name: m.p for name, m in model.named_modules() if isinstance(m, nn.Dropout)}


@contextlib.contextmanager
def dropout_probability(model: nn.Module, p: float):
    """Within the block, every ``nn.Dropout`` of ``model`` drops with probability ``p``.

    BERT's attention reads its probability from its ``nn.Dropout`` module too. The old
    probabilities are restored on exit, even after an error.
    """
    modules = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    old = [m.p for m in modules]
    try:
        for m in modules:
            m.p = p
        yield model
    finally:
        for m, q in zip(modules, old, strict=True):
            m.p = q


@contextlib.contextmanager
def train_mode(model: nn.Module):
    """Within the block, ``model`` is in train mode; its mode before is restored on exit."""
    was = model.training
    try:
        yield model.train()
    finally:
        model.train(was)


@torch.no_grad()
def train_mode_outputs(model: nn.Module, batch: Mapping[str, torch.Tensor], seeds: Iterable[int]) -> torch.Tensor:
    """The last hidden state in train mode, one dropout draw per seed, under ``no_grad``.

    Each draw seeds torch's global generator (dropout draws from it); the global random state
    and the model's mode are left as they were.

    Returns:
        (draws, B, T, H).
    """
    outs = []
    with torch.random.fork_rng(devices=[]), train_mode(model):
        for seed in seeds:
            torch.manual_seed(seed)
            outs.append(model(**batch).last_hidden_state)
    return torch.stack(outs)


@dataclass(frozen=True)
class Saved:
    """What one forward pass kept for a backward pass.

    Attributes:
        count: how many times autograd saved a tensor (one tensor may be saved by several operations).
        activation_bytes: bytes of the distinct tensors saved that are not parameters: the
            activations, kept alive until the backward pass (or until the graph is dropped).
        parameter_bytes: bytes of the distinct parameters saved; they are kept by reference,
            not copied, and exist anyway.
        output: the last hidden state (B, T, H).
    """

    count: int
    activation_bytes: int
    parameter_bytes: int
    output: torch.Tensor


def saved_for_backward(model: nn.Module, batch: Mapping[str, torch.Tensor], grad: bool) -> Saved:
    """Count the tensors one forward pass saves for backward, with gradients recorded or under ``no_grad``.

    The pass runs on a copy of ``model`` whose parameters require gradients, as in training (the
    course's pretrained model has them switched off), in ``model``'s mode. A tensor is counted
    once by its storage; a storage shared with a parameter (a weight, or its transpose) counts
    as a parameter.
    """
    net = copy.deepcopy(model).requires_grad_(True)
    parameters = {p.untyped_storage().data_ptr() for p in net.parameters()}
    storages: dict[int, int] = {}
    count = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal count
        count += 1
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    context = contextlib.nullcontext() if grad else torch.no_grad()
    with context, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        output = net(**batch).last_hidden_state
    activation = sum(n for ptr, n in storages.items() if ptr not in parameters)
    parameter = sum(n for ptr, n in storages.items() if ptr in parameters)
    return Saved(count, activation, parameter, output.detach())
