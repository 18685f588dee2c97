# %% [markdown]
# # Lesson 8: LayerNorm, and where it sits
#
# **Question.** BERT normalises after every residual add: $\mathrm{LayerNorm}(x + F(x))$, "Post-LN".
# What exactly does a LayerNorm compute, and why does its position matter? Many later
# transformers normalise *inside* the branch instead ("Pre-LN"); and BERT was trained with a
# learning-rate warm-up. Are the two related?
#
# ## The equation
#
# Layer normalisation (Ba, Kiros & Hinton 2016) normalises each token vector $z \in \mathbb{R}^H$
# over its own $H$ features, then applies a learned gain $\gamma$ and bias $\beta$:
#
# $$\mu = \frac{1}{H}\sum_{k=1}^{H} z_k, \qquad \sigma^2 = \frac{1}{H}\sum_{k=1}^{H} (z_k - \mu)^2,
# \qquad \mathrm{LN}(z) = \gamma \odot \frac{z - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta.$$
#
# Two details decide whether a re-implementation matches the pretrained model: the variance is
# the *biased* one (divide by $H$, not $H - 1$), and $\varepsilon$ is `layer_norm_eps` from the
# config, not PyTorch's default.

# %%
import copy

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from transformers import get_linear_schedule_with_warmup

from bertlab import corpus
from bertlab.experiments import lesions, rank_collapse
from bertlab.masks import additive_mask
from bertlab.reference import load_model, load_tokenizer

model, tokenizer = load_model(), load_tokenizer()
batch = corpus.batch(tokenizer)  # (B, T) tensors
real = batch["attention_mask"].bool()  # (B, T)
config = model.config
H, L = config.hidden_size, config.num_hidden_layers
print(f"H = {H}, layers = {L}, layer_norm_eps = {config.layer_norm_eps:g}, "
      f"PyTorch's default eps = {torch.nn.LayerNorm(H).eps:g}")

# %% [markdown]
# ## LayerNorm by hand
#
# The input of layer 2's first LayerNorm is $x + a$, the stream plus the attention update. We
# normalise it by hand and compare with the module, then with the two usual mistakes.

# %%
LAYER = 2
trace = lesions.run(model, batch)
z = trace.hidden_states[LAYER] + trace.attention_updates[LAYER]  # (B, T, H): x + a
ln = model.encoder.layer[LAYER].attention.output.LayerNorm

mu = z.mean(-1, keepdim=True)  # (B, T, 1)
var = ((z - mu) ** 2).mean(-1, keepdim=True)  # (B, T, 1): biased, divides by H
y_hand = ln.weight * (z - mu) / torch.sqrt(var + config.layer_norm_eps) + ln.bias  # (B, T, H)

with torch.no_grad():
    y_module = ln(z)  # (B, T, H)
var_unbiased = z.var(-1, keepdim=True, unbiased=True)  # divides by H - 1
y_unbiased = ln.weight * (z - mu) / torch.sqrt(var_unbiased + config.layer_norm_eps) + ln.bias
y_default_eps = F.layer_norm(z, (H,), ln.weight, ln.bias, eps=torch.nn.LayerNorm(H).eps)
print(f"by hand vs nn.LayerNorm:              max abs diff {(y_hand - y_module).abs().max().item():.1e}")
print(f"by hand vs the stream after the block: max abs diff {(y_hand - trace.ffn_inputs[LAYER]).abs().max().item():.1e}")
print(f"mistake, unbiased variance:           max abs diff {(y_unbiased - y_module).abs().max().item():.1e}")
print(f"mistake, PyTorch's default eps:       max abs diff {(y_default_eps - y_module).abs().max().item():.1e}")
print(f"per-token variance of x + a over real tokens: min {var[real].min().item():.3f}, max {var[real].max().item():.3f}")

# %% [markdown]
# The by-hand version matches to float rounding. The unbiased variance shrinks every normalised
# value by a factor $\sqrt{(H-1)/H}$ before $\gamma$ and $\beta$, a small but systematic error; the default $\varepsilon$ matters less here
# because the per-token variances (printed) are far larger than either $\varepsilon$.
#
# ## What LayerNorm forgets
#
# Per token, LayerNorm removes the mean of the features and the overall scale. Adding a constant
# to every feature of a token, or multiplying the token by a positive number, does not change its
# output (up to the tiny $\varepsilon$). What survives is the *direction* of the centred vector:

# %%
with torch.no_grad():
    shift = torch.randn(z.shape[:-1] + (1,), generator=torch.Generator().manual_seed(0))  # (B, T, 1)
    scale = torch.rand(z.shape[:-1] + (1,), generator=torch.Generator().manual_seed(1)) * 5 + 0.5  # (B, T, 1)
    print(f"LN(z + c) vs LN(z), a different c per token: max abs diff {(ln(z + shift) - y_module).abs().max().item():.1e}")
    print(f"LN(s z) vs LN(z), a different s > 0 per token: max abs diff {(ln(scale * z) - y_module).abs().max().item():.1e}")
    token_norms = trace.ffn_inputs[LAYER].norm(dim=-1)[real]  # (N,)
    unit = ((z - mu) / torch.sqrt(var + config.layer_norm_eps)).norm(dim=-1)[real]  # (N,)
print(f"||(z - mu) / sigma|| over real tokens: min {unit.min().item():.4f}, max {unit.max().item():.4f} "
      f"(sqrt(H) = {H ** 0.5:.4f})")
print(f"after gamma and beta: token norms from {token_norms.min().item():.2f} to {token_norms.max().item():.2f}")

# %% [markdown]
# Before $\gamma$ and $\beta$, every token has norm $\sqrt H$ (printed): LayerNorm puts each
# token on a sphere. This is what keeps Post-LN BERT's stream at a constant size through the
# layers (lesson 4 printed the token norms per layer). It is also what changes the gradients.
#
# ## Post-LN and Pre-LN
#
# Xiong et al. (2020) compare the two placements:
#
# $$\text{Post-LN:}\quad x_{l+1} = \mathrm{LN}\big(x_l + F_l(x_l)\big), \qquad
# \text{Pre-LN:}\quad x_{l+1} = x_l + F_l\big(\mathrm{LN}(x_l)\big),$$
#
# with one more LayerNorm after the last Pre-LN layer. In Pre-LN the path from the input to the
# output is a pure sum, $x_L = x_0 + \sum_l F_l(\cdot)$; in Post-LN every half layer divides the
# stream, and with it the gradient flowing back, by a data-dependent standard deviation. Xiong et
# al. prove with mean-field arguments that at initialisation the Post-LN gradients of the
# parameters near the output are large: their Theorem 1 bounds the gradient of the last layer's
# second FFN matrix $W^{2,L}$ by $O(d\sqrt{\ln d})$ for Post-LN, with no dependence on depth, and
# by $O(d\sqrt{\ln d / L})$ for Pre-LN, smaller by a factor $\sqrt L$. With a large learning rate
# those big gradients make the first updates unstable; warming the learning rate up keeps the
# early steps small. They then train Pre-LN transformers without warm-up and reach comparable
# results faster.
#
# ## Gradients at initialisation, measured
#
# We build a randomly initialised BERT with our config, run it both ways with *the same weights*
# (Post-LN: the library's own order; Pre-LN: the same sub-modules composed with the LayerNorm
# moved into each branch, plus a final LayerNorm without parameters), and back-propagate one
# masked-language-model loss on the corpus: 15% of the real, non-special tokens replaced by
# `[MASK]` and predicted through the tied word-embedding matrix, as BERT's decoder is tied to it
# (BERT's extra transform layer before the decoder is left out). We record
# $\lVert \partial \mathcal{L} / \partial W_2 \rVert_F$ for the FFN's output matrix
# (`output.dense.weight`) of every layer, mean over three seeds, for two initialisations: the
# library's (normal, std `initializer_range`, what BERT used) and Xavier (the setting of Xiong et
# al.'s analysis).

# %%
def forward(net, input_ids, attention_mask, token_type_ids, arrangement):
    """Run `net`'s sub-modules composed Post-LN or Pre-LN.

    Returns the final hidden states (B, T, H) and the stream after the embeddings and after each
    layer, a list of L + 1 tensors (B, T, H).
    """
    mask = additive_mask(attention_mask)  # (B, 1, T, T)
    x = net.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)  # (B, T, H)
    streams = [x]
    for layer in net.encoder.layer:
        att, ln_att, ln_out = layer.attention, layer.attention.output.LayerNorm, layer.output.LayerNorm
        if arrangement == "Post-LN":
            h = ln_att(x + att.output.dense(att.self(x, attention_mask=mask)[0]))  # (B, T, H)
            x = ln_out(h + layer.output.dense(layer.intermediate(h)))  # (B, T, H)
        else:
            h = x + att.output.dense(att.self(ln_att(x), attention_mask=mask)[0])  # LN inside the branch
            x = h + layer.output.dense(layer.intermediate(ln_out(h)))
        streams.append(x)
    if arrangement == "Pre-LN":
        x = F.layer_norm(x, (x.shape[-1],), eps=net.config.layer_norm_eps)  # the final LayerNorm
    return x, streams


