# %% [markdown]
# # Lesson 9: No activation after attention, none on the residual path
#
# **Question.** The feed-forward network has its GELU. But the attention sub-layer (the branch
# before its Add & Norm, as the [notation page](../docs/notation.md) defines it) ends with $W^O$,
# and its update $a$ goes straight into the add; the skip connection carries $x$ with no function
# applied at all. Is attention then "just linear"? And why not put a ReLU after $W^O$, or on the
# residual path?
#
# ## The equation
#
# One head $i$ of one layer, for the $T \times H$ matrix $X$ of a sentence (Lesson 3):
#
# $$\mathrm{head}_i = P_i\,(X W^V_i + b^V_i), \qquad
# P_i = \mathrm{softmax}\!\left(\frac{(XW^Q_i + b^Q_i)(XW^K_i + b^K_i)^\top}{\sqrt d} + M\right),$$
#
# and the attention update is $a = \sum_i \mathrm{head}_i W^O_i + b^O$. The rows of $P_i$ sum to
# 1, so the value bias passes through unchanged, and
#
# $$a = \sum_i P_i\, X\, \underbrace{W^V_i W^O_i}_{\text{OV}_i} \;+\; \Big(\sum_i b^V_i W^O_i +
# b^O\Big).$$
#
# The equation separates two things a head does: what it moves, $X$ through a fixed
# $H \times H$ matrix $\text{OV}_i$ of rank $d$ or less, and the weights $P_i$ it averages the
# tokens with, which the softmax computes from $X$ through both $W^Q_i$ and $W^K_i$. Elhage et al.
# (2021) make the same split: an attention head is a QK circuit (where to look) and an OV circuit
# (what to move).

# %%
import matplotlib.pyplot as plt
import torch

from bertlab import corpus
from bertlab.experiments import claims, lesions
from bertlab.experiments.heads import ov_circuits
from bertlab.experiments.layernorm_eps import float32_step
from bertlab.experiments.lesions import LESIONS, LayerEdit
from bertlab.masks import additive_mask
from bertlab.reference import load_model, load_tokenizer

model, tokenizer = load_model(), load_tokenizer()
batch = corpus.batch(tokenizer)  # (B, T) tensors
queries = corpus.batch(tokenizer, lesions.QUERIES)  # (Q, T') tensors
real = batch["attention_mask"].bool()  # (B, T)
L, A = model.config.num_hidden_layers, model.config.num_attention_heads
trace = lesions.run(model, batch)  # intact pass, every stream and update kept

# %% [markdown]
# ## Attention with its weights held fixed
#
# We take layer 3, record its attention probabilities, and rebuild its update $a$ from the
# equation above: the per-head OV matrices (`ov_circuits`, lesson 3) applied to $X$, averaged
# with the recorded $P_i$, plus the constant bias term. Then we double $X$, once with the $P_i$
# held and once as the model does it, recomputing them.
#
# {{ predict: recomputed_attention_gap }}

# %% tags=["remove-input"]
# A question before the measurement below; the build selects its answer from the claim recorded
# there.
from bertlab.experiments import predictions as ask

ask.predict(
    "recomputed_attention_gap",
    "With $P_i$ frozen, doubling $X$ doubles the moved part (the equation above). Now let the "
    "sub-layer recompute $P_i$ from $2X$, as it does: how far does its update land from that "
    "frozen-$P$ prediction, relative to the update's norm?",
    [
        ask.between(
            "softmax_gap",
            None,
            0.25,
            "less than a quarter of it",
            "That would hold if doubling $X$ left the attention pattern about where it was. "
            "Doubling $X$ roughly quadruples the query-key scores, and the softmax sharpens.",
        ),
        ask.between(
            "softmax_gap",
            0.25,
            1,
            "between a quarter of it and all of it",
            "The update moves by {{ softmax_gap }} of its norm from the frozen-$P$ prediction "
            "{{ claim: softmax_is_the_nonlinearity }}: the sharper softmax changes which tokens "
            "each head reads. The softmax is where attention bends.",
        ),
        ask.between(
            "softmax_gap",
            1,
            None,
            "more than all of it",
            "That would hold if the sharper pattern pointed the update somewhere unrelated. The "
            "heads still read the same sentence, only from fewer tokens.",
        ),
    ],
    section="Attention with its weights held fixed",
)

