"""``output_hidden_states`` and ``output_attentions``: what BertModel collects on the way, and how.

transformers does not thread these flags through its layers: forward hooks on every BertLayer
(hidden states) and BertSelfAttention (attention probabilities) append to a per-call collection,
and BertModel adds what was collected to its output. The same is done here, so the results are the
same tensors in the same order: the first BertLayer's input (the embeddings output), then each
layer's output; the attention probabilities of each layer. The hooks are installed when a call
first asks for something, on every such module that has none yet.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from torch import nn

# The collection of the BertModel call running in this thread or task, or None outside one.
_COLLECTED: ContextVar[dict[str, Any] | None] = ContextVar("bertlab_bert_collected", default=None)
_SELECTION = "_hidden_states_layers"  # which hidden states output_hidden_states=[i, j] keeps


class _Recorder:
    """The forward hook that appends one kind of output (``key``) of a module to the running collection.

    A class, not a closure: a model holding these hooks can still be pickled and deep-copied.
    """

    def __init__(self, key: str, index: int) -> None:
        self.key = key
        self.index = index  # a layer returns the hidden state itself; self-attention (output, probabilities)

    def __call__(self, module: nn.Module, args: tuple, output: Any) -> None:
        collected = _COLLECTED.get()
        if collected is None or self.key not in collected:
            return  # no call is collecting this output
        found = output[self.index] if isinstance(output, tuple) else output
        if self.key == "hidden_states":
            if not collected[self.key]:
                _append_hidden(collected, args[0])  # the first layer's input: the embeddings output
            if found is not None:
                _append_hidden(collected, found)
        elif found is not None:
            collected[self.key].append(found)


def _append_hidden(collected: dict[str, Any], hidden: Any) -> None:
    hidden_states = collected["hidden_states"]
    selection = collected.get(_SELECTION)
    hidden_states.append(hidden if selection is None or len(hidden_states) in selection else None)


def install_hooks(model: nn.Module, targets: dict[str, type[nn.Module]]) -> None:
    """Hook every submodule of ``model`` that is a ``targets`` class and is not hooked yet.

    transformers hooks a model once and marks it; here each module is checked instead, so a layer
    put in later, or a model whose state was copied without its hooks, is recorded all the same.
    """
    for module in model.modules():
        for key, cls in targets.items():
            hooked = any(isinstance(h, _Recorder) and h.key == key for h in module._forward_hooks.values())
            if isinstance(module, cls) and not hooked:
                module.register_forward_hook(_Recorder(key, 0 if key == "hidden_states" else 1))


def requested(model: nn.Module, targets: dict[str, type[nn.Module]], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The empty collection for what this call asks for: keyword first, then the model's config.

    ``output_attentions`` also asks for ``cross_attentions``, which stay empty in an encoder: the
    output then holds ``cross_attentions=()``, as transformers' does.
    """
    config = model.config
    flags = {key: kwargs.get(f"output_{key}", getattr(config, f"output_{key}", False)) for key in targets}
    flags["cross_attentions"] = kwargs.get("output_attentions", getattr(config, "output_attentions", False))
    collected: dict[str, Any] = {key: [] for key, flag in flags.items() if flag}
    selection = flags.get("hidden_states")
    if selection is not None and not isinstance(selection, bool):  # an index or indices, possibly negative
        count = config.num_hidden_layers + 1
        chosen = [selection] if isinstance(selection, int) else list(selection)
        collected[_SELECTION] = {i % count for i in chosen if -count <= i < count}
    if collected:
        install_hooks(model, targets)
    return collected


@contextmanager
def collecting(collected: dict[str, Any]) -> Iterator[None]:
    """Make the hooks append to ``collected`` for the duration of one forward pass."""
    token = _COLLECTED.set(collected)
    try:
        yield
    finally:
        _COLLECTED.reset(token)


def attach(config: Any, outputs: Any, collected: dict[str, Any]) -> None:
    """Add the collected tuples to ``outputs``; the last hidden state is the output's own tensor."""
    collected.pop(_SELECTION, None)
    tie = getattr(config, "tie_last_hidden_states", None)  # a config may turn this off
    for key, values in collected.items():
        if key == "hidden_states" and values and values[-1] is not None and (tie is None or tie):
            outputs[key] = (*values[:-1], outputs.last_hidden_state)
        else:
            outputs[key] = tuple(values)
