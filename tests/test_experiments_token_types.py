"""bertlab.experiments.token_types: a sentence pair's types, and the model run with other types."""

import pytest
import torch
import torch.nn.functional as F

from bertlab import corpus
from bertlab.experiments import token_types
from bertlab.pooling import sentence_embeddings


@pytest.fixture(scope="module")
def pair(tokenizer):
    return tokenizer(corpus.SENTENCES[1], corpus.SENTENCES[2], return_tensors="pt")


def test_segment_b_starts_after_the_first_sep(tokenizer, pair):
    tokens = tokenizer.convert_ids_to_tokens(pair["input_ids"][0])
    start = token_types.segment_b_start(pair)
    assert start == tokens.index(tokenizer.sep_token) + 1
    assert start == len(tokenizer(corpus.SENTENCES[1])["input_ids"])  # [CLS] A [SEP]
    with pytest.raises(ValueError, match="no segment B"):
        token_types.segment_b_start(tokenizer(corpus.SENTENCES[1], return_tensors="pt"))


def test_type_variants(pair):
    variants = token_types.type_variants(pair["token_type_ids"])
    assert tuple(variants) == token_types.VARIANTS
    given, zeros, swapped = variants.values()
    assert torch.equal(given, pair["token_type_ids"])
    assert not zeros.any() and torch.equal(swapped + given, torch.ones_like(given))


def test_pair_outputs_are_the_models(model, pair):
    runs = token_types.pair_outputs(model, pair)
    with torch.no_grad():
        as_given = model(**pair).last_hidden_state
        no_types = model(input_ids=pair["input_ids"], attention_mask=pair["attention_mask"]).last_hidden_state
    # one batch of the variants against one run each: equal up to float32 rounding
    torch.testing.assert_close(runs["as the tokenizer gives them"], as_given)
    torch.testing.assert_close(runs["all 0"], no_types)  # the model's default types
    with torch.no_grad():
        swapped = model(**{**pair, "token_type_ids": 1 - pair["token_type_ids"]}).last_hidden_state
    torch.testing.assert_close(runs["swapped"], swapped)
    assert (runs["swapped"] - as_given).abs().max() > 1e-2  # the types change the output


def test_pooled_is_the_models_pooling_and_the_changes_measure_it(model, pair):
    with torch.no_grad():
        hidden = model(**pair).last_hidden_state
    vector = token_types.pooled(hidden, pair["attention_mask"])
    assert vector.dtype == torch.float64
    torch.testing.assert_close(vector.float(), sentence_embeddings(hidden, pair["attention_mask"]))
    assert token_types.embedding_change(vector, vector) == pytest.approx(0.0, abs=1e-12)
    other = F.normalize(torch.randn(1, vector.shape[1], dtype=torch.float64), dim=-1)
    assert token_types.embedding_change(vector, other) == pytest.approx(1 - (vector @ other.T).item())
    moved = token_types.token_change(2 * hidden, hidden)
    torch.testing.assert_close(moved, torch.ones(hidden.shape[1], dtype=torch.float64))
