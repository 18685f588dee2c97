"""The course's central mistakes inside one layer are named: Task 1.5 (numpy) and Task 6.1 (modules).

Each wrong layer below is written the way a learner would write it, from the solution notebooks'
right pieces, independently of the simulations in ``bertlab.diagnose``: a simulation that
computed something else than the mistaken code would not be named here.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from bertlab.checks import CheckFailed, check
from tests.conftest import solution_namespace

# -- Task 1.5: numpy layers ---------------------------------------------------------------------

NB01 = solution_namespace("01-numpy-bert")
softmax, layer_norm, gelu, linear = (NB01[n] for n in ("softmax", "layer_norm", "gelu", "linear"))


def numpy_layer(hidden_states, attention_mask, params, config, flaw=None):
    """A learner's numpy BertLayer with one wiring mistake on demand: (B, T, H) -> (B, T, H)."""
    B, T, H = hidden_states.shape
    heads = config.num_attention_heads
    d = H // heads
    eps = config.layer_norm_eps

    def dense(x, name):
        return linear(x, params[name + ".weight"], params[name + ".bias"])

    def add_norm(x, residual, name):
        w, b = params[name + ".LayerNorm.weight"], params[name + ".LayerNorm.bias"]
        before = {
            "layernorm-before-add": ("attention.output", "output"),
            "layernorm-before-first-add": ("attention.output",),
            "layernorm-before-second-add": ("output",),
        }
        if name in before.get(flaw, ()):
            return layer_norm(x, w, b, eps) + residual
        return layer_norm(x + residual, w, b, eps)

    q, k, v = (
        dense(hidden_states, "attention.self." + n).reshape(B, T, heads, d).transpose(0, 2, 1, 3)
        for n in ("query", "key", "value")
    )  # (B, heads, T, d)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)  # (B, heads, T, T)
    if attention_mask is not None:
        scores = scores + attention_mask
    context = (softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(B, T, H)
    a = add_norm(dense(context, "attention.output.dense"), hidden_states, "attention.output")

    if flaw == "ffn-fed-layer-input":
        h = gelu(dense(hidden_states, "intermediate.dense"))  # reads x instead of a
        return add_norm(dense(h, "output.dense"), a, "output")
    if flaw == "second-residual-from-input":
        h = gelu(dense(a, "intermediate.dense"))
        return add_norm(dense(h, "output.dense"), hidden_states, "output")  # adds x instead of a
    out = a
    for _ in range(2 if flaw == "ffn-applied-twice" else 1):
        h = gelu(dense(out, "intermediate.dense"))  # (B, T, I)
        out = add_norm(dense(h, "output.dense"), out, "output")
    return out


def with_flaw(flaw):
    def bert_layer_forward(hidden_states, attention_mask, params, config):
        return numpy_layer(hidden_states, attention_mask, params, config, flaw)

    return bert_layer_forward


def test_the_numpy_layer_without_flaw_passes(capsys):
    check("1.5", with_flaw(None))
    assert "[Task 1.5] bert_layer_forward passed (4/4 checks)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "flaw, mistake",
    [
        ("second-residual-from-input", "numpy-layer-second-residual-from-input"),
        ("ffn-fed-layer-input", "numpy-layer-ffn-fed-layer-input"),
        ("ffn-applied-twice", "numpy-layer-ffn-applied-twice"),
        ("layernorm-before-add", "numpy-layer-layernorm-before-add"),
        ("layernorm-before-first-add", "numpy-layer-layernorm-before-add"),
        ("layernorm-before-second-add", "numpy-layer-layernorm-before-add"),
    ],
)
def test_numpy_layer_wiring_mistakes_are_named(flaw, mistake):
    with pytest.raises(CheckFailed) as err:
        check("1.5", with_flaw(flaw))
    assert err.value.mistake == mistake, str(err.value)
    message = str(err.value)
    assert message.startswith("[Task 1.5] bert_layer_forward: values differ from the pretrained layer 0")
    assert f"(known mistake `{mistake}`)" in message
    assert 'See lessons/04-add-and-norm (section "' in message


# -- Task 6.1: BertLayer modules ------------------------------------------------------------------

NB06 = solution_namespace("06-bert-model")
BertModel: Any = NB06["BertModel"]


class Layer(nn.Module):
    """The parts of a learner's BertLayer; each subclass wires them in its own (wrong) way."""

    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.attention = NB06["BertAttention"](config, layer_idx=layer_idx)
        self.intermediate = NB06["BertIntermediate"](config)
        self.output = NB06["BertOutput"](config)


class SecondResidualFromInput(Layer):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        attention_output, _ = self.attention(hidden_states, attention_mask)
        intermediate_output = self.intermediate(attention_output)
        return self.output(intermediate_output, hidden_states)


class FFNFedLayerInput(Layer):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        attention_output, _ = self.attention(hidden_states, attention_mask)
        intermediate_output = self.intermediate(hidden_states)
        return self.output(intermediate_output, attention_output)


class FFNAppliedTwice(Layer):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        hidden_states, _ = self.attention(hidden_states, attention_mask)
        for _ in range(2):
            hidden_states = self.output(self.intermediate(hidden_states), hidden_states)
        return hidden_states


