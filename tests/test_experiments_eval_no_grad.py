"""bertlab.experiments.eval_no_grad: what eval() and no_grad() each change (lesson 4)."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from bertlab.experiments import eval_no_grad as eng


def test_training_reads_finds_the_lines_that_read_the_flag(tmp_path):
    source = (
        "def f(self, x):\n"
        "    if self.training:\n"
        "        x = g(x, training=self.training)\n"
        "    trainingset = 1\n"
        "    return x\n"
    )
    path = tmp_path / "fake_module.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("fake_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    expected = [line.strip() for line in source.splitlines() if "training" in line and "trainingset" not in line]
    assert eng.training_reads(module) == expected


def test_dropout_probability_sets_every_dropout_and_restores_it_even_after_an_error():
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.1), nn.Sequential(nn.Dropout(0.3)))
    before = eng.dropouts(net)
    assert sorted(before.values()) == [0.1, 0.3]
    with pytest.raises(RuntimeError), eng.dropout_probability(net, 0.0):
        assert set(eng.dropouts(net).values()) == {0.0}
        raise RuntimeError("inside")
    assert eng.dropouts(net) == before


def test_train_mode_restores_the_mode():
    net = nn.Linear(2, 2).eval()
    with eng.train_mode(net):
        assert net.training
    assert not net.training


def test_train_mode_outputs_are_seeded_and_leave_the_model_and_generator_as_they_were(model, batch):
    state = torch.get_rng_state()
    first = eng.train_mode_outputs(model, batch, [0, 1])
    again = eng.train_mode_outputs(model, batch, [0])
    assert torch.equal(first[0], again[0]) and not torch.equal(first[0], first[1])
    assert not model.training and torch.equal(torch.get_rng_state(), state)


def test_train_mode_with_dropout_off_is_eval_mode(model, batch):
    """What lesson 4 says: in BERT, the training flag switches dropout and nothing else."""
    with torch.no_grad():
        reference = model(**batch).last_hidden_state
    with eng.dropout_probability(model, 0.0), eng.train_mode(model), torch.no_grad():
        train = model(**batch).last_hidden_state
    assert torch.equal(train, reference)
    assert not torch.equal(eng.train_mode_outputs(model, batch, [0])[0], reference)


class _Tiny(nn.Module):
    """``relu(x W_1^T + b_1) W_2^T + b_2``, returned the way ``BertModel`` returns its output."""

    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(3, 5), nn.Linear(5, 2)

    def forward(self, x):
        self.hidden = torch.relu(self.first(x))
        return SimpleNamespace(last_hidden_state=self.second(self.hidden))


def _bytes(t: torch.Tensor) -> int:
    return t.nelement() * t.element_size()


def test_saved_for_backward_counts_what_autograd_keeps():
    torch.manual_seed(0)
    net = _Tiny().requires_grad_(False)
    x = torch.randn(4, 3)
    saved = eng.saved_for_backward(net, {"x": x}, grad=True)
    # The first matrix keeps its input (for W_1's gradient; x needs none, so W_1 is not kept), relu
    # its output, the second matrix that same output and W_2: four saves, three tensors.
    with torch.no_grad():
        hidden = torch.relu(net.first(x))
    assert saved.count == 4
    assert saved.activation_bytes == _bytes(x) + _bytes(hidden)
    assert saved.parameter_bytes == _bytes(net.second.weight)
    none = eng.saved_for_backward(net, {"x": x}, grad=False)
    assert (none.count, none.activation_bytes, none.parameter_bytes) == (0, 0, 0)
    assert torch.equal(none.output, saved.output)
    assert not any(p.requires_grad for p in net.parameters())  # a copy was given gradients, not the model


def test_no_grad_changes_no_value_of_bert_and_keeps_nothing(model, batch):
    with_grad = eng.saved_for_backward(model, batch, grad=True)
    without = eng.saved_for_backward(model, batch, grad=False)
    assert torch.equal(with_grad.output, without.output)
    assert without.count == 0 and with_grad.count > 0
    assert with_grad.activation_bytes > 10 * _bytes(with_grad.output)  # the lesson's claim
    assert 0 < with_grad.parameter_bytes <= sum(_bytes(p) for p in model.parameters())
