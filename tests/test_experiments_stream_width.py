"""bertlab.experiments.stream_width: residual blocks, the R^2 measure, seeded stacks."""

import pytest
import torch

from bertlab.experiments import stream_width


def test_identity_shortcut_cannot_change_width():
    with pytest.raises(ValueError):
        stream_width.Block(8, 12, "identity", "none")
    block = stream_width.Block(8, 12, "projection", "Post-LN")
    assert block(torch.randn(5, 8)).shape == (5, 12)


def test_identity_block_with_a_zero_branch_is_the_identity():
    block = stream_width.Block(6, 6, "identity", "none")
    torch.nn.init.zeros_(block.ffn[2].weight)
    torch.nn.init.zeros_(block.ffn[2].bias)
    x = torch.randn(4, 6)
    assert torch.equal(block(x), x)


def test_stack_is_seeded_and_leaves_the_global_rng_alone():
    state = torch.random.get_rng_state()
    a = stream_width.stack(8, 3, "orthogonal", "none", seed=5)
    b = stream_width.stack(8, 3, "orthogonal", "none", seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    w = a[0].shortcut.weight
    torch.testing.assert_close(w @ w.T, torch.eye(8), atol=1e-5, rtol=0)


def test_linear_r2():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(400, 5, generator=g)
    y = x @ torch.randn(5, 3, generator=g) + 2.0
    assert stream_width.linear_r2(x, y) == pytest.approx(1.0, abs=1e-9)
    noise = torch.randn(400, 3, generator=g)
    assert stream_width.linear_r2(x, noise) < 0.05


def test_measure_shapes_and_parameters():
    m = stream_width.measure("projection", "Post-LN", width=8, depth=4, samples=64, seeds=(0,))
    assert m.cosine.shape == m.r2.shape == (5,) and m.grad.shape == (4,)
    assert m.cosine[0] == pytest.approx(1.0) and m.r2[0] == pytest.approx(1.0)
    assert m.shortcut_parameters == 4 * 8 * 8
    assert stream_width.measure("identity", "none", width=8, depth=4, samples=64, seeds=(0,)).shortcut_parameters == 0
    assert set(stream_width.compare(width=8, depth=2, samples=32, seeds=(0,))) == {
        (s, n) for s in stream_width.SHORTCUTS for n in stream_width.NORMS
    }
