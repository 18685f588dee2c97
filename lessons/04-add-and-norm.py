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
# $$f = \mathrm{GELU}(hW_1 + b_1)\,W_2 + b_2, \qquad y = \mathrm{LN}_2\big(h +
# \mathrm{Dropout}(f)\big).$$
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
# The "Add & Norm" lives inside the two modules that end each block (a sub-layer with its add and
# its LayerNorm), `BertSelfOutput` (`attention.output`) and `BertOutput` (`output`). The library's
# own source, printed from the installed version:

# %%
print(inspect.getsource(modeling_bert.BertSelfOutput.forward))
print(inspect.getsource(modeling_bert.BertOutput.forward))
print(inspect.getsource(modeling_bert.BertLayer.feed_forward_chunk))

# %% [markdown]
# Both have the same shape: `dense`, `dropout`, then `LayerNorm(hidden_states + input_tensor)`.
# The difference is what they receive. `BertAttention` calls `self.output(attention_output,
# hidden_states)`, so in the first one `input_tensor` is the **layer's input** $x$;
# `feed_forward_chunk` calls `self.output(intermediate_output, attention_output)`, so in the
# second one `input_tensor` is the **attention block's output** $h$, the output of the first
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
print(
    f"four calls vs hidden_states[1]: max abs diff {(y - cap.hidden_states[1]).abs().max().item()}"
)
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
        print(
            f"layer {i}: four calls on hidden_states[{i}] vs hidden_states[{i + 1}]: "
            f"max abs diff {(out - cap.hidden_states[i + 1]).abs().max().item()}"
        )

# %% [markdown]
# ## The first Add & Norm
#
# Now the inside of `attention.output`, by hand: $W^O$ (`dense`) turns the concatenated heads
# $c$ into the update $a$ (a sum of the heads' outputs, each through its own rows of $W^O$,
# lesson 3), dropout (the identity in eval mode), the residual add of the layer input $x$, then
# LayerNorm with the biased variance and $\varepsilon$ from the config. The residual is
# `input_tensor`, the
# input of the whole attention block, not the merged heads that entered `dense`. The mistakes
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
            x + a, (x.shape[-1],), so.LayerNorm.weight, so.LayerNorm.bias, eps=torch_eps
        ),
    }
for label, candidate in candidates.items():
    print(f"{label:<48} vs attention.output: max abs diff {(candidate - h).abs().max().item():.1e}")
claims.value(
    "eps_effect_layer0",
    (candidates[f"mistake: eps {torch_eps:g} instead of {so.LayerNorm.eps:g}"] - h).abs().max(),
    "{:.1e}",
)

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
    print(
        f"{label:<36} vs hidden_states[1]: max abs diff "
        f"{(candidate - cap.hidden_states[1]).abs().max().item():.1e}"
    )

# %% [markdown]
# ## Where dropout sits
#
# In training, `hidden_dropout_prob` zeroes features of the sub-layer's output (`dense(...)`),
# before the add. Dropout could sit elsewhere, after the LayerNorm for one:
#
# {{ predict: dropout_after_ln }}

# %% tags=["remove-input"]
# A question before the measurement below; the build selects its answer from the claim recorded
# there.
from bertlab.experiments import predictions as ask

ask.predict(
    "dropout_after_ln",
    "Moved after the LayerNorm, onto the sum itself, does the same dropout move "
    "the token vectors more or less than on the branch?",
    [
        ask.between(
            "dropout_after_ln_times",
            None,
            1,
            "less far than on the branch",
            "That would hold if the update were "
            "larger than the stream it is added to. It is smaller, so zeroing features of the "
            "update moves "
            "a token less than zeroing features of the whole sum.",
        ),
        ask.between(
            "dropout_after_ln_times",
            1,
            3,
            "farther, up to 3 times as far",
            "That would hold if the update "
            "were nearly as large as the stream: dropping part of it would move a token almost as "
            "much as "
            'dropping part of the sum. It is a fraction of the stream (measured in "How much each '
            'sub-layer writes", below), and the tokens move {{ dropout_after_ln_times }} times as '
            "far.",
        ),
        ask.between(
            "dropout_after_ln_times",
            3,
            None,
            "more than 3 times as far",
            "On the branch, dropout thins "
            "only the update and the residual input passes untouched: the mean cosine to eval "
            "mode is "
            "{{ dropout_branch_cosine }} there, {{ dropout_after_ln_cosine }} after the LayerNorm, "
            "{{ dropout_after_ln_times }} times as far {{ claim: dropout_after_ln_worse }}.",
        ),
    ],
    section="Where dropout sits",
)

