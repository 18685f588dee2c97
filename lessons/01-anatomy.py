# %% [markdown]
# # Lesson 1: Anatomy of a pretrained BERT
#
# **Question.** `model.named_parameters()` of the course's BERT lists every tensor of the model
# under a name such as `encoder.layer.0.intermediate.dense.weight`. Which part of the
# architecture is each tensor, and what is `intermediate.dense`, the matrix that sits between the
# attention and `output.dense`?
#
# We answer with the pretrained model this course grades against, all-MiniLM-L6-v2: a small
# BERT that Hugging Face loads as the same `BertModel` class as BERT-base, with fewer
# {{ claim: minilm_fewer_layers }} and narrower {{ claim: minilm_narrower }} layers. Every
# number below is printed by the code that computes it, and every number on this site is
# measured on all-MiniLM-L6-v2 unless the page says otherwise. The letters of the equations
# ($x$, $a$, $h$, $m$, $f$, $y$, $W^Q$, ..., $W_1$, $W_2$) are defined once, on the
# [notation page](../docs/notation.md), which also explains why an equation's $W$ is the
# transpose of an `nn.Linear`'s `weight`.
#
# **The check marks.** A ✓ after a sentence, like the two above, means the site checked that
# sentence: it compares two numbers the lesson's code measures, and the build that made this page
# found the comparison true on your machine. The build refuses to publish a sentence its numbers
# contradict. Pointing at a mark shows the two numbers. The calls that record them run with the
# code but are not shown in it, so the code you read and copy is the experiment alone.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel
from transformers.models.bert.modeling_bert import BertLayer

from bertlab.capture import capture
from bertlab.experiments import claims
from bertlab.experiments.census import GROUPS, census, ffn_share, locate
from bertlab.reference import load_model

model = load_model()  # pretrained all-MiniLM-L6-v2, eval mode, frozen
config = model.config
H, A, L, I = (
    config.hidden_size,
    config.num_attention_heads,
    config.num_hidden_layers,
    config.intermediate_size,
)
print(
    f"hidden size H = {H}, heads = {A} (head size {H // A}), layers = {L}, intermediate size = {I} "
    f"= {I / H:g} H"
)
print(
    f"activation: {config.hidden_act!r}, vocabulary: {config.vocab_size}, positions: "
    f"{config.max_position_embeddings}"
)

# %% [markdown]
# ## The reference model next to bert-base
#
# Write-ups about BERT usually quote bert-base's sizes, those of Devlin et al. (2019).
# `BertConfig()`'s defaults are bert-base's
# (uncased) sizes, so both configurations are available offline: the bundled model's, read by
# `bertlab.reference`, and the defaults. One layer of each is built with `BertLayer(config)` and
# its parameters are counted:


# %%
def sizes(cfg):
    """The architecture constants of a config and the parameter count of one of its layers."""
    return {
        "hidden size H": cfg.hidden_size,
        "heads A": cfg.num_attention_heads,
        "head size d = H / A": cfg.hidden_size // cfg.num_attention_heads,
        "FFN width (intermediate size)": cfg.intermediate_size,
        "layers L": cfg.num_hidden_layers,
        "parameters per layer": sum(p.numel() for p in BertLayer(cfg).parameters()),
    }


columns = {"all-MiniLM-L6-v2": sizes(config), "bert-base (BertConfig())": sizes(BertConfig())}
print(f"{'':<31}" + "".join(f"{name:>26}" for name in columns))
for row in columns["all-MiniLM-L6-v2"]:
    print(f"{row:<31}" + "".join(f"{col[row]:>26,}" for col in columns.values()))
