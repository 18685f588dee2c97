# %% [markdown]
# # Lesson 3: Multi-head attention is one matrix
#
# **Question.** The model has 12 attention heads per layer, yet `named_parameters()` shows a
# single `query`, a single `key` and a single `value` matrix per layer, each $H \times H$. Where
# are the heads, and why store them this way?
#
# ## The equations
#
# Vaswani et al. (2017, "Attention Is All You Need", NeurIPS, Section 3.2) define scaled
# dot-product attention (their equation 1) and multi-head attention as
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V,$$
#
# $$\mathrm{MultiHead}(X) = \mathrm{Concat}(\mathrm{head}_0, \dots, \mathrm{head}_{A-1})\,W^O,
# \qquad \mathrm{head}_i = \mathrm{Attention}(XW_i^Q,\ XW_i^K,\ XW_i^V),$$
#
# with $A$ heads (Vaswani et al. call their number $h$ and the head size $d_k$), $X$ the
# $T \times H$ matrix of one sentence's token vectors,
# $W_i^Q, W_i^K, W_i^V \in \mathbb{R}^{H \times d}$, $d = H/A$, and
# $W^O \in \mathbb{R}^{Ad \times H}$ (the letters are those of the
# [notation page](../docs/notation.md); biases left out). Because each head works in $d = H/A$
# dimensions, they note that all heads together cost about as much as one head of full width.
# BERT (Devlin et al. 2019,
# "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding", NAACL)
# uses this block unchanged, with $X$ the same sequence for queries, keys and values
# (self-attention).
#
# The short answer to the question: the 12 matrices $W_i^Q$ of shape $H \times d$, placed side
# by side, *are* one $H \times H$ matrix. Hugging Face stores that concatenation. The rest of
# the lesson takes one pretrained layer apart and checks each step against it.

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from bertlab.capture import capture
from bertlab.experiments import claims, products
from bertlab.experiments.heads import median_times, ov_circuits, projection_variants
from bertlab.experiments.layernorm_eps import float32_step
from bertlab.masks import additive_mask
from bertlab.reference import load_model, load_tokenizer

model, tokenizer = load_model(), load_tokenizer()
cap = capture()  # one recorded forward pass over the course corpus
LAYER = 2  # any layer works the same way
# BertAttention: .self (Q, K, V) and .output (W^O, Add & Norm)
attn = model.encoder.layer[LAYER].attention
sa = attn.self
call = cap.layer(LAYER, "attention.self")
x = call.args[0]  # (B, T, H): what this layer's attention received
mask = call.kwargs["attention_mask"]  # (B, 1, T, T): the additive mask the model passed in
pad = cap.batch["attention_mask"]  # (B, T): 1 for real tokens, 0 for padding
B, T, H = x.shape
A, d = sa.num_attention_heads, sa.attention_head_size
print(
    f"layer {LAYER}: x {tuple(x.shape)}, heads A={A}, head size d={d}, query.weight "
    f"{tuple(sa.query.weight.shape)}"
)

# %% [markdown]
# ## Splitting into heads
#
# One product gives the queries of all heads at once, shape (B, T, H). Head $i$ owns features
# $i\,d$ to $(i+1)\,d - 1$: `view(B, T, A, d)` cuts each token's $H$ features into $A$ chunks of
# $d$, and `transpose(1, 2)` moves the head axis in front of the tokens, giving (B, A, T, d), so
# that a batched matrix product handles every (sentence, head) pair at once.
#
# Slicing rows $i\,d \dots (i+1)\,d-1$ out of `query.weight` gives head $i$'s own
# $W_i^Q$ (transposed, as `nn.Linear` stores (out, in)), and using it alone reproduces that
# head's slice of the big product:


# %%
def split_heads(t):  # (B, T, H) -> (B, A, T, d)
    return t.view(B, T, A, d).transpose(1, 2)


with torch.no_grad():
    # (B, A, T, d) each
    q, k, v = (split_heads(sa.query(x)), split_heads(sa.key(x)), split_heads(sa.value(x)))

i = 5
rows = slice(i * d, (i + 1) * d)
q_i = x @ sa.query.weight[rows].T + sa.query.bias[rows]  # (B, T, H) @ (H, d) -> (B, T, d)
print(
    f"head {i} from its own {d} rows of query.weight vs q[:, {i}]: max abs diff "
    f"{(q_i - q[:, i]).abs().max().item():.1e}"
)

wrong = sa.query(x).reshape(B, A, T, d)  # reinterprets memory: no head axis is cut out of H
print(
    "reshape(B, A, T, d) without the transpose vs q: max abs diff "
    f"{(wrong - q).abs().max().item():.1e}"
)

# %% [markdown]
# The second line shows the classic mistake: `reshape(B, A, T, d)` runs without error, but since
# memory holds the $H$ features of token 0, then of token 1, and so on, it fills "head 0" with
# features of several tokens.
#
# ## Scaled scores
#
# {{ predict: unscaled_attention }}
#
# Each head compares every query with every key: $S = QK^\top/\sqrt{d}$, shape (B, A, T, T).
# Vaswani et al. motivate the $1/\sqrt{d}$: if the components of $q$ and $k$ are independent with
# mean 0 and variance 1, then $q \cdot k$ has variance $d$, and large scores push the softmax into
# regions where it is nearly one-hot and its gradients vanish. A quick check with random vectors,
# then the effect on the pretrained layer, measured by the entropy of each query's attention
# distribution (lower = more peaked): the unscaled scores give the more peaked rows
# {{ claim: unscaled_rows_more_peaked }}.

# %%
g = torch.Generator().manual_seed(0)
qr, kr = torch.randn(100_000, d, generator=g), torch.randn(100_000, d, generator=g)
print(
    f"random q, k with d={d}: std of q.k = {(qr * kr).sum(-1).std():.2f} (sqrt(d) = {d**0.5:.2f}); "
    f"after scaling: {((qr * kr).sum(-1) / d**0.5).std():.2f}"
)

raw = q @ k.transpose(-1, -2)  # (B, A, T, d) @ (B, A, d, T) -> (B, A, T, T)
scores = raw * sa.scaling  # sa.scaling = d ** -0.5
print(f"scaling = {sa.scaling:.4f} = 1/sqrt({d})")


def mean_entropy(s):
    """Mean entropy (nats) of the attention rows of real query tokens, padding masked out."""
    p = torch.softmax(s + mask, dim=-1)  # (B, A, T, T)
    ent = -(p * torch.log(p.clamp_min(1e-30))).sum(-1)  # (B, A, T)
    return ent[pad[:, None, :].expand(B, A, T).bool()].mean().item()


print(
    f"mean attention entropy with scaling {mean_entropy(scores):.3f} nats, without "
    f"{mean_entropy(raw):.3f} nats\n"
    f"(uniform over the mean sentence length: {torch.log(pad.sum(1).float()).mean():.3f})"
)
claims.claim(
    "unscaled_rows_more_peaked",
    mean_entropy(raw),
    "<",
    mean_entropy(scores),
    "without the 1/sqrt(d) scaling the pretrained layer's attention rows have a lower mean entropy",
)

