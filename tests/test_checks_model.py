"""Task 6's checks: HF's own modules pass; wrong layers, encoders, poolers and models fail as they should."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers.models.bert import modeling_bert as hf

from bertlab import capture, reference
from bertlab.checks import CheckFailed, check
from bertlab.masks import additive_mask


class HFEncoder(hf.BertEncoder):
    """HF's encoder under the course's contract: ``(last_hidden_state, hidden_states)``."""

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        states = [hidden_states]
        hooks = [block.register_forward_hook(lambda m, args, out: states.append(out)) for block in self.layer]
        try:
            last = super().forward(hidden_states, attention_mask).last_hidden_state
        finally:
            for hook in hooks:
                hook.remove()
        return last, tuple(states)


class HFModel(hf.BertModel):
    """HF's BertModel, mask and all, returning ``(last_hidden_state, pooler_output, hidden_states)``."""

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        out = super().forward(input_ids, attention_mask, token_type_ids, output_hidden_states=True)
        return out.last_hidden_state, out.pooler_output, out.hidden_states


def test_hf_passes(capsys):
    check("6.1", hf.BertLayer)
    check("6.2", HFEncoder)
    check("6.3", hf.BertPooler)
    check("6.4", HFModel)
    out = capsys.readouterr().out
    for task in ("6.1] BertLayer passed (6/6", "6.2] BertEncoder passed (5/5", "6.3] BertPooler passed (5/5",
                 "6.4] BertModel passed (6/6"):
        assert task in out
    assert "skipped" not in out  # the bundled model: the sentence-transformers check ran


def test_the_complete_state_dict_has_no_buffers():
    """HF's embeddings buffers are non-persistent: a learner's BertModel loads it strictly."""
    keys = reference.load_model().state_dict()
    assert not [k for k in keys if k.endswith(("position_ids", "token_type_ids"))]


def test_nothing_hard_wired_to_the_pretrained_sizes(tiny_bert_dir, monkeypatch, capsys):
    monkeypatch.setenv(reference.ENV_VAR, str(tiny_bert_dir))
    for task, cls in (("6.1", hf.BertLayer), ("6.2", HFEncoder), ("6.3", hf.BertPooler), ("6.4", HFModel)):
        check(task, cls)
    assert capture.capture().hidden_states[0].shape[-1] == 32
    out = capsys.readouterr().out
    assert "note: the SentenceTransformer check is skipped" in out
    assert "[Task 6.4] BertModel passed (6/6 checks)" in out


# -- learner-like modules built from HF's parts, one flaw each ---------------------------------


class SkipsFFN(hf.BertLayer):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return self.attention(hidden_states, attention_mask)[0]


class LayerWithoutMask(hf.BertLayer):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return super().forward(hidden_states, None)


class NoInputState(HFEncoder):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        last, states = super().forward(hidden_states, attention_mask)
        return last, states[1:]


class Pooler(hf.BertPooler):
    def forward(self, hidden_states):
        return torch.tanh(self.dense(self.token(hidden_states)))

    def token(self, hidden_states):
        return hidden_states[:, 0]


class LastToken(Pooler):
    def token(self, hidden_states):
        return hidden_states[:, -1]


class MeanToken(Pooler):
    def token(self, hidden_states):
        return hidden_states.mean(dim=1)


class NoTanh(hf.BertPooler):
    def forward(self, hidden_states):
        return self.dense(hidden_states[:, 0])


class Model(nn.Module):
    """A learner's BertModel made of HF's parts; subclasses change one step."""

    def __init__(self, config):
        super().__init__()
        self.embeddings = hf.BertEmbeddings(config)
        self.encoder = HFEncoder(config)
        self.pooler = hf.BertPooler(config)

    def mask(self, attention_mask):
        return additive_mask(attention_mask, per_query=False)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, **kwargs):
        embedding_output = self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        mask = None if attention_mask is None else self.mask(attention_mask)
        last, states = self.encoder(embedding_output, mask)
        return last, self.pooler(last), states


class BoolMask(Model):
    def mask(self, attention_mask):
        return attention_mask[:, None, None, :].bool()  # added as +1 / +0 by eager attention


class MaskNotPassed(Model):
    def mask(self, attention_mask):
        return None


class ModelWithoutInputState(Model):
    def forward(self, *args, **kwargs):
        last, pooled, states = super().forward(*args, **kwargs)
        return last, pooled, states[1:]


class ModelLastTokenPooler(Model):
    def __init__(self, config):
        super().__init__(config)
        self.pooler = LastToken(config)


