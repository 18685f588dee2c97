"""ACT2FN: a config's ``hidden_act`` name -> a new activation module, as transformers maps it.

Each entry computes what ``transformers.activations.ACT2FN[name]`` computes, with the same torch
calls in the same order, so outputs are bit-equal; the class names are transformers' too, so a
printed model reads the same. Looking a name up builds a new module each time, as there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping

import torch
from torch import Tensor, nn


class GELUActivation(nn.Module):
    """The exact GELU, x * Phi(x) (torch's erf kernel); BERT's ``"gelu"``."""

    def __init__(self, use_gelu_python: bool = False) -> None:
        super().__init__()
        self.act: Callable[[Tensor], Tensor] = self._gelu_python if use_gelu_python else nn.functional.gelu

    def _gelu_python(self, input: Tensor) -> Tensor:
        return input * 0.5 * (1.0 + torch.erf(input / math.sqrt(2.0)))

    def forward(self, input: Tensor) -> Tensor:
        return self.act(input)


class NewGELUActivation(nn.Module):
    """The tanh approximation of GELU written out (Google's BERT and GPT code); ``"gelu_new"``."""

    def forward(self, input: Tensor) -> Tensor:
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class GELUTanh(nn.Module):
    """The tanh approximation of GELU, torch's kernel; ``"gelu_pytorch_tanh"``."""

    def forward(self, input: Tensor) -> Tensor:
        return nn.functional.gelu(input, approximate="tanh")


class FastGELUActivation(nn.Module):
    """Another grouping of the tanh approximation; ``"gelu_fast"``."""

    def forward(self, input: Tensor) -> Tensor:
        return 0.5 * input * (1.0 + torch.tanh(input * 0.7978845608 * (1.0 + 0.044715 * input * input)))


class QuickGELUActivation(nn.Module):
    """x * sigmoid(1.702 x); ``"quick_gelu"``."""

    def forward(self, input: Tensor) -> Tensor:
        return input * torch.sigmoid(1.702 * input)


class SiLUActivation(nn.Module):
    """x * sigmoid(x); ``"silu"`` (``"swish"`` is torch's own nn.SiLU, as in transformers)."""

    def forward(self, input: Tensor) -> Tensor:
        return nn.functional.silu(input)


class LinearActivation(nn.Module):
    """The identity; ``"linear"``."""

    def forward(self, input: Tensor) -> Tensor:
        return input


_CLASSES: dict[str, tuple[type[nn.Module], dict]] = {
    "gelu": (GELUActivation, {}),
    "gelu_python": (GELUActivation, {"use_gelu_python": True}),
    "gelu_new": (NewGELUActivation, {}),
    "gelu_pytorch_tanh": (GELUTanh, {}),
    "gelu_fast": (FastGELUActivation, {}),
    "quick_gelu": (QuickGELUActivation, {}),
    "linear": (LinearActivation, {}),
    "relu": (nn.ReLU, {}),
    "sigmoid": (nn.Sigmoid, {}),
    "silu": (SiLUActivation, {}),
    "swish": (nn.SiLU, {}),
    "tanh": (nn.Tanh, {}),
}


class _Activations(Mapping[str, nn.Module]):
    """Name -> a new module each lookup (a module is a submodule of the one that keeps it)."""

    def __getitem__(self, name: str) -> nn.Module:
        try:
            cls, kwargs = _CLASSES[name]
        except KeyError:
            raise KeyError(
                f"activation {name!r} is not one the course's BERT implements; choose one of {sorted(_CLASSES)}"
            ) from None
        return cls(**kwargs)

    def __iter__(self) -> Iterator[str]:
        return iter(_CLASSES)

    def __len__(self) -> int:
        return len(_CLASSES)


ACT2FN = _Activations()