# %%
LAYER = 3
attn = model.encoder.layer[LAYER].attention
x = trace.hidden_states[LAYER]  # (B, T, H): the stream entering the layer
mask = additive_mask(batch["attention_mask"])  # (B, 1, T, T)
with torch.no_grad():
    probs = attn.self(x, attention_mask=mask)[1]  # (B, A, T, T)
    ov = ov_circuits(attn)  # (A, H, H)
    d = attn.self.attention_head_size
    w_o = attn.output.dense.weight  # (H, H) acting as x @ w_o.T
    bias = attn.self.value.bias @ w_o.T + attn.output.dense.bias  # (H,): sum_i b_i^V W_i^O + b^O

    def frozen(xs):
        """The attention update for stream xs (B, T, H), the attention weights held at `probs`."""
        # sum_i P_i X OV_i: (B, T, H). Letters: b sentence, g head, q query, k key,
        # c feature in, o feature out
        moved = torch.einsum("bgqk,bkc,gco->bqo", probs, xs, ov)
        return moved + bias

    a = trace.attention_updates[LAYER]  # (B, T, H): what the model computed
    print(
        "sum_i P_i X OV_i + bias vs the model's update a: max abs diff "
        f"{(frozen(x) - a).abs().max().item():.1e}"
    )

    # With P fixed, the map is affine in X: doubling X doubles the moved part, up to float32
    # rounding.
    lin_err = (frozen(2 * x) - bias - 2 * (frozen(x) - bias)).abs().max().item()
    # The real sub-layer recomputes P from 2X: its output is not the linear prediction.
    a2 = attn.output.dense(attn.self(2 * x, attention_mask=mask)[0])  # (B, T, H)
    probs2 = attn.self(2 * x, attention_mask=mask)[1]  # (B, A, T, T)
gap = ((a2 - frozen(2 * x)).norm(dim=-1) / a2.norm(dim=-1))[real]  # (N,)
print(f"P frozen: moved part of f(2X) minus 2 x moved part of f(X): max abs diff {lin_err:.1e}")
print(
    "real sub-layer on 2X vs the frozen-P prediction: relative difference per token, mean "
    f"{gap.mean().item():.3f}"
)
claims.claim(
    "frozen_reconstructs_update",
    (frozen(x) - a).abs().max(),
    "<",
    64 * float32_step(a),
    "the OV reconstruction with the recorded P is within 64 float32 steps of the model's update",
)
claims.claim(
    "frozen_map_is_linear",
    lin_err,
    "<",
    16 * float32_step(frozen(2 * x) - bias),
    "with P frozen, doubling X doubles the moved part to within sixteen float32 steps",
)
claims.value("softmax_gap", gap.mean(), "{:.2f}")
claims.claim(
    "softmax_is_the_nonlinearity",
    gap.mean(),
    ">",
    0.1,
    "recomputing P on 2X moves the update by more than 10% of its norm from the linear prediction",
)


def ent(p):  # (..., T) probabilities -> (...) entropy in nats
    return -(p * p.clamp(min=1e-30).log()).sum(-1)


keys = real[:, None, :].expand(-1, A, -1)  # (B, A, T): rows of real query tokens
print(
    f"mean attention entropy over real query tokens: X {ent(probs)[keys].mean().item():.3f} nats, "
    f"2X {ent(probs2)[keys].mean().item():.3f} nats"
)