# %% [markdown]
# ## The additive mask
#
# Padding tokens must receive zero attention. From the (B, T) 0/1 `attention_mask`, the model
# makes an **additive float** mask: 0 where a key is a real token, `torch.finfo(torch.float32).min`
# where it is padding. For one sentence that is one row over the keys,
#
# ```python
# (1 - m[:, None, None, :].float()) * torch.finfo(torch.float32).min   # (B, 1, 1, T)
# ```
#
# and in transformers 5 the eager attention path (the library's plain PyTorch attention,
# `eager_attention_forward`, which computes the scores, the softmax and the weighted sum one step
# at a time, as opposed to a fused kernel, one compiled routine doing all three in a single call,
# such as PyTorch's `scaled_dot_product_attention`)
# receives that row repeated for every query,
# (B, 1, T, T) (the next section shows which function builds it). It is added to the scores
# before the softmax, so $e^{\text{score} + \text{min}}$ underflows to exactly 0.
# `bertlab.masks.additive_mask` builds the same (B, 1, T, T) tensor:

# %%
ours = additive_mask(pad)  # (B, 1, T, T)
print(f"additive_mask(attention_mask) equals the mask the model passed: {torch.equal(ours, mask)}")
probs = torch.softmax(scores + mask, dim=-1)  # (B, A, T, T)
on_padding = probs * (1 - pad)[:, None, None, :]  # probability that lands on padding keys
print(f"largest probability on a padding key: {on_padding.max().item():.1e}")

# %% [markdown]
# ### The mask's shape on its way to the scores
#
# Exercise 06 builds the mask as (B, 1, 1, T), one row per sentence; the model passed the
# layers the (B, 1, T, T) printed below. Which one does this version of transformers use, and
# does it matter? `BertModel.forward` hands the (B, T) `attention_mask` to
# `masking_utils.create_bidirectional_mask`, which for eager attention returns one row *per
# query*, (B, 1, T, T): the same function builds causal masks, where each query row differs.
# A padding mask depends only on the key, so all $T$ rows of a sentence are the same, and
# broadcasting does the rest: added to the (B, A, T, T) scores, a (B, 1, 1, T) mask is copied
# over the heads and the queries, a (B, 1, T, T) one over the heads only, and the sums are equal
# bit for bit {{ claim: mask_shapes_add_alike }}:

# %%
import transformers
from transformers.models.bert import modeling_bert

row_mask = (1 - pad[:, None, None, :].float()) * torch.finfo(torch.float32).min  # (B, 1, 1, T)
# entries where a query row differs from row 0
rows_differ = (mask != mask[:, :, :1, :]).sum().item()
shape_gap = (scores + row_mask - (scores + mask)).abs().max().item()
claims.value("transformers_version", transformers.__version__)
claims.value("mask_shape", str(tuple(mask.shape)))
claims.value("mask_rows_differ", rows_differ, "{:.0f}")
claims.claim(
    "mask_rows_alike", rows_differ, "==", 0, "every query row of the (B, 1, T, T) mask is the same"
)
claims.claim(
    "mask_shapes_add_alike",
    shape_gap,
    "==",
    0,
    "scores + a (B, 1, 1, T) mask equal scores + the (B, 1, T, T) one",
)
builder = "create_bidirectional_mask"
if not hasattr(modeling_bert, builder):
    builder = "(another function)"
print(
    f"transformers {transformers.__version__}: BertModel builds its mask with {builder};\n"
    f"layer {LAYER} received {tuple(mask.shape)}"
)
print(
    f"entries where a query row differs from the first: {rows_differ};\n"
    f"scores + (B, 1, 1, T) mask vs scores + (B, 1, T, T) mask: max abs diff {shape_gap}"
)

# %% [markdown]
# In transformers {{ transformers_version }} the layers receive a mask of shape
# {{ mask_shape }}, whose query rows differ in {{ mask_rows_differ }} entries
# {{ claim: mask_rows_alike }}, and the two shapes give the same sums
# {{ claim: mask_shapes_add_alike }}. The (B, 1, 1, T) form is what
# `get_extended_attention_mask` returned in transformers 4 (transformers 5 no longer has that
# method); it holds one row of $T$ numbers per sentence instead of $T$ rows and says the same,
# which is why the exercises build it.

# %% [markdown]
# ### Adding a bool mask
#
# The tempting shortcut, adding a **bool** mask, raises no error: PyTorch promotes `True` to 1
# and `False` to 0. Real keys get $+1$ and padding keys $+0$, which for the softmax is the same
# as lowering padding by just 1 instead of removing it: each padding key keeps its weight divided
# by $e$:
#
# {{ predict: bool_mask_padding }}

# %% tags=["remove-input"]
# A question before the measurement below; the build selects its answer from the share measured
# there (recorded at the end of the lesson).
from bertlab.experiments import predictions as ask

ask.predict(
    "bool_mask_padding",
    "With the bool mask added, what share of a real query's attention goes to "
    "the padding keys, on average over the padded sentences?",
    [
        ask.between(
            "bool_padding_percent",
            30,
            None,
            "30% or more",
            "That would hold if padding were not "
            "lowered at all. Real keys get one more than padding keys, which divides padding's "
            "weight "
            "by $e$.",
        ),
        ask.between(
            "bool_padding_percent",
            5,
            30,
            "5% to 30%",
            "Padding keeps {{ bool_padding_share }} of the "
            "attention: each padding key keeps its weight divided by $e$, and the padded sentences "
            "of the "
            "corpus have many padding keys.",
        ),
        ask.between(
            "bool_padding_percent",
            1,
            5,
            "1% to 5%",
            "A padding key keeps its weight divided by $e$; "
            "a share this small would take sentences with little padding.",
        ),
        ask.between(
            "bool_padding_percent",
            None,
            1,
            "almost none, below 1%",
            "That would hold if `False` "
            "became a large negative number, as in the additive mask. It becomes zero: padding is "
            "lowered "
            "by one against the real keys, not removed.",
        ),
    ],
    section="The additive mask",
)

# %%
bool_mask = pad.bool()[:, None, None, :]  # (B, 1, 1, T): True for real tokens
probs_bool = torch.softmax(scores + bool_mask, dim=-1)  # runs without complaint
real_queries = pad.bool()[:, None, :, None]  # (B, 1, T, 1)
padded = pad.sum(1) < T  # (B,) sentences that have padding
mass = (probs_bool * (1 - pad)[:, None, None, :]).sum(-1, keepdim=True)  # (B, A, T, 1)
mass = mass[padded].masked_select(real_queries[padded]).mean()
ctx_bool = (probs_bool @ v).transpose(1, 2).reshape(B, T, H)
print(
    "bool mask: mean attention mass on padding, over real queries of padded sentences: "
    f"{mass.item():.1%}"
)
claims.value("bool_mask_padding_share", 100 * mass, "{:.0f}%")
claims.claim(
    "bool_mask_leaves_padding_share",
    mass,
    ">",
    0.01,
    "with a bool mask added, padding keeps more than 1% of the attention of real queries",
)
print(
    "bool mask: context vs the model's, max abs diff "
    f"{(ctx_bool - call.output[0]).abs().max().item():.2f}"
)

