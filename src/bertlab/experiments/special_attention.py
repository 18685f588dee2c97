"""How much of each layer's attention lands on ``[CLS]``, ``[SEP]`` and punctuation, and how
much those keys write.

Clark et al. (2019, "What Does BERT Look At? An Analysis of BERT's Attention", BlackboxNLP)
found BERT-base's heads putting much of their attention on ``[SEP]`` and punctuation, and argued
that attending to ``[SEP]`` works as a no-op: a place for a head to look when its pattern does
not apply. If it is a no-op, what such a key contributes to the attention output is small
however much attention it receives. Two measurements per layer, by kind of key token
(``cls_attention.KINDS``):

- ``weight``: the share of the attention probabilities on that kind, averaged over heads, real
  queries and sentences, beside the share a uniform row would give it;
- ``written``: the share of what the attention writes that comes from that kind: for query q,
  key k and head i, the length of the key's weighted contribution to the sub-layer's update,
  ``p_{q,k} |v_k W^O_i|`` (``v_k`` the key's value vector in head i, ``W^O_i`` head i's rows of
  W^O, lesson 3), summed over the kind's keys and over heads, over the same sum over all keys.
  A kind that gets much weight and writes little is attended to as a no-op would be.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from bertlab.experiments.cls_attention import KINDS, kind_masks


@dataclass(frozen=True)
class LayerShares:
    """One layer's attention by kind of key; each dict maps a kind of ``KINDS`` to a share.

    Attributes:
        weight: share of the attention probabilities.
        uniform: share a uniform attention row would give (the kind's count over real tokens).
        written: share of the length written into the update, ``p |v W^O_i|``.
    """

    weight: dict[str, float]
    uniform: dict[str, float]
    written: dict[str, float]


def _over_queries(share: torch.Tensor, real: torch.Tensor) -> float:
    """(B, T) per-query shares -> their mean over real queries, then over sentences."""
    per_sentence = (share * real).sum(1) / real.sum(1)  # (B,)
    return per_sentence.mean().item()


@torch.no_grad()
def value_lengths(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """|v_k W^O_i| for every head i and token k of one ``BertLayer``, in float64.

    Args:
        layer: a ``BertLayer`` (``attention.self.value``, ``attention.output.dense``).
        x: (B, T, H) the layer's input.

    Returns:
        (B, A, T): the length of what token k would write through head i with all its weight.
    """
    sa = layer.attention.self
    A, d = sa.num_attention_heads, sa.attention_head_size
    B, T, H = x.shape
    v = sa.value(x).double().view(B, T, A, d).transpose(1, 2)  # (B, A, T, d)
    w_o = layer.attention.output.dense.weight.double().view(H, A, d)  # (H, A*d) -> (H, A, d)
    through = torch.einsum("batd,had->bath", v, w_o)  # (B, A, T, H): v_k W^O_i
    return through.norm(dim=-1)


@torch.no_grad()
def layer_shares(
    model: nn.Module,
    hidden_states: Sequence[torch.Tensor],
    attentions: Sequence[torch.Tensor],
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    tokenizer,
) -> list[LayerShares]:
    """Per layer, the attention on each kind of key token and the share of what it writes.

    Args:
        model: the ``BertModel`` that gave ``hidden_states`` and ``attentions``.
        hidden_states: L + 1 tensors (B, T, H); layer l reads ``hidden_states[l]``.
        attentions: L tensors (B, A, T, T) of attention probabilities.
        input_ids, attention_mask: (B, T).
        tokenizer: the model's tokenizer (for the kinds of token).
    """
    masks = kind_masks(input_ids, attention_mask, tokenizer)  # kind -> (B, T)
    real = attention_mask.double()  # (B, T)
    n_real = attention_mask.sum(1).double()  # (B,)
    out = []
    for layer, x, probs in zip(model.encoder.layer, hidden_states, attentions, strict=False):
        p = probs.double()  # (B, A, T, T)
        written = p * value_lengths(layer, x)[:, :, None, :]  # (B, A, Tq, Tk)
        total = written.sum((1, 3))  # (B, Tq): over heads and keys
        weight, share_written = {}, {}
        for kind in KINDS:
            keys = masks[kind][:, None, None, :]  # (B, 1, 1, Tk)
            weight[kind] = _over_queries((p * keys).sum(-1).mean(1), real)
            share = (written * keys).sum((1, 3)) / total  # (B, Tq)
            share_written[kind] = _over_queries(share, real)
        uniform = {kind: (masks[kind].sum(1) / n_real).mean().item() for kind in KINDS}
        out.append(LayerShares(weight=weight, uniform=uniform, written=share_written))
    return out
