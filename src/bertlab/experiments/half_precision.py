"""What running a module in float16 or bfloat16 does, against the float32 model.

float32 keeps 24 bits of each number, float16 11 and bfloat16 8. A learner's module that
computes in one of them (``.half()``, ``.bfloat16()``, ``torch.autocast``) and returns float32
lands on another answer than the pretrained float32 module by its rounding alone. Two
measurements, each module on the very inputs it receives in the float32 model:

- ``module_outputs``: one layer's four sub-modules, each run as a copy in the half-precision
  dtype and cast back to float32, beside the float32 module's output; the grader's comparison
  is left to the caller (``bertlab.checks.compare``, one layer up);
- ``whole_model``: the whole model in that dtype: its last hidden state, and what a user of
  the sentence vectors would see (cosines, nearest neighbours).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from bertlab.masks import additive_mask
from bertlab.pooling import sentence_embeddings

#: The sub-modules of a ``BertLayer`` a learner writes, in the order the layer calls them.
PARTS = ("attention.self", "attention.output", "intermediate", "output")


def _in(dtype: torch.dtype, module: nn.Module, *args: torch.Tensor) -> torch.Tensor:
    """``module`` and its floating inputs converted to ``dtype``; the output back in float32."""
    copied = copy.deepcopy(module).to(dtype)
    out = copied(*(a.to(dtype) if a.is_floating_point() else a for a in args))
    return (out[0] if isinstance(out, tuple) else out).float()


@torch.no_grad()
def module_outputs(
    model: nn.Module, batch: Mapping[str, torch.Tensor], layer: int, dtype: torch.dtype
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{part: (float32 output, output computed in dtype)}`` over real tokens, each (N, width).

    Args:
        model: a float32 ``BertModel`` in eval mode; left unchanged.
        batch: ``input_ids``, ``token_type_ids``, ``attention_mask`` (B, T).
        layer: which ``BertLayer``.
        dtype: ``torch.float16`` or ``torch.bfloat16``.
    """
    real = batch["attention_mask"].bool()  # (B, T)
    mask = additive_mask(batch["attention_mask"])  # (B, 1, T, T), float32's min for padding
    x = model(**batch, output_hidden_states=True).hidden_states[layer]  # (B, T, H)
    block = model.encoder.layer[layer]
    ctx = block.attention.self(x, attention_mask=mask)[0]  # (B, T, H): the heads, concatenated
    h = block.attention.output(ctx, x)  # (B, T, H): first Add & Norm
    m = block.intermediate(h)  # (B, T, 4H): after the GELU
    y = block.output(m, h)  # (B, T, H): second Add & Norm
    runs: dict[str, tuple[nn.Module, tuple[torch.Tensor, ...], torch.Tensor]] = {
        "attention.self": (block.attention.self, (x, mask), ctx),
        "attention.output": (block.attention.output, (ctx, x), h),
        "intermediate": (block.intermediate, (h,), m),
        "output": (block.output, (m, h), y),
    }
    return {part: (want[real], _in(dtype, module, *args)[real]) for part, (module, args, want) in runs.items()}


def token_closeness(
    expected: torch.Tensor, got: torch.Tensor, closeness: Callable[[torch.Tensor, torch.Tensor], float]
) -> torch.Tensor:
    """(N,) ``closeness`` of each token's row: the grader's measure, one token at a time.

    Args:
        expected, got: (N, width).
        closeness: the measure, e.g. ``lambda e, g: compare.closeness(e, g, ATOL, RTOL)``; at
            most 1 is within the tolerance.
    """
    return torch.tensor([closeness(e, g) for e, g in zip(expected, got, strict=True)])


@dataclass(frozen=True)
class WholeModel:
    """The whole model in a half-precision dtype against float32.

    Attributes:
        expected, got: (N, H) the last hidden state over real tokens, float32 and the dtype's
            (cast back to float32).
        finite: whether every output of the dtype's run is finite (no overflow).
        sentence_cosine: (B,) cosine of each sentence vector to float32's, in float64.
        similarity_moved: max abs change of a cosine between two different sentences.
        neighbours_changed: sentences whose most similar other sentence is not the same.
    """

    expected: torch.Tensor
    got: torch.Tensor
    finite: bool
    sentence_cosine: torch.Tensor
    similarity_moved: float
    neighbours_changed: int


def _nearest(similarity: torch.Tensor) -> torch.Tensor:
    """(B,) each sentence's most similar other sentence."""
    return similarity.clone().fill_diagonal_(-2.0).argmax(1)


@torch.no_grad()
def whole_model(model: nn.Module, batch: Mapping[str, torch.Tensor], dtype: torch.dtype) -> WholeModel:
    """Run a copy of ``model`` in ``dtype`` beside the float32 one; compare what they give.

    Args:
        model: a float32 ``BertModel`` in eval mode; left unchanged.
        batch: ``input_ids``, ``token_type_ids``, ``attention_mask`` (B, T).
        dtype: ``torch.float16`` or ``torch.bfloat16``.
    """
    real = batch["attention_mask"].bool()  # (B, T)
    want = model(**batch).last_hidden_state  # (B, T, H)
    got = copy.deepcopy(model).to(dtype)(**batch).last_hidden_state.float()  # (B, T, H)
    e0 = sentence_embeddings(want.double(), batch["attention_mask"])  # (B, H)
    e1 = sentence_embeddings(got.double(), batch["attention_mask"])  # (B, H)
    s0, s1 = e0 @ e0.T, e1 @ e1.T  # (B, B)
    off_diagonal = ~torch.eye(len(e0), dtype=torch.bool)
    return WholeModel(
        expected=want[real],
        got=got[real],
        finite=bool(torch.isfinite(got).all()),
        sentence_cosine=(e0 * e1).sum(-1),
        similarity_moved=(s1 - s0)[off_diagonal].abs().max().item(),
        neighbours_changed=int((_nearest(s0) != _nearest(s1)).sum()),
    )