# %% [markdown]
# The reconstruction matches the model to float rounding
# {{ claim: frozen_reconstructs_update }}, and with $P$ held fixed the map is
# linear up to float32 rounding: the difference printed for doubling $X$ is that rounding, within
# sixteen float32 steps of the output {{ claim: frozen_map_is_linear }}, not a departure from
# linearity. Let $P$ be recomputed, and doubling the input changes the attention pattern itself
# (doubling $X$ roughly quadruples the query-key scores, so the softmax sharpens and the entropy
# printed above drops): the output is no longer the linear prediction, it moves by
# {{ softmax_gap }} of its norm from it {{ claim: softmax_is_the_nonlinearity }}. So attention
# does have a nonlinearity, in the *routing*: which tokens are read is a nonlinear function of
# the input (the QK circuit, through the softmax); what is read from them is a linear image of it
# (the OV circuit).
#
# ## Why no activation after $W^O$
#
# 1. **$W^V$ and $W^O$ form one map.** In $P_i X W^V_i W^O_i$ the two matrices act back to back
#    (the averaging by $P_i$ commutes with them), so per head they are one low-rank linear map
#    (lesson 3 measured the ranks). An activation *between* them would make each head a small
#    MLP (multi-layer perceptron, like the FFN); an activation *after* $W^O$ would act on the
#    sum of all heads.
# 2. **$W^O$ adds the heads' outputs.** $W^O$ is where the heads' outputs are combined, and the
#    combination is a sum: each head's output goes through its own rows $W^O_i$ and the terms are
#    added (lesson 3), so no head's term depends on what another head computed (Elhage et al.
#    2021). A ReLU after $W^O$ would couple them: whether head 3's contribution to a feature
#    survives would depend on what the other heads wrote there.
# 3. **A nonlinearity follows anyway.** The update is added to the stream and normalised (the
#    LayerNorm is itself nonlinear: it divides each token by its own standard deviation, lesson 4),
#    and the next thing to read it is the FFN, with its GELU, the next activation function
#    (lesson 5). A per-token nonlinearity right
#    after $W^O$ would be a second one, on $H$ features where the FFN's GELU acts on $4H$; what it
#    could add in training is not measured here (the experiment below measures what it costs the
#    pretrained model).
# 4. **A ReLU would throw away the negative part of every update.** An update has to be able to
#    push a feature down as well as up. How much of the update sits in negative coordinates:

# %%
upd = torch.stack(trace.attention_updates)  # (L, B, T, H)
stream = torch.stack(trace.hidden_states[:-1])  # (L, B, T, H): the stream each layer reads
real_l = real[None].expand(L, -1, -1)  # (L, B, T)
neg_upd = (upd[real_l] < 0).float().mean().item()
lost = ((upd - upd.relu()).norm(dim=-1) / upd.norm(dim=-1))[real_l].mean().item()
neg_stream = (stream[real_l] < 0).float().mean().item()
print(
    f"attention updates: {neg_upd:.1%} of the coordinates are negative;\n"
    f"a ReLU would remove on average {lost:.1%} of each update's norm"
)
print(f"residual stream:   {neg_stream:.1%} of the coordinates are negative")
claims.value("relu_norm_lost", 100 * lost, "{:.1f}%")
claims.claim(
    "relu_keeps_part_of_update", lost, "<", 1, "a ReLU after W^O leaves part of each update's norm"
)

# %% [markdown]
# ## The residual stream is a linear channel
#
# Elhage et al. (2021) describe the residual stream as the transformer's communication channel:
# every sub-layer *reads* it through linear maps (here after a LayerNorm) and *writes* to it by
# addition, so information written by one layer reaches every later layer unless something
# overwrites it, and a layer's update is a sum of independent terms (heads, FFN units). The skip
# connection is what makes the channel: it is the identity, so nothing written earlier is lost in
# transit. He, Zhang, Ren & Sun (2016b, "Identity Mappings in Deep Residual Networks", ECCV)
# argue that when the skip is the identity and no activation follows the addition, the signal
# propagates directly from any unit to any other, forward and backward: the gradient at an
# early layer contains a term that passes through no weight layer. He et al. compare variants of the
# residual unit, among them the original ResNet's ReLU *after* the addition (on the path) and
# "pre-activation", which moves the activations into the branch; in their experiments the full
# pre-activation unit, whose path is a clean identity, gave the lowest errors, most clearly in
# their deepest (1001-layer) network. In BERT the path holds one thing, the LayerNorm
# (lesson 6), which keeps the direction of each token's centred vector and applies $\gamma$ and
# $\beta$.
#
# A ReLU on the path would zero the negative coordinates of what the skip carries (the share
# printed above), and their gradient with them: past that block, what was stored there reaches
# later layers through what the block's own branch computed from it, or not at all.
#
# ## The experiment: put the ReLUs in
#
# We run the pretrained model with (a) a ReLU after $W^O$, i.e. on the attention update before the
# add, and (b) a ReLU on what the skip connections carry, $\mathrm{LN}(\mathrm{ReLU}(x) + a)$ and
# $\mathrm{LN}(\mathrm{ReLU}(h) + f)$, first in every layer, then in one layer at a time. For
# scale, the lesion of lesson 8 that removes the whole attention block of a layer. Effects as in
# lesson 8: cosine of each sentence's embedding to the intact one, and the search results.
#
# {{ predict: skip_relu_cosine }}

