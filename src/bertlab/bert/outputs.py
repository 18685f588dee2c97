"""What BertEncoder and BertModel return: named tensors that also index like a tuple.

Code written against transformers reads a model's output in several ways: ``out.last_hidden_state``,
``out["pooler_output"]``, ``out[0]``, ``last, pooled = out.to_tuple()``, ``out.keys()``. ModelOutput
answers all of them as transformers' ModelOutput does: an ordered dict holding only the fields that
are not None, in the order they were set, each also an attribute; integer indices and ``to_tuple()``
count those fields only (with ``output_attentions=True``, ``out[2]`` is the attentions).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import torch


class ModelOutput(OrderedDict):
    """Base of the output dataclasses: a dict of the fields set to something other than None."""

    def __post_init__(self) -> None:
        # The dataclass __init__ set every field as an attribute; the dict holds the ones not None.
        for field in fields(self):  # type: ignore[arg-type]  # subclasses are dataclasses
            value = getattr(self, field.name)
            if value is not None:
                self[field.name] = value

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return dict(self.items())[key]
        return self.to_tuple()[key]  # an int or a slice, over the fields set

    def __setattr__(self, name: str, value: Any) -> None:
        if value is not None and name in {field.name for field in fields(self)}:  # type: ignore[arg-type]
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{type(self).__name__} fields are set, not removed or merged")

    __delitem__ = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __reduce__(self):  # type: ignore[override]
        # Pickle through the dataclass constructor: the dict part alone would lose the None fields.
        if not is_dataclass(self):
            return super().__reduce__()
        callable_, _args, *remaining = super().__reduce__()
        return (callable_, tuple(getattr(self, field.name) for field in fields(self)), *remaining)

    def to_tuple(self) -> tuple[Any, ...]:
        """The fields that are set, in order."""
        return tuple(self[key] for key in self.keys())


@dataclass
class BaseModelOutputWithPastAndCrossAttentions(ModelOutput):
    """BertEncoder's output. Only last_hidden_state is ever set by the encoder itself."""

    last_hidden_state: torch.Tensor | None = None  # (B, T, H)
    past_key_values: Any = None  # a decoder's cache: never set here
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None


@dataclass
class BaseModelOutputWithPoolingAndCrossAttentions(ModelOutput):
    """BertModel's output; hidden_states and attentions are set when asked for (output_hidden_states=True...)."""

    last_hidden_state: torch.Tensor | None = None  # (B, T, H)
    pooler_output: torch.Tensor | None = None  # (B, H); None without a pooler
    hidden_states: tuple[torch.Tensor, ...] | None = None  # L + 1 tensors (B, T, H): embeddings, then each layer
    past_key_values: Any = None  # a decoder's cache: never set here
    attentions: tuple[torch.Tensor, ...] | None = None  # L tensors (B, heads, T, T)
    cross_attentions: tuple[torch.Tensor, ...] | None = None  # () whenever attentions are asked for, as in HF
