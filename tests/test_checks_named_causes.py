"""A failure names the real cause, or says what it measured: learner-written modules whose
symptoms look like another mistake (randomness not from dropout, a layer built in forward, an eps
typed into a LayerNorm written by hand) get their own message, not the look-alike's."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from bertlab.checks import CheckFailed, check
from tests.conftest import solution_namespace

BertSelfOutput: Any = solution_namespace("04-attention-output")["BertSelfOutput"]  # learner-style right code


class JitterInForward(BertSelfOutput):
    """Wrong: a little noise "against overfitting", in eval mode too, and not by dropout."""

    def forward(self, hidden_states, input_tensor):
        out = super().forward(hidden_states, input_tensor)
        return out + 1e-7 * torch.randn_like(out)


class DropoutModuleBuiltInForward(BertSelfOutput):
    """Wrong: a new nn.Dropout built in forward is in training mode, whatever the module's mode."""

    def forward(self, hidden_states, input_tensor):
        update = nn.Dropout(self.dropout.p)(self.dense(hidden_states))
        return self.LayerNorm(update + input_tensor)


def test_randomness_in_eval_mode_is_blamed_on_dropout_only_when_dropout_draws_it():
    with pytest.raises(CheckFailed) as err:
        check("4.1", JitterInForward)
    assert "not through dropout" in str(err.value) and err.value.mistake is None, str(err.value)
    with pytest.raises(CheckFailed) as err:
        check("4.1", DropoutModuleBuiltInForward)
    assert err.value.mistake == "dropout-in-eval", str(err.value)


class LinearBuiltInForward(BertSelfOutput):
    """Wrong: W_O built anew in every forward (new random weights), never the loaded one."""

    def forward(self, hidden_states, input_tensor):
        dense = nn.Linear(hidden_states.shape[-1], hidden_states.shape[-1])
        return self.LayerNorm(dense(hidden_states) + input_tensor)


def test_a_layer_built_in_forward_is_not_called_dropout():
    with pytest.raises(CheckFailed) as err:
        check("4.1", LinearBuiltInForward)
    assert err.value.mistake != "dropout-in-eval" and "dropout" not in str(err.value).lower(), str(err.value)


class HandLayerNormTypedEps(BertSelfOutput):
    """Wrong: a LayerNorm written by hand with BERT's eps typed in, under a name of its own."""

    def __init__(self, config):
        super().__init__(config)
        self.variance_epsilon = 1e-12  # the eps of BERT's checkpoints

    def forward(self, hidden_states, input_tensor):
        x = self.dropout(self.dense(hidden_states)) + input_tensor  # (B, T, H)
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return self.LayerNorm.weight * (x - mean) / torch.sqrt(var + self.variance_epsilon) + self.LayerNorm.bias


def test_an_eps_typed_in_a_hand_written_layernorm_is_named_as_such():
    """Not as torch's default 1e-5, which the other config's large eps makes look alike."""
    with pytest.raises(CheckFailed) as err:
        check("4.1", HandLayerNormTypedEps)
    assert err.value.mistake == "layernorm-eps-typed", str(err.value)
    assert 'section "The equation"' in str(err.value)


class PreLNPort(BertSelfOutput):
    """A SublayerConnection ported as written in a well-known implementation: x + dropout(sublayer(norm(x))),
    its LayerNorm with that implementation's eps, 1e-6."""

    def __init__(self, config):
        super().__init__(config)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=1e-6)

    def forward(self, hidden_states, input_tensor):
        return input_tensor + self.dropout(self.dense(self.LayerNorm(hidden_states)))


@pytest.mark.parametrize("stage", ["names", "values", "calls", "config", "dropout", "gradients"])
def test_a_pre_ln_port_is_told_its_order_first_in_every_stage(stage):
    """Its eps, its dropout's place and its gradients are symptoms: the Pre-LN order is the mistake,
    named before anything else the stage says."""
    with pytest.raises(CheckFailed) as err:
        check("4.1", PreLNPort, only=stage)
    message = str(err.value)
    assert err.value.mistake == "pre-ln-order", message
    headline = message.splitlines()[0]
    if stage == "values":  # the values message's form: what differs and where, then the cause
        assert headline.endswith("values differ from the pretrained layer 0 (atol 1e-05, rtol 1.9e-06)"), message
    else:
        assert "Pre-LN sub-layer" in headline, message
    for symptom in ("eps", "HF applies", "cut from the graph"):
        if symptom in message:
            assert message.index("Pre-LN sub-layer") < message.index(symptom), (symptom, message)
