"""What PyTorch's default LayerNorm epsilon does to the whole model, not one LayerNorm.

BERT's ``layer_norm_eps`` is 1e-12: the original TensorFlow code (google-research/bert,
``modeling.py``) calls ``tf.contrib.layers.layer_norm``, which adds a fixed 1e-12 to the
variance, and the PyTorch ports kept that value in the config. ``nn.LayerNorm``'s default is
1e-5. ``layernorm_eps`` measures each LayerNorm on its own recorded input; here every
LayerNorm of a copy of the model (the embeddings' included) takes the other epsilon and the
whole model runs, so the changes of the early LayerNorms travel through the later layers.

Both models run in float64 (the pretrained float32 weights, converted exactly), so that what is
measured is the epsilon and not float32's rounding; ``float32_rounding`` is how far the float32
model itself is from its float64 run, the size of a rounding difference for comparison.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from bertlab.experiments.layernorm_eps import float32_step, layernorm_inputs
from bertlab.pooling import sentence_embeddings


@torch.no_grad()
def smallest_variances(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """``{LayerNorm name: smallest variance of its input over real tokens}``, in the model's order.

    The biased variance over the features, as the LayerNorm computes it, from the recorded
    float32 inputs converted to float64.
    """
    real = batch["attention_mask"].bool()  # (B, T)
    inputs = layernorm_inputs(model, batch)
    return {name: given.double().var(-1, unbiased=False)[real].min().item() for name, given in inputs.items()}


def with_eps(model: nn.Module, eps: float, dtype: torch.dtype | None = None) -> nn.Module:
    """A copy of ``model`` whose every ``nn.LayerNorm`` uses ``eps``, in ``dtype`` if given."""
    out = copy.deepcopy(model)
    if dtype is not None:
        out = out.to(dtype)
    for m in out.modules():
        if isinstance(m, nn.LayerNorm):
            m.eps = eps
    return out


@dataclass(frozen=True)
class EndToEnd:
    """How far the model's outputs move when every LayerNorm takes another epsilon.

    Attributes:
        hidden_moved: max abs change of the last hidden state over real tokens, in float64.
        hidden_step: float32's spacing at the last hidden state's largest value (``float32_step``).
        float32_rounding: max abs difference, over real tokens, between the model run in float32
            and in float64 (same epsilon): a rounding difference, for scale.
        sentence_cosine: (B,) cosine of each sentence embedding (mean-pooled, L2-normalised) to
            the original's, in float64.
        sentence_moved: max abs change of a sentence embedding's component.
        similarity_moved: max abs change of a cosine between two different sentences.
        neighbours_changed: sentences whose most similar other sentence is not the same.
    """

    hidden_moved: float
    hidden_step: float
    float32_rounding: float
    sentence_cosine: torch.Tensor
    sentence_moved: float
    similarity_moved: float
    neighbours_changed: int

    @property
    def hidden_steps(self) -> float:
        """The change of the last hidden state in float32 steps."""
        return self.hidden_moved / self.hidden_step


def _neighbours(similarity: torch.Tensor) -> torch.Tensor:
    """(B,) each sentence's most similar other sentence."""
    return similarity.fill_diagonal_(-2.0).argmax(1)


@torch.no_grad()
def end_to_end(model: nn.Module, batch: Mapping[str, torch.Tensor], eps: float) -> EndToEnd:
    """Run a float64 copy of ``model`` with every LayerNorm at ``eps`` and one as it is; compare.

    Args:
        model: a float32 ``BertModel`` in eval mode; left unchanged.
        batch: ``input_ids``, ``token_type_ids``, ``attention_mask`` (B, T).
        eps: the epsilon to try (PyTorch's default is 1e-5).
    """
    real = batch["attention_mask"].bool()  # (B, T)
    mask = batch["attention_mask"]
    original = with_eps(model, model.config.layer_norm_eps, torch.float64)(**batch).last_hidden_state  # (B, T, H)
    changed = with_eps(model, eps, torch.float64)(**batch).last_hidden_state  # (B, T, H)
    in_float32 = model(**batch).last_hidden_state  # (B, T, H)
    e0, e1 = sentence_embeddings(original, mask), sentence_embeddings(changed, mask)  # (B, H) each
    s0, s1 = e0 @ e0.T, e1 @ e1.T  # (B, B)
    off_diagonal = ~torch.eye(len(e0), dtype=torch.bool)
    return EndToEnd(
        hidden_moved=(changed - original)[real].abs().max().item(),
        hidden_step=float32_step(in_float32[real]),
        float32_rounding=(in_float32.double() - original)[real].abs().max().item(),
        sentence_cosine=(e0 * e1).sum(-1),
        sentence_moved=(e1 - e0).abs().max().item(),
        similarity_moved=(s1 - s0)[off_diagonal].abs().max().item(),
        neighbours_changed=int((_neighbours(s0.clone()) != _neighbours(s1.clone())).sum()),
    )
