# %% [markdown]
# # Lesson 5: The feed-forward network
#
# **Question.** After attention has let every token gather information from the others, each
# layer runs a feed-forward network (FFN): `intermediate` ($H \to 4H$, GELU) then `output`
# ($4H \to H$). What is it for, and does its exact activation matter?
#
# ## The equations
#
# Vaswani et al. (2017, "Attention Is All You Need", NeurIPS, Section 3.3) apply the same
# two-layer network to every position separately; BERT (Devlin et al. 2019, "BERT: Pre-training
# of Deep Bidirectional Transformers for Language Understanding", NAACL) swaps their ReLU for
# GELU:
#
# $$f = \mathrm{FFN}(h) = m\,W_2 + b_2, \qquad m = \mathrm{GELU}(hW_1 + b_1),$$
#
# with $h$ a token vector (a row of the first Add & Norm's output), $m$ its $4H$ hidden
# activations and $f$ the FFN's update, in the letters of the [notation page](../docs/notation.md).
#
# Geva, Schuster, Berant & Levy (2021, "Transformer Feed-Forward Layers Are Key-Value Memories",
# EMNLP) read the same formula one hidden unit at a time. With $k_i$ the $i$-th column of $W_1$
# (a "key") and $v_i$ the $i$-th row of $W_2$ (a "value"),
#
# $$f = \sum_{i=0}^{4H-1} m_i\, v_i + b_2, \qquad m_i = \mathrm{GELU}(h \cdot k_i + b_{1,i}):$$
#
# each unit checks how well the token matches its key and, if it does, adds its value vector.
# In Hugging Face's storage ($W_1$ is `intermediate.dense.weight.T`), column $i$ of $W_1$ is row
# $i$ of `intermediate.dense.weight`, so $k_i$ is `intermediate.dense.weight[i]`, and $v_i$ is
# `output.dense.weight[:, i]`.

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from bertlab.capture import capture
from bertlab.experiments import claims
from bertlab.experiments.census import census, ffn_share
from bertlab.experiments.variants import drift, swap_activation
from bertlab.reference import load_model, load_tokenizer

model, tokenizer = load_model(), load_tokenizer()
cap = capture()  # one recorded forward pass over the course corpus
pad = cap.batch["attention_mask"]  # (B, T)
real = pad.bool()  # (B, T)
B, T = pad.shape
H, I = model.config.hidden_size, model.config.intermediate_size
print(f"H = {H}, intermediate size 4H = {I}, activation {model.config.hidden_act!r}")

# %% [markdown]
# ## Attention only mixes
#
# Within one head, the output for query token $t$ is $\sum_j P_{tj}\, V_j$, with $P$ the head's
# attention probabilities, $V_j$ the value vector of token $j$, $P_{tj} \ge 0$ and
# $\sum_j P_{tj} = 1$: a **convex combination** (a weighted average) of the value vectors of the
# same sentence. A weighted average can never leave the range spanned by what it averages: every
# coordinate of the output lies between the smallest and the largest value of that coordinate over
# the sentence's value vectors {{ claim: average_stays_in_range }}. We check this on the recorded
# probabilities of one layer:

# %%
LAYER = 3
sa = model.encoder.layer[LAYER].attention.self
A, d = sa.num_attention_heads, sa.attention_head_size
x = cap.layer(LAYER, "attention.self").args[0]  # (B, T, H)
probs = cap.attentions[LAYER]  # (B, A, T, T), recorded by the model
with torch.no_grad():
    v = sa.value(x).view(B, T, A, d).transpose(1, 2)  # (B, A, T, d)
context = probs @ v  # (B, A, T, d)
# (B, A, T, d)
recorded = cap.layer(LAYER, "attention.self").output[0].view(B, T, A, d).transpose(1, 2)
print(
    f"weights >= 0: {bool((probs >= 0).all())}; row sums within "
    f"{(probs.sum(-1) - 1).abs().max().item():.1e} of 1;\n"
    f"probs @ V vs the model's context: max abs diff {(context - recorded).abs().max().item():.1e}"
)

big = torch.finfo(v.dtype).max
keys = real[:, None, :, None]  # (B, 1, T, 1): only real tokens count as values
lo = torch.where(keys, v, big).amin(dim=2, keepdim=True)  # (B, A, 1, d)
hi = torch.where(keys, v, -big).amax(dim=2, keepdim=True)  # (B, A, 1, d)
inside = (context >= lo - 1e-5) & (context <= hi + 1e-5)  # (B, A, T, d)
inside_share = inside[real[:, None, :, None].expand_as(inside)].float().mean()
print(f"output coordinates inside the range of the sentence's values: {inside_share.item():.2%}")
claims.claim(
    "average_stays_in_range",
    inside_share,
    "==",
    1,
    "every output coordinate lies within the range of the sentence's value vectors",
)

