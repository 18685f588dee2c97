# %% [markdown]
# # Lesson 8: Residual connections
#
# **Question.** Each half of a BERT layer, attention and then the FFN, adds its input back to
# its branch's output before normalising: $\mathrm{LayerNorm}(x + F(x))$. What goes wrong without
# that "$x\,+$"? And if the skip connections matter so much, how much does each layer, block and
# head matter?
#
# ## The equation
#
# Drop the LayerNorms for a moment. With identity skips, layer $l$ computes
# $x_{l+1} = x_l + F_l(x_l)$, and unrolling gives
#
# $$x_L = x_0 + \sum_{l=0}^{L-1} F_l(x_l),$$
#
# so the input reaches the output directly, and the gradient
# $\partial x_L / \partial x_l = \mathrm{Id} +
# \partial\big(\sum_{l' \ge l} F_{l'}\big)/\partial x_l$
# (the sum over the layers $l'$ from $l$ on) always contains the identity (He, Zhang, Ren & Sun
# 2016b, "Identity Mappings in Deep Residual Networks", ECCV: their derivation assumes an identity
# skip and nothing after the addition, the case without LayerNorms written here). Veit et al. (2016)
# read the unrolled sum as an ensemble of paths of different lengths and found that deleting a
# single block of a trained residual network at test time barely hurts it. BERT is Post-LN, so a
# LayerNorm sits on the path after each add and the sum is renormalised every half layer, but the
# skip still carries $x$ to the next LayerNorm untouched.
#
# ## Attention alone averages tokens away
#
# Each attention head outputs, for every token, a weighted average of the value vectors of the
# sentence (the softmax weights are positive and sum to 1). Averaging again and again makes the
# tokens alike. Dong, Cordonnier & Loukas (2021) prove that a stack of self-attention layers with
# no skip connections and no MLPs (multi-layer perceptrons; in BERT, the FFN blocks) converges to
# a rank-1 matrix, every row (token) the same, and that it does so *doubly exponentially* in
# depth; skip connections (chiefly) and MLPs counteract it. Their measure, for the $n \times H$
# matrix $X$ of one sentence's $n$ real token vectors (padding left out), is the residual
#
# $$\mathrm{res}(X) = X - \mathbf{1}\bar x^\top, \qquad \bar x = \frac{1}{n}\sum_t X_t,$$
#
# the part of $X$ that is not shared by all tokens. We report $r(X) = \lVert \mathrm{res}(X)
# \rVert_F / \lVert X \rVert_F$ per layer, with $\lVert \cdot \rVert_F$ the Frobenius norm (the
# square root of the sum of all squared entries): 0 means every token carries the same vector.
# (For this norm, $\mathbf{1}\bar x^\top$ is the closest matrix with identical rows, so $r$ is
# the relative distance to "all tokens alike".) The padded positions are in no row of $X$, so
# they count neither in $\bar x$ nor in either norm.
#
# We build Dong et al.'s four variants from the pretrained sub-modules of our model, with
# `bertlab.experiments.rank_collapse`:
#
# | variant | attention block | feed-forward block |
# |---|---|---|
# | full model | $\mathrm{LN}(x + a)$ | $\mathrm{LN}(h + f)$ |
# | attention only | $\mathrm{LN}(a)$ | removed |
# | attention + skip | $\mathrm{LN}(x + a)$ | removed |
# | attention + FFN | $\mathrm{LN}(a)$ | $\mathrm{LN}(f)$ |
#
# **LayerNorm.** Every kept block keeps its own LayerNorm, and a removed block is the identity,
# LayerNorm included; removing a skip means the LayerNorm receives the branch alone. This is what
# Dong et al.'s own code does for BERT. Keeping the LayerNorm keeps the numbers on the scale the
# pretrained weights expect, and it cannot fake or hide a collapse: it acts on each token
# separately, so identical tokens stay identical.

# %%
import matplotlib.pyplot as plt
import torch

from bertlab import corpus
from bertlab.experiments import claims, lesions, rank_collapse
from bertlab.experiments.lesions import LESIONS
from bertlab.experiments.prose import counted
from bertlab.reference import load_model, load_tokenizer

model, tokenizer = load_model(), load_tokenizer()
batch = corpus.batch(tokenizer)  # (B, T) tensors: the course corpus, padded
L, A = model.config.num_hidden_layers, model.config.num_attention_heads
B, T = batch["input_ids"].shape
print(f"{L} layers, {A} heads; corpus: B={B} sentences, T={T} tokens")

# %% [markdown]
# ## The measure by hand
#
# First the residual of the embeddings output for one sentence, by hand, against the library
# function. Sentence 1 has padding, which we slice away.

# %%
hidden0 = rank_collapse.residuals(model, batch, "full")  # (L + 1, B)
trace = lesions.run(model, batch)
row = 1
n = int(batch["attention_mask"][row].sum())
X = trace.hidden_states[0][row, :n]  # (n, H): real tokens only
res = X - X.mean(0, keepdim=True)  # (n, H): X - 1 x̄ᵀ
print(f"sentence {row}: {n} real tokens of T={T}")
print(f"by hand ||X - 1 x̄ᵀ||_F / ||X||_F = {(res.norm() / X.norm()).item():.6f}")
print(f"relative_residual                 = {hidden0[0, row].item():.6f}")

