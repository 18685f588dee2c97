"""What the ``[CLS]`` token attends to, and how its last vector does as a sentence vector.

BERT puts ``[CLS]`` first in every input and, in pretraining, feeds its last vector to the
next-sentence classifier (Devlin et al. 2019, Section 3.1). all-MiniLM-L6-v2 instead averages
the last layer's vectors of all real tokens (``bertlab.pooling``). Two measurements:

- ``cls_attention_shares``: where the attention of ``[CLS]`` (query 0) goes in one layer, by kind
  of key token (``KINDS``), averaged over the heads, with the share a uniform row would give
  each kind beside it (its tokens' count over the sentence's real tokens);
- ``partner_contrast`` and ``partners_found``: for sentences written about the same topic
  (``TOPIC_PAIRS``), how far a set of sentence vectors puts a sentence's partner above the
  other sentences, and whether the partner is its nearest neighbour.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import torch
import torch.nn.functional as F

#: The kinds of key token [CLS]'s attention is split into.
KINDS = ("[CLS]", "[SEP]", "punctuation", "content")

#: Pairs of course sentences (``bertlab.corpus.SENTENCES``) written about the same topic: the cat
#: and the kitten, the markets and the investors, the bread and the recipe.
TOPIC_PAIRS: tuple[tuple[int, int], ...] = ((1, 2), (3, 4), (5, 6))


def token_kind(token: str, tokenizer) -> str | None:
    """The kind (one of ``KINDS``) of a WordPiece token; ``None`` for padding.

    A token made only of punctuation or symbol characters (Unicode categories P* and S*, a
    ``##`` continuation mark aside) is punctuation; every other real token is content.
    """
    if token == tokenizer.pad_token:
        return None
    if token == tokenizer.cls_token:
        return "[CLS]"
    if token == tokenizer.sep_token:
        return "[SEP]"
    text = token.removeprefix("##")
    if text and all(unicodedata.category(ch)[0] in "PS" for ch in text):
        return "punctuation"
    return "content"


def kind_masks(input_ids: torch.Tensor, attention_mask: torch.Tensor, tokenizer) -> dict[str, torch.Tensor]:
    """For each kind, a (B, T) bool mask of the real tokens of that kind."""
    kinds = [[token_kind(t, tokenizer) for t in tokenizer.convert_ids_to_tokens(row)] for row in input_ids.tolist()]
    real = attention_mask.bool()
    return {kind: torch.tensor([[k == kind for k in row] for row in kinds]) & real for kind in KINDS}


@dataclass(frozen=True)
class KindShares:
    """Where one layer's ``[CLS]`` attention goes, per sentence, by kind of key token.

    Attributes:
        attention: kind -> (B,) share of [CLS]'s attention (mean over heads) on that kind's keys.
        uniform: kind -> (B,) share a uniform attention row would give that kind: its tokens'
            count over the sentence's real tokens.
    """

    attention: dict[str, torch.Tensor]
    uniform: dict[str, torch.Tensor]

    def mean(self, kind: str) -> float:
        """The share of ``kind``, averaged over the sentences."""
        return self.attention[kind].mean().item()

    def uniform_mean(self, kind: str) -> float:
        """A uniform row's share of ``kind``, averaged over the sentences."""
        return self.uniform[kind].mean().item()


def cls_attention_shares(
    attention: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor, tokenizer
) -> KindShares:
    """Split the attention of ``[CLS]`` in one layer by kind of key token.

    Args:
        attention: one layer's attention probabilities, (B, A, T, T) (``output_attentions``).
        input_ids: (B, T); each row starts with ``[CLS]``.
        attention_mask: (B, T), 1 for real tokens.
        tokenizer: the model's tokenizer (for the tokens' text and the special tokens).

    Returns:
        A ``KindShares``; per sentence, the kinds' attention shares sum to 1 (padding gets none).
    """
    row = attention[:, :, 0, :].double().mean(1)  # (B, T): query 0's attention, mean over heads
    masks = kind_masks(input_ids, attention_mask, tokenizer)
    real = attention_mask.sum(1).double()  # (B,)
    return KindShares(
        attention={kind: (row * m).sum(1) for kind, m in masks.items()},
        uniform={kind: m.sum(1) / real for kind, m in masks.items()},
    )


def cls_vectors(hidden: torch.Tensor) -> torch.Tensor:
    """The last layer's ``[CLS]`` vectors as sentence vectors: (B, T, H) -> (B, H), unit length."""
    return F.normalize(hidden[:, 0].double(), dim=-1)


def _cosines(embeddings: torch.Tensor) -> torch.Tensor:
    e = F.normalize(embeddings.double(), dim=-1)
    return e @ e.T  # (N, N)


def partner_contrast(embeddings: torch.Tensor, pairs=TOPIC_PAIRS) -> torch.Tensor:
    """For each sentence of ``pairs``: its cosine with its partner minus its mean cosine with the
    other sentences (itself and its partner left out).

    Args:
        embeddings: (N, H) sentence vectors (normalised here, in float64).
        pairs: pairs of row indices of sentences about the same topic.

    Returns:
        (2 * len(pairs),), in the order a, b of each pair.
    """
    sim = _cosines(embeddings)
    n = sim.shape[0]
    out = []
    for a, b in pairs:
        for me, partner in ((a, b), (b, a)):
            others = [j for j in range(n) if j not in (me, partner)]
            out.append(sim[me, partner] - sim[me, others].mean())
    return torch.stack(out)


def partners_found(embeddings: torch.Tensor, pairs=TOPIC_PAIRS) -> int:
    """How many sentences of ``pairs`` have their partner as nearest other sentence (of 2 * pairs)."""
    sim = _cosines(embeddings)
    sim.fill_diagonal_(-2.0)
    nearest = sim.argmax(1)
    return sum(int(nearest[me] == partner) for a, b in pairs for me, partner in ((a, b), (b, a)))
