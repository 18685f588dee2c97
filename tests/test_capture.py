"""The capture records every sub-module on the corpus, and composing them reproduces the layer (S2)."""

from __future__ import annotations

import torch

from bertlab import capture, corpus, reference


def test_corpus_has_padding_and_the_test_sentence():
    assert "this is a test sentence" in corpus.SENTENCES
    assert len(corpus.SENTENCES) >= 8
    mask = corpus.batch(reference.load_tokenizer())["attention_mask"]
    lengths = mask.sum(1)
    assert lengths.min() < lengths.max(), "sentences of one length would never exercise padding"


def test_captured_layer_outputs_are_the_hidden_states():
    cap = capture.capture()
    assert cap.num_layers == reference.load_config().num_hidden_layers
    assert torch.equal(cap.calls["embeddings"].output, cap.hidden_states[0])
    for i in range(cap.num_layers):
        assert torch.equal(cap.layer(i).output, cap.hidden_states[i + 1])
        assert torch.equal(cap.layer(i, "attention.self").output[1], cap.attentions[i])
    assert torch.equal(cap.calls["pooler"].output, cap.pooler_output)


def test_s2_four_submodules_by_hand_give_hidden_states_1():
    """S2: the two Add & Norm live in attention.output and output; nothing else happens in a layer."""
    model, cap = reference.load_model(), capture.capture()
    layer = model.encoder.layer[0]
    x = cap.hidden_states[0]  # (B, T, H)
    mask = cap.layer(0).args[1]  # (B, 1, T, T), additive
    with torch.no_grad():
        context, _ = layer.attention.self(x, attention_mask=mask)  # (B, T, H)
        attention_output = layer.attention.output(context, x)  # first Add & Norm
        intermediate = layer.intermediate(attention_output)  # (B, T, 4H)
        layer_output = layer.output(intermediate, attention_output)  # second Add & Norm
    assert torch.equal(layer_output, cap.hidden_states[1])


def test_capture_works_for_a_tiny_random_bert(tiny_bert_dir):
    cap = capture.capture(tiny_bert_dir)
    assert cap.num_layers == 2
    assert cap.layer(1, "intermediate").output.shape[-1] == 64
