# %% [markdown]
# # Lesson 4: Add & Norm
#
# **Question.** Diagrams of the Transformer show two "Add & Norm" boxes per layer. Hugging
# Face's `BertLayer` has no module of that name. Where exactly do the residual additions and the
# LayerNorms happen, and in which order?
#
# ## The equation
#
# Vaswani et al. (2017, "Attention Is All You Need", NeurIPS, Section 3.1) wrap each of the two
# sub-layers in a residual connection followed by layer normalisation,
#
# $$\mathrm{LayerNorm}\big(x + \mathrm{Sublayer}(x)\big),$$
#
# and (Section 5.4, "Residual Dropout") apply dropout to the output of each sub-layer before it
# is added to the sub-layer input. BERT (Devlin et al. 2019, "BERT: Pre-training of Deep
# Bidirectional Transformers for Language Understanding", NAACL) keeps this layer as is. Written
# out for one layer with input $x$, in the letters of the [notation page](../docs/notation.md)
# ($a$ and $f$ are the two sub-layers' updates, $h$ and $y$ the two Add & Norms' outputs):
#
# $$a = \mathrm{Concat}(\mathrm{head}_0, \dots, \mathrm{head}_{A-1})\,W^O + b^O, \qquad
# h = \mathrm{LN}_1\big(x + \mathrm{Dropout}(a)\big),$$
#
# $$f = \mathrm{GELU}(hW_1 + b_1)\,W_2 + b_2, \qquad y = \mathrm{LN}_2\big(h + \mathrm{Dropout}(f)\big).$$
#
# Note what the first line lacks: no activation function follows $W^O$. The next nonlinearity
# after the softmax is the LayerNorm (it divides by a data-dependent standard deviation), then
# the GELU inside the feed-forward network of lesson 5.

# %%
import inspect

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from transformers.models.bert import modeling_bert

from bertlab.capture import capture
from bertlab.experiments import claims
from bertlab.experiments.variants import ARRANGEMENTS, drift, encode
from bertlab.masks import additive_mask
from bertlab.reference import load_model

model = load_model()
cap = capture()  # one recorded forward pass over the course corpus
pad = cap.batch["attention_mask"]  # (B, T)
real = pad.bool()  # (B, T)

# %% [markdown]
# ## Where the code puts them
#
# The "Add & Norm" lives inside the two modules that end each sub-layer, `BertSelfOutput`
# (`attention.output`) and `BertOutput` (`output`). The library's own source, printed from the
# installed version:

# %%
print(inspect.getsource(modeling_bert.BertSelfOutput.forward))
print(inspect.getsource(modeling_bert.BertOutput.forward))
print(inspect.getsource(modeling_bert.BertLayer.feed_forward_chunk))

# %% [markdown]
# Both have the same shape: `dense`, `dropout`, then `LayerNorm(hidden_states + input_tensor)`.
# The difference is what they receive. `BertAttention` calls `self.output(attention_output,
# hidden_states)`, so in the first one `input_tensor` is the **layer's input** $x$;
# `feed_forward_chunk` calls `self.output(intermediate_output, attention_output)`, so in the
# second one `input_tensor` is the **attention sub-layer's output** $h$, the output of the first
# Add & Norm.
#
# ## One layer by four calls
#
# If that reading is right, calling layer 0's four sub-modules in order on `hidden_states[0]`
# (the embeddings) must give exactly `hidden_states[1]`:

# %%
layer = model.encoder.layer[0]
x = cap.hidden_states[0]  # (B, T, H): the embeddings
mask = additive_mask(pad)  # (B, 1, T, T): 0 for real keys, finfo.min for padding
with torch.no_grad():
    context, probs = layer.attention.self(x, attention_mask=mask)  # (B, T, H), (B, A, T, T)
    h = layer.attention.output(context, x)  # (B, T, H): first Add & Norm, residual = x
    m = layer.intermediate(h)  # (B, T, 4H): W_1 and GELU
    y = layer.output(m, h)  # (B, T, H): second Add & Norm, residual = h
print(f"four calls vs hidden_states[1]: max abs diff {(y - cap.hidden_states[1]).abs().max().item()}")
assert torch.equal(y, cap.hidden_states[1])  # the prose below says "exactly zero"