# %% [markdown]
# ## Four variants, pretrained and at initialisation
#
# The same measure for every hidden state of every variant, averaged over the corpus sentences.
# "Random init" is a `BertModel` with the same config and freshly initialised weights (the
# library's initialisation, seed 0).
#
# {{ predict: attention_only_collapse }}

# %% tags=["remove-input"]
# A question before the measurement below; the build selects its answer from the claim recorded
# there.
from bertlab.experiments import predictions as ask

ask.predict(
    "attention_only_collapse",
    "Attention only, no skip and no FFN, in every layer of the pretrained model: after how "
    "many layers is r below a thousandth, a sentence's token vectors alike to three digits?",
    [
        ask.between(
            "collapse_hidden_state",
            None,
            3,
            "within two layers",
            "That would hold if every attention row were close to uniform, as at "
            "initialisation, where one layer all but finishes the job. The pretrained heads "
            "look at particular tokens, and each of their averages mixes less.",
        ),
        ask.between(
            "collapse_hidden_state",
            3,
            6,
            "after three to five layers",
            "Each layer's averaging multiplies the digits of agreement between the tokens: r is "
            "below a thousandth from hidden state {{ collapse_hidden_state }} on and ends at "
            "{{ no_skip_r_last }} {{ claim: no_skip_reaches_zero }}, against at least "
            "{{ skip_r_min }} with the skip.",
        ),
        ask.between(
            "collapse_hidden_state",
            6,
            None,
            "not before the last layer",
            "That would hold if attention kept each token's own vector. Without the skip nothing "
            "does: each layer's output is a weighted average, and averages of averages converge "
            "fast.",
        ),
    ],
    section="Four variants, pretrained and at initialisation",
)

# %%
random_model = rank_collapse.random_model(model.config, seed=0)
curves = {
    "pretrained": rank_collapse.curves(model, batch),
    "random init": rank_collapse.curves(random_model, batch),
}

for weights, table in curves.items():
    print(f"{weights}: mean relative residual after each layer (column 0 = embeddings)")
    for name, curve in table.items():
        print(f"  {rank_collapse.LABELS[name]:<17}" + " ".join(f"{v:9.2e}" for v in curve.tolist()))

# %%
# alt: Two line charts on a log scale, for the pretrained and for randomly initialised weights: the
#   relative distance of the hidden states from rank one, from the embeddings through each layer,
#   one line per variant of the model.
FLOOR = 1e-9  # exact zeros cannot be drawn on a log axis
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
for ax, (weights, table) in zip(axes, curves.items(), strict=True):
    # a line style and a marker of its own per variant: where two curves coincide, both show
    for k, (name, curve) in enumerate(table.items()):
        style = {"marker": "os^D"[k % 4], "ls": ("-", "--", ":", "-.")[k % 4], "mfc": "none"}
        ax.plot(range(L + 1), curve.clamp(min=FLOOR), **style, label=rank_collapse.LABELS[name])
    ax.set_yscale("log")
    ax.set_title(f"{weights} weights")
    ax.set_xlabel("hidden state l (0 = embeddings, l = after layer l - 1)")
    ax.legend(frameon=False, fontsize=8)
axes[0].set_ylabel(r"$\|X - \mathbf{1}\bar{x}^\top\|_F \;/\; \|X\|_F$")
fig.tight_layout()
plt.show()
print(f"values below {FLOOR:g} are drawn at {FLOOR:g}")

# %% [markdown]
# Both variants without a skip around attention ("attention only", "attention + FFN") fall
# towards zero within a few layers, pretrained or not (at most {{ no_skip_r_last }} after the last
# layer {{ claim: no_skip_reaches_zero }}); both variants with the skip stay far from zero ($r \ge$
# {{ skip_r_min }} throughout {{ claim: skip_stays_far_from_zero }}). The rate of the
# pure-attention decay is easier to read on
# $-\log_{10} r$, which counts the digits of agreement between the tokens. An exponential decay
# would add the same number of digits per layer; doubly exponential decay multiplies them:

# %%
pure = curves["pretrained"]["attention_only"]  # (L + 1,)
digits = -torch.log10(pure.clamp(min=FLOOR))
for i in range(1, L + 1):
    grow = digits[i] / digits[i - 1]
    print(
        f"after layer {i - 1}: r = {pure[i].item():.2e}, digits = {digits[i].item():5.2f}, "
        f"x{grow.item():.1f} the digits of the layer before"
    )
