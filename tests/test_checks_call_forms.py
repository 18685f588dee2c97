"""The ``arguments`` check calls each module in every form HF's callers use (``call_forms``).

A random draw of inputs never called whole forms: ``inputs_embeds`` without token types, a
``scaling`` other than the head size's, a [PAD] id other than 0. Each class below is written as a
learner would (independently of ``bertlab.diagnose``); the wrong ones pass every check on the
forms HF's own model uses, and fail here, with the form named.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from bertlab.checks import CheckFailed, check
from bertlab.checks.call_forms import OTHER_SCALING
from tests.conftest import solution_namespace

NB = solution_namespace("02-embeddings", "06-bert-model")
SolutionEmbeddings: Any = NB["BertEmbeddings"]
SolutionModel: Any = NB["BertModel"]


# -- eager_attention_forward: `scaling` ----------------------------------------------------------


def scaling_ignored(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Wrong: 1/sqrt(d) from the head size, whatever `scaling` the caller passes."""
    scores = query @ key.transpose(-1, -2) / math.sqrt(query.size(-1))
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = nn.functional.dropout(scores.softmax(-1), p=dropout, training=module.training)
    return (weights @ value).transpose(1, 2), weights


def scaling_from_shape(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Wrong: reads `scaling`'s name but overwrites it with the head size's."""
    scaling = query.shape[-1] ** -0.5
    scores = torch.einsum("bhqd,bhkd->bhqk", query, key) * scaling
    if attention_mask is not None:
        scores += attention_mask
    weights = torch.softmax(scores, dim=-1)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.einsum("bhqk,bhkd->bqhd", weights, value), weights


def scaling_without_default(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Wrong: uses `scaling` as given, so None (HF's default) raises."""
    scores = (query @ key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = nn.functional.dropout(scores.softmax(-1), p=dropout, training=module.training)
    return (weights @ value).transpose(1, 2), weights


def scaling_or_default(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Right: HF's rule written another way."""
    scale = scaling if scaling is not None else 1 / math.sqrt(query.size(-1))
    scores = torch.matmul(query, key.transpose(2, 3)) * scale
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).permute(0, 2, 1, 3), weights


def scaling_folded_into_query(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Right: the query scaled before the product (the same scores up to rounding)."""
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    scores = (query * scaling) @ key.transpose(-1, -2)
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = scores.softmax(dim=-1)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return (weights @ value).transpose(1, 2).contiguous(), weights


@pytest.mark.parametrize(
    "fn, form",
    [
        (scaling_ignored, f"scaling={OTHER_SCALING}"),
        (scaling_from_shape, f"scaling={OTHER_SCALING}"),
        (scaling_without_default, "scaling left out"),
    ],
)
def test_an_attention_that_mishandles_scaling_fails_the_arguments_check(fn, form):
    check("3.1", fn, upto="masks")  # on the head size's scaling it is HF's function
    with pytest.raises(CheckFailed) as err:
        check("3.1", fn, only="arguments")
    assert f"called with {form}" in str(err.value), str(err.value)


@pytest.mark.parametrize("fn", [scaling_or_default, scaling_folded_into_query])
def test_an_attention_that_follows_scaling_passes(fn, capsys):
    check("3.1", fn, only="arguments")
    assert "arguments passed" in capsys.readouterr().out


# -- BertEmbeddings: the [PAD] row and inputs_embeds ----------------------------------------------


class PadTypedIn(SolutionEmbeddings):
    """Wrong: padding_idx=0, the pretrained model's [PAD] id, typed in."""

    def __init__(self, config):
        super().__init__(config)
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)


class LookupByIndexing(SolutionEmbeddings):
    """Wrong: looks the words up by indexing the table, which bypasses padding_idx: the [PAD]
    row is trained."""

    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        words = self.word_embeddings.weight[input_ids] if inputs_embeds is None else inputs_embeds
        return SolutionEmbeddings.forward(self, None, token_type_ids, position_ids, words, past_key_values_length)


class EmbedsDetached(SolutionEmbeddings):
    """Wrong: the caller's word vectors are detached on the way in."""

    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        if inputs_embeds is not None:
            inputs_embeds = inputs_embeds.detach()
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds, past_key_values_length)


class EmbedsCopiedByData(SolutionEmbeddings):
    """Wrong: copies the caller's word vectors through `.data` (out of the graph)."""

    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        if inputs_embeds is not None:
            inputs_embeds = inputs_embeds.data.clone()
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds, past_key_values_length)


