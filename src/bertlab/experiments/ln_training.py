"""Post-LN against Pre-LN trained from scratch: small stacks of BERT's layer on a toy task.

Lesson 6 measures gradients at initialisation; this trains. Every run is a stack of ``depth``
BERT layers (multi-head self-attention, then the GELU feed-forward network, each wrapped in a
residual add and a LayerNorm) under BERT's embeddings and a linear output layer, initialised as
transformers initialises BERT (normal weights of standard deviation ``initializer_range``, zero
biases, LayerNorm gain 1 and bias 0), and arranged one of two ways:

- ``"Post-LN"``, BERT's: ``h = LN_1(x + Attn(x))``, ``y = LN_2(h + FFN(h))``;
- ``"Pre-LN"``: ``h = x + Attn(LN_1(x))``, ``y = h + FFN(LN_2(h))``, and one more LayerNorm after
  the last layer (Xiong et al. 2020).

The task (``reverse``): a sequence of ``length`` random tokens, and at every position the token
found at the mirrored position, so each output must be read from another position. Every step
draws a fresh batch, so the training loss of a step is measured on data the run has not seen.
Adam (no weight decay), with BERT's schedule shape: a linear warm-up over ``warmup`` steps to the
peak learning rate, then a linear decay to 0; without warm-up the decay starts at the peak.

*Why the runs are stacked.* Small layers are cheap in arithmetic and dear in per-operation
overhead: one run of a 12-layer stack is hundreds of small operations per step. All the runs of
one depth and arrangement (both schedules, every seed) therefore train side by side as one
batched computation: every weight has a leading "run" axis, each run reads only its own slice,
and the runs' losses are added, so that each run's gradient is its own; Adam then steps each
run with its own learning rate. A run's layer computes what transformers' ``BertLayer`` computes
with the same weights (``tests/test_experiments_ln_training.py`` checks it, and that a run
trained alone matches its slice of the stack).

The runs of one seed share their initial weights and their data, whatever the arrangement or the
schedule, so each comparison is paired.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

ARRANGEMENTS = ("Post-LN", "Pre-LN")
SCHEDULES = ("warm-up", "none")
# Adam's constants, as BERT's optimiser (Devlin et al. 2019: beta_1 0.9, beta_2 0.999, epsilon 1e-6).
BETAS = (0.9, 0.999)
ADAM_EPS = 1e-6


@dataclass(frozen=True)
class Setup:
    """The size of the toy problem and of the layers, and the training schedule.

    Attributes:
        vocab: number of token ids; chance loss is ``ln(vocab)``.
        length: tokens per sequence.
        hidden: the stream's width ``H``; the FFN's is ``4H``.
        heads: attention heads.
        batch: sequences per step, fresh every step.
        steps: training steps.
        lr: the peak learning rate.
        warmup: steps of linear warm-up, for the runs that have one.
        init_std: standard deviation of the initial weights (BERT's ``initializer_range``).
        layer_norm_eps: BERT's epsilon.
    """

    vocab: int = 16
    length: int = 8
    hidden: int = 32
    heads: int = 2
    batch: int = 8
    steps: int = 200
    lr: float = 5e-3
    warmup: int = 80
    init_std: float = 0.02
    layer_norm_eps: float = 1e-12

    @property
    def chance(self) -> float:
        """The loss of a uniform guess, ``ln(vocab)``."""
        return math.log(self.vocab)

    def config(self, depth: int):
        """A transformers ``BertConfig`` of this size (eager attention, no dropout)."""
        from transformers import BertConfig  # here: importing this module should not import transformers

        config = BertConfig(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            num_hidden_layers=depth,
            num_attention_heads=self.heads,
            intermediate_size=4 * self.hidden,
            max_position_embeddings=self.length,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            initializer_range=self.init_std,
            layer_norm_eps=self.layer_norm_eps,
            hidden_act="gelu",
        )
        config._attn_implementation = "eager"
        return config


def lr_factor(step: int, warmup: int, steps: int) -> float:
    """The learning rate at ``step`` (0-based) as a fraction of the peak, linear warm-up then decay.

    The same shape as transformers' ``get_linear_schedule_with_warmup``.
    """
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (steps - step) / max(1, steps - warmup))


def reverse_task(setup: Setup, generator: torch.Generator, n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences of random tokens (n, T) and their targets, each sequence reversed (n, T)."""
    ids = torch.randint(0, setup.vocab, (n or setup.batch, setup.length), generator=generator)
    return ids, ids.flip(1)


@dataclass(frozen=True)
class Run:
    """One member of a stack: which arrangement, schedule and seed."""

    arrangement: str
    schedule: str
    seed: int


def runs(seeds: Sequence[int]) -> list[Run]:
    """Every arrangement, schedule and seed, in that nesting order."""
    return [Run(a, s, seed) for a in ARRANGEMENTS for s in SCHEDULES for seed in seeds]


#: The weights of one layer, each with the run axis and the layer axis in front (matrices in the
#: ``x @ W`` layout: input features first).
LAYER_WEIGHTS = ("qkv_w", "qkv_b", "o_w", "o_b", "ln1_w", "ln1_b", "w1", "b1", "w2", "b2", "ln2_w", "ln2_b")

#: Drawn from a normal of standard deviation ``init_std`` (matrices and embedding tables), and the
#: LayerNorm gains (1); every other weight is a bias (0). BERT's ``_init_weights``.
DRAWN = frozenset({"word", "position", "qkv_w", "o_w", "w1", "w2", "head_w"})
GAINS = frozenset({"emb_ln_w", "ln1_w", "ln2_w", "final_w"})


class Stacks(nn.Module):
    """Several runs of a ``depth``-layer BERT stack in one arrangement, each with its own weights.

    Weights have the run axis first (``E`` runs); layer weights the layer axis second. The
    embeddings are BERT's without token types: word plus position, then a LayerNorm. Every
    member must have the same arrangement (the two take different paths through a layer).
    """

    def __init__(self, setup: Setup, depth: int, members: Sequence[Run]):
        super().__init__()
        arrangements = {m.arrangement for m in members}
        if len(arrangements) != 1 or not arrangements <= set(ARRANGEMENTS):
            raise ValueError(f"one arrangement of {ARRANGEMENTS} per stack, got {sorted(arrangements)}")
        E, L, H, V, T = len(members), depth, setup.hidden, setup.vocab, setup.length
        self.setup, self.depth, self.members = setup, depth, tuple(members)
        self.arrangement = arrangements.pop()
        shapes = {
            "word": (E, V, H),
            "position": (E, T, H),
            "emb_ln_w": (E, H),
            "emb_ln_b": (E, H),
            "qkv_w": (E, L, H, 3 * H),
            "qkv_b": (E, L, 3 * H),
            "o_w": (E, L, H, H),
            "o_b": (E, L, H),
            "ln1_w": (E, L, H),
            "ln1_b": (E, L, H),
            "w1": (E, L, H, 4 * H),
            "b1": (E, L, 4 * H),
            "w2": (E, L, 4 * H, H),
            "b2": (E, L, H),
            "ln2_w": (E, L, H),
            "ln2_b": (E, L, H),
            "final_w": (E, H),
            "final_b": (E, H),
            "head_w": (E, H, V),
            "head_b": (E, V),
        }
        for name, shape in shapes.items():
            self.register_parameter(name, nn.Parameter(torch.empty(shape)))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """BERT's initialisation, drawn once per seed: the runs of one seed start from the same weights."""
        drawn: dict[int, dict[str, torch.Tensor]] = {}
        for e, member in enumerate(self.members):
            if member.seed not in drawn:
                g = torch.Generator().manual_seed(member.seed)
                drawn[member.seed] = {name: self._initial(name, p.shape[1:], g) for name, p in self.named_parameters()}
            for name, p in self.named_parameters():
                p[e] = drawn[member.seed][name]

    def _initial(self, name: str, shape: torch.Size, g: torch.Generator) -> torch.Tensor:
        if name in DRAWN:
            return torch.randn(shape, generator=g) * self.setup.init_std
        if name in GAINS:
            return torch.ones(shape)
        return torch.zeros(shape)  # biases

    def _norm(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """LayerNorm over the last axis with each run's own gain and bias: (E, N, H) -> (E, N, H)."""
        normed = F.layer_norm(x, (x.shape[-1],), eps=self.setup.layer_norm_eps)
        return normed * weight[:, None, :] + bias[:, None, :]

    def _attention(self, x: torch.Tensor, qkv_w, qkv_b, o_w, o_b, n: int) -> torch.Tensor:
        """Multi-head self-attention's update ``a = Concat(heads) W^O + b^O``: (E, nT, H) -> (E, nT, H)."""
        E, H, A, T = x.shape[0], self.setup.hidden, self.setup.heads, self.setup.length
        qkv = torch.baddbmm(qkv_b[:, None, :], x, qkv_w)  # (E, nT, 3H)
        q, k, v = qkv.view(E, n, T, 3, A, H // A).permute(3, 0, 1, 4, 2, 5)  # each (E, n, A, T, d)
        probs = torch.softmax(q @ k.transpose(-1, -2) * (H // A) ** -0.5, dim=-1)  # (E, n, A, T, T)
        context = (probs @ v).transpose(2, 3).reshape(E, n * T, H)  # (E, nT, H): heads concatenated
        return torch.baddbmm(o_b[:, None, :], context, o_w)

    def _ffn(self, x: torch.Tensor, w1, b1, w2, b2) -> torch.Tensor:
        """``GELU(x W_1 + b_1) W_2 + b_2``: (E, nT, H) -> (E, nT, H)."""
        return torch.baddbmm(b2[:, None, :], F.gelu(torch.baddbmm(b1[:, None, :], x, w1)), w2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits (E, n, T, V) for token ids (E, n, T), each run on its own slice."""
        E, n, T = ids.shape
        x = self.word[torch.arange(E)[:, None, None], ids] + self.position[:, None, :T]  # (E, n, T, H)
        x = self._norm(x.reshape(E, n * T, -1), self.emb_ln_w, self.emb_ln_b)  # (E, nT, H)
        layers = zip(*(getattr(self, name).unbind(1) for name in LAYER_WEIGHTS), strict=True)
        for qkv_w, qkv_b, o_w, o_b, ln1_w, ln1_b, w1, b1, w2, b2, ln2_w, ln2_b in layers:
            if self.arrangement == "Post-LN":  # BERT's: h = LN_1(x + Attn(x)), y = LN_2(h + FFN(h))
                h = self._norm(x + self._attention(x, qkv_w, qkv_b, o_w, o_b, n), ln1_w, ln1_b)
                x = self._norm(h + self._ffn(h, w1, b1, w2, b2), ln2_w, ln2_b)
            else:  # Pre-LN: h = x + Attn(LN_1(x)), y = h + FFN(LN_2(h))
                h = x + self._attention(self._norm(x, ln1_w, ln1_b), qkv_w, qkv_b, o_w, o_b, n)
                x = h + self._ffn(self._norm(h, ln2_w, ln2_b), w1, b1, w2, b2)
        if self.arrangement == "Pre-LN":
            x = self._norm(x, self.final_w, self.final_b)  # the final LayerNorm
        logits = torch.baddbmm(self.head_b[:, None, :], x, self.head_w)  # (E, nT, V)
        return logits.view(E, n, T, -1)

    def bert_layer(self, member: int, layer: int):
        """Transformers' ``BertLayer`` holding run ``member``'s weights of ``layer`` (for checking)."""
        from transformers.models.bert.modeling_bert import BertLayer

        H = self.setup.hidden
        out = BertLayer(self.setup.config(self.depth)).eval()
        w = {name: getattr(self, name)[member, layer].detach() for name in LAYER_WEIGHTS}
        att = out.attention
        with torch.no_grad():
            for i, linear in enumerate((att.self.query, att.self.key, att.self.value)):
                linear.weight.copy_(w["qkv_w"][:, i * H : (i + 1) * H].T)
                linear.bias.copy_(w["qkv_b"][i * H : (i + 1) * H])
            for linear, weight, bias in (
                (att.output.dense, "o_w", "o_b"),
                (out.intermediate.dense, "w1", "b1"),
                (out.output.dense, "w2", "b2"),
            ):
                linear.weight.copy_(w[weight].T)
                linear.bias.copy_(w[bias])
            for norm, weight, bias in (
                (att.output.LayerNorm, "ln1_w", "ln1_b"),
                (out.output.LayerNorm, "ln2_w", "ln2_b"),
            ):
                norm.weight.copy_(w[weight])
                norm.bias.copy_(w[bias])
        return out


@dataclass
class Curves:
    """Training losses of every run of every depth.

    Attributes:
        setup: the problem and schedule.
        losses: ``{(depth, arrangement, schedule): (seeds, steps)}``, each step's loss on its own
            fresh batch (data the run had not seen), in nats.
        seconds: wall-clock time of the whole training.
    """

    setup: Setup
    losses: dict[tuple[int, str, str], torch.Tensor] = field(default_factory=dict)
    seconds: float = 0.0

    def final(self, depth: int, arrangement: str, schedule: str, last: int = 20) -> torch.Tensor:
        """(seeds,) mean loss over the ``last`` steps of each run."""
        return self.losses[depth, arrangement, schedule][:, -last:].mean(1)


def _batches(setup: Setup, members: Sequence[Run], generators) -> tuple[torch.Tensor, torch.Tensor]:
    """This step's batch for every run, (E, n, T) ids and targets: one draw per seed, shared by its runs."""
    drawn = {seed: reverse_task(setup, g) for seed, g in generators.items()}
    ids = torch.stack([drawn[m.seed][0] for m in members])
    targets = torch.stack([drawn[m.seed][1] for m in members])
    return ids, targets


def train_stacks(net: Stacks) -> torch.Tensor:
    """Train every run of ``net`` at once; (E, steps) each step's loss, before that step's update.

    Adam with each run's own learning rate: the peak times its schedule's factor at that step.
    Each seed's data come from a generator of their own, the same for every run of that seed.
    """
    setup, members = net.setup, net.members
    params = list(net.parameters())
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    warm = torch.tensor([m.schedule == "warm-up" for m in members])  # (E,)
    generators = {m.seed: torch.Generator().manual_seed(10_000 + m.seed) for m in members}  # apart from the init's
    losses = torch.empty(len(members), setup.steps)
    b1, b2 = BETAS
    for step in range(setup.steps):
        ids, targets = _batches(setup, members, generators)
        logits = net(ids)  # (E, n, T, V)
        per_token = F.cross_entropy(logits.flatten(0, 2), targets.flatten(), reduction="none")
        loss = per_token.view(len(members), -1).mean(1)  # (E,)
        for p in params:
            p.grad = None
        loss.sum().backward()  # each run's gradient is its own: the runs share no weight
        losses[:, step] = loss.detach()
        factors = torch.where(warm, lr_factor(step, setup.warmup, setup.steps), lr_factor(step, 0, setup.steps))
        t = step + 1
        with torch.no_grad():
            for p, (m, v) in zip(params, moments, strict=True):
                g = p.grad
                if g is None:  # Post-LN's runs leave the final LayerNorm unused
                    continue
                m.lerp_(g, 1 - b1)  # m <- b1 m + (1 - b1) g
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                denominator = v.sqrt().div_(math.sqrt(1 - b2**t)).add_(ADAM_EPS)
                step_size = (setup.lr * factors / (1 - b1**t)).view(-1, *([1] * (p.dim() - 1)))  # (E, 1, ..)
                p.addcdiv_(m * step_size, denominator, value=-1)
    return losses


def train_depth(setup: Setup, depth: int, seeds: Sequence[int]) -> dict[tuple[str, str], torch.Tensor]:
    """Train every arrangement, schedule and seed at one depth; ``{(arrangement, schedule): (seeds, steps)}``."""
    out = {}
    for arrangement in ARRANGEMENTS:
        members = [m for m in runs(seeds) if m.arrangement == arrangement]
        losses = train_stacks(Stacks(setup, depth, members))  # (E, steps)
        for schedule in SCHEDULES:
            out[arrangement, schedule] = losses[[i for i, m in enumerate(members) if m.schedule == schedule]]
    return out


def train(setup: Setup, depths: Sequence[int] = (2, 6, 12), seeds: Sequence[int] = (0, 1, 2)) -> Curves:
    """Train every depth, arrangement, schedule and seed; deterministic for a given setup.

    Runs on one thread (matrices this small gain nothing from more, and every thread count then
    gives the same sums); the global random state is left as it was.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    start = time.perf_counter()
    curves = Curves(setup)
    try:
        for depth in depths:
            for key, value in train_depth(setup, depth, seeds).items():
                curves.losses[(depth, *key)] = value
    finally:
        torch.set_num_threads(threads)
    curves.seconds = time.perf_counter() - start
    return curves


def summary(curves: Curves, last: int = 20) -> Mapping[tuple[int, str, str], float]:
    """Mean over seeds of each run's final loss (mean of its ``last`` steps)."""
    return {key: curves.final(*key, last=last).mean().item() for key in curves.losses}