collapsed = next((i for i in range(L + 1) if pure[i] < 1e-3), None)
print(
    f"attention only: r < 1e-3 from hidden state {collapsed} on; "
    f"full model at the last layer: r = {curves['pretrained']['full'][-1].item():.3f}"
)
pure_init = curves["random init"]["attention_only"]  # (L + 1,)
collapsed_init = next((i for i in range(L + 1) if pure_init[i] < 1e-3), None)
print(
    f"attention only at initialisation: r = {pure_init[0].item():.2e} for the embeddings, "
    f"{pure_init[1].item():.2e} after layer 0;\nr < 1e-3 from hidden state {collapsed_init} on"
)
# float32 keeps about 7 digits: below ten times its precision, r is at float32's floor
above_floor = [i for i in range(1, L + 1) if pure[i - 1] > 10 * torch.finfo(torch.float32).eps]
claims.value("collapse_hidden_state", collapsed, "{:.0f}")
claims.value("collapse_hidden_state_init", collapsed_init, "{:.0f}")
claims.value("init_r_embeddings", pure_init[0], "{:.2f}")
claims.value("init_r_after_one", pure_init[1], "{:.2f}")
claims.claim(
    "digits_grow_each_layer",
    min(digits[i] / digits[i - 1] for i in above_floor),
    ">",
    1,
    "until r reaches float32's floor, the digits grow by a factor above one each layer",
)
claims.claim(
    "collapse_faster_at_init",
    collapsed_init,
    "<",
    collapsed,
    "at initialisation attention alone reaches r < 1e-3 in fewer layers than pretrained",
)
no_skip = max(t[v][-1] for t in curves.values() for v in ("attention_only", "attention_ffn"))
with_skip = min(t[v].min() for t in curves.values() for v in ("full", "attention_skip"))
claims.value("no_skip_r_last", no_skip, "{:.0e}")
claims.value("skip_r_min", with_skip, "{:.2f}")
claims.claim(
    "no_skip_reaches_zero",
    no_skip,
    "<",
    1e-3,
    "without a skip around attention, r ends below 1e-3, pretrained or not",
)
claims.claim(
    "skip_stays_far_from_zero",
    with_skip,
    ">",
    0.1,
    "with the skip, r stays above 0.1 in every hidden state, pretrained or not",
)

# %% [markdown]
# The number of digits grows by a factor larger than one each layer
# {{ claim: digits_grow_each_layer }} until $r$ reaches float32's floor (about $10^{-7}$, where
# float32 runs out of digits and the factor drops to about 1): a doubly exponential collapse, as
# Dong et al. predict. Pretrained, $r$ is below $10^{-3}$ from hidden state
# {{ collapse_hidden_state }} on. At initialisation it is faster, below $10^{-3}$ from hidden
# state {{ collapse_hidden_state_init }} on {{ claim: collapse_faster_at_init }}: the random query
# and key weights are tiny, so every attention row is close to uniform, and a single layer
# already takes $r$ from {{ init_r_embeddings }} to {{ init_r_after_one }}. The skip connection
# keeps
# each token's own vector in the sum, and the FFN alone (attention + FFN) does not rescue it here:
# it acts on each token separately, so once the tokens are alike it keeps them alike.
#
# ## Lesions: remove one piece of the pretrained model
#
# Now the other direction: keep everything and remove one piece at test time, the way Veit et
# al. (2016) deleted blocks of residual networks and Michel, Levy & Neubig (2019) masked
# attention heads. `bertlab.experiments.lesions` runs the pretrained model by hand with one
# layer changed:
#
# - `layer`: the whole layer is skipped (its input is its output);
# - `attention` / `ffn`: one block (branch, add and LayerNorm) is skipped;
# - `attention_skip` / `ffn_skip`: the block stays but loses its skip connection;
# - heads: one head's output is zeroed before $W^O$.
#
# Two effects are measured. **Cosine**: each corpus sentence's embedding (mean over its real
# tokens, L2-normalised, the recipe of all-MiniLM-L6-v2, lesson 7) against the intact model's
# embedding of the same sentence; 1 means unchanged. **Search**: a few queries
# (`lesions.QUERIES`) search the corpus; for each query we look up where the lesioned model ranks
# the sentence the intact model ranked first. "top kept" is the fraction of queries whose first
# result is unchanged, and "score corr" the correlation between the lesioned and the intact
# query-to-sentence cosine scores (1: the search scores move together).
#
# {{ predict: layer_removed_most }}

# %% tags=["remove-input"]
ask.predict(
    "layer_removed_most",
    "Remove one whole layer of the pretrained model: which layer's removal "
    "moves the sentence embeddings most?",
    [
        ask.between(
            "layer_removed_most_index",
            None,
            1,
            "the first layer",
            "That would hold if an early layer's loss grew through the layers after it. The "
            "skips carry the stream past a missing layer; the later layers mostly nudge it.",
        ),
        ask.between(
            "layer_removed_most_index",
            1,
            L - 1,
            "one in between",
            "That would hold if the middle layers wrote the largest changes. Whatever a middle "
            "layer writes, the layers after it can partly make up for.",
        ),
        ask.between(
            "layer_removed_most_index",
            L - 1,
            None,
            "the last layer",
            "Nothing comes after the last layer to make up "
            "for it: its removal moves the embeddings most {{ claim: last_layer_moves_most }}.",
        ),
    ],
    section="Lesions: remove one piece of the pretrained model",
)

# %%
queries = corpus.batch(tokenizer, lesions.QUERIES)  # (Q, T') tensors
table = lesions.layer_lesions(model, batch, queries)  # 5 kinds x L layers
print(
    f"{'lesion':<15}{'layer':>6}{'mean cos':>10}{'min cos':>10}{'top kept':>10}"
    f"{'score corr':>12}   rank of intact top, per query"
)
for r in table:
    e = r.effect
    print(
        f"{r.kind:<15}{r.layer:>6}{e.mean_cosine:>10.3f}{e.min_cosine:>10.3f}{e.top_kept:>10.0%}"
        f"{e.score_correlation:>12.3f}   {e.rank_of_top.tolist()}"
    )