# %% tags=["remove-input"]
ask.predict(
    "skip_relu_cosine",
    "Put a ReLU on what the skip connections carry, in every layer at once. What mean cosine "
    "do the sentence embeddings keep to the intact ones?",
    [
        ask.between(
            "relu_skip_cosine",
            0.6,
            None,
            "above 0.6",
            "That would hold if the stream's negative coordinates carried little that the "
            "sentence embedding needs. Cut in every layer, they take most of it with them.",
        ),
        ask.between(
            "relu_skip_cosine",
            0.1,
            0.6,
            "between 0.1 and 0.6",
            "The embeddings keep a mean cosine of {{ relu_skip_cosine }}, against "
            "{{ relu_wo_cosine }} for a ReLU after $W^O$ in every layer "
            "{{ claim: skip_relu_worse_everywhere }}: the skips carry the whole stream, and "
            "what the positive coordinates still carry is part of the sentence, not all of it.",
        ),
        ask.between(
            "relu_skip_cosine",
            None,
            0.1,
            "below 0.1",
            "That would hold if nothing of the sentence got through. The positive coordinates "
            "still do, and the embeddings stay related to the intact ones.",
        ),
    ],
    section="The experiment: put the ReLUs in",
)

# %%
base = lesions.baseline(model, batch, queries)
edits = {
    "ReLU after W^O": LayerEdit(relu_after_attention=True),
    "ReLU on the skips": LayerEdit(relu_on_skip=True),
}
print(
    f"{'edit, every layer':<22}{'mean cos':>10}{'min cos':>10}{'top kept':>10}{'score corr':>12}   "
    "rank of intact top, per query"
)
everywhere = {}
for name, edit in edits.items():
    e = lesions.effect(model, batch, queries, edit, base)  # the same edit in all layers
    everywhere[name] = e
    print(
        f"{name:<22}{e.mean_cosine:>10.3f}{e.min_cosine:>10.3f}{e.top_kept:>10.0%}"
        f"{e.score_correlation:>12.3f}   {e.rank_of_top.tolist()}"
    )

per_layer = {
    name: [lesions.effect(model, batch, queries, {i: edit}, base) for i in range(L)]
    for name, edit in edits.items()
}
per_layer["attention block removed"] = [
    lesions.effect(model, batch, queries, {i: LESIONS["attention"]}, base) for i in range(L)
]
print(f"\n{'one layer at a time':<26}" + "".join(f"{'layer ' + str(i):>10}" for i in range(L)))
for name, effects in per_layer.items():
    print(f"{name:<26}" + "".join(f"{e.mean_cosine:>10.3f}" for e in effects))
    print(f"{'   top kept':<26}" + "".join(f"{e.top_kept:>10.0%}" for e in effects))
    print(f"{'   score corr':<26}" + "".join(f"{e.score_correlation:>10.3f}" for e in effects))

# %%
# alt: Line chart: the mean cosine similarity between the edited and the intact model's outputs
#   against the layer edited, one line per edit.
fig, ax = plt.subplots(figsize=(7, 3.2))
for name, effects in per_layer.items():
    label = name.replace("W^O", "$W^O$")  # mathtext, not a literal caret
    ax.plot(range(L), [e.mean_cosine for e in effects], marker="o", label=label)
ax.set_xlabel("layer edited")
ax.set_ylabel("mean cosine to intact")
ax.set_xticks(range(L))
ax.legend(frameon=False)
fig.tight_layout()
plt.show()