# %% [markdown]
# So attention *routes*: the softmax decides how much of each token to take, but what it delivers
# is an average of linear images ($xW^V$) of tokens already in the sentence, which $W^O$ then maps
# linearly again. Nothing in the attention branch, from the sub-layer's input up to $W^O$ (the
# update $a$; the Add & Norm that follows is lesson 4's), applies a nonlinear function to a token's
# features: a token whose attention is all on itself comes out as a linear map of itself.
#
# ## The per-token nonlinearity
#
# The FFN is the opposite: it never looks at other tokens, and it is nonlinear. Two checks on the
# recorded input of the FFN of the same layer: running it on every token *alone* gives the same
# result as on the batch (up to float32 rounding: a matrix-vector product sums in a different
# order than a matrix-matrix product), and removing its GELU (keeping both matrices) changes its
# output by the relative amount printed.

# %%
layer = model.encoder.layer[LAYER]


def ffn(t, act=None):
    """act(t W_1 + b_1) W_2 + b_2 for t of shape (..., H); act defaults to the model's GELU."""
    hidden = layer.intermediate.dense(t)  # (..., 4H)
    hidden = (act or layer.intermediate.intermediate_act_fn)(hidden)
    return layer.output.dense(hidden)  # (..., H)


h = cap.layer(LAYER, "intermediate").args[0]  # (B, T, H): the first Add & Norm's output
with torch.no_grad():
    together = ffn(h)  # (B, T, H)
    # one token at a time
    alone = torch.stack([torch.stack([ffn(h[b, t]) for t in range(T)]) for b in range(B)])
    linear = ffn(h, act=nn.Identity())
rel = ((together - linear).norm(dim=-1) / together.norm(dim=-1))[real]  # (N,)
print(
    f"each token alone vs the whole batch: max abs diff {(alone - together).abs().max().item():.1e}"
)
print(
    f"without GELU: relative change of the FFN output per token, mean {rel.mean():.2f}, min "
    f"{rel.min():.2f}"
)

# %% [markdown]
# Without a nonlinearity the two matrices would collapse into one $H \times H$ map (their product)
# and the layer would add nothing a single linear map could not. Stacked attention and FFN
# layers need both: attention moves information between tokens, the FFN transforms each token's
# features.
#
# ## Parameter share
#
# The FFN is where most of a layer's parameters are {{ claim: ffn_holds_most_of_layer }} (lesson
# 1 counted them):

# %%
layer_counts = census(model, by="group", layer=0)
all_counts = census(model, by="group")
print(
    f"per layer: FFN {layer_counts['feed-forward']:,} of "
    f"{layer_counts['attention'] + layer_counts['feed-forward']:,} "
    f"parameters = {ffn_share(model):.1%}"
)
print(
    f"whole model: FFN {all_counts['feed-forward']:,} of {sum(all_counts.values()):,} = "
    f"{all_counts['feed-forward'] / sum(all_counts.values()):.1%} (the embedding table takes much "
    "of the rest)"
)
claims.value("ffn_layer_share", 100 * ffn_share(model), "{:.1f} %")
claims.claim(
    "ffn_layer_share_below_two_thirds",
    ffn_share(model) - 2 / 3,
    "<",
    0,
    "inside a layer the FFN's share is just below two thirds",
)
claims.claim(
    "ffn_holds_most_of_layer",
    ffn_share(model),
    ">",
    0.5,
    "the FFN holds most of a layer's parameters",
)

# %% [markdown]
# Geva et al. (2021) note that feed-forward layers make up about two thirds of a transformer's
# parameters. Inside a layer the share is {{ ffn_layer_share }}, just below two thirds
# {{ claim: ffn_layer_share_below_two_thirds }} (the biases and LayerNorms weigh a little more on
# attention's side; lesson 1 shows the share tends to $2/3$ as $H$ grows). The share of the whole
# model also depends on the size of the embedding table, which is large next to a model as narrow
# as this one.
#
# ## Keys and values
#
# First the decomposition itself: for one token, summing $m_i v_i$ over all units, term by term,
# gives the FFN's output.

# %%
k_all = layer.intermediate.dense.weight  # (4H, H): row i is key k_i
b1 = layer.intermediate.dense.bias  # (4H,)
v_all = layer.output.dense.weight  # (H, 4H): column i is value v_i
token = h[1, 2]  # (H,): one token of one sentence
with torch.no_grad():
    m = F.gelu(k_all @ token + b1)  # (4H,): one coefficient per unit
    summed = sum(m[i] * v_all[:, i] for i in range(I)) + layer.output.dense.bias  # (H,)
print(
    f"sum of {I} weighted value vectors vs the FFN: max abs diff "
    f"{(summed - ffn(token)).abs().max().item():.1e}"
)

# %% [markdown]
# How many memories does a token use? GELU is positive exactly where its input is positive, so a
# unit "fires" when its output is above 0. The recorded `intermediate` outputs give, for every
# real token and every layer, the fraction of the $4H$ units that fire:

# %%
# alt: Box plots, one per layer, of the fraction of the feed-forward network's intermediate units
#   that are positive after GELU, per corpus token, with whiskers from the minimum to the maximum.
fire = []
for i in range(model.config.num_hidden_layers):
    m_all = cap.layer(i, "intermediate").output  # (B, T, 4H), after GELU
    frac = (m_all > 0).float().mean(-1)[real]  # (N,): per real token
    fire.append(frac)
    assert frac.mean() < 0.5  # the prose below says "a fraction"
    print(
        f"layer {i}: units firing per token: mean {frac.mean():.1%} ({frac.mean() * I:.0f} of "
        f"{I}), "
        f"min {frac.min():.1%}, max {frac.max():.1%}"
    )

