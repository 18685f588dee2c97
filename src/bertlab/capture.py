"""Record what every sub-module of the reference model sees and returns on the corpus.

One forward pass with forward hooks. The checks feed a learner's module the *captured input*
of the matching pretrained module, so a bug upstream never cascades into a later task.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from bertlab import bert, corpus, model_files

# The sub-modules recorded in every layer, by their path inside ``encoder.layer.{i}``.
LAYER_PARTS = ("", "attention", "attention.self", "attention.output", "intermediate", "output")


@dataclass(frozen=True)
class Call:
    """One recorded call: positional args, keyword args and the output, detached."""

    args: tuple
    kwargs: dict
    output: Any


@dataclass
class Capture:
    """Everything the reference model computed on the corpus batch.

    Attributes:
        batch: the tokenized corpus (``input_ids``, ``token_type_ids``, ``attention_mask``: (B, T)).
        calls: recorded calls by module name, e.g. ``"encoder.layer.2.attention.self"``.
        hidden_states: ``num_hidden_layers + 1`` tensors of shape (B, T, H); [0] is the embeddings.
        attentions: ``num_hidden_layers`` tensors of shape (B, heads, T, T).
        last_hidden_state: (B, T, H).
        pooler_output: (B, H).
    """

    batch: dict
    calls: dict[str, Call] = field(repr=False)
    hidden_states: tuple
    attentions: tuple
    last_hidden_state: torch.Tensor
    pooler_output: torch.Tensor

    def layer(self, index: int, part: str = "") -> Call:
        """The call of ``encoder.layer.{index}.{part}`` (``part=""`` is the whole layer)."""
        return self.calls[f"encoder.layer.{index}" + (f".{part}" if part else "")]

    @property
    def num_layers(self) -> int:
        return len(self.attentions)


def _detach(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_detach(v) for v in value)
    if isinstance(value, dict):
        return {k: _detach(v) for k, v in value.items()}
    return value


def run(model, batch) -> Capture:
    """Run ``model`` once on ``batch`` and record the calls of the modules the checks use."""
    names = {"embeddings", "pooler", "encoder"}
    names |= {
        f"encoder.layer.{i}" + (f".{p}" if p else "")
        for i in range(model.config.num_hidden_layers)
        for p in LAYER_PARTS
    }
    calls: dict[str, Call] = {}
    handles = []
    for name, module in model.named_modules():
        if name in names:

            def hook(mod, args, kwargs, output, name=name):
                calls.setdefault(name, Call(_detach(args), _detach(kwargs), _detach(output)))

            handles.append(module.register_forward_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            out = model(**batch, output_hidden_states=True, output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    return Capture(
        batch=dict(batch),
        calls=calls,
        hidden_states=_detach(out.hidden_states),
        attentions=_detach(out.attentions),
        last_hidden_state=_detach(out.last_hidden_state),
        pooler_output=_detach(out.pooler_output),
    )


@functools.cache
def _capture(path) -> Capture:
    model = bert.load_model(path)
    return run(model, corpus.batch(bert.load_tokenizer(path)))


def capture(model: str | os.PathLike | None = None) -> Capture:
    """The reference model's capture on the course corpus, computed once per process."""
    return _capture(model_files.model_dir(model))
