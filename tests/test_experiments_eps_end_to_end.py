"""bertlab.experiments.eps_end_to_end: PyTorch's default LayerNorm epsilon in the whole model (lesson 6)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bertlab.experiments import eps_end_to_end as e2e
from bertlab.experiments import lesions
from bertlab.experiments.layernorm_eps import eps_effect


def test_with_eps_changes_every_layernorm_of_a_copy_only(model):
    copy = e2e.with_eps(model, 1e-5, torch.float64)
    norms = [m for m in copy.modules() if isinstance(m, nn.LayerNorm)]
    assert len(norms) == 2 * model.config.num_hidden_layers + 1  # the embeddings' and two per layer
    assert {m.eps for m in norms} == {1e-5}
    assert {p.dtype for p in copy.parameters()} == {torch.float64}
    assert {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)} == {model.config.layer_norm_eps}
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_the_models_own_epsilon_moves_nothing(model, batch):
    same = e2e.end_to_end(model, batch, model.config.layer_norm_eps)
    assert same.hidden_moved == 0 and same.sentence_moved == 0 and same.neighbours_changed == 0
    assert torch.allclose(same.sentence_cosine, torch.ones_like(same.sentence_cosine), rtol=0, atol=1e-12)
    assert same.float32_rounding > 0  # float32 is not float64


@pytest.fixture(scope="module")
def default_eps(model, batch):
    return e2e.end_to_end(model, batch, torch.nn.LayerNorm(1).eps)


def test_a_larger_epsilon_moves_the_outputs_more(model, batch, default_eps):
    larger = e2e.end_to_end(model, batch, 1e-3)
    assert larger.hidden_moved > default_eps.hidden_moved > 0
    assert larger.sentence_cosine.min() < default_eps.sentence_cosine.min() < 1


def test_what_lesson_6_says_of_the_whole_model(model, batch, default_eps):
    """Reaches the output, does not compound, far from rounding, and leaves every neighbour."""
    single = eps_effect(model, batch, torch.nn.LayerNorm(1).eps)
    last = single[f"encoder.layer.{model.config.num_hidden_layers - 1}.output.LayerNorm"].moved
    largest = max(e.moved for e in single.values())
    assert last < default_eps.hidden_moved < largest
    assert default_eps.hidden_moved > 100 * default_eps.hidden_step
    assert default_eps.hidden_moved > 100 * default_eps.float32_rounding
    assert (1 - default_eps.sentence_cosine).max() < 1e-6
    assert default_eps.neighbours_changed == 0


def test_smallest_variances_are_those_of_the_recorded_inputs(model, batch):
    variances = e2e.smallest_variances(model, batch)
    trace = lesions.run(model, batch)
    real = batch["attention_mask"].bool()
    for i in range(model.config.num_hidden_layers):
        z = (trace.hidden_states[i] + trace.attention_updates[i]).double()  # the first LayerNorm's input
        expected = z.var(-1, unbiased=False)[real].min().item()
        assert variances[f"encoder.layer.{i}.attention.output.LayerNorm"] == pytest.approx(expected, rel=1e-5)
    assert len(variances) == 2 * model.config.num_hidden_layers + 1