# %%
# alt: Grouped bar chart: for each lesioned layer and each kind of lesion, the mean cosine
#   similarity between the lesioned and the intact model's outputs.
kinds = list(LESIONS)
# (L,) each
by_kind = {k: torch.tensor([r.effect.mean_cosine for r in table if r.kind == k]) for k in kinds}
fig, ax = plt.subplots(figsize=(9, 3.4))
width = 0.8 / len(kinds)
for n_kind, k in enumerate(kinds):
    ax.bar(
        torch.arange(L) + (n_kind - (len(kinds) - 1) / 2) * width, by_kind[k], width=width, label=k
    )
ax.set_xlabel("lesioned layer")
ax.set_ylabel("mean cosine to intact")
ax.set_ylim(min(0.0, *(v.min().item() for v in by_kind.values())), 1.0)
ax.legend(frameon=False, ncol=len(kinds), fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0))
fig.tight_layout()
plt.show()

for k in kinds:
    print(
        f"{k:<15} mean cosine averaged over layers {by_kind[k].mean().item():.3f}  (worst layer "
        f"{int(by_kind[k].argmin())})"
    )
for k in ("layer", "attention_skip", "ffn_skip"):
    claims.value(f"{k}_mean_cosine", by_kind[k].mean(), "{:.3f}")
for s in ("attention_skip", "ffn_skip"):
    worse_in = by_kind[s] < by_kind["layer"]  # (L,): layers where losing the skip hurts more
    # the prose's words follow the count: "in all 6 layers" only when it is all
    n_worse = int(worse_in.sum())
    claims.value(
        f"{s}_worse_where",
        f"in all {L} layers" if n_worse == L else f"in {n_worse} of the {L} layers",
    )
    claims.claim(
        f"{s}_worse_on_average",
        by_kind[s].mean(),
        "<",
        by_kind["layer"].mean(),
        f"removing {s}'s skip hurts more than removing the layer, averaged over the layers",
    )
    print(
        f"{s}: hurts more than removing the whole layer in "
        f"{counted(torch.nonzero(worse_in).flatten().tolist(), 'layer')}"
    )
claims.value("layers", L, "{:.0f}")
# (L,) each: 1 - mean cosine, how far a lesion moves the outputs
damage = {k: 1 - v for k, v in by_kind.items()}
claims.claim(
    "skip_not_worse_everywhere",
    (damage["layer"] / damage["attention_skip"]).max(),
    ">",
    1,
    "in some layer, removing attention's skip hurts less than removing the layer",
)
claims.claim(
    "ffn_skip_worse_everywhere",
    (damage["ffn_skip"] / damage["layer"]).min(),
    ">",
    1,
    "in every layer, removing the FFN's skip hurts more than removing the layer",
)
last_kept = next(r.effect.top_kept for r in table if r.kind == "layer" and r.layer == L - 1)
claims.value("last_layer_top_kept", last_kept, "{:.0%}")
claims.value("layer_removed_most_index", damage["layer"].argmax(), "{:.0f}")
claims.claim(
    "last_layer_moves_most",
    damage["layer"][-1],
    ">",
    damage["layer"][:-1].max(),
    "skipping the last layer moves the embeddings more than skipping any other layer",
)
claims.claim(
    "last_layer_keeps_most_queries",
    last_kept,
    ">",
    0.5,
    "without the last layer, most queries still rank the same sentence first",
)

# %% [markdown]
# Reading the table: skipping a whole layer, or one of its blocks, moves the embeddings but
# mostly leaves the search results in place, as in Veit et al.'s residual networks: the rest of
# the model still receives a stream of the kind it expects. Removing only the *skip* while
# keeping the block is worse than removing the whole layer *on average over the layers*: mean
# cosine {{ attention_skip_mean_cosine }} without attention's skip
# {{ claim: attention_skip_worse_on_average }} and {{ ffn_skip_mean_cosine }} without the FFN's
# {{ claim: ffn_skip_worse_on_average }}, against {{ layer_mean_cosine }} without the layer. Layer
# by layer, losing the FFN's skip hurts more than losing the whole layer {{ ffn_skip_worse_where }}
# {{ claim: ffn_skip_worse_everywhere }}, losing attention's {{ attention_skip_worse_where }}
# {{ claim: skip_not_worse_everywhere }} (the table lists each). Without its skip the block passes
# on its
# update alone, and an update on its own is not a stream of the kind the following layers were
# trained to read. Removing the last layer moves the embedding more than removing any other
# {{ claim: last_layer_moves_most }} (the output space is that layer's), yet most queries
# ({{ last_layer_top_kept }}) still find the same sentence
# {{ claim: last_layer_keeps_most_queries }}:
# a lesion can move the embeddings far and leave their ranking nearly intact.
#
# ## Masking single heads

# %%
# alt: Heat map, layer against masked head: the mean cosine similarity between the model's output
#   with that one head masked and the intact output.
heads = lesions.head_lesions(model, batch)  # (L, A): mean cosine to intact per masked head
fig, ax = plt.subplots(figsize=(7, 3))
im = ax.imshow(heads.numpy(), cmap="viridis", aspect="auto")
ax.set_xlabel("masked head")
ax.set_ylabel("layer")
ax.set_xticks(range(A))
ax.set_yticks(range(L))
fig.colorbar(im, ax=ax, label="mean cosine to intact")
fig.tight_layout()
plt.show()

