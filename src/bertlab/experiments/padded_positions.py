"""What the padded positions' output vectors contain, and why pooling leaves them out.

The additive mask (``bertlab.masks``) removes padding as a *key*: no query gives a padded
position any attention. It does not remove padding as a *query*: a padded position has an
input vector like any token (the ``[PAD]`` embedding, its position, segment A), and in every
layer it attends, as a query, to the sentence's real keys. So it gets an output vector too,
one no real token reads. Three measurements:

- ``mask_shares``: per layer, the share of attention padded queries give to real keys, and the
  share real queries give to padded keys;
- ``padded_cosines``: how the last layer's padded vectors relate to their own sentence (its
  mean-pooled vector), to the other sentences', and to each other;
- ``refill_padding``: how far the outputs move when the padded positions hold another token
  id, real tokens and padded ones apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertlab.pooling import sentence_embeddings


@dataclass(frozen=True)
class MaskShares:
    """Where attention goes across the real/padded divide, in one layer.

    Attributes:
        padded_to_real: the smallest share of attention, over heads and padded queries, that a
            padded query gives to its sentence's real keys (1 would be all of it).
        padded_to_padded: the largest share a padded query gives to padded keys.
        real_to_padded: the largest share of attention, over heads and real queries, that a
            real query gives to padded keys.
    """

    padded_to_real: float
    padded_to_padded: float
    real_to_padded: float


def mask_shares(attentions: Sequence[torch.Tensor], attention_mask: torch.Tensor) -> list[MaskShares]:
    """Per layer, the attention padded queries give to real keys and real queries to padding.

    Args:
        attentions: one (B, A, T, T) tensor of attention probabilities per layer
            (``output_attentions``); rows are queries, columns keys.
        attention_mask: (B, T), 1 for real tokens; at least one sentence is padded.
    """
    real = attention_mask.bool()  # (B, T)
    out = []
    for probs in attentions:
        p = probs.double()
        on_real = (p * real[:, None, None, :]).sum(-1).transpose(1, 2)  # (B, T, A): per query
        on_padded = (p * ~real[:, None, None, :]).sum(-1).transpose(1, 2)  # (B, T, A)
        out.append(
            MaskShares(
                padded_to_real=on_real[~real].min().item(),  # padded queries: (P, A)
                padded_to_padded=on_padded[~real].max().item(),
                real_to_padded=on_padded[real].max().item(),  # real queries: (R, A)
            )
        )
    return out


@dataclass(frozen=True)
class PaddedCosines:
    """Cosines of the last layer's vectors with the sentence vectors, per padded sentence.

    Attributes:
        sentences: (S,) the indices of the sentences that have padding.
        padded_to_own: (S,) mean cosine of the sentence's padded vectors with its own sentence
            vector (mean over its real tokens, ``bertlab.pooling``).
        real_to_own: (S,) the same for its real tokens' vectors.
        padded_to_other: (S,) the largest mean cosine of its padded vectors with another
            sentence's vector.
        padded_to_padded: (S,) the smallest cosine between two of its padded vectors.
    """

    sentences: torch.Tensor
    padded_to_own: torch.Tensor
    real_to_own: torch.Tensor
    padded_to_other: torch.Tensor
    padded_to_padded: torch.Tensor


def padded_cosines(hidden: torch.Tensor, attention_mask: torch.Tensor) -> PaddedCosines:
    """Compare the padded positions' last vectors with the sentence vectors, in float64.

    Args:
        hidden: (B, T, H) the last layer's vectors, padded positions included.
        attention_mask: (B, T), 1 for real tokens.
    """
    real = attention_mask.bool()  # (B, T)
    unit = F.normalize(hidden.double(), dim=-1)  # (B, T, H)
    sentences = sentence_embeddings(hidden.double(), attention_mask)  # (B, H), unit length
    to_all = unit @ sentences.T  # (B, T, B): each vector's cosine with each sentence vector
    rows: dict[str, list[torch.Tensor]] = {k: [] for k in ("own", "real", "other", "padded")}
    padded_sentences = [s for s in range(len(hidden)) if bool((~real[s]).any())]
    for s in padded_sentences:
        padded = ~real[s]  # (T,)
        cos = to_all[s][padded]  # (P, B)
        rows["own"].append(cos[:, s].mean())
        rows["real"].append(to_all[s][real[s], s].mean())
        rows["other"].append(torch.cat([cos[:, :s], cos[:, s + 1 :]], 1).mean(0).max())
        rows["padded"].append((unit[s][padded] @ unit[s][padded].T).min())  # (P, P) -> ()
    return PaddedCosines(
        sentences=torch.tensor(padded_sentences),
        padded_to_own=torch.stack(rows["own"]),
        real_to_own=torch.stack(rows["real"]),
        padded_to_other=torch.stack(rows["other"]),
        padded_to_padded=torch.stack(rows["padded"]),
    )


@dataclass(frozen=True)
class Refilled:
    """How far the last hidden state moves when padded positions hold another token id.

    Attributes:
        real_moved: max abs change over real tokens.
        padded_moved: max abs change over padded positions.
    """

    real_moved: float
    padded_moved: float


@torch.no_grad()
def refill_padding(model: nn.Module, batch: Mapping[str, torch.Tensor], token_id: int) -> Refilled:
    """Run ``model`` on ``batch`` as it is and with ``token_id`` in every padded position.

    Args:
        model: a ``BertModel`` in eval mode.
        batch: ``input_ids``, ``token_type_ids``, ``attention_mask`` (B, T); the mask unchanged.
        token_id: the id written where the mask is 0 (a real word, not ``[PAD]``).
    """
    real = batch["attention_mask"].bool()  # (B, T)
    refilled = dict(batch)
    refilled["input_ids"] = batch["input_ids"].masked_fill(~real, token_id)  # (B, T)
    before = model(**batch).last_hidden_state  # (B, T, H)
    after = model(**refilled).last_hidden_state  # (B, T, H)
    moved = (after - before).abs().amax(-1)  # (B, T)
    return Refilled(real_moved=moved[real].max().item(), padded_moved=moved[~real].max().item())