def masked_tokens(seed):
    """Input ids with 15% of the real, non-special tokens masked; (B, T) ids, (B, T) chosen, (N,) targets."""
    g = torch.Generator().manual_seed(seed)
    ids = batch["input_ids"].clone()  # (B, T)
    special = torch.isin(ids, torch.tensor(tokenizer.all_special_ids))
    chosen = (torch.rand(ids.shape, generator=g) < 0.15) & real & ~special  # (B, T)
    targets = ids[chosen]  # (N,)
    ids[chosen] = tokenizer.mask_token_id
    return ids, chosen, targets


def random_net(seed, init, layers=L):
    cfg = copy.deepcopy(config)
    cfg.num_hidden_layers = layers
    net = rank_collapse.random_model(cfg, seed)  # library init, eval mode: no dropout noise
    if init == "Xavier":
        g = torch.Generator().manual_seed(seed)
        for module in net.encoder.modules():
            if isinstance(module, torch.nn.Linear):
                torch.nn.init.xavier_normal_(module.weight, generator=g)
                torch.nn.init.zeros_(module.bias)
    net.embeddings.requires_grad_(False)  # we only look at the encoder's gradients
    return net


def w2_grad_norms(net, seed, arrangement):
    """(layers,) Frobenius norm of dLoss/dW_2 for each layer's FFN output matrix."""
    net.zero_grad(set_to_none=True)
    ids, chosen, targets = masked_tokens(seed)
    hidden, _ = forward(net, ids, batch["attention_mask"], batch["token_type_ids"], arrangement)  # (B, T, H)
    logits = hidden[chosen] @ net.embeddings.word_embeddings.weight.T  # (N, V)
    F.cross_entropy(logits, targets).backward()
    return torch.stack([layer.output.dense.weight.grad.norm() for layer in net.encoder.layer])


SEEDS = (0, 1, 2)
ARRANGEMENTS = ("Post-LN", "Pre-LN")
grads = {}  # (init, arrangement) -> (L,) mean over seeds
for init in ("library", "Xavier"):
    per_seed = {a: [] for a in ARRANGEMENTS}
    for seed in SEEDS:
        net = random_net(seed, init)
        for a in ARRANGEMENTS:
            per_seed[a].append(w2_grad_norms(net, seed, a))
    for a in ARRANGEMENTS:
        grads[init, a] = torch.stack(per_seed[a]).mean(0)

for (init, a), g in grads.items():
    print(f"{init + ' init':<13}{a:<8} ||dL/dW_2|| per layer: " + " ".join(f"{v:.3f}" for v in g.tolist()))
I = config.intermediate_size
print(f"weight std: library init {config.initializer_range}, Xavier {(2 / (H + H)) ** 0.5:.3f} for (H, H) "
      f"and {(2 / (H + I)) ** 0.5:.3f} for (H, 4H) matrices")

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
for ax, init in zip(axes, ("library", "Xavier")):
    for a in ARRANGEMENTS:
        ax.plot(range(L), grads[init, a], marker="o", label=a)
    ax.set_title(f"{init} initialisation")
    ax.set_xlabel("layer")
    ax.set_xticks(range(L))
    ax.set_ylim(bottom=0)
axes[0].set_ylabel(r"$\|\partial \mathcal{L} / \partial W_2\|_F$ (mean of 3 seeds)")
axes[1].legend(frameon=False)
fig.tight_layout()
plt.show()

for init in ("library", "Xavier"):
    post, pre = grads[init, "Post-LN"], grads[init, "Pre-LN"]
    print(f"{init} init: last layer Post-LN / Pre-LN = {(post[-1] / pre[-1]).item():.2f}; "
          f"Pre-LN last / first layer = {(pre[-1] / pre[0]).item():.2f}, Post-LN last / first = {(post[-1] / post[0]).item():.2f}")

# %% [markdown]
# With Xavier initialisation, the setting of the theory, the last layer's gradient is larger in
# Post-LN than in Pre-LN by the factor printed, and Pre-LN's gradients shrink towards the output
# much faster than Post-LN's (last-to-first ratios printed). With the library's initialisation (standard deviation
# `initializer_range`, smaller than Xavier's for these widths, both printed) every branch starts out small
# next to the stream, both arrangements are close to the identity, and the gap is small.
#
# Theorem 1 says the Post-LN to Pre-LN ratio at the last layer should grow like $\sqrt L$. One
# more measurement, with twice as many layers (Xavier init, same seeds):

# %%
deep = {a: [] for a in ARRANGEMENTS}
for seed in SEEDS:
    net = random_net(seed, "Xavier", layers=2 * L)
    for a in ARRANGEMENTS:
        deep[a].append(w2_grad_norms(net, seed, a)[-1])
