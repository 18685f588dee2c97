"""Task 2's checks: the solution's BertEmbeddings passes; wrong embeddings fail with the right message.

transformers' own BertEmbeddings is refused as a shortcut, so the right code is the solution
notebook's class, and each wrong module below is a subclass of it that changes one thing.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers.models.bert import modeling_bert as hf

from bertlab import capture, reference
from bertlab.checks import TASKS, CheckFailed, check
from tests.conftest import solution_namespace

Solution: Any = solution_namespace("02-embeddings")["BertEmbeddings"]


def test_the_solution_passes(capsys):
    check("2.1", Solution)
    n = len(TASKS["2.1"].stages)
    assert f"[Task 2.1] BertEmbeddings passed ({n}/{n} checks)" in capsys.readouterr().out


def test_transformers_own_module_is_refused():
    with pytest.raises(
        CheckFailed,
        match=r"built on transformers' BertEmbeddings: this task is to write "
        r"BertEmbeddings yourself",
    ):
        check("2.1", hf.BertEmbeddings)


def test_nothing_hard_wired_to_the_pretrained_sizes(tiny_bert_dir, monkeypatch):
    monkeypatch.setenv(reference.ENV_VAR, str(tiny_bert_dir))
    check("2.1", Solution)
    assert capture.capture().hidden_states[0].shape[-1] == 32


def test_the_corpus_exercises_the_default_positions():
    """HF's BertModel passes position_ids=None: the values check runs the learner's default."""
    kwargs = capture.capture().calls["embeddings"].kwargs
    assert kwargs["position_ids"] is None and kwargs["input_ids"].shape[1] > 1


class Embeddings(Solution):
    """The solution's module with a flaw switched on by a subclass: a small, readable wrong implementation."""

    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        words = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds  # (B, T, H)
        B, T, _ = words.shape
        if position_ids is None:
            start = past_key_values_length + self.first_position
            position_ids = torch.arange(start, start + T)[None, :]
        if token_type_ids is None or self.zero_types:
            token_type_ids = torch.zeros(B, T, dtype=torch.long)
        x = words + self.position_embeddings(position_ids)
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


class PersistentBuffer(Solution):
    def __init__(self, config):
        super().__init__(config)
        self.register_buffer("position_ids", torch.arange(config.max_position_embeddings)[None, :])


class DefaultEps(Solution):
    def __init__(self, config):
        super().__init__(config)
        self.LayerNorm = torch.nn.LayerNorm(config.hidden_size)


class NoPaddingIdx(Solution):
    def __init__(self, config):
        super().__init__(config)
        self.word_embeddings = torch.nn.Embedding(config.vocab_size, config.hidden_size)


class NoBuffers(Solution):
    """Defaults made in forward instead: the right numbers, but no buffers as the task asks."""

    def __init__(self, config):
        super().__init__(config)
        del self.position_ids, self.token_type_ids

    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        T = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(past_key_values_length, past_key_values_length + T)[None, :]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds, past_key_values_length)


class OnesTokenTypesBuffer(Solution):
    def __init__(self, config):
        super().__init__(config)
        self.token_type_ids = torch.ones_like(self.token_type_ids)


class IdsOnly(Solution):
    """Reads B and T from input_ids: crashes when called with inputs_embeds only."""

    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        _B, _T = input_ids.shape
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds, past_key_values_length)


class IgnoresInputsEmbeds(Solution):
    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        if inputs_embeds is not None:
            inputs_embeds = torch.zeros_like(inputs_embeds)  # the given vectors are never used
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds, past_key_values_length)


class PositionsFromZero(Solution):
    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds, 0)


class NoPastArgument(Solution):
    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None):
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds)


class Shifted(Solution):
    def forward(self, *args, **kwargs):
        return super().forward(*args, **kwargs) + 0.5


@pytest.mark.parametrize(
    "cls, expected",
    [
        (Stub, r"not implemented yet: Stub\(config\) raises NotImplementedError"),
        (PersistentBuffer, r"the buffer position_ids is saved in the state_dict.*\n.*persistent=False"),
        (DefaultEps, r"`self.LayerNorm` has eps=1e-05, expected config.layer_norm_eps = 1e-12"),
        (
            NoPaddingIdx,
            r"`self.word_embeddings` has padding_idx=None, expected config.pad_token_id = 0\n"
            r"  padding_idx keeps the \[PAD\] row out of training",
        ),
        (NoBuffers, r"`self.position_ids` is missing: the default position_ids are a buffer of shape \[1, 512\]"),
        (OnesTokenTypesBuffer, r"`self.token_type_ids` must be all zeros, of shape \[1, 512\]"),
        (
            IdsOnly,
            r"forward raised AttributeError: 'NoneType' object has no attribute 'shape'\n"
            r"(.*\n)*  the call: forward\(inputs_embeds=float32 tensor \[\d+, \d+, 384\], "
            r"token_type_ids=int64 tensor \[\d+, \d+\]\)\n"
            r"  With `inputs_embeds` given and no `input_ids`, the word vectors are `inputs_embeds`",
        ),
        (
            IgnoresInputsEmbeds,
            r"values differ from HF's BertEmbeddings on random word vectors as inputs_embeds "
            r"\(batch \d+, length \d+\), no input_ids",
        ),
        (
            PositionsFromZero,
            r"values differ from HF's BertEmbeddings on random ids \(batch \d+, length \d+\) and "
            r"past_key_values_length=\d+ \(atol 1e-05, rtol 1.9e-06\)\n.*\n"
            r"  The default positions start at past_key_values_length",
        ),
        (NoPastArgument, r"forward raised TypeError: .*unexpected keyword argument 'past_key_values_length'"),
        (
            Shifted,
            r"values differ from the pretrained model \(atol 1e-05, rtol 1.9e-06\)\n"
            r"  max abs diff 5.0e-01 at \(batch \d+, token \d+, dim \d+\): expected .*, got ",
        ),
    ],
)
def test_failures_say_what_and_where(cls, expected):
    # A names failure that blocks nothing fails the names cell's run (up to shapes); a run that
    # goes further is judged by the checks after it (test_a_names_failure_that_blocks_nothing_...).
    upto = "shapes" if cls in (DefaultEps, NoPaddingIdx, NoBuffers) else None
    with pytest.raises(CheckFailed, match=expected) as err:
        check("2.1", cls, upto=upto)
    assert str(err.value).startswith("[Task 2.1] BertEmbeddings: ")
    # torch's default eps is a known mistake of its own, named (its hint steps speak of eps)
    assert err.value.mistake == ("embeddings-layernorm-eps-default" if cls is DefaultEps else None)


