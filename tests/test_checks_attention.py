"""Task 3's checks: the solution notebook's code passes, on the pretrained and on a tiny random BERT;
failures read well."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bertlab import capture, reference
from bertlab.checks import CheckFailed, check
from tests.conftest import solution_namespace

# Learner-style right code: the solution notebook's (transformers' own is refused as a shortcut).
NS = solution_namespace("03-self-attention")


@pytest.mark.parametrize("task, name", [("3.1", "eager_attention_forward"), ("3.2", "BertSelfAttention")])
def test_the_solution_passes(task, name, capsys):
    check(task, NS[name])
    assert f"[Task {task}] {name} passed" in capsys.readouterr().out


def test_nothing_hard_wired_to_the_pretrained_sizes(tiny_bert_dir, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tiny_bert_dir))
    check("3.2", NS["BertSelfAttention"])
    assert capture.capture().hidden_states[0].shape[-1] == 32


class Stub(nn.Module):
    def __init__(self, config, is_causal=False, layer_idx=None):
        super().__init__()
        raise NotImplementedError()


class Renamed(NS["BertSelfAttention"]):
    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        self.q = self.query
        del self.query


class ReturnsOnlyContext(NS["BertSelfAttention"]):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return super().forward(hidden_states, attention_mask)[0]


class Shifted(NS["BertSelfAttention"]):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        context, probs = super().forward(hidden_states, attention_mask)
        return context + 0.5, probs


@pytest.mark.parametrize(
    "cls, expected",
    [
        (Stub, r"not implemented yet: Stub\(config\) raises NotImplementedError"),
        (Renamed, r"parameter names differ.*\n  missing: query.bias, query.weight\n  unexpected: q.bias, q.weight"),
        (ReturnsOnlyContext, r"must return a tuple \(context_layer, attention_probs\).*got a tensor"),
        (Shifted, r"`context_layer` values differ from the pretrained layer 0 \(atol 1e-05\)\n"
                  r"  max abs diff 5.0e-01 at \(batch \d+, token \d+, dim \d+\): expected .*, got "),
    ],
)
def test_failures_say_what_and_where(cls, expected):
    with pytest.raises(CheckFailed, match=expected) as err:
        check("3.2", cls)
    assert str(err.value).startswith("[Task 3.2] BertSelfAttention: ")
    assert err.value.mistake is None


def test_bool_mask_added_is_not_the_right_answer():
    """The transformers 5 trap: adding a 0/1 mask runs without error and is wrong."""
    cap = capture.capture()
    call = cap.layer(0, "attention.self")
    module = reference.load_model().encoder.layer[0].attention.self
    bool_mask = cap.batch["attention_mask"][:, None, None, :].bool()
    with torch.no_grad():
        _, probs = module(call.args[0], attention_mask=bool_mask)
    b, t = (cap.batch["attention_mask"] == 0).nonzero()[0]  # a padding position
    assert call.output[1][b, :, :, t].abs().max() == 0  # the additive mask: never attended to
    assert probs[b, :, :, t].sum() > 0  # the bool mask: padding gets attention (no error raised)
