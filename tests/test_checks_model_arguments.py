"""Every argument BertModel's forward takes changes its output as it changes HF's: a model that
drops ``position_ids`` or ``inputs_embeds`` passes every check on ``input_ids`` alone, and fails
the ``arguments`` check, named."""

from __future__ import annotations

from typing import Any

import pytest

from bertlab.checks import CheckFailed, check
from tests.conftest import solution_namespace

NB06 = solution_namespace("06-bert-model")
BertModel: Any = NB06["BertModel"]


class PositionsIgnored(BertModel):
    """Never passes the caller's position_ids on: the embeddings use 0..T-1 whatever was asked."""

    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, inputs_embeds=None, **kwargs
    ):
        return super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            inputs_embeds=inputs_embeds,
            **kwargs,
        )


class EmbedsIgnored(BertModel):
    """Takes inputs_embeds but embeds zeros ids when input_ids is missing (the word vectors are lost)."""

    def forward(
        self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, inputs_embeds=None, **kwargs
    ):
        if input_ids is None:
            input_ids = inputs_embeds.new_zeros(inputs_embeds.shape[:2]).long()
        return super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            **kwargs,
        )


@pytest.mark.parametrize("cls, argument", [(PositionsIgnored, "position_ids"), (EmbedsIgnored, "inputs_embeds")])
def test_a_model_that_drops_an_argument_fails_naming_it(cls, argument):
    check("6.4", cls, upto="calls")  # on input_ids alone it is HF's model
    with pytest.raises(CheckFailed) as err:
        check("6.4", cls, only="arguments")
    first = str(err.value).splitlines()[0]
    assert "values differ from HF's BertModel called with" in first and argument in first, str(err.value)
    assert "passes input_ids, token_type_ids, position_ids and inputs_embeds on to its embeddings" in str(err.value)


def test_the_solution_passes_the_arguments_check(capsys):
    check("6.4", NB06["BertModel"], only="arguments")
    assert "arguments passed" in capsys.readouterr().out