fire_max = max(f.mean() for f in fire)
claims.value("fire_max_mean", 100 * fire_max, "{:.0f}%")
claims.claim(
    "tokens_use_a_fraction",
    fire_max,
    "<",
    0.5,
    "in every layer a token fires fewer than half of the units, on average over the tokens",
)
fig, ax = plt.subplots(figsize=(6, 3))
ax.boxplot([f.numpy() for f in fire], whis=(0, 100))  # whiskers from the min to the max printed
ax.set_xticks(range(1, len(fire) + 1), [str(i) for i in range(len(fire))])
ax.set_xlabel("layer")
ax.set_ylabel("fraction of units > 0")
ax.set_title("FFN units firing per token (corpus tokens; whiskers: min to max)")
fig.tight_layout()
plt.show()

# %% [markdown]
# Each token uses a fraction of its layer's units, on average at most {{ fire_max_mean }} in any
# layer {{ claim: tokens_use_a_fraction }}: the FFN is a large store of which a given token reads
# a subset, a different one for different tokens (the truncation below shows they differ).
#
# Which inputs trigger a unit? Geva et al. collect the inputs whose key match is largest and find
# human-readable patterns, shallow ones (a specific word) in lower layers and more semantic ones
# in upper layers. Our corpus is tiny (the cell prints how many word tokens it has), so this is a
# glimpse, not a study: for the first and the last layer, take the unit with the peak activation
# on a word token (special tokens `[CLS]`/`[SEP]` left out, since some units fire on them in every
# sentence) and list the corpus tokens that excite it, strongest first, each shown in its sentence.
# A token on
# which the unit does not fire (activation at or below 0) is left out of the list.

# %%
ids = cap.batch["input_ids"]  # (B, T)
words = real & ~torch.isin(ids, torch.tensor(tokenizer.all_special_ids))  # (B, T)
where = words.nonzero()  # (N, 2): (sentence, position) of each word token
print(f"{len(where)} word tokens in {B} sentences")


def show_unit(layer_index, top=6):
    """Print the unit with the largest activation on a word token, and its top tokens in context."""
    m_all = cap.layer(layer_index, "intermediate").output[words]  # (N, 4H)
    unit = int(m_all.max(0).values.argmax())
    values, rows = m_all[:, unit].topk(top)
    fires = values > 0  # (top,): a token on which the unit does not fire does not excite it
    values, rows = values[fires], rows[fires]
    print(
        f"layer {layer_index}, unit {unit}: fires on {(m_all[:, unit] > 0).float().mean():.0%} of "
        "word tokens"
    )
    for value, row in zip(values, rows, strict=True):
        s, t = where[row].tolist()
        # without [CLS], [SEP]
        toks = tokenizer.convert_ids_to_tokens(ids[s, 1 : int(pad[s].sum()) - 1])
        context = " ".join([*toks[max(0, t - 4) : t - 1], f"[[{toks[t - 1]}]]", *toks[t : t + 3]])
        print(f"   {value:6.2f}  {context}")


show_unit(0)
show_unit(model.config.num_hidden_layers - 1)

# %% [markdown]
# Read the two lists with Geva et al.'s question in mind: do the tokens that excite a unit share
# their spelling, their meaning, or nothing obvious? To look further, run it on sentences of
# your own: the code works unchanged on any list of sentences.
#
# ## Exact GELU
#
# Hendrycks & Gimpel (2016, "Gaussian Error Linear Units (GELUs)", arXiv:1606.08415) define
#
# $$\mathrm{GELU}(x) = x\,\Phi(x) = \frac{x}{2}\left(1 + \mathrm{erf}\!\left(\frac{x}{\sqrt
# 2}\right)\right),$$
#
# with $\Phi$ the standard normal CDF, and give the approximation
# $\frac{x}{2}\left(1 + \tanh\!\left(\sqrt{2/\pi}\,(x + 0.044715\,x^3)\right)\right)$. In
# transformers, `hidden_act="gelu"` is the exact erf form and `"gelu_new"` the tanh form; in
# PyTorch they are `F.gelu(x)` and `F.gelu(x, approximate="tanh")`. Which one does the
# pretrained model use, and how far apart are they? After the plots, each of them, and ReLU,
# takes the place of the pretrained model's activation in every layer.
#
# {{ predict: relu_or_tanh }}

# %% tags=["remove-input"]
from bertlab.experiments import predictions as ask

