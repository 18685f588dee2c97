"""One bug, one failure: a task built on earlier tasks' modules is checked with HF's own parts.

A wrong part (BertSelfOutput, BertLayer, BertPooler) fails its own task and no later one; the
composition's own mistakes still fail the composed task; where HF's parts cannot stand in for
the learner's, the failure names the part to fix first.
"""

from __future__ import annotations

import pytest
from torch import nn

from bertlab.checks import CheckFailed, check
from tests.conftest import solution_namespace


@pytest.fixture(scope="module")
def learner() -> dict:
    return solution_namespace(
        "02-embeddings", "03-self-attention", "04-attention-output", "05-feed-forward", "06-bert-model"
    )


def with_part(namespace: dict, composite: str, attr: str, part: type) -> type:
    """The solution's ``composite`` class whose ``attr`` is built from ``part`` instead."""
    base = namespace[composite]

    def __init__(self, config, *args, **kwargs):
        base.__init__(self, config, *args, **kwargs)
        setattr(self, attr, part(config))

    return type(f"{composite}_with_{part.__name__}", (base,), {"__init__": __init__})


def test_a_wrong_self_output_fails_4_1_only(learner, capsys):
    class NormBeforeAdd(learner["BertSelfOutput"]):
        def forward(self, hidden_states, input_tensor):
            return self.LayerNorm(self.dropout(self.dense(hidden_states))) + input_tensor

    with pytest.raises(CheckFailed, match=r"^\[Task 4\.1\]"):
        check("4.1", NormBeforeAdd)
    check("4.2", with_part(learner, "BertAttention", "output", NormBeforeAdd))
    assert "[Task 4.2] BertAttention passed" in capsys.readouterr().out


def test_a_wrong_layer_fails_6_1_only(learner, capsys):
    class SkipsFFN(learner["BertLayer"]):
        def forward(self, hidden_states, attention_mask=None, **kwargs):
            return self.attention(hidden_states, attention_mask)[0]

    with pytest.raises(CheckFailed, match=r"^\[Task 6\.1\] BertLayer: values differ") as err:
        check("6.1", SkipsFFN, upto="values")
    assert err.value.mistake == "layer-skips-ffn"

    def encoder_init(self, config):
        nn.Module.__init__(self)
        self.layer = nn.ModuleList(SkipsFFN(config) for _ in range(config.num_hidden_layers))

    Encoder = type("BertEncoder", (learner["BertEncoder"],), {"__init__": encoder_init})
    check("6.2", Encoder, upto="masks")
    model = with_part(learner, "BertModel", "encoder", Encoder)
    check("6.4", model, upto="masks")
    out = capsys.readouterr().out
    assert "[Task 6.2] BertEncoder: names, shapes, values, masks passed" in out
    assert "[Task 6.4] BertModel: names, shapes, values, masks passed" in out


def test_a_wrong_pooler_fails_6_3_only(learner, capsys):
    class LastToken(learner["BertPooler"]):
        def forward(self, hidden_states):
            return self.activation(self.dense(hidden_states[:, -1]))

    with pytest.raises(CheckFailed, match=r"^\[Task 6\.3\]"):
        check("6.3", LastToken, upto="values")
    check("6.4", with_part(learner, "BertModel", "pooler", LastToken), upto="values")
    assert "[Task 6.4] BertModel: names, shapes, values passed" in capsys.readouterr().out


def test_the_composition_own_mistake_still_fails(learner):
    class LayerWithoutMask(learner["BertLayer"]):
        def forward(self, hidden_states, attention_mask=None, **kwargs):
            return super().forward(hidden_states, None)

    with pytest.raises(CheckFailed, match=r"^\[Task 6\.1\] BertLayer: ") as err:
        check("6.1", LayerWithoutMask, upto="masks")
    assert err.value.mistake == "encoder-mask-not-applied"


def test_when_hf_parts_cannot_stand_in_the_part_to_fix_is_named(learner):
    """A BertAttention returning one tensor, and a BertLayer written for it: with HF's attention
    (a tuple) the layer cannot run, because its part differs from HF's."""

    class AttentionOutputOnly(learner["BertAttention"]):
        def forward(self, hidden_states, attention_mask=None, **kwargs):
            return super().forward(hidden_states, attention_mask)[0]

    class LayerForIt(with_part(learner, "BertLayer", "attention", AttentionOutputOnly)):
        def forward(self, hidden_states, attention_mask=None, **kwargs):
            attention_output = self.attention(hidden_states, attention_mask)
            return self.output(self.intermediate(attention_output), attention_output)

    with pytest.raises(CheckFailed, match=r"because your BertAttention \(task 4\.2\) differs; fix 4\.2 first"):
        check("6.1", LayerForIt, upto="values")


def test_a_wrong_name_in_a_part_fails_6_4_names_with_the_task_to_fix(learner):
    class RenamedNorm(learner["BertSelfOutput"]):
        def __init__(self, config):
            super().__init__(config)
            self.layer_norm = self.LayerNorm
            del self.LayerNorm

    ns = dict(learner)
    attention = with_part(ns, "BertAttention", "output", RenamedNorm)

    def layer_init(self, config, layer_idx=None):
        learner["BertLayer"].__init__(self, config, layer_idx)
        self.attention = attention(config)

    layer = type("BertLayer", (learner["BertLayer"],), {"__init__": layer_init})

    def encoder_init(self, config):
        nn.Module.__init__(self)
        self.layer = nn.ModuleList(layer(config) for _ in range(config.num_hidden_layers))

    encoder = type("BertEncoder", (learner["BertEncoder"],), {"__init__": encoder_init})
    with pytest.raises(CheckFailed, match=r"fails because your BertSelfOutput \(task 4\.1\) differs; fix 4\.1 first"):
        check("6.4", with_part(learner, "BertModel", "encoder", encoder), only="names")
    check("6.2", encoder, only="names")  # the encoder's own names are right
