"""bertlab.experiments.half_precision: modules and the model in float16 and bfloat16 against float32."""

import pytest
import torch

from bertlab.checks.compare import RTOL, closeness
from bertlab.checks.framework import ATOL
from bertlab.experiments.half_precision import PARTS, module_outputs, token_closeness, whole_model


def measure(e, g):
    return closeness(e, g, ATOL, RTOL)


@pytest.fixture(scope="module")
def runs(model, batch):
    return {dt: module_outputs(model, batch, 2, dt) for dt in (torch.float16, torch.bfloat16)}


def test_expected_outputs_are_the_layers_own(model, batch, runs):
    """The float32 side is what the layer gives: the second Add & Norm's output is hidden_states[3]."""
    with torch.no_grad():
        states = model(**batch, output_hidden_states=True).hidden_states
    real = batch["attention_mask"].bool()
    want, _ = runs[torch.float16]["output"]
    assert torch.equal(want, states[3][real])
    assert list(runs[torch.float16]) == list(PARTS)


def test_token_closeness_is_the_measure_row_by_row():
    expected = torch.zeros(3, 4)
    got = expected.clone()
    got[1, 2] = 5e-5  # five times an absolute tolerance of 1e-5 at a value of 0
    per_token = token_closeness(expected, got, lambda e, g: closeness(e, g, 1e-5))
    torch.testing.assert_close(per_token, torch.tensor([0.0, 5.0, 0.0]))


def test_float32_copies_match_exactly(model, batch):
    """The copy-and-convert path adds nothing of its own: in float32 every part is the same."""
    for part, (want, got) in module_outputs(model, batch, 2, torch.float32).items():
        assert torch.equal(want, got), part


def test_half_precision_fails_every_token_and_bfloat16_more(runs):
    """What lesson 6 says of the model: computed from the model here, not read off the page."""
    for part in PARTS:
        for dt in runs:
            want, got = runs[dt][part]
            assert token_closeness(want, got, measure).min() > 1, (dt, part)
        f16, b16 = (measure(*runs[dt][part]) for dt in runs)
        assert b16 > f16 > 100, part


def test_the_whole_model_in_half_precision_keeps_its_neighbours(model, batch):
    for dt, gap in ((torch.float16, 1e-5), (torch.bfloat16, 1e-3)):
        w = whole_model(model, batch, dt)
        assert w.finite and w.neighbours_changed == 0
        assert (1 - w.sentence_cosine).max() < gap
        assert measure(w.expected, w.got) > 1
    same = whole_model(model, batch, torch.float32)
    assert torch.equal(same.expected, same.got) and same.similarity_moved < 1e-6
