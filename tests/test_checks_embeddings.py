"""Task 2's checks: HF's own BertEmbeddings passes; wrong embeddings fail with the right message."""

from __future__ import annotations

import pytest
import torch
from transformers.models.bert import modeling_bert as hf

from bertlab import capture, reference
from bertlab.checks import CheckFailed, check


def test_hf_passes(capsys):
    check("2.1", hf.BertEmbeddings)
    assert "[Task 2.1] BertEmbeddings passed (6/6 checks)" in capsys.readouterr().out


def test_nothing_hard_wired_to_the_pretrained_sizes(tiny_bert_dir, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tiny_bert_dir))
    check("2.1", hf.BertEmbeddings)
    assert capture.capture().hidden_states[0].shape[-1] == 32


def test_the_corpus_exercises_the_default_positions():
    """HF's BertModel passes position_ids=None: the values check runs the learner's default."""
    kwargs = capture.capture().calls["embeddings"].kwargs
    assert kwargs["position_ids"] is None and kwargs["input_ids"].shape[1] > 1


class Embeddings(hf.BertEmbeddings):
    """HF's module with a flaw switched on by a subclass: a small, readable wrong implementation."""

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None,
                past_key_values_length=0):
        B, T = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(self.first_position, self.first_position + T)[None, :]
        if token_type_ids is None or self.zero_types:
            token_type_ids = torch.zeros(B, T, dtype=torch.long)
        x = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        if self.with_types:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x) if self.with_layernorm else x)

    first_position, zero_types, with_types, with_layernorm = 0, False, True, True


class Right(Embeddings):
    pass


class OffByOne(Embeddings):
    first_position = 1


class ZeroTypes(Embeddings):
    zero_types = True


class NoTypes(Embeddings):
    with_types = False


class NoLayerNorm(Embeddings):
    with_layernorm = False


def test_a_rewritten_module_passes():
    check("2.1", Right)


@pytest.mark.parametrize(
    "cls, mistake, stage",
    [
        (OffByOne, "position-ids-off-by-one", "values"),
        (NoTypes, "token-types-ignored", "values"),
        (NoLayerNorm, "embeddings-no-layernorm", "values"),
        # The corpus has token types 0 only: random token types are needed to see this one.
        (ZeroTypes, "token-types-always-zero", "batches"),
    ],
)
def test_known_mistakes_are_named(cls, mistake, stage):
    with pytest.raises(CheckFailed) as err:
        check("2.1", cls)
    assert err.value.mistake == mistake
    message = str(err.value)
    assert message.startswith("[Task 2.1] BertEmbeddings: values differ from ")
    assert ("the pretrained model" in message) == (stage == "values")
    assert f"(known mistake `{mistake}`)" in message
    assert 'See lessons/02-embeddings (section "' in message


class Stub(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        raise NotImplementedError()


class PersistentBuffer(hf.BertEmbeddings):
    def __init__(self, config):
        super().__init__(config)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings)[None, :])


class DefaultEps(hf.BertEmbeddings):
    def __init__(self, config):
        super().__init__(config)
        self.LayerNorm = torch.nn.LayerNorm(config.hidden_size)


class Shifted(hf.BertEmbeddings):
    def forward(self, *args, **kwargs):
        return super().forward(*args, **kwargs) + 0.5


@pytest.mark.parametrize(
    "cls, expected",
    [
        (Stub, r"not implemented yet: Stub\(config\) raises NotImplementedError"),
        (PersistentBuffer, r"the buffer position_ids is saved in the state_dict.*\n.*persistent=False"),
        (DefaultEps, r"`self.LayerNorm` has eps=1e-05, expected config.layer_norm_eps = 1e-12"),
        (Shifted, r"values differ from the pretrained model \(atol 1e-05\)\n"
                  r"  max abs diff 5.0e-01 at \(batch \d+, token \d+, dim \d+\): expected .*, got "),
    ],
)
def test_failures_say_what_and_where(cls, expected):
    with pytest.raises(CheckFailed, match=expected) as err:
        check("2.1", cls)
    assert str(err.value).startswith("[Task 2.1] BertEmbeddings: ")
    assert err.value.mistake is None