# %% [markdown]
# Why *add* the mask to the scores, rather than *multiply* by the 0/1 mask? Two multiplicative
# forms come to mind. **Multiplying the scores** by 0/1 gives a padding key the score 0, not
# $-\infty$: after the softmax it still gets $e^{0}/Z$ of the attention, $Z$ being the row's sum
# of exponentials, as much as a real key whose score happens to be 0. **Multiplying the
# probabilities** by 0/1 after the softmax does remove padding, but the rows then sum to less
# than 1 {{ claim: product_rows_below_one }} and have to be divided by their new sums. On this
# layer, the share of attention that
# lands on padding (mean over the real queries of padded sentences), and how far the layer's
# output $y$ for real tokens moves from the pretrained model's, continuing the layer with
# its own `attention.output`, `intermediate` and `output`:

# %%
keep = pad[:, None, None, :].float()  # (B, 1, 1, T): 1 for a real key, 0 for padding
layer_module = model.encoder.layer[LAYER]
real_q = pad.bool()[:, None, :, None]  # (B, 1, T, 1): real query tokens
padded_rows = pad.sum(1) < T  # (B,): sentences that have padding


def padding_share(p):
    """Mean attention mass on padding keys over real queries of padded sentences."""
    share = (p * (1 - keep)).sum(-1, keepdim=True)  # (B, A, T, 1)
    return share[padded_rows].masked_select(real_q[padded_rows]).mean().item()


def layer_output(p):
    """The layer's output y (B, T, H) when attention uses the probabilities p (B, A, T, T)."""
    with torch.no_grad():
        c = (p @ v).transpose(1, 2).reshape(B, T, H)  # (B, T, H): heads concatenated
        h = layer_module.attention.output(c, x)  # first Add & Norm
        return layer_module.output(layer_module.intermediate(h), h)  # (B, T, H)


y_model = cap.hidden_states[LAYER + 1]  # (B, T, H): the pretrained layer's output
probs_times_scores = torch.softmax(scores * keep, dim=-1)  # padding scores become 0
probs_times_probs = torch.softmax(scores, dim=-1) * keep  # padding removed, rows no longer sum to 1
probs_renormalised = probs_times_probs / probs_times_probs.sum(-1, keepdim=True)
real_rows = pad.bool()[:, None, :].expand(B, A, T)  # (B, A, T)
mask_forms = {
    "additive mask (the model's)": probs,
    "scores * mask": probs_times_scores,
    "softmax(scores) * mask": probs_times_probs,
    "softmax(scores) * mask, renormalised": probs_renormalised,
}
print("attention on padding, row sums, and y vs the model on real tokens (max abs diff):")
print(f"{'mask':<37}{'padding':>8}{'row sums':>16}{'y vs model':>12}")
for label, p in mask_forms.items():
    moved = (layer_output(p) - y_model).abs().amax(-1)[pad.bool()].max().item()  # real tokens only
    sums = p.sum(-1)[real_rows]
    print(
        f"{label:<37}{padding_share(p):>8.1%}  {sums.min().item():.3f} .. {sums.max().item():.3f}"
        f"{moved:>12.1e}"
    )
print(
    f"renormalised product vs additive mask: max abs diff of the probabilities "
    f"{(probs_renormalised - probs).abs().max().item():.1e}"
)
# the prose below: scores * mask leaves padding attention, the renormalised product is the same
assert padding_share(probs_times_scores) > 0 and probs_times_probs.sum(-1)[real_rows].min() < 1
assert torch.allclose(probs_renormalised, probs, atol=1e-6)
# rows of padded sentences
product_sums = probs_times_probs.sum(-1)[real_rows & padded_rows[:, None, None]]
claims.value("product_row_sum_mean", product_sums.mean(), "{:.2f}")
claims.claim(
    "product_rows_below_one",
    1 - product_sums.mean(),
    ">",
    0.1,
    "without renormalising, the real query rows of padded sentences lose over a tenth of their sum "
    "on average",
)
renorm_gap = (probs_renormalised - probs).abs().max()
claims.claim(
    "renormalised_matches_additive",
    renorm_gap,
    "<",
    16 * float32_step(probs),
    "the renormalised product is within sixteen float32 steps of the additive mask's probabilities",
)

# %% [markdown]
# Multiplying the scores leaves padding a share of the attention (printed) and moves the
# layer's output for the real tokens, by the amount printed. Multiplying the probabilities
# without renormalising removes padding but leaves rows that sum to less than 1 (on average
# {{ product_row_sum_mean }} over the real queries of the padded sentences)
# {{ claim: product_rows_below_one }};
# renormalised, it gives the additive mask's probabilities up to float rounding
# {{ claim: renormalised_matches_additive }}. The additive form gets there in
# one operation: a single broadcast add on the scores, after which the softmax's own division by
# $Z$ does the renormalising, since $e^{\text{score} + \text{min}}$ underflows to exactly 0 and
# drops out of
# $Z$. The product form needs a multiply, a second sum over the keys and a division, each over
# the whole (B, A, T, T) tensor, in every layer.

# %% [markdown]
# Why `torch.finfo(torch.float32).min`, a *finite* float, rather than $-\infty$? A row whose keys
# are all masked
# would be $-\infty - (-\infty) = $ NaN inside the softmax; with a finite value it stays a number:

# %%
print(
    "softmax of an all -inf row:   ",
    torch.softmax(torch.full((4,), float("-inf")), dim=-1).tolist(),
)
print(
    "softmax of an all finfo.min row:",
    torch.softmax(torch.full((4,), torch.finfo(torch.float32).min), dim=-1).tolist(),
)

# %% [markdown]
# ## Softmax over the keys
#
# Each query distributes one unit of attention over the keys, so the softmax runs over the
# **last** axis (the keys): every row of `probs` sums to 1. A softmax over `dim=-2` would make
# each *key's* column sum to 1 instead, and the rows would no longer be distributions.

# %%
row_sums = probs.sum(-1)  # (B, A, T)
print(f"softmax over keys:    row sums within {(row_sums - 1).abs().max().item():.1e} of 1")
wrong_axis = torch.softmax(scores + mask, dim=-2).sum(-1)  # (B, A, T)
print(
    f"softmax over queries: row sums range from {wrong_axis.min().item():.3f} to "
    f"{wrong_axis.max().item():.3f}"
)
print(
    f"our probabilities vs the model's attentions[{LAYER}]: max abs diff "
    f"{(probs - cap.attentions[LAYER]).abs().max().item():.1e}"
)

# %% [markdown]
# ## A numerically stable softmax
#
# For the row $S_t$ of one query's scores (one head's $S_i$, head index dropped),
# $\mathrm{softmax}(S_t)_j = e^{S_{tj}} / \sum_{j'} e^{S_{tj'}}$ is unchanged when the same constant
# is subtracted from every $S_{tj}$. Subtracting the row's maximum keeps every exponent $\le 0$, so
# nothing overflows; `torch.softmax` does this internally. Written naively, a float32 $e^{S_{tj}}$
# overflows to infinity once $S_{tj}$ passes about 88, and an overflowed entry becomes `nan`
# (infinity over infinity):