# %% [markdown]
# On the branch, the residual input $x$ is added untouched, so a token's representation is never
# wiped out by dropout; dropout thins the sub-layer's update to it. Training-mode draws through the
# first Add & Norm, averaged over {{ dropout_draws }} draws so that the comparison is about dropout,
# not about one mask (a mask depends on the random generator, which differs between machines); how
# far a draw moves the tokens is measured as $1 - \cos$ to eval mode:

# %%
p = so.dropout.p
DRAWS = 16
cos_branch = cos_after = zeroed = 0.0
for seed in range(DRAWS):
    torch.manual_seed(seed)
    with torch.no_grad():
        a_dropped = F.dropout(a, p=p, training=True)  # only the branch
        h_train = so.LayerNorm(x + a_dropped)
        # dropout moved after the LayerNorm
        h_dropped_after = F.dropout(so.LayerNorm(x + a), p=p, training=True)
    cos_branch += F.cosine_similarity(h_train[real], h[real], dim=-1).mean().item() / DRAWS
    cos_after += F.cosine_similarity(h_dropped_after[real], h[real], dim=-1).mean().item() / DRAWS
    zeroed += (a_dropped == 0).float().mean().item() / DRAWS
print(
    f"p = {p}: zeroed fraction of the branch {zeroed:.3f}; "
    f"mean cosine of the token vectors to eval mode {cos_branch:.4f}"
)
print(f"dropout after the LayerNorm instead: mean cosine to eval mode {cos_after:.4f}")
# as printed: the ratio is theirs
far_after, far_branch = (float(f"{1 - c:.3g}") for c in (cos_after, cos_branch))
print(
    f"1 - cosine: {far_after:.3g} after the LayerNorm, {far_branch:.3g} on the branch "
    f"({far_after / far_branch:.1f} times as far)"
)
claims.value("dropout_draws", DRAWS, "{:.0f}")
claims.value("dropout_branch_cosine", cos_branch, "{:.4f}")
claims.value("dropout_after_ln_cosine", cos_after, "{:.4f}")
claims.value("dropout_after_ln_times", far_after / far_branch, "{:.1f}")
claims.claim(
    "dropout_after_ln_worse",
    1 - cos_after,
    ">",
    1 - cos_branch,
    "dropout after the LayerNorm moves the token vectors more than dropout on the branch",
)

# %% [markdown]
# On the branch the token vectors keep a mean cosine of {{ dropout_branch_cosine }} to eval mode;
# with the dropout moved after the LayerNorm, {{ dropout_after_ln_cosine }}
# {{ claim: dropout_after_ln_worse }}: there it drops features of the residual stream too.

# %% [markdown]
# ## `model.eval()` or `torch.no_grad()`?
#
# Code that compares with a pretrained model often calls both, and they do different things.
# `model.eval()` sets every module's `training` flag to False; `torch.no_grad()` changes no
# module, it stops autograd from recording the operations, so that no graph is built and no
# tensor is kept for a backward pass.
#
# {{ predict: train_mode_without_dropout }}

# %% tags=["remove-input"]
ask.predict(
    "train_mode_without_dropout",
    "Set every dropout probability to zero and put the model in "
    "training mode: are its outputs those of eval mode?",
    [
        ask.holds(
            "train_mode_is_dropout_only",
            "yes, exactly",
            "In BERT only the dropouts read the `training` "
            "flag: with them at zero, train mode gives eval mode's outputs bit for bit "
            "{{ claim: train_mode_is_dropout_only }}.",
        ),
        ask.fails(
            "train_mode_is_dropout_only",
            "no: training mode changes more than dropout",
            "That would hold "
            "for a model with batch normalisation, whose statistics depend on the mode. BERT's "
            "LayerNorm "
            "does not read the flag.",
        ),
    ],
    section="`model.eval()` or `torch.no_grad()`?",
)