# %% [markdown]
# The difference is exactly zero: the same operations in the same order give the same bits.
# The same holds for every layer:

# %%
with torch.no_grad():
    for i, lay in enumerate(model.encoder.layer):
        x_i = cap.hidden_states[i]  # (B, T, H): layer i's input
        ctx, _ = lay.attention.self(x_i, attention_mask=mask)
        h_i = lay.attention.output(ctx, x_i)
        out = lay.output(lay.intermediate(h_i), h_i)
        print(f"layer {i}: four calls on hidden_states[{i}] vs hidden_states[{i + 1}]: "
              f"max abs diff {(out - cap.hidden_states[i + 1]).abs().max().item()}")

# %% [markdown]
# ## The first Add & Norm
#
# Now the inside of `attention.output`, by hand: $W^O$ (`dense`) turns the concatenated heads
# $c$ into the update $a$ (a sum of the heads' outputs, each through its own rows of $W^O$,
# lesson 3), dropout (the identity in eval mode), the residual add of the layer input $x$, then
# LayerNorm with the biased variance and $\varepsilon$ from the config. The residual is `input_tensor`, the
# input of the whole attention sub-layer, not the merged heads that entered `dense`. The mistakes
# a learner might make are computed alongside, each with its distance from the real module.

# %%
def layer_norm(z, ln):
    """LayerNorm over the last axis by hand: (..., H) -> (..., H)."""
    mu = z.mean(-1, keepdim=True)
    var = z.var(-1, keepdim=True, unbiased=False)
    return ln.weight * (z - mu) / torch.sqrt(var + ln.eps) + ln.bias


so = layer.attention.output
torch_eps = torch.nn.LayerNorm(1).eps  # PyTorch's default
with torch.no_grad():
    a = context @ so.dense.weight.T + so.dense.bias  # (B, T, H): the attention update, c W^O + b^O
    candidates = {
        "by hand: LN_1(x + a)": layer_norm(x + a, so.LayerNorm),  # add, then normalise
        "mistake: x + LN_1(a)": x + layer_norm(a, so.LayerNorm),
        "mistake: LN_1(a), no residual": layer_norm(a, so.LayerNorm),
        "mistake: LN_1(a + c), residual = merged heads": layer_norm(a + context, so.LayerNorm),
        "mistake: attention.output(x, c), swapped": so(x, context),
        f"mistake: eps {torch_eps:g} instead of {so.LayerNorm.eps:g}": F.layer_norm(
            x + a, (x.shape[-1],), so.LayerNorm.weight, so.LayerNorm.bias, eps=torch_eps),
    }
for label, candidate in candidates.items():
    print(f"{label:<48} vs attention.output: max abs diff {(candidate - h).abs().max().item():.1e}")
claims.value("eps_effect_layer0", (candidates[f"mistake: eps {torch_eps:g} instead of {so.LayerNorm.eps:g}"] - h)
             .abs().max(), "{:.1e}")

# %% [markdown]
# PyTorch's default $\varepsilon$ moves this LayerNorm by up to {{ eps_effect_layer0 }}. How far
# it moves one depends on the variances that reach it: across the model's LayerNorms the effect
# runs from {{ 06-layernorm: eps_effect_min }} to {{ 06-layernorm: eps_effect_max }}
# ([lesson 6](06-layernorm.py) measures each).

# %% [markdown]
# ## The second Add & Norm
#
# The same pattern closes the feed-forward network, with one change that is easy to get wrong:
# the residual is $h$, the output of the first Add & Norm, not the layer input $x$.

# %%
out = layer.output
with torch.no_grad():
    f = m @ out.dense.weight.T + out.dense.bias  # (B, T, 4H) @ (4H, H) -> (B, T, H): the FFN update
    y_hand = layer_norm(h + f, out.LayerNorm)
for label, candidate in {
    "by hand: LN_2(h + f)": y_hand,
    "mistake: LN_2(x + f)": layer_norm(x + f, out.LayerNorm),
}.items():
    print(f"{label:<36} vs hidden_states[1]: max abs diff {(candidate - cap.hidden_states[1]).abs().max().item():.1e}")

