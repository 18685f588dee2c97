"""Why the FFN widens to 4H and comes back: how many of its hidden units a token needs.

Two measurements for lesson 5.

*Keeping k of the 4H units of the pretrained model.* Read one unit at a time (Geva et al. 2021,
"Transformer Feed-Forward Layers Are Key-Value Memories"), the FFN's output for a token is
``f = sum_i m_i v_i + b_2`` over its ``I = 4H`` units. Keeping only ``k`` units means zeroing
the other coefficients ``m_i`` before ``output.dense``. Three ways to choose them:

- ``"fixed"``: the same ``k`` units for every token, those with the largest mean ``|m_i|`` over
  the real tokens of the batch (chosen on the very sentences they are tested on, which can only
  flatter this choice);
- ``"random"``: the same ``k`` units for every token, drawn at random (seeded);
- ``"per-token"``: each token's own ``k`` largest ``|m_i|``. This needs all ``I`` coefficients
  first, so it saves no work; it measures how concentrated each token's use of the units is.

Measured on each layer alone (its intact input, ``truncation_errors``) and on the whole model
with every layer truncated (``embedding_cosines``).

*A parameter-matched training comparison* (``train_lookup``): small networks, seeded, trained to
memorise a random key -> value table, a task that needs per-token nonlinear capacity and nothing
else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from bertlab.experiments import lesions
from bertlab.pooling import sentence_embeddings

STRATEGIES = ("fixed", "random", "per-token")
KS = (48, 96, 192, 384, 768, 1536)


def unit_ranking(activations: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Units ordered by mean ``|m_i|`` over the real tokens, largest first.

    Args:
        activations: (B, T, I) the FFN's hidden coefficients, after GELU.
        real: (B, T) bool, the real (not padding) tokens.

    Returns:
        (I,) unit indices.
    """
    return activations.abs()[real].mean(0).argsort(descending=True)  # (I,)


