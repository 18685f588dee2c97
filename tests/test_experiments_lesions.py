"""bertlab.experiments.lesions: the hand-composed encoder, its edits and the effect measures."""

import copy

import pytest
import torch

from bertlab import corpus, reference
from bertlab.experiments import lesions
from bertlab.experiments.lesions import INTACT, LESIONS, LayerEdit


@pytest.fixture(scope="module")
def queries():
    return corpus.batch(reference.load_tokenizer(), lesions.QUERIES)


@pytest.fixture(scope="module")
def intact(model, batch):
    return lesions.run(model, batch)


def test_intact_pass_reproduces_the_model_exactly(model, batch, intact):
    with torch.no_grad():
        expected = model(**batch, output_hidden_states=True).hidden_states
    assert len(intact.hidden_states) == len(expected) == model.config.num_hidden_layers + 1
    for ours, theirs in zip(intact.hidden_states, expected, strict=True):
        assert torch.equal(ours, theirs)


def test_trace_shapes(model, batch, intact):
    B, T = batch["input_ids"].shape
    H, L = model.config.hidden_size, model.config.num_hidden_layers
    assert intact.last_hidden_state.shape == (B, T, H)
    for seq in (intact.attention_updates, intact.ffn_inputs, intact.ffn_updates):
        assert len(seq) == L and all(t.shape == (B, T, H) for t in seq)


def test_layer_edit_value_semantics():
    assert LayerEdit() == INTACT
    edit = LayerEdit(heads_off=[3, 1])
    assert edit.heads_off == frozenset({1, 3}) and edit == LayerEdit(heads_off={1, 3})
    assert hash(edit) == hash(LayerEdit(heads_off=(3, 1)))


def test_edit_list_forms():
    assert lesions.edit_list(None, 3) == [INTACT] * 3
    edit = LESIONS["ffn"]
    assert lesions.edit_list(edit, 2) == [edit, edit]
    assert lesions.edit_list({1: edit}, 3) == [INTACT, edit, INTACT]
    with pytest.raises(ValueError, match="layer 3"):
        lesions.edit_list({3: edit}, 3)


def test_removed_layer_is_the_identity(model, batch, intact):
    trace = lesions.run(model, batch, {2: LESIONS["layer"]})
    assert torch.equal(trace.hidden_states[3], trace.hidden_states[2])
    assert torch.equal(trace.hidden_states[2], intact.hidden_states[2])
    assert trace.attention_updates[2] is None and trace.ffn_updates[2] is None
    ratios = lesions.update_ratios(trace)
    assert ratios["attention"][2].isnan() and ratios["ffn"][2].isnan()
    assert not ratios["attention"][1].isnan()


def test_skip_removal_normalises_the_branch_alone(model, batch, intact):
    trace = lesions.run(model, batch, {0: LESIONS["attention_skip"]})
    layer = model.encoder.layer[0]
    expected = layer.attention.output.LayerNorm(intact.attention_updates[0])
    assert torch.equal(trace.ffn_inputs[0], expected)


def test_head_mask_equals_zeroing_that_head_of_w_o(model, batch):
    i, j = 1, 5
    trace = lesions.run(model, batch, {i: LayerEdit(heads_off={j})})
    pruned = copy.deepcopy(model)
    d = model.config.hidden_size // model.config.num_attention_heads
    with torch.no_grad():
        pruned.encoder.layer[i].attention.output.dense.weight[:, j * d : (j + 1) * d] = 0.0
    expected = lesions.run(pruned, batch)
    torch.testing.assert_close(trace.last_hidden_state, expected.last_hidden_state, atol=1e-5, rtol=0)


def test_all_heads_off_leaves_only_the_output_bias(model, batch):
    heads = range(model.config.num_attention_heads)
    trace = lesions.run(model, batch, {0: LayerEdit(heads_off=set(heads))})
    bias = model.encoder.layer[0].attention.output.dense.bias
    assert torch.equal(trace.attention_updates[0], bias.expand_as(trace.attention_updates[0]))
    with pytest.raises(ValueError, match="heads"):
        lesions.run(model, batch, {0: LayerEdit(heads_off={len(heads)})})