relu_wo, relu_skip = everywhere["ReLU after W^O"], everywhere["ReLU on the skips"]
print(
    f"every layer: ReLU after W^O keeps mean cosine {relu_wo.mean_cosine:.3f}, "
    f"ReLU on the skips {relu_skip.mean_cosine:.3f}"
)
# (L,) each
cos = {name: torch.tensor([e.mean_cosine for e in effects]) for name, effects in per_layer.items()}
# (L,) each: 1 - mean cosine, how far an edit moves the outputs
damage = {name: 1 - c for name, c in cos.items()}
# > 1: the skips' ReLU worse in every layer
skip_margin = (damage["ReLU on the skips"] / damage["ReLU after W^O"]).min()
skip_worse_layers = int((damage["ReLU on the skips"] > damage["ReLU after W^O"]).sum())
# > 1: W^O's ReLU milder everywhere
block_margin = (damage["attention block removed"] / damage["ReLU after W^O"]).min()
print(f"ReLU on the skips is the more damaging edit in every single layer: {bool(skip_margin > 1)}")
print(
    "ReLU after W^O in one layer costs less than removing that layer's attention block,\n"
    "in every layer: "
    f"{bool(block_margin > 1)}"
)
claims.value("relu_wo_cosine", relu_wo.mean_cosine, "{:.3f}")
claims.value("skip_relu_worse_layers", skip_worse_layers, "{:.0f}")
claims.value("n_layers", L, "{:.0f}")
claims.value("relu_skip_cosine", relu_skip.mean_cosine, "{:.3f}")
claims.value("relu_skip_one_layer_min", cos["ReLU on the skips"].min(), "{:.3f}")
claims.value("relu_skip_one_layer_max", cos["ReLU on the skips"].max(), "{:.3f}")
claims.claim(
    "skip_relu_worse_every_layer",
    skip_margin,
    ">",
    1,
    "a ReLU on the skips costs more than a ReLU after W^O, in every layer",
)
claims.claim(
    "wo_relu_milder_than_removing",
    block_margin,
    ">",
    1,
    "a ReLU after W^O costs less than removing the attention block, in every layer",
)
claims.claim(
    "skip_relu_worse_everywhere",
    relu_skip.mean_cosine,
    "<",
    relu_wo.mean_cosine,
    "in all layers at once, the ReLU on the skips leaves less of the embeddings",
)
claims.claim(
    "skip_relu_shuffles_scores",
    relu_skip.score_correlation,
    "<",
    relu_wo.score_correlation,
    "the ReLU on the skips leaves a lower score correlation than the ReLU after W^O",
)

# %% [markdown]
# A ReLU after $W^O$ in every layer keeps a mean cosine of {{ relu_wo_cosine }} to the intact
# embeddings, and the search scores still move together with the intact ones ("score corr"). In one
# layer at a time it costs less than removing that layer's attention block altogether
# {{ claim: wo_relu_milder_than_removing }}: the model loses the negative part of what attention
# writes, but the stream itself is intact and the FFNs still read it. A ReLU on the skips is worse
# in every layer {{ claim: skip_relu_worse_every_layer }}, and in all layers together it leaves a
# mean cosine of {{ relu_skip_cosine }} {{ claim: skip_relu_worse_everywhere }}: it cuts the
# channel itself. Past an edited block, the skip no longer carries what the embeddings and earlier
# layers stored in negative coordinates; it gets through as far as that block's attention or FFN,
# which read the whole stream, wrote it into their update, and no further. Edited in one layer, the
# sentence
# embeddings keep a mean cosine of {{ relu_skip_one_layer_min }} to {{ relu_skip_one_layer_max }}
# to the intact ones (the table above), so much of the sentence survives a single cut; how much
# of the lost part later layers rebuild is not measured here. The first search result of each query
# survives even that on this
# small corpus (each query has one clearly best sentence, lesson 7), but the scores below it are
# shuffled more (the lower "score corr") {{ claim: skip_relu_shuffles_scores }}.
#
# These weights were trained without either ReLU, so some damage is expected from any change.
# The point is the difference between the two places: a nonlinearity *on a branch* changes one
# update; a nonlinearity *on the path* changes everything that flows through it.
#
# ## What we found
#
# - For fixed attention weights, the attention update $a$ (the branch up to $W^O$, before the
#   Add & Norm) is affine in its input (reconstructed to rounding from the OV matrices); its
#   nonlinearity is the softmax that decides where to look.
# - $W^V_i W^O_i$ is one low-rank map per head, and heads add their terms independently; an
#   activation after $W^O$ would couple them and discard the negative part of every update.
# - The residual stream is a linear channel every sub-layer reads from and writes to by
#   addition; a ReLU on it stops the skip from carrying what is stored in negative coordinates
#   (their share is printed above), which then gets past that block through the branch's
#   update, or not at all.
# - Measured on the pretrained model: a ReLU on the skip connections is more damaging than a
#   ReLU after $W^O$ {{ claim: skip_relu_worse_everywhere }}, which in any one layer costs less
#   than removing that layer's attention {{ claim: wo_relu_milder_than_removing }}.
#
# **Exercise:** [07-why-measured](../exercises/07-why-measured/07-why-measured.ipynb): open it with
# `make lab`, then grade it with `bertlab grade 07`.
#
# ## Check yourself
#
# {{ predict: check_softmax_bends }}
#
# {{ predict: check_relu_against_removal }}
#
# {{ predict: check_skip_relu_each_layer }}