# %%
row = scores[0, 0, 0] * 100  # (T,): one query's scores, made large on purpose
naive = row.exp() / row.exp().sum()  # (T,)
stable = (row - row.max()).exp() / (row - row.max()).exp().sum()  # (T,)
print(
    f"largest score {row.max().item():.0f}: naive softmax has {int(naive.isnan().sum())} nan of "
    f"{row.numel()}"
)
print(
    "max-subtracted vs torch.softmax: max abs diff "
    f"{(stable - torch.softmax(row, -1)).abs().max().item():.1e}"
)

# %% [markdown]
# ## Dropout
#
# In training, BERT applies dropout with probability `attention_probs_dropout_prob` to the
# attention probabilities themselves: a dropped entry means that, for this step, a query ignores
# one key, and the surviving weights are scaled by $1/(1-p)$ so each row still sums to 1 in
# expectation. Each entry is kept or dropped on its own: one draw per element of the
# (B, A, T, T) tensor, never one mask drawn for a row and shared by every query, head or sentence
# (the "locked" dropout some frameworks broadcast, which the grader names `dropout-mask-shared`).
# In eval mode `BertSelfAttention` passes `dropout=0.0`, which is why the
# probabilities above equal the model's.

# %%
torch.manual_seed(0)
p_drop = sa.dropout.p
dropped = F.dropout(probs, p=p_drop, training=True)  # (B, A, T, T)
rows_real = dropped.sum(-1)[pad[:, None, :].expand(B, A, T).bool()]  # row sums of real queries
print(f"p = {p_drop}, module training: {sa.training}")
print(
    f"one training-mode draw: row sums mean {rows_real.mean():.3f}, range {rows_real.min():.3f} .. "
    f"{rows_real.max():.3f}"
)

# %% [markdown]
# ## Merging the heads
#
# Weighted sum of the values, then the inverse of the split: (B, A, T, d) → (B, T, A, d) →
# (B, T, H). This is `BertSelfAttention`'s output, the `context_layer`:

# %%
context = (probs @ v).transpose(1, 2).reshape(B, T, H)  # (B, A, T, T) @ (B, A, T, d) -> (B, T, H)
print(
    "context by hand vs attention.self's output: max abs diff "
    f"{(context - call.output[0]).abs().max().item():.1e}"
)

# %% [markdown]
# ## $W^O$ adds the heads up
#
# Concatenating the heads and multiplying by $W^O$ is the same as multiplying each head by its own
# block of $d$ rows of $W^O$ and summing (block matrix multiplication):
#
# $$\mathrm{Concat}(\mathrm{head}_0, \dots, \mathrm{head}_{A-1})\,W^O = \sum_{i=0}^{A-1}
# \mathrm{head}_i\, W^O_i,
# \qquad W^O_i = \text{rows } i\,d \dots (i+1)\,d-1 \text{ of } W^O.$$
#
# So $W^O$ is where the heads' outputs are combined, and the combination is this sum: each head's
# output goes through its own rows $W^O_i$, which no other head uses, and the results are added.
# No head's term depends on another head's output; they meet in the sum and nowhere else, and
# the heads run apart and summed reproduce the layer {{ claim: separate_heads_reproduce }}. Elhage
# et al.
# (2021, "A Mathematical Framework for Transformer Circuits",
# transformer-circuits.pub) use this to read heads as independent units that each add their own
# vector into the residual stream. In Hugging Face's `nn.Linear` convention $W^O_i$ is the column
# block `attention.output.dense.weight[:, i*d:(i+1)*d]`. Below, every head runs on its own
# slices of `query`, `key`, `value` and `dense`, nothing shared, and the sum is compared with the
# pretrained layer:

# %%
w_o, b_o = attn.output.dense.weight, attn.output.dense.bias  # (H, H), (H,)
heads_sum = torch.zeros(B, T, H)
with torch.no_grad():
    for i in range(A):
        r = slice(i * d, (i + 1) * d)
        q_i = x @ sa.query.weight[r].T + sa.query.bias[r]  # (B, T, d)
        k_i = x @ sa.key.weight[r].T + sa.key.bias[r]  # (B, T, d)
        v_i = x @ sa.value.weight[r].T + sa.value.bias[r]  # (B, T, d)
        p_i = torch.softmax(q_i @ k_i.transpose(-1, -2) / d**0.5 + mask[:, 0], dim=-1)  # (B, T, T)
        heads_sum += (p_i @ v_i) @ w_o[:, r].T  # (B, T, d) @ (d, H) -> (B, T, H)
    projected = heads_sum + b_o  # (B, T, H)
    library_dense = attn.output.dense(call.output[0])  # W^O applied to the concatenated heads
    library_out = cap.layer(LAYER, "attention.output").output  # after the first Add & Norm
print(
    f"sum of {A} separate heads vs attention.output.dense(context): max abs diff "
    f"{(projected - library_dense).abs().max().item():.1e}"
)
claims.claim(
    "separate_heads_reproduce",
    (projected - library_dense).abs().max(),
    "<",
    16 * float32_step(library_dense),
    "the heads run separately and summed are within sixteen float32 steps of the layer's W^O "
    "output",
)
print(
    f"LayerNorm(sum + x) vs the attention block's output:          max abs diff "
    f"{(attn.output.LayerNorm(projected + x) - library_out).abs().max().item():.1e}"
)

# %% [markdown]
# ## A head's value-output map
#
# For a fixed attention pattern, head $i$ maps a token vector it attends to through $W_i^V$
# ($H \to d$) and then $W^O_i$ ($d \to H$). The product $W_i^V W^O_i$ is an $H \times H$
# matrix (Elhage et al. 2021 call it the head's OV circuit). Passing through $d$ dimensions, its
# rank is bounded by $d$. `ov_circuits` builds these matrices for every head of the layer;
# `torch.linalg.matrix_rank` measures them, one by one and summed over the heads:
#
# {{ predict: ov_rank }}

# %% tags=["remove-input"]
ask.predict(
    "ov_rank",
    "Each head's $W_i^V W^O_i$ has rank at most $d$. What rank does their sum over the "
    "layer's heads, $\\sum_i W_i^V W^O_i$, reach?",
    [
        ask.between(
            "ov_rank_together",
            None,
            2 * d,
            "below $2d$",
            "That would hold if the heads wrote into the same few directions, each repeating the "
            "others. Their maps point into different subspaces: the sum reaches "
            "{{ ov_rank_together }}.",
        ),
        ask.between(
            "ov_rank_together",
            2 * d,
            0.9 * H,
            "$2d$ to $0.9H$",
            "That would hold if the heads' subspaces overlapped in good part. They barely do: "
            "the sum reaches {{ ov_rank_together }}, with $H$ the most it could.",
        ),
        ask.between(
            "ov_rank_together",
            0.9 * H,
            None,
            "$0.9H$ or more",
            "The $A$ heads of $d$ dimensions each could span $Ad = H$ together, and they nearly "
            "do: the sum reaches rank {{ ov_rank_together }}, every head writing into "
            "directions of its own.",
        ),
    ],
    section="A head's value-output map",
)