def test_a_names_failure_that_blocks_nothing_costs_the_cells_that_see_it(capsys):
    """No padding_idx: the module loads the pretrained weights and its outputs are HF's. The names
    cell's run fails on it; the values and batches cells' runs pass, saying so; the gradients
    cell's run fails on the [PAD] row's gradient, which it checks on its own."""
    with pytest.raises(CheckFailed, match=r"padding_idx=None") as err:
        check("2.1", NoPaddingIdx, upto="shapes")
    assert err.value.stage == "names"
    for upto in ("values", "batches"):
        check("2.1", NoPaddingIdx, upto=upto)
        out = capsys.readouterr().out
        assert f"{upto} passed; names failed" in out and "padding_idx=None" in out, out
    with pytest.raises(CheckFailed, match=r"\[PAD\] rows only") as err:
        check("2.1", NoPaddingIdx, upto="gradients")
    assert err.value.stage != "names"
    assert "the names check failed: `self.word_embeddings` has padding_idx=None" in str(err.value)


class NoLayerNormModule(Solution):
    """Normalises with torch's function: no `self.LayerNorm`, so the pretrained weights cannot load."""

    def __init__(self, config):
        super().__init__(config)
        del self.LayerNorm
        self.LayerNorm = lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:], eps=config.layer_norm_eps)


def test_a_names_failure_that_leaves_nothing_to_check_stops_every_cell():
    for upto in ("shapes", "values", "gradients"):
        with pytest.raises(CheckFailed, match=r"missing: LayerNorm.bias, LayerNorm.weight") as err:
            check("2.1", NoLayerNormModule, upto=upto)
        assert err.value.stage == "names"


# -- no token_type_ids buffer: its own check fails, every other runs and finds the real mistakes --


class TokenTypesFromTheBuffer(torch.nn.Module):
    """A learner's BertEmbeddings written in one piece, with no `token_type_ids` buffer: the
    default token types read from a buffer that was never registered."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = torch.nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.position_embeddings = torch.nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = torch.nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = torch.nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = torch.nn.Dropout(config.hidden_dropout_prob)
        self.register_buffer(
            "position_ids", torch.arange(config.max_position_embeddings).expand((1, -1)), persistent=False
        )

    def total(self, input_ids, token_type_ids, position_ids, inputs_embeds, past_key_values_length):
        words = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        T = words.shape[1]
        if position_ids is None:
            position_ids = self.position_ids[:, past_key_values_length : past_key_values_length + T]
        if token_type_ids is None:
            token_type_ids = self.token_type_ids[:, :T]  # AttributeError: no such buffer
        return words + self.position_embeddings(position_ids) + self.token_type_embeddings(token_type_ids)

    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        total = self.total(input_ids, token_type_ids, position_ids, inputs_embeds, past_key_values_length)
        return self.dropout(self.LayerNorm(total))


class TokenTypesZerosWhenMissing(TokenTypesFromTheBuffer):
    """The default token types made on the spot: right outputs, but no buffer as HF's has."""

    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        if token_type_ids is None:
            shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:2]
            token_type_ids = torch.zeros(shape, dtype=torch.long)
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds, past_key_values_length)


class NoBufferNoLayerNorm(TokenTypesFromTheBuffer):
    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        return self.dropout(self.total(input_ids, token_type_ids, position_ids, inputs_embeds, past_key_values_length))


@pytest.mark.parametrize("cls", [TokenTypesFromTheBuffer, TokenTypesZerosWhenMissing])
def test_a_missing_token_type_buffer_fails_its_own_check_only(cls, capsys):
    check("2.1", cls, upto="gradients")  # every other check runs, and passes
    assert "gradients passed" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match=r"`self.token_type_ids` is missing") as err:
        check("2.1", cls, only="buffers")
    assert "the other checks of Task 2.1 pass token types" in str(err.value)


def test_a_missing_token_type_buffer_hides_no_other_mistake():
    with pytest.raises(CheckFailed) as err:
        check("2.1", NoBufferNoLayerNorm, upto="values")
    assert err.value.mistake == "embeddings-no-layernorm", str(err.value)