worst = int(heads.argmin())
layer_worst = by_kind["layer"].min().item()
print(
    f"{L * A} single-head lesions: mean cosine from {heads.min().item():.4f} (layer {worst // A}, "
    f"head {worst % A}) "
    f"to {heads.max().item():.4f}; median {heads.median().item():.4f}"
)
print(
    f"heads whose removal keeps the mean cosine above 0.99: {int((heads > 0.99).sum())} of {L * A}"
)
print("per layer, mean over its heads:", " ".join(f"{v:.4f}" for v in heads.mean(1).tolist()))
print(f"most harmful on average: layer {int(heads.mean(1).argmin())}")
print(f"for comparison, the most harmful whole-layer lesion: mean cosine {layer_worst:.4f}")
head_damage = 1 - heads  # (L, A): how far masking each head moves the embeddings
claims.claim(
    "any_head_less_than_any_layer",
    head_damage.max(),
    "<",
    damage["layer"].min(),
    "masking any single head moves the embeddings less than skipping any whole layer",
)
claims.claim(
    "last_layer_heads_matter_most",
    head_damage[-1].mean(),
    ">",
    head_damage[:-1].mean(1).max(),
    "the last layer's heads, averaged, move the embeddings more than any other layer's",
)

# %% [markdown]
# Any single head can go with little effect on the sentence embeddings (the range is printed
# above), less than skipping any one whole layer {{ claim: any_head_less_than_any_layer }}; the
# heads of the last layer matter most {{ claim: last_layer_heads_matter_most }}. This matches Michel
# et al. (2019), who removed
# many heads of a trained BERT at test time without a significant loss in accuracy. Each head
# writes a small, separate term into the residual stream (lesson 3), and the stream carries
# everything else past it.
#
# ## How much each block writes
#
# How big is each block's update, what its branch adds before the add and the LayerNorm, next to
# the stream it is added to? Lesson 4 printed the mean over the real tokens, per layer, of
# $\lVert a_t \rVert / \lVert x_t \rVert$ for attention and $\lVert f_t \rVert / \lVert h_t \rVert$
# for the FFN ($h$ is the stream between the two blocks). We print them again, and for attention
# also the ratio of each single real token.
#
# {{ predict: attention_update_size }}

# %% tags=["remove-input"]
ask.predict(
    "attention_update_size",
    "Over every real token of the corpus and every layer, how large is the largest attention "
    r"update $\lVert a_t \rVert$ next to the stream $\lVert x_t \rVert$ it is added to?",
    [
        ask.between(
            "attention_token_ratio_max",
            1,
            None,
            "larger than the stream",
            "The layer means stay below the stream, but single tokens do not: the largest ratio "
            "is {{ attention_token_ratio_max }}, well above the largest layer mean, "
            "{{ attention_ratio_max }} {{ claim: token_ratio_above_layer_means }}. A mean over "
            "a sentence hides its largest terms.",
        ),
        ask.between(
            "attention_token_ratio_max",
            0.5,
            1,
            "between half of it and all of it",
            "That would hold if no token's update went much past the layer means. A few tokens' "
            "updates outgrow their stream.",
        ),
        ask.between(
            "attention_token_ratio_max",
            None,
            0.5,
            "under half of it",
            "That would hold if no token's update exceeded the means printed in the lesson on "
            "Add & Norm. Those are averages; single tokens go well beyond them.",
        ),
    ],
    section="How much each block writes",
)

# %%
# alt: Bar chart per layer of two mean norm ratios, the attention update over its residual input and
#   the feed-forward update over its residual input, with a dashed line at ratio one.
ratios = lesions.update_ratios(trace)  # {"attention": (L,), "ffn": (L,)}
for i in range(L):
    print(
        f"layer {i}: ||a|| / ||x|| = {ratios['attention'][i].item():.3f}   ||f|| / ||h|| = "
        f"{ratios['ffn'][i].item():.3f}"
    )

real = batch["attention_mask"].bool()  # (B, T)
# (L, N): each real token's ||a_t|| / ||x_t||, layer by layer
token_ratios = torch.stack(
    [
        (a.norm(dim=-1) / x.norm(dim=-1))[real]
        for a, x in zip(trace.attention_updates, trace.hidden_states[:-1], strict=True)
    ]
)
top_layer = int(token_ratios.max(1).values.argmax())
print(
    f"largest ||a_t|| / ||x_t|| of any real token: {token_ratios.max().item():.3f}, in layer "
    f"{top_layer};\ntokens with ||a_t|| > ||x_t||, per layer: "
    f"{(token_ratios > 1).sum(1).tolist()} of {real.sum().item()}"
)

