"""S2 with the learner-facing code: the solution classes of Tasks 3, 4 and 5, called by hand in
BertLayer's order, map ``hidden_states[i]`` to ``hidden_states[i + 1]`` of the pretrained model."""

from __future__ import annotations

import pytest
import torch

from bertlab import capture, reference
from tests.conftest import solution_namespace

NOTEBOOKS = ("03-self-attention", "04-attention-output", "05-feed-forward")


def solution_classes() -> dict:
    return solution_namespace(*NOTEBOOKS)


@pytest.fixture(scope="module")
def learner():
    return solution_classes()


def build_layer(learner: dict, index: int) -> dict:
    """BertAttention, BertIntermediate and BertOutput of layer ``index``, pretrained weights loaded strictly."""
    model = reference.load_model()
    parts = {}
    for part, cls in (("attention", "BertAttention"), ("intermediate", "BertIntermediate"), ("output", "BertOutput")):
        module = learner[cls](reference.load_config())
        module.load_state_dict(model.encoder.layer[index].get_submodule(part).state_dict(), strict=True)
        parts[part] = module.eval()
    return parts


def run_layer(parts: dict, hidden_states, attention_mask):
    """BertLayer.forward by hand: attention with the first Add & Norm, then the FFN with the second."""
    attention_output, _ = parts["attention"](hidden_states, attention_mask)  # (B, T, H)
    intermediate_output = parts["intermediate"](attention_output)  # (B, T, I)
    return parts["output"](intermediate_output, attention_output)  # (B, T, H)


def test_layer_0_from_the_learner_classes(learner):
    cap = capture.capture()
    mask = cap.layer(0).args[1]  # the additive mask BertLayer 0 received, (B, 1, T, T)
    with torch.no_grad():
        got = run_layer(build_layer(learner, 0), cap.hidden_states[0], mask)
    diff = (got - cap.hidden_states[1]).abs().max().item()
    assert diff < 1e-5, f"layer 0 by hand vs hidden_states[1]: max abs diff {diff:.1e}"


def test_every_layer_from_the_learner_classes(learner):
    cap = capture.capture()
    diffs = []
    with torch.no_grad():
        for i in range(cap.num_layers):
            got = run_layer(build_layer(learner, i), cap.hidden_states[i], cap.layer(i).args[1])
            diffs.append((got - cap.hidden_states[i + 1]).abs().max().item())
    assert max(diffs) < 1e-5, [f"layer {i}: {d:.1e}" for i, d in enumerate(diffs)]


def test_the_classes_are_the_notebooks(learner):
    """The composition runs the notebooks' own classes, not HF's."""
    for cls in ("BertSelfAttention", "BertSelfOutput", "BertAttention", "BertIntermediate", "BertOutput"):
        assert learner[cls].__module__ != "transformers.models.bert.modeling_bert"
        assert "modeling_bert" not in learner[cls].forward.__code__.co_filename