def keep_mask(
    activations: torch.Tensor,
    k: int,
    strategy: str,
    ranking: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A 0/1 mask over the units, 1 for the ``k`` kept ones.

    Args:
        activations: (B, T, I) coefficients after GELU.
        k: how many units to keep, 1..I.
        strategy: one of ``STRATEGIES``.
        ranking: (I,) the ``unit_ranking``, needed for ``"fixed"``.
        generator: draws the ``"random"`` subset.

    Returns:
        (I,) for the fixed and random subsets, (B, T, I) for ``"per-token"``.
    """
    I = activations.shape[-1]
    if not 1 <= k <= I:
        raise ValueError(f"k={k}: keep between 1 and {I} units")
    if strategy == "per-token":
        top = activations.abs().topk(k, dim=-1).indices  # (B, T, k)
        return torch.zeros_like(activations).scatter_(-1, top, 1.0)  # (B, T, I)
    if strategy == "fixed":
        if ranking is None:
            raise ValueError('the "fixed" strategy keeps the top of a ranking: pass unit_ranking(...) as ranking')
        chosen = ranking[:k]
    elif strategy == "random":
        chosen = torch.randperm(I, generator=generator)[:k]
    else:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {STRATEGIES}")
    mask = torch.zeros(I, dtype=activations.dtype)
    mask[chosen] = 1.0
    return mask  # (I,)


def intact_activations(model, batch: Mapping[str, torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Each layer's FFN coefficients ``m`` (B, T, I) in the intact model, and the (B, T) real-token mask."""
    with torch.no_grad():
        trace = lesions.run(model, batch)
        acts = [layer.intermediate(h) for layer, h in zip(model.encoder.layer, trace.ffn_inputs, strict=True)]
    return acts, trace.attention_mask.bool()


@torch.no_grad()
def truncation_errors(
    model,
    batch: Mapping[str, torch.Tensor],
    ks: Sequence[int] = KS,
    strategies: Sequence[str] = STRATEGIES,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """Relative error of each layer's FFN output when only ``k`` units are kept.

    Every layer gets its intact input (the stream between its two blocks in the unchanged
    model), so the errors of different layers do not compound here. The error of a token is
    ``||f_k - f|| / ||f||`` with ``f = output.dense(m)`` (bias ``b_2`` included) and ``f_k`` the
    same with the dropped units' coefficients set to 0.

    Args:
        model: a pretrained ``BertModel`` in eval mode.
        batch: ``input_ids`` and ``attention_mask`` (B, T), optionally ``token_type_ids``.
        ks: numbers of kept units.
        strategies: which of ``STRATEGIES`` to measure.
        seed: seeds the random subsets (one draw per layer and k).

    Returns:
        ``{strategy: (len(ks), L)}`` mean over real tokens of the relative error.
    """
    acts, real = intact_activations(model, batch)
    generator = torch.Generator().manual_seed(seed)
    out = {s: torch.empty(len(ks), len(model.encoder.layer)) for s in strategies}
    for i, (layer, m) in enumerate(zip(model.encoder.layer, acts, strict=True)):
        f = layer.output.dense(m)  # (B, T, H)
        ranking = unit_ranking(m, real)
        for row, k in enumerate(ks):
            for s in strategies:
                fk = layer.output.dense(m * keep_mask(m, k, s, ranking, generator))  # (B, T, H)
                out[s][row, i] = ((fk - f).norm(dim=-1) / f.norm(dim=-1))[real].mean()
    return out


def subset_masks(
    activations: Sequence[torch.Tensor], real: torch.Tensor, k: int, strategy: str, seed: int = 0
) -> list[torch.Tensor | None]:
    """One (I,) mask per layer for a fixed or random subset; ``None`` per layer for ``"per-token"``.

    Args:
        activations: per layer, the intact coefficients (B, T, I) (``intact_activations``).
        real: (B, T) bool.
        k: how many units to keep.
        strategy: one of ``STRATEGIES``.
        seed: seeds the random subsets (one draw per layer, in layer order).
    """
    if strategy == "per-token":
        return [None] * len(activations)
    generator = torch.Generator().manual_seed(seed)
    return [keep_mask(m, k, strategy, unit_ranking(m, real), generator) for m in activations]


@contextlib.contextmanager
def units_kept(model, k: int, strategy: str, masks: Sequence[torch.Tensor | None]):
    """Within the block, every layer's ``intermediate`` passes on only ``k`` units.

    Forward hooks on each layer's ``intermediate`` replace its output ``m`` by ``m * mask``,
    with the layer's mask from ``subset_masks`` or, for ``"per-token"``, each token's own top
    ``k``. The hooks are removed on exit, even after an error, so a cached model is left as it
    was found.
    """

    def hook(module, args, output, mask):
        return output * (keep_mask(output, k, strategy) if mask is None else mask)

    handles = [
        layer.intermediate.register_forward_hook(lambda mod, a, o, mask=mask: hook(mod, a, o, mask))
        for layer, mask in zip(model.encoder.layer, masks, strict=True)
    ]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def embedding_cosines(
    model,
    batch: Mapping[str, torch.Tensor],
    ks: Sequence[int] = KS,
    strategies: Sequence[str] = STRATEGIES,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """Cosine of each sentence embedding to the intact one, with every layer keeping ``k`` units.

    The fixed subsets are ranked on ``batch`` itself, run through the intact model.

    Returns:
        ``{strategy: (len(ks), B)}``; the embeddings are mean-pooled and L2-normalised as in
        all-MiniLM-L6-v2.
    """
    acts, _ = intact_activations(model, batch)
    real = batch["attention_mask"].bool()  # (B, T)
    intact = sentence_embeddings(model(**batch).last_hidden_state, batch["attention_mask"])  # (B, H)
    out = {}
    for s in strategies:
        rows = []
        for k in ks:
            with units_kept(model, k, s, subset_masks(acts, real, k, s, seed)):
                edited = sentence_embeddings(model(**batch).last_hidden_state, batch["attention_mask"])  # (B, H)
            rows.append((edited * intact).sum(-1))  # (B,)
        out[s] = torch.stack(rows)  # (len(ks), B)
    return out


# --- a small, seeded training comparison ---------------------------------------------------


class FFN(nn.Sequential):
    """``Linear(H, W)``, GELU, ``Linear(W, H)``: BERT's FFN with hidden width ``W``."""

    def __init__(self, hidden: int, width: int):
        super().__init__(nn.Linear(hidden, width), nn.GELU(), nn.Linear(width, hidden))


class ResidualStack(nn.Module):
    """``n`` narrow FFNs, each added to the stream: ``x <- x + FFN(x)``, as in a transformer."""

    def __init__(self, hidden: int, width: int, n: int):
        super().__init__()
        self.blocks = nn.ModuleList(FFN(hidden, width) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)  # (N, H)
        return x


def lookup_models(hidden: int) -> dict[str, nn.Module]:
    """The compared networks, built from the global RNG (seed it first).

    A linear map (no hidden layer), the FFN with ``H`` and with ``4H`` hidden units, and four
    narrow residual FFNs, which have about as many parameters as the wide one (``4 * (2H^2 + 2H)``
    vs ``8H^2 + 5H``: 2,176 against 2,128 at H = 16) but spend them on depth instead of width.
    """
    return {
        "linear H -> H": nn.Linear(hidden, hidden),
        "H -> H -> H (GELU)": FFN(hidden, hidden),
        "H -> 4H -> H (GELU)": FFN(hidden, 4 * hidden),
        "4 x (H -> H -> H), residual": ResidualStack(hidden, hidden, 4),
    }


@dataclass(frozen=True)
class TrainResult:
    """One network's result on the lookup task.

    Attributes:
        name: which network (a key of ``lookup_models``).
        parameters: its number of trainable parameters.
        losses: (seeds,) final training loss per seed, as a fraction of the values' variance
            (1.0: no better than always answering the mean value).
    """

    name: str
    parameters: int
    losses: torch.Tensor

    @property
    def mean_loss(self) -> float:
        return self.losses.mean().item()


def lookup_table(hidden: int, pairs: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``pairs`` random keys (pairs, H) and values (pairs, H), standard normal, seeded."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(pairs, hidden, generator=g), torch.randn(pairs, hidden, generator=g)


def train_lookup(
    hidden: int = 16, pairs: int = 256, steps: int = 300, lr: float = 1e-2, seeds: Sequence[int] = (0, 1)
) -> list[TrainResult]:
    """Train each of ``lookup_models`` to memorise a random key -> value table.

    Full-batch Adam on the mean squared error, the same data, steps and learning rate for every
    network. There is nothing to generalise: the only way to a low loss is to store the table,
    token by token, in the weights. Deterministic: data and initial weights come from the seeds
    (the global RNG is restored afterwards).

    Returns:
        One ``TrainResult`` per network, in the order of ``lookup_models``.
    """
    losses: dict[str, list[float]] = {}
    params: dict[str, int] = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # matrices this small: threads cost more than they save
    try:
        for seed in seeds:
            _train_one_seed(hidden, pairs, steps, lr, seed, losses, params)
    finally:
        torch.set_num_threads(threads)
    return [TrainResult(name, params[name], torch.tensor(v)) for name, v in losses.items()]


def _train_one_seed(hidden, pairs, steps, lr, seed, losses, params):
    keys, values = lookup_table(hidden, pairs, seed)  # (P, H), (P, H)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        models = lookup_models(hidden)
    for name, net in models.items():
        params[name] = sum(p.numel() for p in net.parameters())
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        for _ in range(steps):
            loss = ((net(keys) - values) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            final = ((net(keys) - values) ** 2).mean() / values.var()
        losses.setdefault(name, []).append(final.item())
