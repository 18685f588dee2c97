"""Right code that splits its work (chunks of tokens, one head at a time, a loop over tokens)
passes the train-mode dropout checks, and the same code with dropout in the wrong place fails.

Each module below is written as a learner would, independently of ``bertlab.diagnose``. The
chunked layer does what HF's ``apply_chunking_to_forward`` does when ``chunk_size_feed_forward``
is set, with chunks that need not divide the length.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from bertlab.checks import CheckFailed, check
from tests.conftest import solution_namespace

NB06 = solution_namespace("06-bert-model")


class Layer(nn.Module):
    """A learner's BertLayer whose feed-forward block runs on pieces of the sequence."""

    def __init__(self, config, layer_idx=None):
        super().__init__()
        self.attention = NB06["BertAttention"](config, layer_idx=layer_idx)
        self.intermediate = NB06["BertIntermediate"](config)
        self.output = NB06["BertOutput"](config)

    def feed_forward(self, attention_output):  # (B, t, H) -> (B, t, H), any t
        return self.output(self.intermediate(attention_output), attention_output)

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        attention_output, _ = self.attention(hidden_states, attention_mask)
        return self.feed_forward_in_pieces(attention_output)


class ChunkedLayer(Layer):
    """Chunks of four tokens along the sequence."""

    def feed_forward_in_pieces(self, attention_output):
        return torch.cat([self.feed_forward(chunk) for chunk in attention_output.split(4, dim=1)], dim=1)


class TokenLoopLayer(Layer):
    """A loop over the tokens, one (B, 1, H) slice at a time."""

    def feed_forward_in_pieces(self, attention_output):
        pieces = [self.feed_forward(attention_output[:, t : t + 1]) for t in range(attention_output.shape[1])]
        return torch.cat(pieces, dim=1)


class ChunkedDropoutOnSum(ChunkedLayer):
    """Wrong: chunked, and dropout acts on the residual sum instead of the dense output."""

    def feed_forward(self, attention_output):
        out = self.output
        dense = out.dense(self.intermediate(attention_output))
        return out.LayerNorm(out.dropout(dense + attention_output))


@pytest.mark.parametrize("cls", [ChunkedLayer, TokenLoopLayer])
def test_a_layer_that_runs_its_feed_forward_in_pieces_passes(cls, capsys):
    check("6.1", cls)
    assert "[Task 6.1] BertLayer passed" in capsys.readouterr().out


def test_a_chunked_layer_with_dropout_in_the_wrong_place_fails():
    with pytest.raises(CheckFailed) as err:
        check("6.1", ChunkedDropoutOnSum)
    assert "in train mode" in str(err.value), str(err.value)


# -- Task 3.2: one head at a time ---------------------------------------------------------------

NB03 = solution_namespace("03-self-attention")


class PerHeadSelfAttention(nn.Module):
    """A learner's BertSelfAttention that loops over the heads, each with its own slice of Q, K, V."""

    def __init__(self, config, is_causal=False, layer_idx=None):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def probabilities(self, scores):  # (B, T, T) -> (B, T, T)
        return self.dropout(scores.softmax(dim=-1))

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        d = self.attention_head_size
        q, k, v = self.query(hidden_states), self.key(hidden_states), self.value(hidden_states)  # (B, T, H)
        contexts, probs = [], []
        for h in range(self.num_attention_heads):
            part = slice(h * d, (h + 1) * d)
            scores = q[..., part] @ k[..., part].transpose(-1, -2) / math.sqrt(d)  # (B, T, T)
            if attention_mask is not None:
                scores = scores + attention_mask[:, 0]
            p = self.probabilities(scores)
            probs.append(p)
            contexts.append(p @ v[..., part])  # (B, T, d)
        return torch.cat(contexts, dim=-1), torch.stack(probs, dim=1)


class PerHeadDropoutOnScores(PerHeadSelfAttention):
    """Wrong: dropout on the scores, before the softmax."""

    def probabilities(self, scores):
        return self.dropout(scores).softmax(dim=-1)


def test_self_attention_one_head_at_a_time_passes(capsys):
    check("3.2", PerHeadSelfAttention)
    assert "[Task 3.2] BertSelfAttention passed" in capsys.readouterr().out


def test_self_attention_one_head_at_a_time_with_dropout_before_the_softmax_fails():
    with pytest.raises(CheckFailed) as err:
        check("3.2", PerHeadDropoutOnScores)
    assert "in train mode" in str(err.value), str(err.value)


# -- every way into torch's dropout is recorded and replayed --------------------------------------


def test_every_dropout_route_is_recorded_and_replays_hfs_mask():
    """Fails when torch routes a dropout around the names ``located_dropout`` replaces."""
    from transformers.models.bert.modeling_bert import eager_attention_forward

    from bertlab.checks import located_dropout

    x = torch.rand(3, 5, 16) + 1  # (rows..., features), no zeros of its own
    training = nn.Module().train()
    routes = {
        "nn.Dropout": lambda: nn.Dropout(0.5).train()(x),
        "F.dropout": lambda: nn.functional.dropout(x, 0.5, True),
        "F.dropout in place": lambda: nn.functional.dropout(x.clone(), 0.5, True, inplace=True),
        "torch.dropout": lambda: torch.dropout(x, 0.5, True),
        # HF's attention drops its weights (B, heads, T, T) with nn.functional.dropout
        "HF's eager attention": lambda: eager_attention_forward(
            training, x[None], x[None], x[None], None, 1.0, dropout=0.5
        )[1][0],
    }
    for name, route in routes.items():
        with located_dropout.recording() as drawn:
            first = route()
        assert len(drawn) == 1 and (first == 0).any(), f"{name}: not recorded, or nothing dropped"
        again = located_dropout.patched(drawn).run(route)
        assert torch.equal(first, again), f"{name}: the recorded mask is not replayed"
    outside = torch.dropout(torch.ones(64, 64), 0.5, True) == 0
    assert not (outside == outside[0]).all(), "torch's own dropout is not back after the block"


def test_a_piece_in_another_layout_is_located_and_a_shared_row_is_not():
    from bertlab.checks import located_dropout

    x = torch.rand(2, 3, 5, 5) + 0.5  # (batch, heads, query, key)
    with located_dropout.recording() as drawn:
        dropped = nn.functional.dropout(x, 0.3, True)
    keep = dropped != 0
    sequence_first = x.permute(2, 3, 0, 1)  # (query, key, batch, heads)
    assert torch.equal(located_dropout.locate(sequence_first, drawn), keep.permute(2, 3, 0, 1))
    merged = x.reshape(6, 5, 5)  # (batch * heads, query, key)
    assert torch.equal(located_dropout.locate(merged, drawn), keep.reshape(6, 5, 5))
    one_head = x[:, 1]  # (batch, query, key)
    assert torch.equal(located_dropout.locate(one_head, drawn), keep[:, 1])
    assert located_dropout.locate(torch.ones(2, 1, 5, 5), drawn) is None  # a mask to share over rows