for layers, post, pre in ((L, grads["Xavier", "Post-LN"][-1], grads["Xavier", "Pre-LN"][-1]),
                          (2 * L, torch.stack(deep["Post-LN"]).mean(), torch.stack(deep["Pre-LN"]).mean())):
    print(f"{layers:>2} layers: last-layer gradient Post-LN {post.item():.3f}, Pre-LN {pre.item():.3f}, "
          f"ratio {(post / pre).item():.2f}, sqrt(L) = {layers ** 0.5:.2f}")

# %% [markdown]
# Doubling the depth leaves the Post-LN gradient at the last layer about where it was and makes
# the Pre-LN one smaller, so the ratio grows (compare it with $\sqrt L$ in the printout).
#
# Why Pre-LN's gradients shrink with depth: its stream is a growing sum, and each LayerNorm
# divides what it reads by the stream's current size, so a later layer's parameters affect the
# output less. In Post-LN every layer's output is renormalised to the same size. The token norms
# of the stream through the layers, at initialisation:

# %%
with torch.no_grad():
    net = random_net(0, "Xavier")
    for a in ARRANGEMENTS:
        _, streams = forward(net, batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], a)
        norms = [s.norm(dim=-1)[real].mean().item() for s in streams]  # L + 1 values
        print(f"{a:<8} mean token norm of the stream, embeddings then after each layer: "
              + " ".join(f"{v:.1f}" for v in norms))

# %% [markdown]
# ## Warm-up
#
# BERT is Post-LN, and Devlin et al. (2019) trained it with Adam at a peak learning rate of
# $10^{-4}$, warmed up linearly over the first 10,000 steps and then decayed linearly over the
# 1,000,000 training steps. This is the warm-up Xiong et al. explain: while the gradients near
# the output are large, a small learning rate keeps the first updates from throwing the model
# off. The schedule, drawn by the library's own implementation:

# %%
WARMUP, TOTAL, PEAK = 10_000, 1_000_000, 1e-4  # Devlin et al. (2019), Section A.2
opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=PEAK)
schedule = get_linear_schedule_with_warmup(opt, num_warmup_steps=WARMUP, num_training_steps=TOTAL)
steps = torch.arange(0, TOTAL + 1, 2_000)
lr = [PEAK * schedule.lr_lambdas[0](int(s)) for s in steps]
fig, axes = plt.subplots(1, 2, figsize=(10, 2.8))
axes[0].plot(steps, lr)
axes[0].set_title("whole run")
zoom = steps <= 5 * WARMUP
axes[1].plot(steps[zoom], [v for v, k in zip(lr, zoom) if k])
axes[1].axvline(WARMUP, color="gray", ls="--", lw=0.8)
axes[1].set_title("first steps: linear warm-up")
for ax in axes:
    ax.set_xlabel("step")
axes[0].set_ylabel("learning rate")
fig.tight_layout()
plt.show()
print(f"learning rate at step 1: {PEAK * schedule.lr_lambdas[0](1):.1e}, at step {WARMUP}: {PEAK * schedule.lr_lambdas[0](WARMUP):.1e}")

# %% [markdown]
# ## What we found
#
# - LayerNorm normalises each token over its own features with the biased variance and the
#   config's $\varepsilon$; by hand it matches `nn.LayerNorm` to rounding, and the unbiased
#   variance or PyTorch's default $\varepsilon$ do not match exactly.
# - It forgets each token's mean and scale and keeps the direction of the centred vector; before
#   $\gamma$ and $\beta$ every token has norm $\sqrt H$.
# - At initialisation, with Xavier weights, Post-LN's gradients near the output are larger than
#   Pre-LN's by a factor that grows with depth, as Xiong et al. predict; with BERT's small
#   initialisation the two are closer. Post-LN BERT was trained with a learning-rate warm-up.
#
# **Exercise:** [06-bert-model](../exercises/06-bert-model/06-bert-model.ipynb): open it with
# `make lab`, then grade it with `bertlab grade 06`.
#
# ## References
#
# - Ba, J. L., Kiros, J. R., & Hinton, G. E. (2016). Layer Normalization. arXiv:1607.06450.
# - Devlin, J., Chang, M.-W., Lee, K., & Toutanova, K. (2019). BERT: Pre-training of Deep
#   Bidirectional Transformers for Language Understanding. *NAACL*.
# - Xiong, R., Yang, Y., He, D., et al. (2020). On Layer Normalization in the Transformer
#   Architecture. *ICML*. arXiv:2002.04745.
