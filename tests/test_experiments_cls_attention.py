"""bertlab.experiments.cls_attention: [CLS]'s attention by kind of key, and partners among sentence vectors."""

import pytest
import torch
import torch.nn.functional as F

from bertlab import corpus
from bertlab.experiments.cls_attention import (
    KINDS,
    TOPIC_PAIRS,
    cls_attention_shares,
    cls_vectors,
    kind_masks,
    partner_contrast,
    partners_found,
    token_kind,
)
from bertlab.pooling import sentence_embeddings


@pytest.fixture(scope="module")
def output(model, batch):
    with torch.no_grad():
        return model(**batch, output_attentions=True)


def test_token_kinds(tokenizer):
    enc = tokenizer(["Hello, world!", "a b c d e f"], padding=True)
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    kinds = [token_kind(t, tokenizer) for t in tokens]
    assert kinds[: tokens.index("[SEP]") + 1] == ["[CLS]", "content", "punctuation", "content", "punctuation", "[SEP]"]
    assert set(kinds[tokens.index("[SEP]") + 1 :]) <= {None}  # padding has no kind
    assert token_kind("##ing", tokenizer) == "content" and token_kind("$", tokenizer) == "punctuation"


def test_kind_masks_cover_every_real_token_once(tokenizer, batch):
    masks = kind_masks(batch["input_ids"], batch["attention_mask"], tokenizer)
    assert set(masks) == set(KINDS)
    covered = torch.stack([m.long() for m in masks.values()]).sum(0)  # (B, T)
    assert torch.equal(covered, batch["attention_mask"].long())


def test_shares_are_the_attention_of_cls(model, batch, output, tokenizer):
    for attention in (output.attentions[0], output.attentions[-1]):
        shares = cls_attention_shares(attention, batch["input_ids"], batch["attention_mask"], tokenizer)
        total = sum(shares.attention[k] for k in KINDS)  # (B,)
        torch.testing.assert_close(total, torch.ones_like(total), atol=1e-6, rtol=0)
        uniform = sum(shares.uniform[k] for k in KINDS)
        torch.testing.assert_close(uniform, torch.ones_like(uniform))
        on_itself = attention[:, :, 0, 0].double().mean(1)  # (B,): [CLS] query, [CLS] key
        torch.testing.assert_close(shares.attention["[CLS]"], on_itself)
        is_sep = batch["input_ids"] == tokenizer.sep_token_id  # (B, T)
        on_sep = (attention[:, :, 0, :].double().mean(1) * is_sep).sum(1)
        torch.testing.assert_close(shares.attention["[SEP]"], on_sep)
        torch.testing.assert_close(shares.uniform["[CLS]"], 1 / batch["attention_mask"].sum(1).double())
        assert shares.mean("content") == pytest.approx(shares.attention["content"].mean().item())


def test_partner_measures_on_vectors_built_for_it():
    g = torch.Generator().manual_seed(0)
    vectors = torch.randn(5, 16, generator=g, dtype=torch.float64)
    vectors[1] = 3 * vectors[0]  # 0 and 1 point the same way
    contrast = partner_contrast(vectors, pairs=((0, 1),))
    unit = F.normalize(vectors, dim=-1)
    expected = 1 - (unit[0] @ unit[2:].T).mean()
    torch.testing.assert_close(contrast[0], expected)
    torch.testing.assert_close(contrast[1], 1 - (unit[1] @ unit[2:].T).mean())
    assert partners_found(vectors, pairs=((0, 1),)) == 2
    vectors[3], vectors[4] = -vectors[2], vectors[2]  # 2's nearest is 4; its partner 3 is the farthest of all
    assert partners_found(vectors, pairs=((2, 3),)) == 0
    assert bool((partner_contrast(vectors, pairs=((2, 3),)) < 0).all())


def test_topic_pairs_name_corpus_sentences():
    flat = [i for pair in TOPIC_PAIRS for i in pair]
    assert len(set(flat)) == len(flat) and all(0 <= i < len(corpus.SENTENCES) for i in flat)


def test_mean_pooling_finds_the_topic_partners_and_cls_vectors_separate_them_less(output, batch):
    """What lesson 7 says of the model: computed from the model here, not read off the page."""
    mean = sentence_embeddings(output.last_hidden_state, batch["attention_mask"])
    cls = cls_vectors(output.last_hidden_state)
    torch.testing.assert_close(cls.norm(dim=-1), torch.ones(len(cls), dtype=torch.float64))
    assert partners_found(mean) == 2 * len(TOPIC_PAIRS)
    assert partner_contrast(mean).mean() > partner_contrast(cls).mean()
