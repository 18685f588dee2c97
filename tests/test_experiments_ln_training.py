"""bertlab.experiments.ln_training: Post-LN and Pre-LN stacks of BERT's layer, trained (lesson 6)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from transformers import get_linear_schedule_with_warmup

from bertlab.experiments import ln_training as lt

SMALL = lt.Setup(steps=6, warmup=3)


def _by_hand(net: lt.Stacks, member: int, ids: torch.Tensor) -> torch.Tensor:
    """Run ``member``'s weights through transformers' ``BertLayer`` modules: logits (n, T, V)."""
    setup = net.setup
    x = net.word[member][ids] + net.position[member][: setup.length]  # (n, T, H)
    x = F.layer_norm(x, (setup.hidden,), net.emb_ln_w[member], net.emb_ln_b[member], eps=setup.layer_norm_eps)
    for i in range(net.depth):
        layer = net.bert_layer(member, i)
        if net.arrangement == "Post-LN":
            out = layer(x)  # BERT's own layer, as it is
            x = out[0] if isinstance(out, tuple) else out
        else:  # the same sub-modules, the LayerNorms moved into the branches
            att, ln_1, ln_2 = layer.attention, layer.attention.output.LayerNorm, layer.output.LayerNorm
            h = x + att.output.dense(att.self(ln_1(x))[0])
            x = h + layer.output.dense(layer.intermediate(ln_2(h)))
    if net.arrangement == "Pre-LN":
        x = F.layer_norm(x, (setup.hidden,), net.final_w[member], net.final_b[member], eps=setup.layer_norm_eps)
    return x @ net.head_w[member] + net.head_b[member]


@pytest.mark.parametrize("arrangement", lt.ARRANGEMENTS)
def test_each_run_computes_what_bert_layer_computes(arrangement):
    members = [m for m in lt.runs((0, 1)) if m.arrangement == arrangement]
    net = lt.Stacks(SMALL, 3, members)
    with torch.no_grad():
        for p in net.parameters():  # away from the initial ones and zeros, so every weight counts
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.1)
        ids = torch.stack([lt.reverse_task(SMALL, torch.Generator().manual_seed(e))[0] for e in range(len(members))])
        logits = net(ids)  # (E, n, T, V)
        for e in range(len(members)):
            torch.testing.assert_close(logits[e], _by_hand(net, e, ids[e]))


def test_the_runs_of_one_seed_start_from_the_same_weights():
    members = lt.runs((0, 1))
    post = lt.Stacks(SMALL, 2, [m for m in members if m.arrangement == "Post-LN"])
    pre = lt.Stacks(SMALL, 2, [m for m in members if m.arrangement == "Pre-LN"])
    for (name, a), b in zip(post.named_parameters(), pre.parameters(), strict=True):
        assert torch.equal(a, b), name  # same seed, same member order: equal, arrangement aside
        seeds = [m.seed for m in post.members]
        assert torch.equal(a[seeds.index(0)], a[len(seeds) - 1 - seeds[::-1].index(0)]), name  # both schedules
        if name in lt.DRAWN:
            assert not torch.equal(a[seeds.index(0)], a[seeds.index(1)]), name  # another seed, other weights


def test_a_stack_holds_one_arrangement():
    with pytest.raises(ValueError, match="one arrangement"):
        lt.Stacks(SMALL, 1, lt.runs((0,)))


def test_lr_factor_is_transformers_linear_schedule():
    steps = 20
    for warmup in (0, 5):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        schedule = get_linear_schedule_with_warmup(opt, num_warmup_steps=warmup, num_training_steps=steps)
        assert [lt.lr_factor(s, warmup, steps) for s in range(steps + 1)] == [
            schedule.lr_lambdas[0](s) for s in range(steps + 1)
        ]


def test_a_run_trained_in_a_stack_trains_as_alone_with_torch_adam():
    """Each run's gradient is its own, and the hand-written Adam is torch's, per-run rates included."""
    setup = dataclasses.replace(SMALL, steps=4, warmup=2)
    members = [m for m in lt.runs((0, 1)) if m.arrangement == "Pre-LN"]
    stacked = lt.train_stacks(lt.Stacks(setup, 2, members))  # (E, steps)
    for e, member in enumerate(members):
        alone = lt.Stacks(setup, 2, [member])
        opt = torch.optim.Adam(alone.parameters(), lr=setup.lr, betas=lt.BETAS, eps=lt.ADAM_EPS)
        warmup = setup.warmup if member.schedule == "warm-up" else 0
        schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s, w=warmup: lt.lr_factor(s, w, setup.steps))
        data = torch.Generator().manual_seed(10_000 + member.seed)  # as train_stacks draws a seed's batches
        losses = []
        for _ in range(setup.steps):
            ids, targets = lt.reverse_task(setup, data)
            loss = F.cross_entropy(alone(ids[None]).flatten(0, 2), targets.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            schedule.step()
            losses.append(loss.item())
        torch.testing.assert_close(stacked[e], torch.tensor(losses), rtol=1e-4, atol=1e-5)


def test_training_is_deterministic_on_one_thread_and_keeps_the_thread_count(monkeypatch):
    """One thread whatever the caller's count: the claims sweep trains once per kernel set and
    lets that set's runs of other thread counts reuse the curves (``tests/claims_sweep.py``)."""
    seen = []  # the thread count each depth trained under
    real = lt.train_depth
    monkeypatch.setattr(lt, "train_depth", lambda *args: seen.append(torch.get_num_threads()) or real(*args))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        first = lt.train(SMALL, depths=(1,), seeds=(0,))
        second = lt.train(SMALL, depths=(1,), seeds=(0,))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert seen == [1, 1]
    assert set(first.losses) == {(1, a, s) for a in lt.ARRANGEMENTS for s in lt.SCHEDULES}
    for key, value in first.losses.items():
        assert value.shape == (1, SMALL.steps) and torch.equal(value, second.losses[key])