def test_a_model_built_from_hf_parts_passes():
    check("6.4", Model)


@pytest.mark.parametrize(
    "task, cls, mistake",
    [
        ("6.1", SkipsFFN, "layer-skips-ffn"),
        ("6.1", LayerWithoutMask, "encoder-mask-not-applied"),
        ("6.2", NoInputState, "hidden-states-missing-embeddings"),
        ("6.3", NoTanh, "pooler-no-tanh"),
        ("6.3", LastToken, "pooler-wrong-token"),
        ("6.3", MeanToken, "pooler-wrong-token"),
        ("6.4", BoolMask, "bool-mask-added"),
        ("6.4", MaskNotPassed, "encoder-mask-not-applied"),
        ("6.4", ModelWithoutInputState, "hidden-states-missing-embeddings"),
        ("6.4", ModelLastTokenPooler, "pooler-wrong-token"),
    ],
)
def test_known_mistakes_are_named(task, cls, mistake):
    with pytest.raises(CheckFailed) as err:
        check(task, cls)
    assert err.value.mistake == mistake
    assert f"(known mistake `{mistake}`)" in str(err.value)
    assert 'See lessons/09-putting-it-together (section "' in str(err.value)


def test_the_pooler_is_right_only_on_the_first_token():
    check("6.3", Pooler)


class Stub(nn.Module):
    def __init__(self, config):
        super().__init__()
        raise NotImplementedError()


class EncoderReturnsTensor(HFEncoder):
    def forward(self, hidden_states, attention_mask=None, **kwargs):
        return super().forward(hidden_states, attention_mask)[0]


class ModelReturnsHFOutput(hf.BertModel):
    pass


class ModelPersistentBuffer(Model):
    def __init__(self, config):
        super().__init__(config)
        self.embeddings.register_buffer("position_ids", torch.arange(config.max_position_embeddings)[None, :])


class ShiftedModel(Model):
    def forward(self, *args, **kwargs):
        last, pooled, states = super().forward(*args, **kwargs)
        return last + 0.1, pooled, states


@pytest.mark.parametrize(
    "task, cls, expected, only",
    [
        ("6.4", Stub, r"\[Task 6.4\] BertModel: not implemented yet: Stub\(config\) raises NotImplementedError", None),
        ("6.2", EncoderReturnsTensor, r"forward must return a tuple \(last_hidden_state, hidden_states\); "
                                      r"got a tensor of shape \[10, \d+, 384\]", None),
        ("6.4", ModelReturnsHFOutput, r"forward must return a tuple \(last_hidden_state, pooler_output, "
                                      r"hidden_states\); got BaseModelOutputWithPoolingAndCrossAttentions", None),
        ("6.4", ModelPersistentBuffer, r"embeddings.position_ids is saved in the state_dict.*\n.*persistent=False",
         None),
        # The last hidden state is off, the hidden states are not: only the sentence check sees it.
        ("6.4", ShiftedModel, r"values differ from SentenceTransformer\(all-MiniLM-L6-v2\)\.encode\(corpus.SENTENCES\)"
                              r" after mean pooling and L2 normalisation \(atol 1e-05\)\n"
                              r"  max abs diff .* at \(sentence \d+, dim \d+\)", "sentences"),
    ],
)
def test_failures_say_what_and_where(task, cls, expected, only):
    with pytest.raises(CheckFailed, match=expected) as err:
        check(task, cls, only=only)
    assert err.value.mistake is None


def test_a_shifted_last_hidden_state_fails_the_values_check():
    with pytest.raises(CheckFailed, match=r"`last_hidden_state` values differ from the pretrained model"):
        check("6.4", ShiftedModel, upto="values")


def test_the_given_classes_are_the_earlier_solutions():
    """Notebook 06 gives Tasks 2 to 5 as working code: the same code as their reference solutions."""
    import nbformat

    from tests.conftest import solution_notebook

    def solution_code(name):
        nb = nbformat.read(solution_notebook(name), as_version=4)
        return [
            "\n".join(line for line in cell.source.splitlines()
                      if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
            for cell in nb.cells
            if cell.metadata.get("nbgrader", {}).get("solution")
        ]

    nb = nbformat.read(solution_notebook("06-bert-model"), as_version=4)
    given = next(c.source for c in nb.cells if c.cell_type == "code" and "class BertOutput(" in c.source)
    earlier = [code for name in ("02-embeddings", "03-self-attention", "04-attention-output", "05-feed-forward")
               for code in solution_code(name)]
    assert given == "\n\n\n".join(earlier), "notebook 06's given cell differs from the solutions of 02 to 05"