# %%
with torch.no_grad():
    ov = ov_circuits(attn)  # (A, H, H): one H x H matrix per head of this layer
    ranks = torch.linalg.matrix_rank(ov)  # (A,)
    full = torch.linalg.matrix_rank(ov.sum(0))  # all heads together: W^V W^O of the whole layer
assert ranks.max() <= d
print(f"layer {LAYER}: each OV matrix is {tuple(ov.shape[1:])}; rank per head:\n{ranks.tolist()}")
print(f"head size d = {d}; all {A} heads summed: rank {full.item()} of {H}")
claims.value("ov_rank_max", ranks.max(), "{:.0f}")
claims.value("ov_rank_sum", full, "{:.0f}")
claims.claim(
    "ov_rank_is_d", ranks.max(), "==", d, "the largest rank of a head's OV matrix is d, the bound"
)
claims.claim(
    "heads_together_reach_more", full, ">", d, "the heads of a layer summed have a rank above d"
)

# %% [markdown]
# Every head's map passes through its $d$ dimensions, so its rank is at most $d$, and the
# largest here is {{ ov_rank_max }}
# {{ claim: ov_rank_is_d }} (the printout shows whether each head uses all $d$ dimensions), so no
# single head can move more than a $d$-dimensional slice of information; summed, the heads of a
# layer reach rank {{ ov_rank_sum }} {{ claim: heads_together_reach_more }}.
#
# ## What $W^O$ adds over concatenating the heads
#
# Without $W^O$, the concatenated heads would enter the stream as they are: head $i$ would write
# its $d$ numbers into features $i\,d \dots (i+1)\,d-1$, its *slot*, and nowhere else. With
# $W^O$, head $i$ writes $\mathrm{head}_i W^O_i$, which can point anywhere among the $H$
# features: training chooses each head's $d$-dimensional subspace. How far is the pretrained
# layer from keeping its heads in their slots? Two measurements
# (`bertlab.experiments.head_mixing`): the share of each head's block $W^O_i$ that lands in the
# head's own slot of output features, and, on the corpus's real tokens, the share of each output
# feature's variance supplied by its leading head (with heads in their slots, each share would be
# the whole):

# %%
from bertlab.experiments import head_mixing
from bertlab.pooling import sentence_embeddings

real_context = call.output[0][pad.bool()]  # (N, H): the concatenated heads of the real tokens
slot_share = head_mixing.own_slot_shares(w_o, A)  # (A,): W^O_i's share in head i's own slot
# (A, H): heads' shares per feature
feature_shares = head_mixing.coordinate_shares(real_context, w_o, A)
largest_head = feature_shares.max(0).values  # (H,): the largest head's share of each output feature
print(
    f"share of W^O_i in head i's own slot: mean {slot_share.mean():.3f}, max "
    f"{slot_share.max():.3f}\n"
    f"(in its slot only: 1; a random direction: d/H = {d / H:.3f})"
)
print(
    f"largest head's share of an output feature's variance, over {real_context.shape[0]} real "
    "tokens: "
    f"mean {largest_head.mean():.3f}, max {largest_head.max():.3f}"
)
claims.value("wo_layer", LAYER, "{:.0f}")
claims.value("wo_slot_share_mean", slot_share.mean(), "{:.3f}")
claims.value("wo_slot_share_max", slot_share.max(), "{:.3f}")
claims.value("wo_random_share", d / H, "{:.3f}")
claims.value("wo_largest_head_share", 100 * largest_head.mean(), "{:.0f}%")
claims.claim(
    "wo_blocks_leave_their_slots",
    slot_share.max(),
    "<",
    2 * d / H,
    "no head keeps even twice a random direction's share of its W^O block in its own slot",
)
claims.claim(
    "wo_features_draw_on_many_heads",
    largest_head.mean(),
    "<",
    0.5,
    "on average the largest head supplies less than half of an output feature's variance",
)

# %% [markdown]
# Each head's block keeps {{ wo_slot_share_mean }} of its weight in its own slot on average and
# {{ wo_slot_share_max }} at most, where a block pointing in a random direction would keep
# $d/H$ = {{ wo_random_share }}: no head keeps even twice that
# {{ claim: wo_blocks_leave_their_slots }}.
# The slot numbering has left no trace in where the heads write. And each output feature is a
# mixture of heads: the largest head supplies {{ wo_largest_head_share }} of a feature's variance
# on average {{ claim: wo_features_draw_on_many_heads }}.
#
# Then an ablation: layer {{ wo_layer }}'s $W^O$ replaced, everything else as trained. Two things
# are measured: how far the next layer's input (this layer's output $y$) moves, as the mean over
# real tokens of $\lVert y' - y\rVert / \lVert y \rVert$, and the cosine of each sentence vector
# (the model's mean pooling) with the intact model's. The replacements: the identity (plain
# concatenation), $W^O$'s own diagonal blocks (each head into its own slot, through the weights
# it has there), the best maps that keep each head in its slot, fitted by linear regression
# to $W^O$'s output on these very tokens (in-sample, a test that flatters them), and zero (the
# heads' output removed, $W^O$'s bias kept):

# %%
fit_weight, fit_bias = head_mixing.own_slot_fit(real_context, w_o, A)  # (H, H) block-diagonal, (H,)
replacements = {
    "W^O as trained": (w_o, b_o),
    "plain concatenation (identity)": (torch.eye(H), b_o),
    "own slots: W^O's diagonal blocks": (head_mixing.diagonal_blocks(w_o, A), b_o),
    "own slots: best fit on these tokens": (fit_weight, b_o + fit_bias),
    "heads removed (W^O = 0, bias kept)": (torch.zeros_like(w_o), b_o),
}
intact = sentence_embeddings(cap.last_hidden_state, pad)  # (B, H)
wo_moves = {}
print("how far the next layer's input moves; the sentence vectors' cosine with the intact model:")
print(f"{'W^O':<37}{'input moves':>12}{'cosine mean':>13}{'min':>7}")
for label, (weight_new, bias_new) in replacements.items():
    ablated = head_mixing.run_with_output_projection(model, cap.batch, LAYER, weight_new, bias_new)
    wo_moves[label] = head_mixing.relative_change(
        ablated.hidden_states[LAYER + 1], cap.hidden_states[LAYER + 1], pad
    )
    # (B,): cosine with intact
    kept = (sentence_embeddings(ablated.last_hidden_state, pad) * intact).sum(-1)
    print(f"{label:<37}{wo_moves[label]:>12.1%}{kept.mean():>13.3f}{kept.min():>7.3f}")
moved_fit, moved_removed = (
    wo_moves["own slots: best fit on these tokens"],
    wo_moves["heads removed (W^O = 0, bias kept)"],
)
claims.value("moved_identity", 100 * wo_moves["plain concatenation (identity)"], "{:.0f}%")
claims.value("moved_diagonal", 100 * wo_moves["own slots: W^O's diagonal blocks"], "{:.0f}%")
claims.value("moved_fit", 100 * moved_fit, "{:.0f}%")
claims.value("moved_removed", 100 * moved_removed, "{:.0f}%")
claims.claim(
    "own_slot_fit_recovers_part",
    moved_fit,
    "<",
    moved_removed,
    "the fitted own-slot maps move the next layer's input less than removing the heads' output",
)
claims.claim(
    "own_slot_fit_falls_short",
    moved_fit,
    ">",
    moved_removed / 3,
    "the fitted own-slot maps still move it by more than a third of what removing the heads does",
)

