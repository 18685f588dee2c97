"""What a dropout on the attention weights measurably does, said when no known mistake explains it.

A wrong dropout has many causes (a p typed in, no 1 / (1 - p), the scores dropped before the
softmax, one mask per head with ``dropout2d``), and a message that names one guess misleads
every other. The weights tell what was done instead: which share of them is zero, what the kept
ones are multiplied by, whether the zeros repeat along an axis. Each is measured against the
weights without dropout and said beside HF's own value; a cause is named only where the
measurements are those of that cause alone.
"""

from __future__ import annotations

import torch

PRETRAINED_P = 0.1  # what a probability typed in is: the pretrained model's


def measured(got: torch.Tensor, plain: torch.Tensor, hf_dropped: torch.Tensor, p: float, dims: tuple) -> str:
    """The learner's dropped weights ``got`` beside the weights without dropout ``plain`` and HF's
    dropped ones ``hf_dropped`` (all ``dims``-shaped, e.g. (batch, head, query, key)), with HF's ``p``."""
    got, plain, hf_dropped = (t.detach().float() for t in (got, plain, hf_dropped))
    if got.shape != plain.shape:
        return f"Your weights have shape {list(got.shape)}, HF's {list(plain.shape)}."
    live = plain > 0  # masked keys weigh nothing, dropped or not
    zero = (got == 0) & live
    share = float(zero.sum()) / max(int(live.sum()), 1)
    kept = live & ~zero
    ratio = got[kept] / plain[kept]
    scale = float(ratio.median()) if ratio.numel() else float("nan")
    uniform = ratio.numel() > 0 and float((ratio - scale).abs().max()) <= 1e-3 * abs(scale)
    parts = [f"{share:.1%} of your weights are zero (HF zeroes each with probability p = {p:g})"]
    if uniform:
        parts.append(f"the kept ones are the softmax's times {scale:.4g} (HF: 1 / (1 - p) = {1 / (1 - p):.4g})")
    else:
        parts.append(
            "the kept ones are not the softmax's weights times one number: something other than the "
            "softmax's output is dropped, or it is changed after"
        )
    shared = [
        name
        for axis, name in enumerate(dims)
        if got.shape[axis] > 1 and share > 0 and bool(((zero | ~live).all(axis) | (~zero | ~live).all(axis)).all())
    ]
    if shared:
        parts.append(
            f"the zeros are the same along {', '.join(shared)}: one mask shared over them, where HF "
            "draws each weight on its own"
        )
    hf_zero = (hf_dropped == 0) & live
    if bool(hf_zero.any()) and share > 0:
        parts.append(
            f"{float((zero & hf_zero).sum()) / float(hf_zero.sum()):.0%} of the weights HF dropped are zero in yours"
        )
    text = "Measured with HF's dropout decisions: " + "; ".join(parts) + "."
    typed = abs(share - PRETRAINED_P) < 0.02 and uniform and abs(scale * (1 - PRETRAINED_P) - 1) < 1e-3
    if typed and abs(p - PRETRAINED_P) > 0.05:
        text += f" Those are a p of {PRETRAINED_P:g}: is the probability typed in instead of read from `dropout`?"
    return text
