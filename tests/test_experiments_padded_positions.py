"""bertlab.experiments.padded_positions: where padded queries look, what their vectors hold."""

import pytest
import torch

from bertlab.experiments.padded_positions import mask_shares, padded_cosines, refill_padding


@pytest.fixture(scope="module")
def output(model, batch):
    with torch.no_grad():
        return model(**batch, output_attentions=True)


def test_mask_shares_read_the_rows_they_name():
    real = torch.tensor([[1, 1, 0]])  # (B, T): one sentence, the last position padded
    probs = torch.tensor([[[[0.5, 0.5, 0.0], [0.25, 0.75, 0.0], [0.2, 0.3, 0.5]]]])  # (1, 1, T, T)
    share = mask_shares([probs], real)[0]
    assert share.padded_to_real == pytest.approx(0.5)
    assert share.padded_to_padded == pytest.approx(0.5)
    assert share.real_to_padded == 0
    probs[0, 0, 1] = torch.tensor([0.25, 0.5, 0.25])  # a real query that reads padding
    assert mask_shares([probs], real)[0].real_to_padded == pytest.approx(0.25)


def test_padded_cosines_on_vectors_built_for_them():
    hidden = torch.zeros(2, 3, 4, dtype=torch.float64)  # (B, T, H)
    hidden[0, 0, 0] = hidden[0, 1, 0] = 1  # sentence 0 points along feature 0
    hidden[0, 2] = torch.tensor([1.0, 1.0, 0, 0])  # its padded position: halfway to sentence 1
    hidden[1, :, 1] = 1  # sentence 1, no padding, along feature 1
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    cos = padded_cosines(hidden, mask)
    assert cos.sentences.tolist() == [0]  # only sentence 0 is padded
    half = 2**-0.5
    torch.testing.assert_close(cos.padded_to_own, torch.tensor([half], dtype=torch.float64))
    torch.testing.assert_close(cos.padded_to_other, torch.tensor([half], dtype=torch.float64))
    torch.testing.assert_close(cos.real_to_own, torch.tensor([1.0], dtype=torch.float64))
    torch.testing.assert_close(cos.padded_to_padded, torch.tensor([1.0], dtype=torch.float64))


def test_no_query_of_the_model_reads_padding(output, batch):
    """What lesson 7 says of the model: computed from the model here, not read off the page."""
    for share in mask_shares(output.attentions, batch["attention_mask"]):
        assert share.padded_to_padded == 0 and share.real_to_padded == 0
        assert share.padded_to_real == pytest.approx(1, abs=1e-5)


def test_padded_vectors_read_their_own_sentence(model, batch):
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    cos = padded_cosines(hidden, batch["attention_mask"])
    assert len(cos.sentences) == int((batch["attention_mask"] == 0).any(1).sum())
    assert bool((cos.padded_to_own > cos.padded_to_other).all())
    assert cos.padded_to_own.mean() < cos.real_to_own.mean()


def test_refilled_padding_moves_only_the_padded_positions(model, batch):
    moved = refill_padding(model, batch, token_id=1996)  # "the"
    assert moved.real_moved == 0 and moved.padded_moved > 0.1
    unchanged = refill_padding(model, batch, token_id=int(batch["input_ids"][0, -1]))  # [PAD] itself
    assert unchanged.real_moved == 0 and unchanged.padded_moved == 0