# %% [markdown]
# Put back into their slots, the heads' outputs miss the directions the later layers read: plain
# concatenation moves the next layer's input by {{ moved_identity }} and $W^O$'s own diagonal
# blocks by {{ moved_diagonal }}, where removing the heads' output altogether moves it by
# {{ moved_removed }}. The maps fitted to keep each head in its slot recover part of that
# {{ claim: own_slot_fit_recovers_part }}, yet still move it by {{ moved_fit }}, more than a
# third of the removal's, on the tokens they were fitted to {{ claim: own_slot_fit_falls_short }}.
#
# What this shows: the trained layer uses $W^O$ to send each head's output into directions of
# its own, spread over all $H$ features, and the layers after it read those directions; the sum
# of the heads (two sections up) is taken there, not slot by slot. What it does not show is how
# a model *trained* without $W^O$ would do. It would have to live with fixed slots: head $i$ of
# every layer writing into the same $d$ features, its value matrix $W_i^V$ still choosing what
# to write but no longer where. Whether that costs anything, an ablation of a model trained with
# $W^O$ cannot say; it measures what this model relies on, not what the architecture needs.
# $W^O$ costs $H^2$ weights per layer, as many as each of $W^Q$, $W^K$ and $W^V$.
#
# ## What the heads look at
#
# Clark et al. (2019, "What Does BERT Look At? An Analysis of BERT's Attention", BlackboxNLP)
# counted where BERT-base's attention goes: much of it lands on a few tokens, `[CLS]` in the
# early layers, `[SEP]` in the middle ones (over half of all attention there), and periods and
# commas. They argued that attending to `[SEP]` works as a no-op, a place for a head to look when
# its pattern does not apply: the gradient of the loss with respect to that attention is small.
# Does this model do the same? Below are the attention patterns of this layer's heads for one
# sentence, then, per layer, the share of attention on each kind of key token.
#
# {{ predict: attention_sink }}

# %% tags=["remove-input"]
# A question before the measurement below; the build selects its
# answer from the claims recorded there.
ask.predict(
    "attention_sink",
    "Averaged over the layers, which kind "
    "of key token gets the most attention for its number, "
    "compared with a uniform row's share?",
    [
        ask.fails(
            "sink_above_sep",
            "`[SEP]`, as in BERT-base's middle layers",
            "That would hold if this model had kept "
            "BERT-base's habit. Distilled to six layers, it gives "
            "`[SEP]` less than a uniform share after its first "
            "layer, and `[CLS]` more attention for its number "
            "{{ claim: sink_above_sep }}.",
        ),
        ask.holds(
            "sink_is_cls",
            "`[CLS]`",
            "`[CLS]` gets "
            "{{ sink_cls_lift }} times a uniform row's share, "
            "averaged over the layers {{ claim: sink_is_cls }}: in "
            "this model it is the token "
            "the heads park on.",
        ),
        ask.fails(
            "sink_above_punctuation",
            "punctuation",
            "That would "
            "hold if the heads parked on periods and commas. Here "
            "punctuation gets less than a uniform share in every "
            "layer, and `[CLS]` more for its number "
            "{{ claim: sink_above_punctuation }}.",
        ),
    ],
    section="Where the attention lands, layer by layer",
)

# %% [markdown]
# The attention patterns of the twelve heads of this layer, for one sentence (padding left out):

# %%
# alt: A grid of heat maps, one per attention head of one layer, for one corpus sentence: rows are
#   the query tokens, columns the key tokens, and the colour is the attention probability from 0 to
#   1.
s = 1
n = int(pad[s].sum())
toks = tokenizer.convert_ids_to_tokens(cap.batch["input_ids"][s, :n])
fig, axes = plt.subplots(3, 4, figsize=(11, 8.6), layout="constrained")
for i, ax in enumerate(axes.flat):
    image = ax.imshow(probs[s, i, :n, :n].numpy(), cmap="viridis", vmin=0, vmax=1)
    ax.set_title(f"head {i}", fontsize=9)
    ax.set_xticks(range(n), toks, rotation=90, fontsize=6)
    ax.set_yticks(range(n), toks, fontsize=6)
fig.suptitle(f"layer {LAYER}: attention probabilities (rows: queries, columns: keys)")
fig.colorbar(image, ax=axes, shrink=0.6, label="attention probability")
plt.show()

# %% [markdown]
# ### Where the attention lands, layer by layer
#
# Many rows of such maps put their weight on one or two columns. Per layer, the share of all
# real queries' attention (averaged over heads, queries and sentences) on each kind of key token,
# beside the share a uniform row would give it (`bertlab.experiments.special_attention`):

# %%
from bertlab.experiments import special_attention
from bertlab.experiments.cls_attention import KINDS

with torch.no_grad():
    seen = model(**cap.batch, output_attentions=True, output_hidden_states=True)
by_layer = special_attention.layer_shares(
    model, seen.hidden_states, seen.attentions, cap.batch["input_ids"], pad, tokenizer
)
print("share of attention (uniform share in the last row)")
print("layer" + "".join(f"{kind:>13}" for kind in KINDS))
for index, s in enumerate(by_layer):
    print(f"{index:>5}" + "".join(f"{s.weight[k]:>13.1%}" for k in KINDS))
print("unif." + "".join(f"{by_layer[0].uniform[k]:>13.1%}" for k in KINDS))

# %% tags=["remove-input"]
# mean over layers
lift = {k: sum(s.weight[k] / s.uniform[k] for s in by_layer) / len(by_layer) for k in KINDS}
later = by_layer[1:]  # after the first layer
_ = claims.value("sink_cls_lift", lift["[CLS]"], "{:.1f}")
_ = claims.value("sink_cls_min", 100 * min(s.weight["[CLS]"] for s in by_layer), "{:.0f}%")
_ = claims.value("sink_cls_max", 100 * max(s.weight["[CLS]"] for s in by_layer), "{:.0f}%")
_ = claims.value("sink_sep_max_later", 100 * max(s.weight["[SEP]"] for s in later), "{:.1f}%")
_ = claims.value("sink_sep_uniform", 100 * by_layer[0].uniform["[SEP]"], "{:.1f}%")
_ = claims.claim(
    "sink_is_cls",
    lift["[CLS]"],
    ">",
    max(lift[k] for k in KINDS if k != "[CLS]"),
    "averaged over the layers, [CLS] gets the most attention for its number",
)
_ = claims.claim(
    "sink_above_sep",
    lift["[CLS]"],
    ">",
    lift["[SEP]"],
    "[CLS] gets more attention for its number than [SEP]",
)
_ = claims.claim(
    "sink_above_punctuation",
    lift["[CLS]"],
    ">",
    lift["punctuation"],
    "[CLS] gets more attention for its number than punctuation",
)
_ = claims.claim(
    "sink_cls_above_twice_uniform",
    min(s.weight["[CLS]"] / s.uniform["[CLS]"] for s in by_layer),
    ">",
    2,
    "in every layer [CLS] gets more than twice a uniform share",
)
_ = claims.claim(
    "sink_sep_below_uniform",
    max(s.weight["[SEP]"] / s.uniform["[SEP]"] for s in later),
    "<",
    1,
    "after the first layer [SEP] gets less than a uniform share",
)
_ = claims.claim(
    "sink_punctuation_below_uniform",
    max(s.weight["punctuation"] / s.uniform["punctuation"] for s in by_layer),
    "<",
    1,
    "in every layer punctuation gets less than a uniform share",
)