class TypesFromIds(SolutionEmbeddings):
    """Wrong: the default token types are zeros shaped like input_ids, which is None when the
    caller gives inputs_embeds."""

    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds, past_key_values_length)


class ShapeFromEither(SolutionEmbeddings):
    """Right: B and T from whichever of input_ids and inputs_embeds is given, zeros for the types."""

    def forward(
        self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, past_key_values_length=0
    ):
        shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
        if token_type_ids is None:
            token_type_ids = torch.zeros(shape, dtype=torch.long)
        return super().forward(input_ids, token_type_ids, position_ids, inputs_embeds, past_key_values_length)


@pytest.mark.parametrize("cls", [PadTypedIn, LookupByIndexing])
def test_a_pad_row_other_than_the_configs_fails_named(cls):
    check("2.1", cls, upto="config")
    with pytest.raises(CheckFailed) as err:
        check("2.1", cls, only="arguments")
    message = str(err.value)
    assert "[PAD] rows" in message and "padding_idx=config.pad_token_id" in message, message


@pytest.mark.parametrize("cls", [EmbedsDetached, EmbedsCopiedByData])
def test_detached_inputs_embeds_fail_the_gradient_of_the_form(cls):
    check("2.1", cls, upto="config")
    with pytest.raises(CheckFailed) as err:
        check("2.1", cls, only="arguments")
    message = str(err.value)
    assert "no gradient reaches inputs_embeds, called with inputs_embeds" in message, message


def test_default_types_shaped_like_input_ids_fail_the_buffers_check():
    check("2.1", TypesFromIds, upto="gradients")  # every call there passes input_ids or token types
    with pytest.raises(CheckFailed) as err:
        check("2.1", TypesFromIds, only="buffers")
    assert "called with inputs_embeds, no token_type_ids" in str(err.value), str(err.value)


@pytest.mark.parametrize("cls", [ShapeFromEither, SolutionEmbeddings])
def test_embeddings_that_take_every_form_pass(cls, capsys):
    check("2.1", cls, only="arguments")
    check("2.1", cls, only="buffers")
    assert "arguments passed" in capsys.readouterr().out


# -- BertModel: defaults built from the right input ------------------------------------------------


class ModelTypesFromIds(SolutionModel):
    """Wrong: default token types and mask built from input_ids."""

    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, inputs_embeds=None, **kwargs
    ):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        return super().forward(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)


class ModelEmbedsDetached(SolutionModel):
    """Wrong: inputs_embeds passed on detached."""

    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, inputs_embeds=None, **kwargs
    ):
        if inputs_embeds is not None:
            inputs_embeds = inputs_embeds.detach()
        return super().forward(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)


class ModelMaskAlwaysBuilt(SolutionModel):
    """Right: an all-ones (B, T) mask built when none is given, from whichever input is."""

    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, inputs_embeds=None, **kwargs
    ):
        if attention_mask is None:
            shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
            attention_mask = torch.ones(shape, dtype=torch.long)
        return super().forward(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)


@pytest.mark.parametrize(
    "cls, message",
    [
        (ModelTypesFromIds, "raised"),
        (ModelEmbedsDetached, "no gradient reaches inputs_embeds"),
    ],
)
def test_a_model_wrong_in_one_form_fails_naming_it(cls, message):
    check("6.4", cls, upto="config")  # right on input_ids
    with pytest.raises(CheckFailed) as err:
        check("6.4", cls, only="arguments")
    assert message in str(err.value) and "inputs_embeds" in str(err.value), str(err.value)


def test_a_model_that_builds_its_default_mask_passes(capsys):
    check("6.4", ModelMaskAlwaysBuilt, only="arguments")
    assert "arguments passed" in capsys.readouterr().out