fig, ax = plt.subplots(figsize=(6, 3))
idx = torch.arange(L)
ax.bar(idx - 0.18, ratios["attention"], width=0.36, label="attention: |a| / |x|")
ax.bar(idx + 0.18, ratios["ffn"], width=0.36, label="FFN: |f| / |h|")
ax.axhline(1.0, color="gray", lw=0.8, ls="--")
ax.set_xlabel("layer")
ax.set_ylabel("mean norm ratio")
ax.legend(frameon=False)
fig.tight_layout()
plt.show()
claims.claim(
    "attention_update_below_stream",
    ratios["attention"].max(),
    "<",
    1,
    "on average over the tokens, attention's update is smaller than the stream in every layer",
)
claims.value("attention_token_ratio_max", token_ratios.max(), "{:.2f}")
claims.claim(
    "token_ratio_above_layer_means",
    token_ratios.max(),
    ">",
    ratios["attention"].max(),
    "some real token's attention update is larger, next to its stream, than any layer's mean",
)
claims.claim(
    "ffn_above_stream_somewhere",
    ratios["ffn"].max(),
    ">",
    1,
    "in some layer the FFN's update is larger than the stream, on average over the tokens",
)
claims.claim(
    "ffn_writes_more_than_attention",
    ratios["ffn"].mean(),
    ">",
    ratios["attention"].mean(),
    "the FFN's update is larger than attention's, on average over the layers",
)
update_min = min(ratios["attention"].min(), ratios["ffn"].min())
claims.value("attention_ratio_max", ratios["attention"].max(), "{:.2f}")
claims.value("ffn_over_attention", ratios["ffn"].mean() / ratios["attention"].mean(), "{:.1f}")
claims.value("update_ratio_min", update_min, "{:.2f}")
claims.claim(
    "updates_a_sizeable_part",
    update_min,
    ">",
    0.2,
    "every block's update is more than a fifth of the stream's norm, on average over the tokens",
)
print(
    "attention updates smaller than the stream in every layer: "
    f"{bool((ratios['attention'] < 1).all())};\n"
    "FFN updates larger than the stream in "
    f"{counted(torch.nonzero(ratios['ffn'] > 1).flatten().tolist(), 'layer')}"
)

# %% [markdown]
# On average over the tokens, attention's updates are smaller than the stream in every layer
# {{ claim: attention_update_below_stream }}, though a single token's can go well past the layer
# means (the largest ratio is {{ attention_token_ratio_max }}, the largest mean
# {{ attention_ratio_max }} {{ claim: token_ratio_above_layer_means }}); the FFN
# writes more
# {{ claim: ffn_writes_more_than_attention }}, and where the line above names a layer, more than
# the stream itself, before the LayerNorm scales the sum back (lesson 4 measured the same ratios
# from the recorded modules). With the skip, a token's vector after a block is its old vector plus a
# change; without it, the
# block has to rebuild the whole vector from its update, and for attention that update is a
# weighted average over the sentence, which is exactly what drove the collapse above.
#
# ## Why the stream keeps one width
#
# Every sub-layer writes into the stream by addition, $x + F(x)$, and a sum needs equal shapes.
# So BERT keeps one width $H$ for every hidden state and every sub-layer's output; the FFN widens
# to $4H$ inside its branch and comes back to $H$ before the add (lesson 5). A branch that changed
# the width could not be added at all:

# %%
from torch import nn

from bertlab.experiments import stream_width

H = model.config.hidden_size
print(
    "hidden states:", sorted({tuple(s.shape) for s in trace.hidden_states}), "(B, T, H) every time"
)
x0 = trace.hidden_states[0]  # (B, T, H)
wider = nn.Linear(H, H + 128)  # a branch that would widen the stream
try:
    x0 + wider(x0)
except RuntimeError as err:
    print(f"x + F(x) with F: {H} -> {H + 128} raises RuntimeError:\n  {err}")

# %% [markdown]
# He, Zhang, Ren & Sun (2016a, "Deep Residual Learning for Image Recognition", CVPR) met this where
# their network changes width between stages. He et al. compare (A) zero-padding the extra
# dimensions of the skip, (B) a learned projection $W_s x$ on the skip only where the width
# changes, identity everywhere else, and (C) projections on every skip; they find the
# differences small and keep parameter-free identity skips wherever the width stays, to save
# memory, time and parameters. For BERT, a projection on every skip would add one $H \times H$
# matrix per sub-layer:

# %%
encoder_params = sum(p.numel() for p in model.encoder.parameters())
projections = 2 * L * H * H  # two sub-layers per layer, one H x H matrix each
print(
    f"{2 * L} projections of {H} x {H}: {projections:,} parameters, "
    f"{projections / encoder_params:.0%} of the encoder's {encoder_params:,}"
)

# %% [markdown]
# Parameters are one cost, gain is another: the identity passes the input on with gain exactly 1
# in every direction, a projection does not. Where can that be measured? On small stacks of random
# residual blocks (`bertlab.experiments.stream_width`, width $w = 32$, 12 blocks
# $\mathrm{Norm}(S(x) + F(x))$ with a $w \to 4w \to w$ GELU FFN, three seeds), identical except
# for the skip $S$: the identity, a bias-free projection with PyTorch's default initialisation,
# or the same projection initialised orthogonal (norm-preserving, the best start a square
# projection can have). Norm is a LayerNorm (Post-LN, as in BERT) or nothing (the plain sum of He
# et al.). On 512 random inputs we measure how much of the input is still in the output: the
# cosine between input and output, and the $R^2$ of the best affine map from input to output (1:
# the output is an affine function of the input); and the gradient of a regression loss that
# reaches each block's first weight matrix.

