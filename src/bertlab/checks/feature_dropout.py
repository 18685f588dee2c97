"""Every dropout torch computes, drawn as one fixed mask over the last axis while a check asks.

Right code may apply its dropout to pieces of a tensor: chunks of tokens (what HF's
``apply_chunking_to_forward`` does), one head at a time, a loop over tokens. Torch's generator
then draws other masks than HF's one call, and a mask that depends on the whole shape (the
``DropoutProbe`` of ``bertlab.diagnose.common``) differs too. A mask over the last axis alone, the
same for every row, is what every such split sees alike; where dropout acts still decides the
output, and so does its probability.

Every way into torch's dropout goes through the names patched here: ``nn.Dropout`` and
``nn.functional.dropout`` call ``torch._VF.dropout`` (HF's attention calls the latter), and
``torch.dropout`` is the same kernel under another name. ``tests/test_checks_split_work.py``
fails if torch routes one of them elsewhere.
"""

from __future__ import annotations

import contextlib

import torch

SEED = 0
_NAMES = ("dropout", "dropout_")  # out of place, in place


def _keep(x: torch.Tensor, p: float) -> torch.Tensor:
    """(last axis,) keep-mask scaled by 1 / (1 - p): the same for every row of x."""
    keep = torch.rand(x.shape[-1:], generator=torch.Generator().manual_seed(SEED)) >= p
    return keep.to(x.dtype) / (1 - p)


def _dropout(x: torch.Tensor, p: float, train: bool) -> torch.Tensor:
    return x * _keep(x, p) if train and p > 0 else x


def _dropout_(x: torch.Tensor, p: float, train: bool) -> torch.Tensor:
    return x.mul_(_keep(x, p)) if train and p > 0 else x


def active() -> bool:
    """Whether this process is inside ``per_feature()``."""
    return vars(torch).get("dropout") is _dropout


@contextlib.contextmanager
def per_feature():
    """Inside, every dropout in this process draws the per-feature mask; outside, torch's own."""
    replacements = {"dropout": _dropout, "dropout_": _dropout_}
    saved = [(owner, name, vars(owner).get(name)) for owner in (torch._VF, torch) for name in _NAMES]
    try:
        for owner, name, _ in saved:
            setattr(owner, name, replacements[name])
        yield
    finally:
        for owner, name, value in saved:
            if value is None:
                delattr(owner, name)  # torch._VF finds its kernels by __getattr__
            else:
                setattr(owner, name, value)