ask.predict(
    "relu_or_tanh",
    "Put ReLU in every layer in place of the pretrained model's GELU, then the tanh form of "
    "GELU instead: how many times as far as the tanh form does ReLU move the outputs?",
    [
        ask.between(
            "relu_over_tanh_drift",
            None,
            30,
            "less than 30 times as far",
            "That would hold if the tanh form's error were a sizeable part of what ReLU changes, "
            "or if the negative inputs, where ReLU and GELU differ, were rare. The two GELUs "
            "differ by at most {{ gelu_gap }}, and ReLU zeroes what GELU lets through.",
        ),
        ask.between(
            "relu_over_tanh_drift",
            30,
            3000,
            "30 to 3000 times as far",
            "The tanh form differs from the erf GELU by at most {{ gelu_gap }}, ReLU by up to "
            "{{ relu_gelu_gap }} for negative inputs: ReLU moves the outputs "
            "{{ relu_over_tanh_drift }} times as much {{ claim: tanh_moves_less_than_relu }}.",
        ),
        ask.between(
            "relu_over_tanh_drift",
            3000,
            None,
            "3000 times as far, or more",
            "That would hold if the tanh form were exact up to float32 rounding. It differs from "
            "the erf form by up to {{ gelu_gap }}, and the difference carries through the layers.",
        ),
    ],
    section="Exact GELU",
)

# %%
# alt: Left: the exact (erf) GELU, the tanh approximation and ReLU plotted over the input. Right:
#   the difference between the erf and the tanh GELU over the input.
act = layer.intermediate.intermediate_act_fn
z = torch.linspace(-6, 6, 4001)
exact = 0.5 * z * (1 + torch.erf(z / 2**0.5))  # the definition
tanh_form = 0.5 * z * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (z + 0.044715 * z**3)))
print(f"model's activation: {type(act).__name__}")
print(f"  vs x * Phi(x) (erf):   max abs diff {(act(z) - exact).abs().max().item():.1e}")
print(f"  vs the tanh form:      max abs diff {(act(z) - tanh_form).abs().max().item():.1e}")
print(
    f"F.gelu(x, approximate='tanh') vs the tanh formula: max abs diff "
    f"{(F.gelu(z, approximate='tanh') - tanh_form).abs().max().item():.1e}"
)
worst = (exact - tanh_form).abs().argmax()
print(
    "largest gap between erf and tanh GELU on [-6, 6]: "
    f"{(exact - tanh_form).abs().max().item():.1e} at x = {z[worst].item():.2f}"
)
gelu_gap = (exact - tanh_form).abs().max()
relu_gap = torch.minimum((torch.relu(z) - exact).abs(), (torch.relu(z) - tanh_form).abs())[
    z < 0
].max()
print(f"largest gap between ReLU and the nearer GELU for x < 0: {relu_gap.item():.2f}")
claims.value("gelu_gap", gelu_gap, "{:.1e}")
claims.value("relu_gelu_gap", relu_gap, "{:.2f}")
claims.claim(
    "relu_differs_far_more",
    relu_gap,
    ">",
    100 * gelu_gap,
    "for negative inputs ReLU differs from both GELUs by over a hundred times the GELUs' gap",
)

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2))
ax1.plot(z, exact, label="GELU (erf)")
ax1.plot(z, tanh_form, "--", label="GELU (tanh)")
ax1.plot(z, torch.relu(z), ":", label="ReLU")
ax1.set_xlim(-4, 3)
ax1.set_ylim(-0.5, 3)
ax1.legend(frameon=False)
ax1.set_title("activations")
ax2.plot(z, exact - tanh_form)
ax2.set_title("GELU (erf) minus GELU (tanh)")
ax2.set_xlabel("x")
fig.tight_layout()
plt.show()

# %% [markdown]
# The two GELUs differ by at most {{ gelu_gap }}, invisible in the left plot, while ReLU differs
# from both by up to {{ relu_gelu_gap }} for negative inputs {{ claim: relu_differs_far_more }}:
# GELU lets small negative values through and is smooth at 0. Does that matter for a pretrained
# model? `swap_activation` puts another function into every layer's
# `intermediate.intermediate_act_fn`
# (and restores the original afterwards); `drift` compares the final hidden states and the
# sentence embeddings with the unchanged model ("same neighbour": the fraction of corpus
# sentences whose nearest other sentence stays the same).

# %%
swaps = {
    "exact GELU (erf)": nn.GELU(),
    "tanh GELU": nn.GELU(approximate="tanh"),
    "ReLU": nn.ReLU(),
    "no activation": nn.Identity(),
}
reference = cap.last_hidden_state  # (B, T, H) of the unchanged model
results = {}
print(f"{'':<17}{'max abs diff':>13}{'token cos':>11}{'sentence cos':>14}{'same neighbour':>16}")
for name, fn in swaps.items():
    with swap_activation(model, fn), torch.no_grad():
        hidden = model(**cap.batch).last_hidden_state  # (B, T, H)
    dr = results[name] = drift(reference, hidden, pad)
    print(
        f"{name:<17}{dr['max_abs_diff']:>13.1e}{dr['token_cosine']:>11.6f}"
        f"{dr['sentence_cosine']:>14.6f}{dr['same_neighbour']:>16.0%}"
    )
gaps = {name: results[name]["max_abs_diff"] for name in swaps}
claims.value("relu_over_tanh_drift", gaps["ReLU"] / gaps["tanh GELU"], "{:.0f}")
claims.value("none_over_relu_drift", gaps["no activation"] / gaps["ReLU"], "{:.1f}")
claims.claim(
    "erf_gelu_reproduces",
    gaps["exact GELU (erf)"],
    "==",
    0,
    "the erf GELU reproduces the model exactly",
)
claims.claim(
    "tanh_moves_less_than_relu",
    gaps["tanh GELU"],
    "<",
    gaps["ReLU"],
    "tanh GELU moves the outputs less than ReLU",
)
claims.claim(
    "relu_moves_less_than_none",
    gaps["ReLU"],
    "<",
    gaps["no activation"],
    "ReLU moves them less than no activation",
)