# the sizes other pages (the FAQ) quote: read from the configs, never typed
for prefix, cfg in (("", config), ("base_", BertConfig())):
    for key, number in (
        ("H", cfg.hidden_size),
        ("A", cfg.num_attention_heads),
        ("L", cfg.num_hidden_layers),
        ("I", cfg.intermediate_size),
        ("d", cfg.hidden_size // cfg.num_attention_heads),
    ):
        claims.value(prefix + key, number, "{:.0f}")
base_config = BertConfig()
claims.claim(
    "minilm_fewer_layers",
    config.num_hidden_layers,
    "<",
    base_config.num_hidden_layers,
    "all-MiniLM-L6-v2 has fewer layers than BERT-base",
)
claims.claim(
    "minilm_narrower",
    config.hidden_size,
    "<",
    base_config.hidden_size,
    "all-MiniLM-L6-v2's layers are narrower than BERT-base's",
)

# %% [markdown]
# ## The layer in the papers
#
# BERT (Devlin, Chang, Lee & Toutanova 2019, "BERT: Pre-training of Deep Bidirectional
# Transformers for Language Understanding", NAACL) is the encoder of the Transformer
# (Vaswani et al. 2017, "Attention Is All You Need", NeurIPS) stacked $L$ times. Each layer has
# two sub-layers, multi-head self-attention and a position-wise feed-forward network (FFN), and
# Vaswani et al. close each sub-layer with a residual connection and a layer normalisation:
#
# $$\text{output} = \mathrm{LayerNorm}\big(x + \mathrm{Sublayer}(x)\big).$$
#
# The FFN is Vaswani et al.'s equation (2), two linear maps with a nonlinearity between them,
# applied to every position separately:
#
# $$\mathrm{FFN}(h) = \max(0,\, hW_1 + b_1)\,W_2 + b_2, \qquad W_1 \in \mathbb{R}^{H \times 4H},\
# W_2 \in \mathbb{R}^{4H \times H},$$
#
# with $h$ the token vector the FFN receives (the output of the first Add & Norm) and an inner
# size of $2048 = 4 \times 512$ in their base model, four times its width. Devlin et al. keep the
# inner size at $4H$ and replace the ReLU $\max(0,\cdot)$ by GELU.
#
# In Hugging Face's code every box of the layer diagram below is a small module, and a parameter's
# name is the path to its module. A module can hold several tensors. Before the library prints
# one layer's modules:
#
# {{ predict: tensors_per_layer }}

# %% tags=["remove-input"]
# A question before the layer's modules and the census: the build selects its answer from the
# number recorded below.
from bertlab.experiments import predictions as ask

ask.predict(
    "tensors_per_layer",
    "How many named tensors does one layer hold?",
    [
        ask.between(
            "tensors_per_layer",
            20,
            None,
            "24 or more",
            "That would hold if every head had its own "
            "query, key and value tensors. The heads' matrices are stacked into one `Linear` each.",
        ),
        ask.between(
            "tensors_per_layer",
            14,
            20,
            "16",
            "{{ tensors_per_layer }}: query, key, value, $W^O$, "
            "$W_1$ and $W_2$ each have a weight and a bias, and the two LayerNorms a gain and a "
            "shift each.",
        ),
        ask.between(
            "tensors_per_layer",
            9,
            14,
            "12",
            "Counting only the weights of attention and the FFN, "
            "with their biases, leaves out the two LayerNorms, a gain and a shift each.",
        ),
        ask.between(
            "tensors_per_layer",
            None,
            9,
            "6",
            "One tensor per box of the diagram: that would "
            "hold if a `Linear` were one tensor and a LayerNorm one. Each `Linear` has a weight "
            "and a bias, each LayerNorm a gain and a shift.",
        ),
    ],
    section="Every tensor, mapped",
)

# %% [markdown]
# One layer, as the library builds it:

# %%
print(model.encoder.layer[0])

# %% [markdown]
# Read it in forward order, as the diagram draws it:
#
# ![BertLayer](../docs/assets/bertlayer.svg)
#
# The GELU is a module without parameters (`intermediate_act_fn`), so it never shows up in
# `named_parameters()`: the list jumps from `intermediate.dense` straight to `output.dense`.
# The same goes for the residual additions and the dropouts.
#
# ## Every tensor, mapped
#
# `locate` (in `bertlab.experiments.census`) maps a parameter name onto one of six parts and
# refuses any name it cannot place. The embeddings, the first layer and the pooler, which reads
# one token of the last layer's output, `[CLS]`: the special token the tokenizer puts first in
# every input ([lesson 2](02-embeddings.py#from-text-to-ids) prints one):

# %%
ROLE = {
    ("embeddings", "word_embeddings.weight"): "one row per vocabulary entry",
    ("embeddings", "position_embeddings.weight"): "one row per position",
    ("embeddings", "token_type_embeddings.weight"): "one row per segment (sentence A / B)",
    ("embeddings", "LayerNorm.weight"): "gain of the embedding LayerNorm",
    ("embeddings", "LayerNorm.bias"): "shift of the embedding LayerNorm",
    ("attention.self", "query.weight"): "W^Q transposed: every head's W^Q_i",
    ("attention.self", "key.weight"): "W^K transposed: every head's W^K_i",
    ("attention.self", "value.weight"): "W^V transposed: every head's W^V_i",
    ("attention.output", "dense.weight"): "W^O transposed: sums the heads",
    ("attention.output", "LayerNorm.weight"): "gamma of LN_1, the 1st Add & Norm",
    ("attention.output", "LayerNorm.bias"): "beta of LN_1",
    ("intermediate", "dense.weight"): "W_1 transposed: H -> 4H, GELU follows",
    ("output", "dense.weight"): "W_2 transposed: 4H -> H",
    ("output", "LayerNorm.weight"): "gamma of LN_2, the 2nd Add & Norm",
    ("output", "LayerNorm.bias"): "beta of LN_2",
    ("pooler", "dense.weight"): "tanh(dense(x_L at [CLS]))",
}

print(f"{'name':<50}{'shape':<13}role")
part = None
for name, p in model.named_parameters():
    where = locate(name)
    if where.layer not in (None, 0):
        continue
    if where.part != part:  # the part of the model, a heading over its tensors
        part = where.part
        print(f"-- {part}")
    role = ROLE.get(
        (where.part, where.piece), "bias of the line above" if where.piece.endswith("bias") else ""
    )
    print(f"{name:<50}{tuple(p.shape)!s:<13}{role}")

# %% [markdown]
# `nn.Linear` stores its weight as (out features, in features) and computes
# `x @ weight.T + bias`, so `intermediate.dense.weight` of shape $(4H, H)$ is $W_1^\top$: column
# $i$ of $W_1$ is row $i$ of `intermediate.dense.weight` (the
# [notation page](../docs/notation.md) lists every such pair).
#
# The other layers repeat the first layer's names with another index. The census below places
# all of the model's tensors and counts them per layer:

# %%
names = [name for name, _ in model.named_parameters()]
places = [locate(name) for name in names]  # raises on any name it cannot place
per_layer = {i: sum(w.layer == i for w in places) for i in range(L)}
outside = sum(w.layer is None for w in places)
print(
    f"{len(names)} named tensors: {outside} outside the layers + {L} layers x {per_layer[0]} "
    f"(per layer: {sorted(set(per_layer.values()))})"
)
assert len(names) == outside + sum(per_layer.values())

# %% tags=["remove-input"]
claims.value("named_tensors", len(names), "{:.0f}")
_ = claims.value("tensors_per_layer", per_layer[0], "{:.0f}")  # answers the question above

# %% [markdown]
# ## What `intermediate.dense` is
#
# If `intermediate.dense` is the FFN's $W_1$ and GELU follows it, then
# $m = \mathrm{GELU}(hW_1 + b_1)$ computed by hand must reproduce what the pretrained
# `intermediate` module returned on real text. `capture()` records, for every layer, the input
# and output of each sub-module while the model reads the course corpus. A float32 number is
# exact to within a rounding step, the gap between two neighbouring float32 numbers of its size
# (about `torch.finfo(torch.float32).eps` times it), and a product computed by hand may sum in
# another order than the library's: the code prints each difference in such steps.

# %%
cap = capture()
h = cap.layer(0, "intermediate").args[0]  # (B, T, H): the first Add & Norm's output
m = cap.layer(0, "intermediate").output  # (B, T, 4H): recorded, after GELU
dense = model.encoder.layer[0].intermediate.dense
by_hand = F.gelu(h @ dense.weight.T + dense.bias)  # (B, T, H) @ (H, 4H) -> (B, T, 4H)
print(f"input {tuple(h.shape)} -> intermediate {tuple(m.shape)}")

# the next module, `output`, takes those 4H features back to H, then adds and normalises
w2 = model.encoder.layer[0].output.dense
f = m @ w2.weight.T + w2.bias  # (B, T, 4H) @ (4H, H) -> (B, T, H)
ln = model.encoder.layer[0].output.LayerNorm
comparisons = {
    "GELU(h W_1 + b_1) vs the recorded intermediate output m": (by_hand, m),
    "LN_2(h + m W_2 + b_2) vs hidden_states[1]": (
        ln(h + f),
        cap.hidden_states[1],
    ),
}
eps32 = torch.finfo(torch.float32).eps
for label, (ours, theirs) in comparisons.items():
    diff = (ours - theirs).abs().max().item()
    # a float32 rounding step at the size of the largest value compared
    step = eps32 * theirs.abs().max().item()
    verdict = "exactly zero" if diff == 0 else f"{diff / step:.1f} float32 rounding steps"
    assert diff <= 64 * step  # the prose below says "a few rounding steps at most"
    print(f"{label}: max abs diff {diff:.1e} ({verdict})")

# %% [markdown]
# Each difference is either exactly zero or a few float32 rounding steps at the size of the values
# compared: `intermediate.dense` followed by GELU is the first half of the FFN, `output.dense` is
# the second half, and `output.LayerNorm` closes the layer's second Add & Norm. The two modules are
# named after what they return, not after what they compute: `intermediate` returns the FFN's
# intermediate (hidden) layer, the $4H$-wide $m$ between the two matrices, and `output` returns the
# layer's output $y$.
#
# ## Parameter census
#
# How are the parameters spread over the parts?
#
# {{ predict: ffn_share_of_layer }}

# %% tags=["remove-input"]
claims.value("ffn_share_of_layer", ffn_share(model), "{:.1%}")  # measured by the census below
ask.predict(
    "ffn_share_of_layer",
    "What share of one layer's parameters is the feed-forward network "
    "(`intermediate` and `output`)?",
    [
        ask.between(
            "ffn_share_of_layer",
            None,
            0.45,
            "about a third (below 0.45)",
            "That would hold if the "
            "attention, with its query, key, value and $W^O$, were the heavy part. Those are four "
            "$H \\times H$ matrices; the FFN's two matrices are $H \\times 4H$ and $4H \\times H$.",
        ),
        ask.between(
            "ffn_share_of_layer",
            0.45,
            0.6,
            "about a half (0.45 to 0.6)",
            "That would hold if the "
            "FFN's matrices were as large as attention's. Each is $4H$ wide on one side: two of "
            "them "
            "hold twice the entries of attention's four $H \\times H$ matrices.",
        ),
        ask.between(
            "ffn_share_of_layer",
            0.6,
            0.7,
            "about two thirds (0.6 to 0.7)",
            "The FFN holds "
            "{{ ffn_share_of_layer }} of a layer of all-MiniLM-L6-v2: its two matrices have $8H^2$ "
            "entries, attention's four have $4H^2$.",
        ),
        ask.between(
            "ffn_share_of_layer",
            0.7,
            None,
            "more than 0.7",
            "That would hold if the FFN were "
            "wider than $4H$, or attention narrower than its four $H \\times H$ matrices.",
        ),
    ],
    section="Parameter census",
)


# %%
def show_census(m, title):
    """Print parameters per part and per group with their share of the total."""
    parts, groups = census(m), census(m, by="group")
    total = sum(parts.values())
    print(f"{title}: {len(list(m.named_parameters()))} named tensors, {total:,} parameters")
    for key, n in [*parts.items(), ("---", None), *groups.items()]:
        if n is None:
            print("  " + "-" * 42)
            continue
        print(f"  {key:<18} {n:>12,}  {n / total:6.1%}")
    return groups


minilm = show_census(model, "pretrained all-MiniLM-L6-v2")

# %% [markdown]
# Devlin et al. report 110 M parameters for BERT-base ($L=12$, $H=768$, 12 heads). Its
# configuration is the default of `BertConfig`, so we can build BERT-base locally, without
# downloading anything, and count. A count needs the shapes alone, so the model is built on
# PyTorch's `meta` device, whose tensors have a shape and no values: no weights are drawn or stored.

# %%
with torch.device("meta"):
    base = BertModel(BertConfig())  # BERT-base's 110 M parameters as shapes, no memory behind them
base_groups = show_census(base, "BertModel(BertConfig()), BERT-base")

# %% [markdown]
# ## One layer counted by hand
#
# Count one layer by hand. The attention block, the sub-layer with its Add & Norm, has four
# $H \times H$ matrices with biases (query, key, value, $W^O$) and one LayerNorm (gain and shift):
# $4H^2 + 6H$. The feed-forward block has $W_1$ ($H \times 4H$, bias $4H$), $W_2$ ($4H \times H$,
# bias $H$) and one LayerNorm: $8H^2 + 7H$. The FFN's share of a layer,
# $(8H^2 + 7H) / (12H^2 + 13H)$, is just below $2/3$ for every $H$
# {{ claim: ffn_share_below_two_thirds }} and tends to $2/3$ as $H$ grows
# {{ claim: ffn_share_nearer_two_thirds_when_wider }}. The code checks the formula against the
# counted parameters of both models:

# %%
for label, m in [("all-MiniLM-L6-v2", model), ("BERT-base", base)]:
    h = m.config.hidden_size
    assert m.config.intermediate_size == 4 * h
    layer = census(m, by="group", layer=0)
    assert layer["attention"] == 4 * h * h + 6 * h and layer["feed-forward"] == 8 * h * h + 7 * h
    print(
        f"{label:<17} H={h:<4} attention {layer['attention']:>9,}  FFN "
        f"{layer['feed-forward']:>9,}  "
        f"FFN share of a layer {ffn_share(m):.4f}"
    )
print(f"limit 2/3 = {2 / 3:.4f}")
# the shares differ from 2/3 in the fourth digit: the claims compare the gaps to 2/3, not the shares
gap = {
    label: 2 / 3 - ffn_share(m) for label, m in [("all-MiniLM-L6-v2", model), ("BERT-base", base)]
}
print("gap to 2/3: " + ", ".join(f"{label} {g:.1e}" for label, g in gap.items()))
claims.claim(
    "ffn_share_below_two_thirds",
    -min(gap.values()),
    "<",
    0,
    "in both models the FFN's share of a layer is below 2/3",
)
claims.claim(
    "ffn_share_nearer_two_thirds_when_wider",
    gap["BERT-base"],
    "<",
    gap["all-MiniLM-L6-v2"],
    "the wider BERT-base's share is nearer 2/3 than all-MiniLM-L6-v2's",
)

# %%
# alt: Two horizontal stacked bars, all-MiniLM-L6-v2 and BERT-base, each splitting all the model's
#   parameters into the shares of the embeddings, attention, feed-forward and pooler, labelled in
#   percent.
fig, ax = plt.subplots(figsize=(8, 2.4))
colors = {
    "embeddings": "#9aa5b1",
    "attention": "#4c78a8",
    "feed-forward": "#f58518",
    "pooler": "#54a24b",
}
for row, (_label, groups) in enumerate([("all-MiniLM-L6-v2", minilm), ("BERT-base", base_groups)]):
    total, left = sum(groups.values()), 0.0
    for g in GROUPS:
        share = groups[g] / total
        ax.barh(row, share, left=left, color=colors[g], label=g if row == 0 else None)
        if share > 0.04:
            ax.text(left + share / 2, row, f"{share:.0%}", ha="center", va="center", color="white")
        left += share
ax.set_yticks([0, 1], ["all-MiniLM-L6-v2", "BERT-base"])
ax.set_xlim(0, 1)
ax.set_xlabel("share of all parameters")
ax.legend(ncol=4, loc="upper center", bbox_to_anchor=(0.5, 1.35), frameon=False)
fig.tight_layout()
plt.show()
embedding_share = {
    label: groups["embeddings"] / sum(groups.values())
    for label, groups in (("all-MiniLM-L6-v2", minilm), ("BERT-base", base_groups))
}
claims.claim(
    "embeddings_larger_share_when_narrow",
    embedding_share["all-MiniLM-L6-v2"],
    ">",
    embedding_share["BERT-base"],
    "the embeddings take a larger share of all-MiniLM-L6-v2 than of BERT-base",
)

# %% [markdown]
# Inside the layers the FFN always holds just under two thirds. Across the whole model the
# picture depends on width: the word-embedding table has one row of $H$ numbers per vocabulary
# entry (`config.vocab_size` rows, printed at the top) and grows linearly in $H$ while the layers
# grow quadratically, so in the narrow all-MiniLM-L6-v2 the embeddings take a
# much larger share than in BERT-base, {{ embedding_share_minilm }} against
# {{ embedding_share_base }} {{ claim: embeddings_larger_share_when_narrow }} (compare the two
# bars).
#
# ## What we found
#
# - Every named tensor belongs to one of six parts: the embeddings, then per layer
#   `attention.self` (query, key, value of all heads), `attention.output` ($W^O$ and the first
#   Add & Norm's LayerNorm), `intermediate` ($W_1$), `output` ($W_2$ and the second Add & Norm's
#   LayerNorm), and the pooler.
# - `intermediate.dense` is the first matrix of the feed-forward network, $H \to 4H$; GELU
#   follows it without a parameter of its own, and `output.dense` brings the $4H$ features back
#   to $H$. Recomputing it by hand reproduced the pretrained module.
# - The FFN is just under two thirds of every layer's parameters; the count of
#   `BertModel(BertConfig())` reproduces Devlin et al.'s 110 M (printed above).
#
# Lesson 2 starts at the bottom of the stack, with the embeddings. Lesson 1 has no exercise of
# its own: the layer in numpy, [01-numpy-bert](../exercises/01-numpy-bert/01-numpy-bert.ipynb),
# needs the attention, the Add & Norms, GELU and LayerNorm, so it comes after lesson 6.
#
# ## Check yourself
#
# {{ predict: check_ffn_below_two_thirds }}
#
# {{ predict: check_ffn_share_with_width }}
#
# {{ predict: check_embedding_share }}

# %% tags=["remove-input"]
shares = {
    label: groups["embeddings"] / sum(groups.values())
    for label, groups in (("minilm", minilm), ("base", base_groups))
}
claims.value("embedding_share_minilm", shares["minilm"], "{:.1%}")
claims.value("embedding_share_base", shares["base"], "{:.1%}")
ask.check(
    "check_ffn_below_two_thirds",
    "Compared with two thirds, the FFN's share of a layer is:",
    [
        ask.fails(
            "ffn_share_below_two_thirds",
            "just above two thirds",
            "That would hold if the FFN's biases and LayerNorm weighed more, next to its "
            "matrices, than attention's do next to its own. Attention adds $6H$ to $4H^2$, the "
            "FFN $7H$ to $8H^2$: relative to its size, attention's small terms weigh more.",
        ),
        ask.holds(
            "ffn_share_below_two_thirds",
            "just below two thirds",
            "Attention's LayerNorm and biases add $6H$ to its "
            "$4H^2$ weights, the FFN's add $7H$ to its $8H^2$: the small terms tip the ratio just "
            "under "
            "two thirds, {{ ffn_share_of_layer }} in all-MiniLM-L6-v2.",
        ),
    ],
    section="One layer counted by hand",
)
ask.check(
    "check_ffn_share_with_width",
    "Whose layer has its FFN share nearer two thirds?",
    [
        ask.holds(
            "ffn_share_nearer_two_thirds_when_wider",
            "BERT-base's (H = 768)",
            "The terms in $H$ shrink "
            "next to those in $H^2$ as $H$ grows, so the wider model is nearer the limit.",
        ),
        ask.fails(
            "ffn_share_nearer_two_thirds_when_wider",
            "all-MiniLM-L6-v2's (H = 384)",
            "That would hold if "
            "the biases and LayerNorms grew as fast as the matrices. They grow with $H$, the "
            "matrices "
            "with $H^2$.",
        ),
    ],
    section="One layer counted by hand",
)
ask.check(
    "check_embedding_share",
    "In which model do the embeddings take the larger share of all parameters?",
    [
        ask.fails(
            "embeddings_larger_share_when_narrow",
            "BERT-base",
            "That would hold if the embeddings grew "
            "as fast as the layers with the width. The table has one row of $H$ numbers per "
            "vocabulary entry: it grows with $H$, the layers with $H^2$.",
        ),
        ask.holds(
            "embeddings_larger_share_when_narrow",
            "all-MiniLM-L6-v2",
            "The word-embedding table grows "
            "with $H$, the layers with $H^2$: in the narrow model the table weighs more, "
            "{{ embedding_share_minilm }} of the model against {{ embedding_share_base }} in "
            "BERT-base.",
        ),
    ],
    section="One layer counted by hand",
)

# %% tags=["remove-input"]
claims.publish()  # the numbers above, for the build that renders this page