# %% [markdown]
# Which modules read the flag? The lines of transformers' BERT source that read it, the dropout
# modules, which read it inside PyTorch, and the model's outputs in training mode, with and
# without dropout (`bertlab.experiments.eval_no_grad`):

# %%
from bertlab.experiments import eval_no_grad
from bertlab.experiments.layernorm_eps import float32_step
from bertlab.pooling import sentence_embeddings

print(f"load_model() returns the model with training = {model.training}")
print("lines of transformers' modeling_bert.py that read `training`:")
for line in eval_no_grad.training_reads(modeling_bert):
    print("   ", line)
rates = eval_no_grad.dropouts(model)  # {name: p}
print(f"nn.Dropout modules: {len(rates)}, with p = {sorted(set(rates.values()))}")

batch = cap.batch
with torch.no_grad():
    reference = model(**batch).last_hidden_state  # (B, T, H): eval mode, as loaded
EVAL_DRAWS = 8
# (D, B, T, H), under no_grad
train_out = eval_no_grad.train_mode_outputs(model, batch, range(EVAL_DRAWS))
moved = torch.stack([(o - reference)[real].abs().max() for o in train_out])  # (D,)
cosines = torch.stack(
    [(sentence_embeddings(o, pad) * sentence_embeddings(reference, pad)).sum(-1) for o in train_out]
)
with eval_no_grad.dropout_probability(model, 0.0), torch.no_grad(), eval_no_grad.train_mode(model):
    train_no_dropout = model(**batch).last_hidden_state  # (B, T, H): train mode, every p = 0
step = float32_step(reference[real])
print(
    f"train mode vs eval mode, {EVAL_DRAWS} draws: largest change {moved.mean().item():.2f} "
    f"on average ({moved.mean().item() / step:.1e} float32 steps);\n"
    "sentence cosine to eval mode: mean "
    f"{cosines.mean().item():.4f}, lowest {cosines.min().item():.4f}"
)
print(
    "train mode with every dropout p = 0 vs eval mode: max abs diff "
    f"{(train_no_dropout - reference).abs().max().item()}"
)

with_grad = eval_no_grad.saved_for_backward(model, batch, grad=True)
without = eval_no_grad.saved_for_backward(model, batch, grad=False)
output_bytes = reference.nelement() * reference.element_size()
print(
    f"with gradients: {with_grad.count} saves for backward, "
    f"{with_grad.activation_bytes / 1e6:.1f} MB of activations\n"
    f"(+ {with_grad.parameter_bytes / 1e6:.1f} MB of parameters, kept by reference); "
    f"the last hidden state is {output_bytes / 1e6:.2f} MB"
)
print(f"under torch.no_grad(): {without.count} tensors saved, {without.activation_bytes} bytes")
print(
    "outputs with and without gradients: max abs diff "
    f"{(with_grad.output - without.output).abs().max().item()}"
)