# %% [markdown]
# This model does it with another token. `[CLS]` gets from
# {{ sink_cls_min }} to {{ sink_cls_max }} of the attention, more than
# twice a uniform row's share in every layer
# {{ claim: sink_cls_above_twice_uniform }}, while `[SEP]`, after the
# first layer, gets at most {{ sink_sep_max_later }} where a uniform row
# would give it {{ sink_sep_uniform }}
# {{ claim: sink_sep_below_uniform }}, and punctuation gets less than a
# uniform share in every layer
# {{ claim: sink_punctuation_below_uniform }}. The model was made by
# distillation (trained to reproduce the outputs of another, already
# trained model, its teacher) and then fine-tuned on sentence pairs;
# which token its heads settle on is its training's choice, not BERT's
# design.
#
# Is that attention a no-op here? Weight alone cannot say: what key $j$
# adds to query $t$'s update in head $i$ is its weight $(P_i)_{tj}$ times
# the vector it writes, $(V_i)_j W^O_i$, row $j$ of head $i$'s values
# through its block of $W^O$ (section "$W^O$ adds the heads up"), and a
# key whose vector is short adds little however much weight it gets.
# Kobayashi et al. (2020, "Attention is Not Only a Weight: Analyzing
# Transformers with Vector Norms", EMNLP) measured attention this way,
# by the length $(P_i)_{tj}\,\lVert (V_i)_j W^O_i \rVert$, and found BERT's
# attention to `[SEP]` and punctuation written with short vectors. The
# same split by that length, the share of what each kind of key writes
# into the update:

# %%
print("share of what the attention writes, (P_i)_tj |(V_i)_j W^O_i|")
print("layer" + "".join(f"{kind:>13}" for kind in KINDS))
for index, s in enumerate(by_layer):
    print(f"{index:>5}" + "".join(f"{s.written[k]:>13.1%}" for k in KINDS))

# %% tags=["remove-input"]
cls_kept = max(s.written["[CLS]"] / s.weight["[CLS]"] for s in later)
content_gain = min(s.written["content"] / s.weight["content"] for s in later)
# Bounds printed as bounds: "at most" rounded up, "at least" rounded down, to one decimal.
cls_written_max = max(s.written["[CLS]"] for s in later)
_ = claims.value("sink_cls_written_max", math.ceil(1000 * cls_written_max) / 10, "{:.1f}%")
_ = claims.value("sink_cls_kept", math.ceil(1000 * cls_kept) / 10, "{:.1f}%")
_ = claims.value("sink_content_gain", math.floor(10 * content_gain) / 10, "{:.1f}")
_ = claims.claim(
    "sink_cls_writes_little",
    cls_kept,
    "<",
    1 / 3,
    "after the first layer [CLS] writes less than a third of its attention share",
)
_ = claims.claim(
    "sink_content_writes_more",
    content_gain,
    ">",
    1,
    "after the first layer the content tokens write a larger share than their attention share",
)

# %% [markdown]
# In layers 1 to 5, after the first, `[CLS]` writes at most
# {{ sink_cls_written_max }} of the attention's update, and in each of
# them less than a third of its share of the weight (at most
# {{ sink_cls_kept }} of it) {{ claim: sink_cls_writes_little }}: its
# value vectors through $W^O$ are short. In the same layers the content
# tokens write more than their weight, at least {{ sink_content_gain }}
# times it {{ claim: sink_content_writes_more }}. Layer 0, which reads
# the embeddings, is left out of both (its row is in the table above).
# That is what a no-op looks like: a head with nothing to do puts its
# weight on `[CLS]` and adds little to the token. It is consistent with
# Clark et al.'s reading, moved from `[SEP]` to `[CLS]`, and does not
# prove it: a short vector can still matter downstream.
#
# ## Why one matrix: one product instead of many
#
# Storing the heads side by side lets the hardware do one large matrix product instead of many
# small ones. The three variants below (from `bertlab.experiments.heads`) compute identical
# queries, keys and values for all heads: $3A$ small products (3 roles × $A$ heads), three
# $H \times H$ products (what `BertSelfAttention` does), or one fused $H \times 3H$ product.
# What is exact is counted: the multiply-adds (PyTorch's FLOP counter) and the product kernels
# each variant calls, one call of the library's compiled matrix-product routine per product
# (`bertlab.experiments.products`). The time is measured too, on a batch of 4
# random sequences of 64 tokens, median of interleaved runs:

# %%
torch.manual_seed(0)
xb = torch.randn(4, 64, H)  # (B, T, H)
variants = projection_variants(sa)
with torch.no_grad():
    results = {name: fn(xb) for name, fn in variants.items()}  # each (q, k, v), (B, A, T, d)
reference_qkv = results["one matrix per role"]
for name, qkv in results.items():
    diff = max((a - b).abs().max().item() for a, b in zip(qkv, reference_qkv, strict=True))
    print(f"{name:<20} same q, k, v as one matrix per role: max abs diff {diff:.1e}")

work = {name: products.count(fn, xb) for name, fn in variants.items()}
times = median_times(variants, xb, rounds=20)
print(f"{'':<20}{'product kernels':>16}{'multiply-adds':>15}   ms on this machine, this build")
for name, t in times.items():
    print(f"{name:<20}{work[name].kernels:>16d}{work[name].multiply_adds:>15,}{t * 1e3:>8.3f}")
macs = [w.multiply_adds for w in work.values()]
claims.value("heads_kernels", work["per head"].kernels, "{:.0f}")
claims.value("role_kernels", work["one matrix per role"].kernels, "{:.0f}")
claims.value("fused_kernels", work["fused QKV"].kernels, "{:.0f}")
claims.claim(
    "same_multiply_adds",
    max(macs) - min(macs),
    "==",
    0,
    "the three variants do the same multiply-adds",
)
claims.claim(
    "per_head_most_kernels",
    work["per head"].kernels,
    "==",
    3 * A * work["fused QKV"].kernels,
    "per head calls 3A times as many product kernels as the fused product",
)

