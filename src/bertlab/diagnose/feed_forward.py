"""Known mistakes in BertIntermediate (Task 5.1), the first half of the feed-forward network.

BertOutput (Task 5.2), the second half, is an Add & Norm: its mistakes live in ``add_norm``.
"""

from __future__ import annotations

from torch import nn

from bertlab.diagnose import Mistake, register

LESSON = "05-feed-forward"


def intermediate(module, hidden_states, flaw=None):
    """HF's BertIntermediate forward on ``module``'s weights with an optional flaw.

    Args:
        module: HF's BertIntermediate (``dense``: H -> intermediate_size).
        hidden_states: (B, T, H).

    Returns:
        (B, T, intermediate_size).
    """
    x = module.dense(hidden_states)  # (B, T, I)
    if flaw == "tanh-gelu":
        return nn.functional.gelu(x, approximate="tanh")
    if flaw == "relu-instead-of-gelu":
        return nn.functional.relu(x)
    if flaw == "activation-missing":
        return x
    return nn.functional.gelu(x)  # the exact form, x * Phi(x) with Phi from erf


def _flawed(flaw):
    def outputs(module, inputs):
        return {"hidden_states": intermediate(module, inputs["hidden_states"], flaw)}

    return outputs


# ReLU and GELU differ by |z| Φ(-|z|) on either side of 0, most (by 0.17) near |z| = 0.75: the position
# a failure prints may be positive or negative, so the words cover both.
RELU_INSTEAD_OF_GELU = (
    "ReLU instead of GELU: ReLU gives a pre-activation z itself where z > 0 and exactly 0 where z < 0, "
    "while GELU gives z Φ(z), a little below z on the positive side and a little below 0 on the "
    "negative side (they differ most, by 0.17, near z = ±0.75)"
)

for _id, _description, _section in [
    (
        "tanh-gelu",
        'the tanh approximation of GELU (`approximate="tanh"`, HF\'s "gelu_new") instead of the exact erf form',
        "Exact GELU",
    ),
    ("relu-instead-of-gelu", RELU_INSTEAD_OF_GELU, "Exact GELU"),
    (
        "activation-missing",
        "dense(hidden_states) with NO activation: the two matrices of the FFN collapse into one",
        "The per-token nonlinearity",
    ),
]:
    register(Mistake(_id, ("5.1",), _description, LESSON, _section, _flawed(_id)))