claims.value("eval_draws", EVAL_DRAWS, "{:.0f}")
claims.value("dropout_modules", len(rates), "{:.0f}")
claims.value("train_moved", moved.mean(), "{:.2f}")
claims.value("train_moved_million_steps", moved.mean() / step / 1e6, "{:.0f}")
claims.value("train_sentence_cosine", cosines.mean(), "{:.3f}")
claims.claim(
    "train_mode_moves_outputs",
    moved.mean(),
    ">",
    1000 * step,
    "train mode moves the last hidden state by more than a thousand float32 steps",
)
claims.claim(
    "train_mode_is_dropout_only",
    (train_no_dropout - reference).abs().max(),
    "==",
    0,
    "with every dropout probability at 0, train mode gives exactly eval mode's outputs",
)
claims.value("saved_count", with_grad.count, "{:.0f}")
claims.value("saved_mb", with_grad.activation_bytes / 1e6, "{:.0f}")
claims.value("saved_vs_output", with_grad.activation_bytes / output_bytes, "{:.0f}")
claims.claim(
    "graph_keeps_more_than_output",
    with_grad.activation_bytes,
    ">",
    10 * output_bytes,
    "with gradients, the activations kept for backward are more than ten times the output's size",
)
claims.claim(
    "no_grad_keeps_nothing", without.count, "==", 0, "under no_grad no tensor is saved for backward"
)
claims.claim(
    "no_grad_same_values",
    (with_grad.output - without.output).abs().max(),
    "==",
    0,
    "the outputs with and without gradients are exactly equal",
)

# %% [markdown]
# The library's own lines (printed) all set the dropout of the attention probabilities; every
# other use of the flag is in PyTorch's `nn.Dropout`. In train mode the last hidden state moves by
# up to {{ train_moved }} (the largest change, averaged over {{ eval_draws }} dropout draws), some
# {{ train_moved_million_steps }} million float32 steps at its size: that is dropout, not rounding
# {{ claim: train_mode_moves_outputs }}, and the sentence embeddings keep a mean cosine of
# {{ train_sentence_cosine }} to eval mode's. Those draws ran under `torch.no_grad()`: it leaves
# dropout on. With every one of the {{ dropout_modules }} dropout probabilities set to 0, train
# mode gives exactly eval mode's outputs {{ claim: train_mode_is_dropout_only }}, so in BERT the
# flag switches dropout and nothing else (there are no batch statistics, as a BatchNorm would
# keep).
#
# `torch.no_grad()` changes no value: the outputs with and without it are identical to the bit
# {{ claim: no_grad_same_values }}. What it saves is memory. With gradients on (on a copy whose
# parameters require them, as in training), one forward pass over the corpus saved a tensor for
# the backward pass {{ saved_count }} times, {{ saved_mb }} MB of activations in all, which stay
# alive as long as the output does: {{ saved_vs_output }} times the size of the output itself
# {{ claim: graph_keeps_more_than_output }}. Under `torch.no_grad()` it saved none
# {{ claim: no_grad_keeps_nothing }}. So a comparison with the pretrained model needs
# `model.eval()`; `torch.no_grad()` is for memory (it also skips the work of recording the
# graph) and does not replace it. The course's `load_model()` returns the model in eval mode, as
# transformers' `from_pretrained` does.

# %% [markdown]
# ## How much each sub-layer writes
#
# The residual form means each sub-layer adds an *update* to the stream. Its size relative to the
# stream it is added to, $\lVert a \rVert / \lVert x \rVert$ for attention and
# $\lVert f \rVert / \lVert h \rVert$ for the FFN, averaged over real tokens, per layer:

# %%
# alt: Bar chart per layer of two mean norm ratios side by side: the attention update over its
#   residual input, and the feed-forward update over its residual input.
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
        print(
            f"layer {i}: |a| / |x| = {ratios['attention'][-1]:.3f}   "
            f"|f| / |h| = {ratios['feed-forward'][-1]:.3f}"
        )

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
# With a mean-field analysis (the weights taken as random draws, and the expected sizes of the
# activations and gradients followed from layer to layer, as if each were an average over many
# independent units) they show that at initialisation the expected gradients of the
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
# "Where dropout sits" above). Placed after the LayerNorm it would
# also drop features of the residual stream, the one path that is supposed to carry $x$ through
# unchanged: over the draws above, the token vectors keep a mean cosine of
# {{ dropout_after_ln_cosine }} to eval mode, against {{ dropout_branch_cosine }} with dropout on
# the branch: {{ dropout_after_ln_times }} times as far from eval mode, measured as $1 - \cos$
# (the ratio of the two printed above) {{ claim: dropout_after_ln_worse }}.
#
# Do the weights of a pretrained model still work in an arrangement other than the one they were
# trained in?
# `bertlab.experiments.variants.encode` runs the pretrained sub-modules with the residuals and
# LayerNorms arranged differently (the same weights throughout) and `drift` compares the final
# hidden states and the sentence embeddings (mean over tokens, normalised) with the real model.
# "Same neighbour" is the fraction of corpus sentences whose nearest other sentence is
# unchanged:

# %%
reference = cap.last_hidden_state  # (B, T, H)
print(f"{'arrangement':<25}{'max abs diff':>13}{'sentence cosine':>17}{'same neighbour':>16}")
for name, formula in ARRANGEMENTS.items():
    dr = drift(reference, encode(model, cap.batch, name), pad)
    print(
        f"{name:<25}{dr['max_abs_diff']:>13.2e}{dr['sentence_cosine']:>17.4f}"
        f"{dr['same_neighbour']:>16.0%}\n  {formula}"
    )

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
# - `model.eval()` switches dropout off, and in BERT nothing else
#   {{ claim: train_mode_is_dropout_only }}: it is what a comparison with the pretrained model
#   needs. `torch.no_grad()` changes no value {{ claim: no_grad_same_values }}; it keeps autograd
#   from saving the activations for a backward pass {{ claim: no_grad_keeps_nothing }}.
#
# **Exercise:** [04-attention-output](../exercises/04-attention-output/04-attention-output.ipynb):
# open it with `make lab`, then grade it with `bertlab grade 04`.
#
# ## Check yourself
#
# {{ predict: check_no_grad_values }}
#
# {{ predict: check_no_grad_saves }}
#
# {{ predict: check_graph_size }}

# %% tags=["remove-input"]
ask.check(
    "check_no_grad_values",
    "Does `torch.no_grad()` change the values a model returns?",
    [
        ask.holds(
            "no_grad_same_values",
            "no, they are exactly the same",
            "It stops autograd from recording; "
            "the arithmetic is the same {{ claim: no_grad_same_values }}.",
        ),
        ask.fails(
            "no_grad_same_values",
            "yes, a little",
            "That would hold if `no_grad` switched dropout off, or "
            "computed in another precision. It does neither: `model.eval()` is what switches "
            "dropout off.",
        ),
    ],
    section="`model.eval()` or `torch.no_grad()`?",
)
ask.check(
    "check_no_grad_saves",
    "Under `torch.no_grad()`, how many tensors are saved for a backward pass?",
    [
        ask.fails(
            "no_grad_keeps_nothing",
            "fewer than with gradients, but some",
            "That would hold if `no_grad` only pruned the graph. It builds none.",
        ),
        ask.holds(
            "no_grad_keeps_nothing",
            "none",
            "No graph is built, so nothing is kept for backward "
            "{{ claim: no_grad_keeps_nothing }}; with gradients, {{ saved_count }} tensors are "
            "saved.",
        ),
    ],
    section="`model.eval()` or `torch.no_grad()`?",
)
ask.check(
    "check_graph_size",
    "With gradients on, how do the activations kept for backward compare with the "
    "size of the model's output?",
    [
        ask.between(
            "saved_vs_output",
            10,
            None,
            "10 times the output's size, or more",
            "Every layer keeps its "
            "inputs, scores and intermediate activations for backward: {{ saved_mb }} MB, "
            "{{ saved_vs_output }} times the output's size {{ claim: "
            "graph_keeps_more_than_output }}.",
        ),
        ask.between(
            "saved_vs_output",
            2,
            10,
            "2 to 10 times its size",
            "That would hold if backward kept only "
            "each layer's output, one tensor of the output's size per layer. It keeps what every "
            "operation "
            "received: the inputs of each product, the attention scores, the FFN's $4H$-wide "
            "activations.",
        ),
        ask.between(
            "saved_vs_output",
            None,
            2,
            "about the output's size",
            "That would hold if backward needed "
            "only the output. It needs what each operation received.",
        ),
    ],
    section="`model.eval()` or `torch.no_grad()`?",
)

# %% tags=["remove-input"]
claims.publish()  # the numbers and claims above, for the build that renders this page