def test_relu_edits(model, batch, intact):
    trace = lesions.run(model, batch, LayerEdit(relu_after_attention=True))
    assert all((a >= 0).all() for a in trace.attention_updates)
    # A ReLU on the skip changes what is added to, not the first update itself.
    trace = lesions.run(model, batch, {0: LayerEdit(relu_on_skip=True)})
    assert torch.equal(trace.attention_updates[0], intact.attention_updates[0])
    assert not torch.equal(trace.ffn_inputs[0], intact.ffn_inputs[0])


def test_start_from_a_cached_prefix_gives_the_same_numbers(model, batch, intact):
    edits = {3: LESIONS["ffn_skip"]}
    full = lesions.run(model, batch, edits)
    resumed = lesions.run(model, batch, edits, start=(3, intact.hidden_states[3]))
    assert torch.equal(full.last_hidden_state, resumed.last_hidden_state)


def test_sentence_embeddings_ignore_padding():
    hidden = torch.tensor([[[3.0, 4.0], [100.0, -7.0]]])  # (1, 2, 2); token 1 is padding
    mask = torch.tensor([[1, 0]])
    torch.testing.assert_close(lesions.sentence_embeddings(hidden, mask), torch.tensor([[0.6, 0.8]]))


def test_sentence_embeddings_match_sentence_transformers(model, batch):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(reference.bundled_model_dir()), device="cpu")
    expected = torch.from_numpy(st.encode(list(corpus.SENTENCES)))
    ours = lesions.encode(model, batch)
    assert (ours - expected).abs().max() < 1e-5


def test_token_ratio_by_hand():
    update = torch.tensor([[[3.0, 4.0], [1.0, 0.0], [9.0, 9.0]]])  # norms 5, 1, (padding)
    stream = torch.tensor([[[0.0, 10.0], [0.0, 4.0], [1.0, 0.0]]])  # norms 10, 4
    mask = torch.tensor([[1, 1, 0]])
    assert lesions.token_ratio(update, stream, mask).item() == pytest.approx((0.5 + 0.25) / 2)


def test_search_orders_by_cosine():
    docs = torch.eye(3)
    q = torch.nn.functional.normalize(torch.tensor([[0.1, 0.9, 0.4]]), dim=-1)
    scores, order = lesions.search(q, docs)
    assert order.tolist() == [[1, 2, 0]]
    torch.testing.assert_close(scores[0, 1], q[0, 1])


def test_intact_effect_is_neutral(model, batch, queries):
    e = lesions.effect(model, batch, queries, None)
    assert e.cosine.shape == (len(corpus.SENTENCES),)
    assert e.min_cosine > 0.99999 and e.top_kept == 1.0 and e.rank_of_top.tolist() == [1] * len(lesions.QUERIES)
    assert e.score_correlation == pytest.approx(1.0, abs=1e-6)


def test_layer_lesions_table_is_deterministic(model, batch, queries):
    first = lesions.layer_lesions(model, batch, queries, kinds=("attention_skip",))
    second = lesions.layer_lesions(model, batch, queries, kinds=("attention_skip",))
    L = model.config.num_hidden_layers
    assert [(r.kind, r.layer) for r in first] == [("attention_skip", i) for i in range(L)]
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a.effect.cosine, b.effect.cosine) and torch.equal(a.effect.rank_of_top, b.effect.rank_of_top)
    # Removing a skip connection moves the embeddings far more than any head does.
    assert min(r.effect.mean_cosine for r in first) < 0.5


def test_head_lesions_match_one_edit_at_a_time(model, batch):
    small = {k: v[:3] for k, v in batch.items()}
    table = lesions.head_lesions(model, small)
    assert table.shape == (model.config.num_hidden_layers, model.config.num_attention_heads)
    assert ((table > 0.5) & (table <= 1.0 + 1e-6)).all()
    reference = lesions.encode(model, small)
    for i, j in [(0, 0), (2, 7), (model.config.num_hidden_layers - 1, 11)]:
        one = lesions.encode(model, small, {i: LayerEdit(heads_off={j})})
        assert abs((one * reference).sum(-1).mean().item() - table[i, j].item()) < 1e-5


def test_training_mode_is_refused(batch):
    config = copy.deepcopy(reference.load_config())
    from transformers import BertModel

    with torch.device("meta"):
        m = BertModel(config)
    m.train()
    with pytest.raises(ValueError, match="eval"):
        lesions.run(m, batch)