# %% [markdown]
# ## Dropout on the branch, never on the residual
#
# In training, `hidden_dropout_prob` zeroes features of the sub-layer's output (`dense(...)`),
# before the add. The residual input $x$ is added untouched, so a token's representation is never
# wiped out by dropout; only the sub-layer's update to it is thinned. Training-mode draws through
# the first Add & Norm, averaged over {{ dropout_draws }} draws so that the comparison is about
# dropout, not about one mask (a mask depends on the random generator, which differs between
# machines); how far a draw moves the tokens is measured as $1 - \cos$ to eval mode:

# %%
p = so.dropout.p
DRAWS = 16
cos_branch = cos_after = zeroed = 0.0
for seed in range(DRAWS):
    torch.manual_seed(seed)
    with torch.no_grad():
        a_dropped = F.dropout(a, p=p, training=True)  # only the branch
        h_train = so.LayerNorm(x + a_dropped)
        h_dropped_after = F.dropout(so.LayerNorm(x + a), p=p, training=True)  # dropout moved after the LayerNorm
    cos_branch += F.cosine_similarity(h_train[real], h[real], dim=-1).mean().item() / DRAWS
    cos_after += F.cosine_similarity(h_dropped_after[real], h[real], dim=-1).mean().item() / DRAWS
    zeroed += (a_dropped == 0).float().mean().item() / DRAWS
print(f"p = {p}: zeroed fraction of the branch {zeroed:.3f}; "
      f"mean cosine of the token vectors to eval mode {cos_branch:.4f}")
print(f"dropout after the LayerNorm instead: mean cosine to eval mode {cos_after:.4f}")
print(f"1 - cosine: {1 - cos_after:.4f} after the LayerNorm, {1 - cos_branch:.4f} on the branch "
      f"({(1 - cos_after) / (1 - cos_branch):.1f} times as far)")
claims.value("dropout_draws", DRAWS, "{:.0f}")
claims.value("dropout_branch_cosine", cos_branch, "{:.4f}")
claims.value("dropout_after_ln_cosine", cos_after, "{:.4f}")
claims.value("dropout_after_ln_times", (1 - cos_after) / (1 - cos_branch), "{:.0f}")
claims.claim("dropout_after_ln_worse", 1 - cos_after, ">", 1 - cos_branch,
             "dropout after the LayerNorm moves the token vectors more than dropout on the branch")

# %% [markdown]
# ## How much each sub-layer writes
#
# The residual form means each sub-layer adds an *update* to the stream. Its size relative to the
# stream it is added to, $\lVert a \rVert / \lVert x \rVert$ for attention and
# $\lVert f \rVert / \lVert h \rVert$ for the FFN, averaged over real tokens, per layer:

# %% alt="Bar chart per layer of two mean norm ratios side by side: the attention update over its residual input, and the feed-forward update over its residual input."
ratios = {"attention": [], "feed-forward": []}
with torch.no_grad():
    for i, lay in enumerate(model.encoder.layer):
        x_i = cap.layer(i, "attention.output").args[1]  # (B, T, H): residual of the first add
        ctx = cap.layer(i, "attention.output").args[0]  # (B, T, H): merged heads c
        h_i = cap.layer(i, "attention.output").output  # (B, T, H): residual of the second add
        a_i = lay.attention.output.dense(ctx)  # (B, T, H): attention update
        f_i = lay.output.dense(cap.layer(i, "intermediate").output)  # (B, T, H): FFN update
        ratios["attention"].append((a_i.norm(dim=-1) / x_i.norm(dim=-1))[real].mean().item())
        ratios["feed-forward"].append((f_i.norm(dim=-1) / h_i.norm(dim=-1))[real].mean().item())
        print(f"layer {i}: |a| / |x| = {ratios['attention'][-1]:.3f}   "
              f"|f| / |h| = {ratios['feed-forward'][-1]:.3f}")