# %% [markdown]
# The three variants do exactly the same multiply-adds {{ claim: same_multiply_adds }}; what
# differs is how they are cut: {{ heads_kernels }} product kernels per head and role,
# {{ role_kernels }} per role, {{ fused_kernels }} fused {{ claim: per_head_most_kernels }}.
# The argument for one matrix is that count: each kernel call pays a fixed overhead (dispatch,
# reading the input again, a thread pool woken up), which weighs *when that overhead is a large
# part of the time*, as with many small products on a GPU. It is an argument, not a
# measurement: whether cutting the calls pays depends on how the matrix library splits each
# product over the cores, and on a CPU at this size the fused product can even take the longest
# of the three. The times printed are from this machine and this build, and on a shared machine
# their order can change from one build to the next, so the page claims nothing about them.
# `BertSelfAttention` itself takes the middle way, one product per role ({{ role_kernels }}
# kernels), which keeps `query`, `key` and `value` as three named weights.
#
# ## What we found
#
# - There is one `query` matrix per layer because the heads' $W_i^Q$ are stored side by side:
#   head $i$ is rows $i\,d \dots (i+1)\,d-1$ of `query.weight` (likewise `key`, `value`), and its
#   block of $W^O$ is the matching columns of `attention.output.dense.weight`.
# - Running the heads separately on their own slices and summing reproduced the pretrained
#   layer {{ claim: separate_heads_reproduce }}, and each head's $W_i^V W^O_i$ has rank at most
#   $d$ {{ claim: ov_rank_is_d }}.
# - $W^O$ is more than a way to add the heads up: it sends each head's output into directions
#   spread over all $H$ features, far from the head's own slot
#   {{ claim: wo_blocks_leave_their_slots }},
#   and this model's later layers rely on it: maps that keep each head in its slot, even fitted
#   to the tokens measured, move the next layer's input by {{ moved_fit }}
#   {{ claim: own_slot_fit_falls_short }}.
# - The projections take the same multiply-adds cut three ways: {{ heads_kernels }} product
#   kernels head by head, {{ role_kernels }} in `BertSelfAttention` (one per role) and
#   {{ fused_kernels }} fused {{ claim: per_head_most_kernels }}. Cutting the calls is the argument
#   for one matrix; the timings above are this machine's, this build's, and do not settle it.
# - Along the way: the scores are scaled by $1/\sqrt{d}$, padding is removed by an **additive**
#   float mask (a bool mask is silently wrong, leaving padding {{ bool_mask_padding_share }} of
#   the attention {{ claim: bool_mask_leaves_padding_share }}; multiplying the scores by 0/1 leaves
#   padding a share of the attention; multiplying the probabilities leaves rows that sum to less
#   than 1 {{ claim: product_rows_below_one }}, and only renormalised gives the same result
#   {{ claim: renormalised_matches_additive }}),
#   the softmax runs over the keys, and attention dropout acts on the probabilities in training,
#   not in eval mode.
#
# **Exercise:** [03-self-attention](../exercises/03-self-attention/03-self-attention.ipynb): open it
# with `make lab`, then grade it with `bertlab grade 03`.
#
# ## Check yourself
#
# {{ predict: check_fused_kernels }}
#
# {{ predict: check_wo_slots }}
#
# {{ predict: check_mask_shape }}

# %% tags=["remove-input"]
# The numbers the questions of this page rest on, measured above, and the questions.
entropy = {"scaled": mean_entropy(scores), "unscaled": mean_entropy(raw)}
_ = claims.value("entropy_scaled", entropy["scaled"], "{:.2f}")
_ = claims.value("entropy_unscaled", entropy["unscaled"], "{:.2f}")
_ = claims.value("entropy_unscaled_minus_scaled", entropy["unscaled"] - entropy["scaled"], "{:.2f}")
_ = claims.value("bool_padding_percent", 100 * mass, "{:.0f}")
_ = claims.value("bool_padding_share", 100 * mass, "{:.0f}%")
_ = claims.value("ov_rank_largest", ranks.max(), "{:.0f}")
_ = claims.value("ov_rank_together", full, "{:.0f}")
ask.predict(
    "unscaled_attention",
    "Without dividing the scores by $\\sqrt{d}$, are the pretrained layer's "
    "attention rows sharper or flatter?",
    [
        ask.between(
            "entropy_unscaled_minus_scaled",
            None,
            -0.25,
            "sharper: the mean entropy falls by more than a quarter of a nat",
            "Unscaled scores are $\\sqrt{d}$ times as large, and the softmax turns "
            "larger gaps into more peaked rows: the mean entropy falls from {{ entropy_scaled "
            "}} to "
            "{{ entropy_unscaled }} nats.",
        ),
        ask.between(
            "entropy_unscaled_minus_scaled",
            -0.25,
            0,
            "a little sharper: it falls by less than a quarter of a nat",
            "That would hold if the rows were already nearly one-hot, so that larger gaps "
            "could sharpen them little. With the scale they are far from it, and without it the "
            "entropy "
            "falls from {{ entropy_scaled }} to {{ entropy_unscaled }} nats.",
        ),
        ask.between(
            "entropy_unscaled_minus_scaled",
            0,
            None,
            "flatter: closer to uniform",
            "That would hold if "
            "the scale made scores larger. It divides them by $\\sqrt{d}$: without it the gaps "
            "between "
            "scores grow, and the softmax sharpens.",
        ),
    ],
    section="Scaled scores",
)
ask.check(
    "check_fused_kernels",
    "Computed head by head, the queries, keys and values take the same "
    "multiply-adds as one fused product. How many product kernels do they take?",
    [
        ask.fails(
            "per_head_most_kernels",
            "as many as fused",
            "That would hold if the library fused the small "
            "products by itself. Each product of the loop is a kernel call of its own.",
        ),
        ask.holds(
            "per_head_most_kernels",
            "$3A$ times as many as fused",
            "One per head and role: "
            "{{ heads_kernels }} against {{ fused_kernels }} fused {{ claim: per_head_most_kernels "
            "}}, "
            "each call with its fixed overhead.",
        ),
    ],
    section="Why one matrix: one product instead of many",
)
ask.check(
    "check_wo_slots",
    "Without $W^O$, head $i$ would write into its own slot of $d$ features. With "
    "$W^O$, where does a head's output go?",
    [
        ask.holds(
            "wo_blocks_leave_their_slots",
            "spread over all $H$ features",
            "A head's block of $W^O$ "
            "keeps at most {{ wo_slot_share_max }} of its output in its own slot, about what a "
            "random "
            "direction would ({{ wo_random_share }}) {{ claim: wo_blocks_leave_their_slots }}.",
        ),
        ask.fails(
            "wo_blocks_leave_their_slots",
            "mostly into its own slot",
            "That would hold if $W^O$ only "
            "added the heads up. It also sends each head's output into directions of the whole "
            "stream.",
        ),
    ],
    section="What $W^O$ adds over concatenating the heads",
)
ask.check(
    "check_mask_shape",
    "The mask reaches the scores with one row per query. Would a mask with a "
    "single row, broadcast over the queries, give the same scores?",
    [
        ask.fails(
            "mask_shapes_add_alike",
            "no: each query needs its own row",
            "That would hold for a causal "
            "mask, where each query sees other keys. BERT's padding mask hides the same keys from "
            "every query.",
        ),
        ask.holds(
            "mask_shapes_add_alike",
            "yes, bit for bit",
            "Padding is a property of the keys, the same for "
            "every query: every row of the mask is the same {{ claim: mask_rows_alike }}, so the "
            "two shapes "
            "add alike {{ claim: mask_shapes_add_alike }}.",
        ),
    ],
    section="The mask's shape on its way to the scores",
)

# %% tags=["remove-input"]
claims.publish()  # the numbers and claims above, for the build that renders this page