# %%
# alt: Left: R squared of the best affine map from the input to the stream after each block, Post-LN
#   stacks, for identity, default projection and orthogonal projection shortcuts. Right: gradient
#   norm of each block's first weight matrix, stacks without normalisation, log scale, same three
#   shortcuts.
# (shortcut, norm) -> Measure
widths = stream_width.compare(width=32, depth=12, samples=512, seeds=(0, 1, 2))
print(
    f"{'norm':<9}{'shortcut':<12}{'cos(in, out)':>13}{'R^2':>7}"
    f"{'grad block 0':>14}{'first / last':>14}{'skip params':>13}"
)
for (shortcut, norm), m in widths.items():
    print(
        f"{norm:<9}{shortcut:<12}{m.cosine[-1].item():>13.3f}{m.r2[-1].item():>7.3f}"
        f"{m.grad[0].item():>14.2e}{m.grad_ratio:>14.3f}{m.shortcut_parameters:>13,}"
    )

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
for shortcut in stream_width.SHORTCUTS:
    post, plain = widths[shortcut, "Post-LN"], widths[shortcut, "none"]
    ax1.plot(range(len(post.r2)), post.r2, marker="o", label=shortcut)
    ax2.plot(range(len(plain.grad)), plain.grad, marker="o", label=shortcut)
ax1.set_xlabel("after block (0 = input)")
ax1.set_ylabel(r"$R^2$ from the input")
ax1.set_title("Post-LN stacks")
ax2.set_yscale("log")
ax2.set_xlabel("block")
ax2.set_ylabel("gradient norm, first weight")
ax2.set_title("no normalisation")
ax1.legend(frameon=False)
fig.tight_layout()
plt.show()

# the prose below states these: keep it honest
for norm in stream_width.NORMS:
    ident = widths["identity", norm].cosine[-1]
    assert ident > 0.5 and all(
        abs(widths[s, norm].cosine[-1]) < 0.1 for s in ("projection", "orthogonal")
    )
post = {s: widths[s, "Post-LN"].r2[-1] for s in stream_width.SHORTCUTS}
assert post["projection"] < post["identity"] and abs(post["orthogonal"] - post["identity"]) < 0.05
assert bool((widths["projection", "Post-LN"].r2[1:] < widths["identity", "Post-LN"].r2[1:]).all())
plain = {s: widths[s, "none"] for s in stream_width.SHORTCUTS}
assert plain["projection"].grad[0] < plain["identity"].grad[0] / 10
print(
    f"no normalisation: block 0's gradient with default projections is "
    f"{(plain['identity'].grad[0] / plain['projection'].grad[0]).item():.0f} times smaller than\n"
    "with identities"
)
claims.claim(
    "projection_loses_more_r2",
    1 - post["projection"],
    ">",
    1 - post["identity"],
    "Post-LN: after the last block, default projections leave more of the input unexplained than "
    "identities",
)
claims.claim(
    "orthogonal_r2_near_identity",
    abs(post["orthogonal"] - post["identity"]),
    "<",
    0.05,
    "Post-LN: orthogonal projections keep an R^2 within 0.05 of the identity's",
)
claims.value(
    "grad_shrink_factor", plain["identity"].grad[0] / plain["projection"].grad[0], "{:.0f}"
)
claims.claim(
    "projection_shrinks_gradient",
    plain["projection"].grad[0],
    "<",
    plain["identity"].grad[0] / 10,
    "no normalisation: block 0's gradient with default projections is over ten times smaller",
)
claims.claim(
    "orthogonal_gradient_near_identity",
    plain["identity"].grad[0] / plain["orthogonal"].grad[0],
    "<",
    2,
    "no normalisation: block 0's gradient with orthogonal projections is within a factor 2 of the "
    "identity's",
)

# %% [markdown]
# After twelve identity skips the output still points roughly where the input did (cosine
# printed); after twelve projections the cosine is near 0, orthogonal or not: the stream has been
# rotated, and the input's coordinates no longer line up with the output's. In the Post-LN
# stacks, default projections also lose information: the $R^2$ from the input falls faster with
# depth than with identities (left), and after the last block more of the input is unexplained
# {{ claim: projection_loses_more_r2 }}, while the orthogonal projections keep about as much as
# the identity {{ claim: orthogonal_r2_near_identity }}. Without normalisation, the gradient
# reaching the first block with default projections is smaller than with identities by a factor
# of {{ grad_shrink_factor }} {{ claim: projection_shrinks_gradient }} (right; there the $R^2$
# column is not where the damage shows). An orthogonal start keeps that gradient within a factor
# 2 of the identity's {{ claim: orthogonal_gradient_near_identity }}, but that is at
# initialisation: nothing keeps a projection orthogonal in training, while the identity stays
# exact and costs nothing. This is
# measured on small random stacks at initialisation, not on BERT or after training.
#
# %% [markdown]
# ## What we found
#
# - Without a skip connection around attention, the pretrained model's token vectors become
#   identical within a few layers, and faster than exponentially
#   {{ claim: digits_grow_each_layer }} ($r < 10^{-3}$ from hidden state
#   {{ collapse_hidden_state }} on; at initialisation from hidden state
#   {{ collapse_hidden_state_init }} on {{ claim: collapse_faster_at_init }}). With the skip they
#   stay distinct (curves above). The FFN
#   alone does not prevent it.
# - Removing a whole layer or one block at test time changes the sentence embeddings but mostly
#   not the search results; removing a skip connection is worse than removing the layer on
#   average over the layers {{ claim: attention_skip_worse_on_average }}: the FFN's
#   {{ ffn_skip_worse_where }} {{ claim: ffn_skip_worse_everywhere }}, attention's
#   {{ attention_skip_worse_where }} {{ claim: skip_not_worse_everywhere }} (the table above).
# - Any single attention head can be masked with a small effect
#   {{ claim: any_head_less_than_any_layer }}; the last layer's heads matter most
#   {{ claim: last_layer_heads_matter_most }}.
# - Each block's update is a sizeable part of the stream (at least {{ update_ratio_min }} of its
#   norm on average {{ claim: updates_a_sizeable_part }}). Attention's is smaller than the stream in
#   every layer on average over the tokens {{ claim: attention_update_below_stream }}, though single
#   tokens' go well past those means {{ claim: token_ratio_above_layer_means }}; the FFN's is larger
#   than the stream itself in some layer {{ claim: ffn_above_stream_somewhere }}. A block adjusts
#   the token and can also rewrite much of it: the skip keeps the old vector in the sum, and the
#   LayerNorm after it rescales the sum of the two.
# - The stream keeps one width so that every skip can be the identity: a change of width needs a
#   projection on the skip, which costs parameters and, in random stacks, the input's direction
#   and (without normalisation) the gradient reaching the first blocks.
#
# **Next:** [Lesson 9: No activation after attention, none on the residual
# path](09-no-activation.py);
# exercise 07 ([07-why-measured](../exercises/07-why-measured/07-why-measured.ipynb)) follows it
# and measures the claims of both lessons.
#
# ## Check yourself
#
# {{ predict: check_skip_keeps_apart }}
#
# {{ predict: check_block_writes_more }}
#
# {{ predict: check_projection_gradient }}