fig, ax = plt.subplots(figsize=(6, 3))
idx = torch.arange(model.config.num_hidden_layers)
ax.bar(idx - 0.18, ratios["attention"], width=0.36, label="attention: |a| / |x|", color="#4c78a8")
ax.bar(idx + 0.18, ratios["feed-forward"], width=0.36, label="FFN: |f| / |h|", color="#f58518")
ax.set_xlabel("layer")
ax.set_ylabel("mean norm ratio")
ax.legend(frameon=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Post-LN
#
# BERT normalises **after** the add, on the main path: "Post-LN". Xiong et al. (2020, "On Layer
# Normalization in the Transformer Architecture", ICML, arXiv:2002.04745) compare it with
# "Pre-LN", which moves the LayerNorm inside the branch and leaves the residual path free of
# normalisation:
#
# $$\text{Post-LN: } x_{l+1} = \mathrm{LayerNorm}\big(x_l + F(x_l)\big) \qquad
# \text{Pre-LN: } x_{l+1} = x_l + F\big(\mathrm{LayerNorm}(x_l)\big).$$
#
# With a mean-field analysis they show that at initialisation the expected gradients of the
# Post-LN parameters near the output layer are large, and they argue that this is why Post-LN
# training needs a learning-rate warm-up (Devlin et al. warm up over the first 10,000 steps); in
# their experiments Pre-LN transformers train without the warm-up stage. Lesson 6 measures
# gradients at initialisation. One visible consequence of Post-LN: every layer's output is
# freshly normalised, so the size of the token vectors is not a sum accumulated over the layers
# but is reset by each layer's last LayerNorm. Mean token norm of each `hidden_states[i]`:

# %%
for i, x_i in enumerate(cap.hidden_states):
    print(f"hidden_states[{i}]: mean token norm {x_i[real].norm(dim=-1).mean().item():6.2f}")

# %% [markdown]
# The norms go up and down from layer to layer (printed): LayerNorm does not hold the norm
# constant. What it does fix is each token's mean and variance over its features before $\gamma$
# and $\beta$; the norm after that depends on each LayerNorm's $\gamma$ and $\beta$, which differ
# from layer to layer (lesson 6 measures this).

# %% [markdown]
# Dropout keeps its place in either arrangement: on the branch, before the add (see
# "Dropout on the branch, never on the residual" above). Placed after the LayerNorm it would
# also drop features of the residual stream, the one path that is supposed to carry $x$ through
# unchanged: over the draws above, the token vectors keep a mean cosine of
# {{ dropout_after_ln_cosine }} to eval mode, against {{ dropout_branch_cosine }} with dropout on
# the branch: about {{ dropout_after_ln_times }} times as far from eval mode, measured as
# $1 - \cos$ {{ claim: dropout_after_ln_worse }}.
#
# The weights of a pretrained model only make sense in the arrangement they were trained in.
# `bertlab.experiments.variants.encode` runs the pretrained sub-modules with the residuals and
# LayerNorms arranged differently (the same weights throughout) and `drift` compares the final
# hidden states and the sentence embeddings (mean over tokens, normalised) with the real model.
# "Same neighbour" is the fraction of corpus sentences whose most similar other sentence is
# unchanged:

# %%
reference = cap.last_hidden_state  # (B, T, H)
for name, formula in ARRANGEMENTS.items():
    dr = drift(reference, encode(model, cap.batch, name), pad)
    print(f"{name:<25} {formula:<48} max abs diff {dr['max_abs_diff']:8.2e}  sentence cosine "
          f"{dr['sentence_cosine']:.4f}  same neighbour {dr['same_neighbour']:.0%}")

# %% [markdown]
# Post-LN reproduces the model; each other arrangement moves the outputs away from it, by the
# amounts printed. This is also why the checks of the course's exercises can tell these mistakes
# apart: each one leaves its own fingerprint on the numbers.
#
# ## What we found
#
# - The first Add & Norm is the end of `attention.output` (`BertSelfOutput`):
#   `LayerNorm(dropout(dense(context)) + input_tensor)` with `input_tensor` = the layer input.
# - The second Add & Norm is the end of `output` (`BertOutput`): the same formula with
#   `input_tensor` = the output of the first Add & Norm.
# - Calling `attention.self`, `attention.output`, `intermediate` and `output` by hand reproduced
#   `hidden_states[1]` from `hidden_states[0]` with a difference of exactly zero.
# - BERT is Post-LN: it normalises after each add, on the residual path itself.
#
# **Exercise:** [04-attention-output](../exercises/04-attention-output/04-attention-output.ipynb):
# open it with `make lab`, then grade it with `bertlab grade 04`.

# %% tags=["remove-input"]
claims.publish()  # the numbers and claims above, for the build that renders this page