# %% tags=["remove-input"]
ask.check(
    "check_softmax_bends",
    "Recompute the probabilities on $2X$ instead of freezing them: does the update "
    "stay on the linear prediction?",
    [
        ask.fails(
            "softmax_is_the_nonlinearity",
            "yes, it stays close to it",
            "That would hold if the softmax were "
            "close to linear over the scores. Doubling the scores sharpens it.",
        ),
        ask.holds(
            "softmax_is_the_nonlinearity",
            "no, it moves off it",
            "The update moves by "
            "{{ softmax_gap }} of its norm from the linear prediction "
            "{{ claim: softmax_is_the_nonlinearity }}: the softmax is attention's nonlinearity.",
        ),
    ],
    section="Attention with its weights held fixed",
)
ask.check(
    "check_relu_against_removal",
    "In any one layer, does a ReLU after $W^O$ cost more or less than "
    "removing that layer's whole attention block?",
    [
        ask.holds(
            "wo_relu_milder_than_removing",
            "less",
            "The ReLU keeps the update's positive coordinates, "
            "though with them only part of its norm (it removes {{ relu_norm_lost }} on average "
            "{{ claim: relu_keeps_part_of_update }}); removing the block keeps none of it "
            "{{ claim: wo_relu_milder_than_removing }}.",
        ),
        ask.fails(
            "wo_relu_milder_than_removing",
            "more",
            "That would hold if a half-cut update misled the "
            "next layers more than no update. It keeps part of what they expect.",
        ),
    ],
    section="The experiment: put the ReLUs in",
)
ask.check(
    "check_skip_relu_each_layer",
    "One layer at a time: in how many of the layers is the ReLU on the skips the costlier "
    "edit, against the ReLU after $W^O$?",
    [
        ask.between(
            "skip_relu_worse_layers",
            None,
            L // 2 + 1,
            f"in {L // 2} or fewer",
            "That would hold if the stream mattered only in some layers and attention's update "
            "in the others. The stream matters wherever it is cut.",
        ),
        ask.between(
            "skip_relu_worse_layers",
            L,
            None,
            f"in all {L}",
            "In {{ skip_relu_worse_layers }} layers of {{ n_layers }}, the ReLU on the skips "
            "costs more than the ReLU after $W^O$ {{ claim: skip_relu_worse_every_layer }}: the "
            "stream matters wherever it is cut.",
        ),
        ask.between(
            "skip_relu_worse_layers",
            L // 2 + 1,
            L,
            f"in {L // 2 + 1} to {L - 1}",
            "That would hold if in some layer attention's update $a$, all that the ReLU after "
            "$W^O$ cuts, carried more than the stream $x$ it joins. The lesson on residual "
            "connections measures $a$ smaller than $x$ in every layer, on average over the "
            "tokens {{ claim: 08-residual-connections: attention_update_below_stream }}.",
        ),
    ],
    section="The experiment: put the ReLUs in",
)

# %% [markdown]
# ## References
#
# - Elhage, N., Nanda, N., Olsson, C., et al. (2021). A Mathematical Framework for Transformer
#   Circuits. *Transformer Circuits Thread*, transformer-circuits.pub.
# - He, K., Zhang, X., Ren, S., & Sun, J. (2016b). Identity Mappings in Deep Residual Networks.
#   *ECCV*.

# %% tags=["remove-input"]
claims.publish()  # the numbers and claims above, for the build that renders this page