# %% tags=["remove-input"]
ask.check(
    "check_skip_keeps_apart",
    "With its skip connections, how far from all alike do the pretrained "
    "model's token vectors stay?",
    [
        ask.between(
            "skip_r_min",
            0.5,
            None,
            "the lowest r over the layers is above a half",
            "The skip adds each token's own "
            "vector back after every average: r stays at least {{ skip_r_min }} "
            "{{ claim: skip_stays_far_from_zero }}.",
        ),
        ask.between(
            "skip_r_min",
            0.1,
            0.5,
            "the lowest r over the layers is between a tenth and a half",
            "That would hold if the skip only slowed the collapse. It adds each token's own "
            "vector back in every layer, and r stays high throughout.",
        ),
        ask.between(
            "skip_r_min",
            None,
            0.1,
            "the lowest r over the layers is below a tenth",
            "That would hold if the FFN, not the "
            "skip, were what kept tokens apart. The variants with a skip are the ones that stay "
            "apart.",
        ),
    ],
    section="Four variants, pretrained and at initialisation",
)
ask.check(
    "check_block_writes_more",
    "Which block writes the larger update next to its stream, on average over the layers?",
    [
        ask.between(
            "ffn_over_attention",
            1.25,
            None,
            "the FFN's is over 1.25 times attention's",
            "The FFN's mean ratio is {{ ffn_over_attention }} times attention's "
            "{{ claim: ffn_writes_more_than_attention }}.",
        ),
        ask.between(
            "ffn_over_attention",
            0.8,
            1.25,
            "the FFN's is between 0.8 and 1.25 times attention's",
            "That would hold if the two blocks shared the work of changing a token evenly. Here "
            "the FFN writes more.",
        ),
        ask.between(
            "ffn_over_attention",
            None,
            0.8,
            "the FFN's is under 0.8 times attention's",
            "That would hold if mixing tokens changed a "
            "token more than transforming its features. Here the FFN writes more.",
        ),
    ],
    section="How much each block writes",
)
ask.check(
    "check_projection_gradient",
    "A shortcut that changes width needs a projection instead of the "
    "identity. In a stack without normalisation, what does it do to the gradient reaching the "
    "first block?",
    [
        ask.between(
            "grad_shrink_factor",
            100,
            None,
            "it shrinks it more than a hundredfold",
            "Each projection scales what passes through it, and the scalings multiply over the "
            "stack: the gradient is {{ grad_shrink_factor }} times smaller "
            "{{ claim: projection_shrinks_gradient }}.",
        ),
        ask.between(
            "grad_shrink_factor",
            10,
            100,
            "it shrinks it ten- to a hundredfold",
            "That would hold if each projection shrank the gradient a little and the stack were "
            "short. The shrinking multiplies over every block of it.",
        ),
        ask.between(
            "grad_shrink_factor",
            None,
            10,
            "it leaves it about the same",
            "That would hold if the "
            "projections were orthogonal: those keep the gradient near the identity's.",
        ),
    ],
    section="Why the stream keeps one width",
)

# %% [markdown]
# ## References
#
# - Dong, Y., Cordonnier, J.-B., & Loukas, A. (2021). Attention is not all you need: pure
#   attention loses rank doubly exponentially with depth. *ICML*. arXiv:2103.03404.
# - He, K., Zhang, X., Ren, S., & Sun, J. (2016a). Deep Residual Learning for Image
#   Recognition. *CVPR*.
# - He, K., Zhang, X., Ren, S., & Sun, J. (2016b). Identity Mappings in Deep Residual Networks.
#   *ECCV*.
# - Michel, P., Levy, O., & Neubig, G. (2019). "Are Sixteen Heads Really Better than One?"
#   *NeurIPS*.
# - Veit, A., Wilber, M., & Belongie, S. (2016). Residual Networks Behave Like Ensembles of
#   Relatively Shallow Networks. *NeurIPS*.

# %% tags=["remove-input"]
claims.publish()  # the numbers and claims above, for the build that renders this page
