"""Which part of BERT each named parameter belongs to, and how many parameters each part holds.

Hugging Face names every tensor by its module path, e.g.
``encoder.layer.3.intermediate.dense.weight``. [`locate`][bertlab.experiments.census.locate]
maps such a name onto the parts of the architecture;
[`census`][bertlab.experiments.census.census] counts parameters per part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torch import nn

# The parts of a BertModel in forward order. The four middle ones repeat in every layer.
PARTS = ("embeddings", "attention.self", "attention.output", "intermediate", "output", "pooler")
LAYER_PARTS = PARTS[1:-1]

# Coarser grouping: a layer is an attention sub-layer followed by a feed-forward sub-layer,
# each one closed by its own Add & Norm (whose LayerNorm is counted with it).
GROUP = {
    "embeddings": "embeddings",
    "attention.self": "attention",
    "attention.output": "attention",
    "intermediate": "feed-forward",
    "output": "feed-forward",
    "pooler": "pooler",
}
GROUPS = ("embeddings", "attention", "feed-forward", "pooler")

_LAYER = re.compile(
    r"^(?:bert\.)?encoder\.layer\.(\d+)\.(attention\.self|attention\.output|intermediate|output)\.(.+)$"
)
_OUTER = re.compile(r"^(?:bert\.)?(embeddings|pooler)\.(.+)$")


@dataclass(frozen=True)
class Location:
    """Where a named tensor sits.

    Attributes:
        layer: index of the encoder layer, or None for the embeddings and the pooler.
        part: one of `PARTS`.
        piece: the rest of the name inside the part, e.g. ``"query.weight"``.
    """

    layer: int | None
    part: str
    piece: str

    @property
    def group(self) -> str:
        """``"embeddings"``, ``"attention"``, ``"feed-forward"`` or ``"pooler"``."""
        return GROUP[self.part]


def locate(name: str) -> Location:
    """Map a parameter name of a ``BertModel`` onto its part.

    Raises:
        ValueError: the name belongs to none of the parts (so a census can never drop a tensor).
    """
    if m := _LAYER.match(name):
        return Location(int(m.group(1)), m.group(2), m.group(3))
    if m := _OUTER.match(name):
        return Location(None, m.group(1), m.group(2))
    raise ValueError(f"{name!r} is not a parameter of a BertModel's embeddings, layers or pooler")


def census(model: nn.Module, by: str = "part", layer: int | None = None) -> dict[str, int]:
    """Count parameters per part (``by="part"``) or per group (``by="group"``).

    Args:
        model: a ``BertModel`` (real or on the meta device: only shapes are read).
        by: ``"part"`` (keys `PARTS`) or ``"group"`` (keys `GROUPS`).
        layer: count only this encoder layer (the embeddings and pooler then count 0).

    Returns:
        Parameter counts in forward order; parts without parameters are present with 0.
    """
    keys = PARTS if by == "part" else GROUPS
    counts = dict.fromkeys(keys, 0)
    for name, param in model.named_parameters():
        where = locate(name)
        if layer is not None and where.layer != layer:
            continue
        counts[where.part if by == "part" else where.group] += param.numel()
    return counts


def ffn_share(model: nn.Module, layer: int = 0) -> float:
    """Fraction of one encoder layer's parameters that belong to its feed-forward sub-layer."""
    counts = census(model, by="group", layer=layer)
    return counts["feed-forward"] / (counts["attention"] + counts["feed-forward"])