# %% [markdown]
# The erf GELU reproduces the model exactly {{ claim: erf_gelu_reproduces }} (it is the function
# the model calls), the tanh form moves the
# outputs by a small amount, ReLU by much more {{ claim: tanh_moves_less_than_relu }}, and
# dropping the activation altogether moves them most {{ claim: relu_moves_less_than_none }}
# (the numbers are above). A model should be run with the activation it was trained with; for checks
# that compare
# against the pretrained layer with a tight tolerance, even the tanh approximation is a
# detectable mistake.
#
# ## Why GELU
#
# The swap above says what *this trained model* needs: the activation it was trained with. It
# does not say why BERT chose GELU, nor how BERT trained with ReLU would have fared. What the
# papers say:
#
# - Hendrycks & Gimpel (2016, "Gaussian Error Linear Units (GELUs)") build GELU from a
#   stochastic regulariser: multiply $x$ by a 0/1 mask that keeps it with probability
#   $\Phi(x)$, so larger inputs are more likely kept; GELU is that mask's expected value,
#   $x\,\Phi(x)$. Where ReLU gates an input by its sign, GELU weights it by how large it is
#   against a standard normal: smooth, and slightly negative for negative inputs. In Hendrycks
#   & Gimpel's (2016) experiments (MNIST, CIFAR-10/100, TIMIT, Twitter part-of-speech tagging) GELU
#   matched or
#   beat ReLU and ELU.
# - Devlin et al. (2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
#   Understanding", Appendix A.2) write that they use GELU rather than the standard ReLU,
#   following OpenAI GPT, and report no comparison of their own.
#
# So BERT's GELU is an inherited choice backed by Hendrycks & Gimpel's experiments, not by a
# BERT ablation. What the trained model shows is where GELU and ReLU differ for its inputs: the
# pre-activations $hW_1 + b_1$ of the FFN of layer {{ gelu_layer }}, over real tokens:
#
# {{ predict: gelu_relu_apart }}

# %% tags=["remove-input"]
# A question before the measurement below; the build selects its answer from the share recorded
# there.
ask.predict(
    "gelu_relu_apart",
    "On what share of these pre-activations do GELU and ReLU differ by more than a hundredth?",
    [
        ask.between(
            "gelu_relu_differ",
            None,
            80,
            "under 80%",
            "That would hold if GELU were ReLU but for a narrow band around zero, and many inputs "
            "lay outside it. This model's pre-activations are small, and most lie where the two "
            "curves part.",
        ),
        ask.between(
            "gelu_relu_differ",
            80,
            90,
            "80% to 90%",
            "That would hold if the two differed on every negative input and on nothing else. "
            "Neither half holds: a very negative input gives GELU within a hundredth of zero, as "
            "ReLU does, and a small positive input gives GELU less than the input ReLU passes on.",
        ),
        ask.between(
            "gelu_relu_differ",
            90,
            None,
            "90% or more",
            "They differ by more than a hundredth on {{ gelu_relu_differ }} of them: below zero, "
            "where {{ pre_negative }} of them lie, GELU is slightly negative and ReLU zero, and "
            "on small positive inputs GELU stays below the input ReLU passes on; only inputs far "
            "from zero, or very near it, escape.",
        ),
    ],
    section="Why GELU",
)

# %%
with torch.no_grad():
    pre = layer.intermediate.dense(h)[real]  # (N, 4H): pre-activations of real tokens
negative = (pre < 0).float().mean().item()
differ = ((F.gelu(pre) - F.relu(pre)).abs() > 0.01).float().mean().item()
print(
    f"layer {LAYER}: pre-activations below 0: {negative:.1%}; where GELU and ReLU differ by more "
    f"than 0.01: {differ:.1%}"
)
claims.value("gelu_layer", LAYER, "{:.0f}")
claims.value("pre_negative", 100 * negative, "{:.0f}%")
claims.value("gelu_relu_differ", 100 * differ, "{:.0f}%")
claims.claim(
    "most_pre_activations_negative", negative, ">", 0.5, "most pre-activations are negative"
)