def test_the_solution_layer_passes(capsys):
    check("6.1", NB06["BertLayer"])
    assert "[Task 6.1] BertLayer passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "cls, mistake",
    [
        (SecondResidualFromInput, "second-residual-from-input"),
        (FFNFedLayerInput, "ffn-fed-layer-input"),
        (FFNAppliedTwice, "ffn-applied-twice"),
    ],
)
def test_layer_wiring_mistakes_are_named(cls, mistake):
    with pytest.raises(CheckFailed) as err:
        check("6.1", cls)
    assert err.value.mistake == mistake, str(err.value)
    message = str(err.value)
    assert message.startswith("[Task 6.1] BertLayer: values differ from the pretrained layer 0")
    assert f"(known mistake `{mistake}`)" in message
    assert 'See lessons/04-add-and-norm (section "' in message


# -- Task 6.4: the mask BertModel hands to its layers -------------------------------------------


class Model(BertModel):
    """A learner's BertModel whose mask step is ``mask``; the rest is the solution's."""

    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, inputs_embeds=None, **kwargs
    ):
        embedding_output = self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        mask = None if attention_mask is None else self.mask(attention_mask)
        sequence_output, hidden_states = self.encoder(embedding_output, mask)
        return sequence_output, self.pooler(sequence_output), hidden_states


class TokensMasked(Model):
    def mask(self, attention_mask):
        return attention_mask[:, None, None, :].float() * torch.finfo(torch.float32).min


class PaddingFavoured(Model):
    def mask(self, attention_mask):
        return (attention_mask[:, None, None, :].float() - 1.0) * torch.finfo(torch.float32).min


class MaskNotBroadcast(Model):
    def mask(self, attention_mask):
        return (1.0 - attention_mask.float()) * torch.finfo(torch.float32).min  # (B, T)


@pytest.mark.parametrize("cls", [TokensMasked, PaddingFavoured])
def test_a_mask_of_the_wrong_sign_is_named(cls):
    with pytest.raises(CheckFailed) as err:
        check("6.4", cls, upto="values")
    assert err.value.mistake == "extended-mask-wrong-sign", str(err.value)
    assert 'See lessons/07-putting-it-together (section "The attention mask")' in str(err.value)


def test_the_not_broadcast_mask_simulation_is_what_the_code_computes(model, batch):
    """On a square batch (B == T) the (B, T) mask runs and gives wrong numbers; the simulation's."""
    from bertlab.diagnose import bert_model as flawed

    inputs = flawed.square_inputs({k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
    n = inputs["input_ids"].shape[0]
    assert inputs["input_ids"].shape == (n, n) and n > 1 and bool((inputs["attention_mask"] == 0).any())
    learner = MaskNotBroadcast(model.config)
    learner.load_state_dict(model.state_dict(), strict=True)
    learner.eval()
    with torch.no_grad():
        last, _pooled, _states = learner(**inputs)
        wrong = flawed.outputs(model, inputs, "extended-mask-not-broadcast")
        right = flawed.outputs(model, inputs)
    assert torch.allclose(last, wrong["last_hidden_state"], atol=1e-4)
    assert not torch.allclose(last, right["last_hidden_state"], atol=1e-2)
    # On the corpus itself (B != T) the same code raises, and the simulation offers nothing.
    corpus = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    assert corpus["input_ids"].shape[0] != corpus["input_ids"].shape[1]
    with pytest.raises(RuntimeError):
        with torch.no_grad():
            learner(**corpus)
    assert flawed.outputs(model, corpus, "extended-mask-not-broadcast") == {}


# -- Task 6.1: layers that call the parts' children, as most published student layers do ----------


class ChildrenCalled(Layer):
    """Right: calls the attention's self-attention, then does the first Add & Norm itself with the
    attention output's own dense, dropout and LayerNorm (instead of calling ``attention.output``)."""

    def first_add_norm(self, context, hidden_states):
        out = self.attention.output
        return out.LayerNorm(out.dropout(out.dense(context)) + hidden_states)

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        context = self.attention.self(hidden_states, attention_mask)[0]  # (B, T, H)
        attention_output = self.first_add_norm(context, hidden_states)
        intermediate_output = self.intermediate.intermediate_act_fn(self.intermediate.dense(attention_output))
        ffn = self.output.dropout(self.output.dense(intermediate_output))
        return self.output.LayerNorm(ffn + attention_output)


class ChildrenCalledNoFirstResidual(ChildrenCalled):
    def first_add_norm(self, context, hidden_states):
        out = self.attention.output
        return out.LayerNorm(out.dropout(out.dense(context)))


class ChildrenCalledNormBeforeAdd(ChildrenCalled):
    def first_add_norm(self, context, hidden_states):
        out = self.attention.output
        return out.LayerNorm(out.dropout(out.dense(context))) + hidden_states


def test_a_layer_that_calls_the_parts_children_itself_passes(capsys):
    """The grader puts HF's parts in the learner's layer; calling their children is using them."""
    check("6.1", ChildrenCalled)
    assert "[Task 6.1] BertLayer passed" in capsys.readouterr().out


@pytest.mark.parametrize("cls", [ChildrenCalledNoFirstResidual, ChildrenCalledNormBeforeAdd])
def test_a_layer_that_calls_the_parts_children_wrongly_is_told_its_values_differ(cls):
    with pytest.raises(CheckFailed) as err:
        check("6.1", cls)
    message = str(err.value)
    assert "transformers" not in message, message
    assert message.startswith("[Task 6.1] BertLayer: values differ from the pretrained layer 0"), message
