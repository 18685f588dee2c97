"""What W_O (``attention.output.dense``) adds over concatenating the heads.

The concatenated heads (``attention.self``'s output, the context) hold head ``i`` in features
``i*d .. (i+1)*d - 1``: its *slot*. Plain concatenation would write each head into the stream in
its own slot; W_O lets every head write into any direction of the H features. Three
measurements of one layer:

- ``own_slot_shares``: how much of each head's block of W_O (its columns, in ``nn.Linear``'s
  (out, in) layout) lands in the head's own slot of output features; a block confined to its
  slot has 1, a block pointing in a random direction has about d / H = 1 / heads;
- ``coordinate_shares``: on real tokens, how the variance of each output feature of W_O is split
  among the heads' terms (1 for one head everywhere, if heads kept to their slots);
- ablations: the layer run with W_O replaced (``run_with_output_projection``) by the identity
  (plain concatenation), by W_O's diagonal blocks (``diagonal_blocks``), by the best map that
  keeps each head in its slot, fitted by least squares on the very tokens it is tested on
  (``own_slot_fit``, which can only flatter it), or by zero (the heads' output removed, W_O's
  bias kept); ``relative_change`` measures how far the next layer's input moves.

Fits and shares are computed in float64.
"""

from __future__ import annotations

import torch
from torch.func import functional_call


def _slot(head: int, d: int) -> slice:
    return slice(head * d, (head + 1) * d)


def own_slot_shares(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Share of each head's block of W_O (squared Frobenius norm) inside its own slot of outputs.

    Args:
        weight: W_O as ``nn.Linear`` stores it, (H_out, H_in); head ``i`` reads input features
            ``i*d .. (i+1)*d - 1`` (columns).
        heads: the number of heads A.

    Returns:
        (A,) shares in [0, 1].
    """
    w = weight.double()
    d = w.shape[1] // heads
    out = []
    for i in range(heads):
        block = w[:, _slot(i, d)]  # (H_out, d): where head i writes
        out.append(block[_slot(i, d)].pow(2).sum() / block.pow(2).sum())
    return torch.stack(out)


def head_terms(context: torch.Tensor, weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Each head's term of W_O's output (bias aside): (N, H) context -> (A, N, H_out), float64.

    Their sum over heads is ``context @ weight.T``.
    """
    c, w = context.double(), weight.double()
    d = c.shape[-1] // heads
    return torch.stack([c[:, _slot(i, d)] @ w[:, _slot(i, d)].T for i in range(heads)])


def coordinate_shares(context: torch.Tensor, weight: torch.Tensor, heads: int) -> torch.Tensor:
    """How each output feature's variance splits among the heads' terms.

    Args:
        context: (N, H) concatenated heads of N real tokens.
        weight: W_O, (H_out, H_in).
        heads: A.

    Returns:
        (A, H_out): column j holds the heads' shares of feature j (each column sums to 1).
    """
    var = head_terms(context, weight, heads).var(1)  # (A, H_out)
    return var / var.sum(0, keepdim=True)


def diagonal_blocks(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """W_O with every block outside the diagonal zeroed: each head writes only into its own slot."""
    d = weight.shape[1] // heads
    out = torch.zeros_like(weight)
    for i in range(heads):
        out[_slot(i, d), _slot(i, d)] = weight[_slot(i, d), _slot(i, d)]
    return out


def own_slot_fit(context: torch.Tensor, weight: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The best map that keeps each head in its own slot, fitted to W_O's output on ``context``.

    For each slot i, least squares (with an intercept) from head i's d features to the d output
    features of slot i of ``context @ weight.T``. In-sample: the fit is tested on the tokens it
    was fitted on, which flatters it.

    Args:
        context: (N, H) concatenated heads of N real tokens.
        weight: W_O, (H_out, H_in).
        heads: A.

    Returns:
        ``(block_weight, bias)``: (H, H) block-diagonal, in ``nn.Linear``'s layout, and (H,), to
        be added to W_O's own bias; float64.
    """
    c = context.double()
    target = c @ weight.double().T  # (N, H)
    n, width = c.shape
    d = width // heads
    block_weight = torch.zeros(width, width, dtype=torch.float64)
    bias = torch.zeros(width, dtype=torch.float64)
    ones = torch.ones(n, 1, dtype=torch.float64)
    for i in range(heads):
        s = _slot(i, d)
        design = torch.cat([c[:, s], ones], dim=1)  # (N, d + 1)
        solution = torch.linalg.lstsq(design, target[:, s]).solution  # (d + 1, d)
        block_weight[s, s] = solution[:d].T
        bias[s] = solution[d]
    return block_weight, bias


def run_with_output_projection(model, batch, layer: int, weight: torch.Tensor, bias: torch.Tensor):
    """The model's output with layer ``layer``'s W_O and its bias replaced; the model is not changed.

    Returns:
        The model's output with ``hidden_states``.
    """
    prefix = f"encoder.layer.{layer}.attention.output.dense."
    replaced = {prefix + "weight": weight.to(torch.float32), prefix + "bias": bias.to(torch.float32)}
    with torch.no_grad():
        return functional_call(model, replaced, args=(), kwargs={**batch, "output_hidden_states": True})


def relative_change(new: torch.Tensor, old: torch.Tensor, attention_mask: torch.Tensor) -> float:
    """Mean over real tokens of ``|new - old| / |old|`` (L2 norms over the H features), in float64."""
    real = attention_mask.bool()
    diff = (new.double() - old.double())[real].norm(dim=-1)
    return (diff / old.double()[real].norm(dim=-1)).mean().item()