# %% [markdown]
# {{ pre_negative }} of the pre-activations are negative {{ claim: most_pre_activations_negative }},
# where ReLU outputs 0 and GELU a small negative number, and GELU and ReLU differ by more than
# 0.01 on {{ gelu_relu_differ }} of them: that is the part of this model's inputs on which the
# swap to ReLU above acts.
#
# ## Why 4H, and back to H
#
# The FFN widens every token from $H$ to $4H$ and narrows it back to $H$. The way back is forced:
# its update $f$ is added to the stream, $h + f$, and a sum needs equal shapes (lesson 8). The
# width in between is a free choice. Vaswani et al. (2017, "Attention Is All You Need") used an
# inner width of 2048 for a model width of 512, four times as wide; Devlin et al. (2019, "BERT:
# Pre-training of Deep Bidirectional Transformers for Language Understanding") kept the factor,
# 3072 for 768; our model keeps it too (read from its config below). Four is an empirical choice
# of the Transformer paper, not a derived one, and BERT inherited it. What we can measure is how
# the trained model uses its $4H$ units, and what width buys a small network trained from scratch.
#
# **Keeping $k$ of the $4H$ units.** Zeroing the other coefficients $m_i$ before
# `output.dense` removes their value vectors from $f$. Three ways to choose which $k$ units stay
# (`bertlab.experiments.ffn_width`):
#
# - *fixed*: the same $k$ units for every token, the top $k$ by mean $|m_i|$ over the corpus
#   (chosen on the very sentences they are tested on, which can flatter them, never hurt them);
# - *random*: the same $k$ units for every token, drawn at random (seeded);
# - *per token*: each token's own top $k$ by $|m_i|$. Finding them needs all $4H$ coefficients,
#   so this saves no work; it measures how concentrated each token's use of the units is.
#
# Two measures: the relative error $\lVert f_k - f \rVert / \lVert f \rVert$ of each layer's FFN
# output, each layer fed its intact input (mean over real tokens, then over layers), and the
# cosine of the sentence embeddings to the intact model's when *every* layer keeps $k$ units.

# %%
# alt: Left: relative error of the feed-forward output against the number of units kept per layer,
#   for a fixed, a random and a per-token choice of units. Right: cosine of the sentence embeddings
#   to the intact model's against the same numbers of units.
from bertlab.experiments import ffn_width

print(f"intermediate_size / hidden_size = {I} / {H} = {I / H:g}")
KS = [I // 32, I // 16, I // 8, I // 4, I // 2, I]  # 4H/32 ... 4H; 4H/4 = H units
errors = ffn_width.truncation_errors(model, cap.batch, KS)  # {strategy: (len(KS), L)}
cosines = ffn_width.embedding_cosines(model, cap.batch, KS)  # {strategy: (len(KS), B)}
names = ffn_width.STRATEGIES
print(f"{'':>6}   {'relative error of f':^30}   {'sentence cosine to intact':^30}")
print(
    f"{'k':>6}   " + "".join(f"{s:>10}" for s in names) + "   " + "".join(f"{s:>10}" for s in names)
)
for row, k in enumerate(KS):
    print(
        f"{k:>6}   "
        + "".join(f"{errors[s][row].mean():>10.3f}" for s in names)
        + "   "
        + "".join(f"{cosines[s][row].mean():>10.3f}" for s in names)
    )

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
for s in names:
    ax1.plot(KS, errors[s].mean(1), marker="o", label=s)
    ax2.plot(KS, cosines[s].mean(1), marker="o", label=s)
for ax in (ax1, ax2):
    ax.set_xscale("log", base=2)
    ax.set_xticks(KS, [str(k) for k in KS])
    ax.set_xlabel(f"units kept per layer, k (of {I})")
    ax.axvline(H, color="gray", lw=0.8, ls="--")
ax1.set_ylabel(r"$\|f_k - f\| / \|f\|$ (mean over layers)")
ax2.set_ylabel("sentence cosine to intact")
ax1.legend(frameon=False)
ax1.set_title("one layer at a time")
ax2.set_title("every layer truncated")
fig.tight_layout()
plt.show()

# the prose below states these orderings: keep it honest
for table, falls in ((errors, True), (cosines, False)):
    for s in names:
        curve = table[s].mean(1)  # (len(KS),)
        assert bool((curve[1:] < curve[:-1]).all() if falls else (curve[1:] > curve[:-1]).all()), s
    for row in range(len(KS) - 1):
        order = [table[s][row].mean() for s in ("per-token", "fixed", "random")]
        assert (order[0] < order[1] < order[2]) if falls else (order[0] > order[1] > order[2]), KS[
            row
        ]
assert all(errors[s][-1].abs().max() < 1e-5 for s in names)  # k = 4H: every unit kept
err = {s: errors[s].mean(1) for s in names}  # (len(KS),) each: mean over layers
cos = {s: cosines[s].mean(1) for s in names}  # (len(KS),) each: mean over sentences
fall = min(err[s][0] / err[s][-2] for s in names)  # from k = 4H/32 to k = 4H/2
claims.value("error_fall_factor", math.floor(100 * float(fall)) / 100, "{:.2f}")  # "at least"
claims.claim(
    "error_falls_with_k",
    fall,
    ">",
    1,
    "for every choice the error at k = 4H/2 is below that at 4H/32",
)
claims.claim(
    "all_units_exact",
    max(errors[s][-1].abs().max() for s in names),
    "<",
    1e-5,
    "with all 4H units kept the FFN output is exact",
)
gaps_k = {  # the smallest gap over k < 4H between neighbours in the order per-token, fixed, random
    "err_pt_fixed": (err["fixed"] - err["per-token"])[:-1].min(),
    "err_fixed_random": (err["random"] - err["fixed"])[:-1].min(),
    "cos_pt_fixed": (cos["per-token"] - cos["fixed"])[:-1].min(),
    "cos_fixed_random": (cos["fixed"] - cos["random"])[:-1].min(),
}
for key, gap_k in gaps_k.items():  # printed as "at least": rounded down, digits of the table
    claims.value(f"gap_{key}", math.floor(1000 * float(gap_k)) / 1000, "{:.3f}")
claims.claim(
    "per_token_beats_fixed",
    gaps_k["err_pt_fixed"],
    ">",
    0.1,
    "at every k < 4H the per-token error is below the fixed subset's by more than 0.1",
)
claims.claim(
    "fixed_beats_random",
    gaps_k["err_fixed_random"],
    ">",
    0.05,
    "at every k < 4H the fixed subset's error is below a random subset's by more than 0.05",
)
claims.claim(
    "cosines_same_order",
    min(gaps_k["cos_pt_fixed"], gaps_k["cos_fixed_random"]),
    ">",
    0.02,
    "at every k < 4H the sentence cosines are ordered per-token > fixed > random, by more than "
    "0.02",
)
half = KS.index(I // 2)
print(
    f"per token, keeping k = {I // 2} (half the units): FFN output off by "
    f"{errors['per-token'][half].mean():.0%}, "
    f"sentence cosine {cosines['per-token'][half].mean():.3f};\nkeeping k = {H} (= H): off by "
    f"{errors['per-token'][KS.index(H)].mean():.0%}"
)

# %% [markdown]
# The error falls as $k$ grows, for every choice (from $k = 4H/32$ to $4H/2$ by a factor of at
# least {{ error_fall_factor }} {{ claim: error_falls_with_k }}), and is 0 at $k = 4H$ (all units
# kept) {{ claim: all_units_exact }}. At every smaller $k$, each token's own top $k$ leaves a
# smaller error than the fixed subset, by at least {{ gap_err_pt_fixed }}
# {{ claim: per_token_beats_fixed }}, and the fixed subset a smaller one than a random subset, by
# at least {{ gap_err_fixed_random }} {{ claim: fixed_beats_random }}; the sentence cosines come
# in the same order, by at least {{ gap_cos_pt_fixed }} and {{ gap_cos_fixed_random }}
# {{ claim: cosines_same_order }}. So tokens do use different units, but no small subset carries the
# output: even each
# token's own best half of the units leaves the error printed above. The dashed line marks
# $k = H$, as many units as an FFN that did not widen would have. This is about the *trained* model:
# a network trained at width $H$ would learn other
# units, so the truncation does not tell us what a narrower FFN could have learned.
#
# **A small training comparison.** What does the hidden width buy a network trained from scratch?
# The task needs per-token nonlinear capacity and nothing else: memorise a table of random keys
# and values ($\mathbb{R}^{16} \to \mathbb{R}^{16}$, 256 pairs, standard normal, seeded), the way
# Geva et al. picture the FFN as a memory. Four networks at the same width $H = 16$ are trained
# the same way (full-batch Adam, same steps and learning rate, two seeds): a linear map, the FFN
# with $H$ hidden units, the FFN with $4H$, and four narrow FFNs each added to a stream
# ($x \leftarrow x + \mathrm{FFN}(x)$), which together have about as many parameters as the wide
# one. The loss is the mean squared error as a fraction of the values' variance: 1 is the score
# of always answering the mean value.

# %%
trained = ffn_width.train_lookup(hidden=16, pairs=256, steps=300, seeds=(0, 1))
print(f"{'network':<30}{'parameters':>11}{'final loss':>12}   per seed")
for r in trained:
    print(
        f"{r.name:<30}{r.parameters:>11,}{r.mean_loss:>12.3f}   "
        + " ".join(f"{v:.3f}" for v in r.losses.tolist())
    )
by_name = {r.name: r for r in trained}
linear, narrow = by_name["linear H -> H"], by_name["H -> H -> H (GELU)"]
wide, deep = by_name["H -> 4H -> H (GELU)"], by_name["4 x (H -> H -> H), residual"]
# the prose below says: far better with 4H than with H hidden units; any hidden layer beats none
assert wide.mean_loss < narrow.mean_loss / 2 and narrow.mean_loss < linear.mean_loss
gap = (deep.mean_loss - wide.mean_loss) / wide.mean_loss
verdict = (
    "within 10% of each other"
    if abs(gap) < 0.1
    else "the residual stack lower"
    if gap < 0
    else "the wide FFN lower"
)
print(
    f"wide FFN vs four narrow residual FFNs ({wide.parameters:,} vs {deep.parameters:,} "
    f"parameters):\n{wide.mean_loss:.3f} vs {deep.mean_loss:.3f}, {verdict}"
)
assert abs(gap) < 0.1  # the prose below says "within 10%"
claims.value("narrow_over_wide_loss", narrow.mean_loss / wide.mean_loss, "{:.1f}")
claims.claim(
    "wide_stores_far_more",
    narrow.mean_loss,
    ">",
    2 * wide.mean_loss,
    "the FFN with 4H hidden units ends with under half the loss of the one with H",
)
claims.claim(
    "hidden_layer_beats_linear",
    1 - max(r.mean_loss for r in (narrow, wide, deep)),
    ">",
    1 - linear.mean_loss,
    "every network with a hidden layer explains more of the table than the linear map",
)
claims.value("deep_wide_gap", 100 * abs(gap), "{:.1f}%")
claims.claim(
    "deep_within_ten_percent",
    abs(gap),
    "<",
    0.1,
    "the four narrow residual FFNs end within 10% of the wide FFN's loss",
)

# %% [markdown]
# At the same stream width, the FFN with $4H$ hidden units stores the table far better than the
# one with $H$ (its loss {{ narrow_over_wide_loss }} times smaller
# {{ claim: wide_stores_far_more }}),
# and any hidden layer beats the linear map {{ claim: hidden_layer_beats_linear }} (losses above):
# the hidden units are
# where a per-token network keeps what it memorises, and widening them adds capacity without
# widening the stream that every other part of the layer reads. What this does *not* show: that
# four is the best factor (only 1 and 4 are tried); that any of it carries over to language, or
# to BERT's size; or that width beats depth: the four narrow residual FFNs, with about the same
# number of parameters, end within 10% of the wide FFN's loss ({{ deep_wide_gap }} apart
# {{ claim: deep_within_ten_percent }}, last line above). Here the
# capacity comes with the parameters, and one wide layer is one way to spend them; speed on real
# hardware, a common argument for one wide matrix product, is not measured here.
#
# %% [markdown]
# ## What we found
#
# - Attention outputs, head by head, are weighted averages of value vectors: it moves information
#   between tokens but applies no nonlinearity to a token's features.
# - The FFN is the per-token nonlinearity: it acts on each token alone, and without its GELU its
#   two matrices would be one linear map. It holds about two thirds of each layer's parameters.
# - As key-value memories: each unit matches the token against a key and adds a value vector;
#   a token activates a fraction of the units, at most {{ fire_max_mean }} on average in any layer
#   {{ claim: tokens_use_a_fraction }}.
# - The pretrained model uses the exact erf GELU; swapping in tanh GELU, ReLU or nothing moves
#   its outputs by the amounts printed above.
# - The width comes back to $H$ because the update is added to the stream; $4H$ in between is
#   the Transformer paper's empirical choice. The trained model spreads each token's output over
#   many units, and in a small trained network more hidden units store more (tables above).
#
# **Exercise:** [05-feed-forward](../exercises/05-feed-forward/05-feed-forward.ipynb): open it with
# `make lab`, then grade it with `bertlab grade 05`.
#
# ## Check yourself
#
# {{ predict: check_ffn_most_parameters }}
#
# {{ predict: check_units_kept }}
#
# {{ predict: check_no_activation }}

# %% tags=["remove-input"]
ask.check(
    "check_ffn_most_parameters",
    "Which sub-layer holds most of a layer's parameters, and by how much?",
    [
        ask.between(
            "ffn_layer_share",
            None,
            50,
            "attention: the FFN holds under half",
            "That would hold if attention's four matrices were as wide as the FFN's two. They "
            "are $H \\times H$, the FFN's $H \\times 4H$ and $4H \\times H$.",
        ),
        ask.between(
            "ffn_layer_share",
            50,
            60,
            "the FFN, by a little: half to 60%",
            "That would hold if the FFN's inner width were a little over $H$. It is $4H$: each "
            "of its two matrices holds as many weights as all four of attention's.",
        ),
        ask.between(
            "ffn_layer_share",
            60,
            None,
            "the FFN, by far: over 60%",
            "Its two matrices are $4H$ wide on one side, eight times $H^2$ against attention's "
            "four: the FFN holds {{ ffn_layer_share }} of a layer "
            "{{ claim: ffn_holds_most_of_layer }}.",
        ),
    ],
    section="Parameter share",
)
ask.check(
    "check_units_kept",
    "Keeping only some of the $4H$ units, which choice loses the least?",
    [
        ask.fails(
            "per_token_beats_fixed",
            "one fixed set of units for every token",
            "That would hold if every token used the same units. Each token uses its own.",
        ),
        ask.holds(
            "per_token_beats_fixed",
            "the units each token uses most",
            "A token uses its own few units: "
            "keeping each token's largest beats one fixed set for all {{ claim: "
            "per_token_beats_fixed }}.",
        ),
    ],
    section="Why 4H, and back to H",
)
ask.check(
    "check_no_activation",
    "Which moves the pretrained model's outputs more: ReLU in place of GELU, or "
    "no activation at all?",
    [
        ask.between(
            "none_over_relu_drift",
            None,
            0.8,
            "ReLU",
            "That would hold if GELU were close to linear on this model's inputs. It is not: it "
            "switches most units off.",
        ),
        ask.between(
            "none_over_relu_drift",
            1.25,
            None,
            "no activation at all",
            "Without a nonlinearity the two matrices collapse into one linear map: that moves "
            "the outputs {{ none_over_relu_drift }} times as far as ReLU does "
            "{{ claim: relu_moves_less_than_none }}.",
        ),
        ask.between(
            "none_over_relu_drift",
            0.8,
            1.25,
            "about the same, within a quarter",
            "That would hold if ReLU were as far from GELU as the identity is. ReLU keeps GELU's "
            "switch: it zeroes what GELU all but zeroes.",
        ),
    ],
    section="Exact GELU",
)

# %% tags=["remove-input"]
claims.publish()  # the numbers and claims above, for the build that renders this page
