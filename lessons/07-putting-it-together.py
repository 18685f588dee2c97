# %% [markdown]
# # Lesson 7: Putting it together
#
# **Question.** We have taken BERT apart: the embeddings (lesson 2), attention (lesson 3), Add &
# Norm (lesson 4), the feed-forward network (lesson 5) and LayerNorm (lesson 6). Put back
# together, does our composition give *exactly* what the
# `sentence-transformers` library gives for all-MiniLM-L6-v2, and what can the resulting
# sentence vectors do?
#
# ## The equations
#
# For a sentence of $T$ tokens, BERT's encoder (Devlin et al. 2019) computes
# $x_0 = \mathrm{Embed}(\text{tokens})$ and,
# for each layer $l = 0, \dots, L-1$ (letters of the [notation page](../docs/notation.md), the
# layer's index added to each),
#
# $$a_l = \mathrm{Concat}(\mathrm{head}_{0,l}, \dots, \mathrm{head}_{A-1,l})\,W^O_l + b^O_l, \qquad
# h_l = \mathrm{LN}_{1,l}\big(x_l + a_l\big),$$
#
# $$x_{l+1} = \mathrm{LN}_{2,l}\big(h_l + \mathrm{GELU}(h_l W_{1,l} + b_{1,l})\,W_{2,l} +
# b_{2,l}\big).$$
#
# A sentence-transformers model then *pools* the $T$ token vectors of the last layer into one
# vector and normalises it. Reimers & Gurevych (2019) train BERT-style encoders so that the
# cosine of two such vectors measures how similar two sentences are; the pooling of our model is
# written in its own files, which we print. With $\delta_t = 1$ for real tokens and $0$ for
# padding (the `attention_mask`):
#
# $$e = \frac{u}{\lVert u \rVert_2}, \qquad u = \frac{\sum_t \delta_t\, x_{L,t}}{\sum_t \delta_t}.$$

# %%
import json

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from sentence_transformers import SentenceTransformer

from bertlab import corpus
from bertlab.experiments import claims, layer_cost, lesions
from bertlab.reference import bundled_model_dir, load_model, load_tokenizer

model, tokenizer = load_model(), load_tokenizer()
path = bundled_model_dir()
st = SentenceTransformer(str(path), device="cpu")
print("SentenceTransformer:", " -> ".join(type(module).__name__ for module in st))
print("modules.json:")
for module in json.loads((path / "modules.json").read_text()):
    print(f"  {module['type']}")
print("1_Pooling/config.json:")
for key, setting in json.loads((path / "1_Pooling" / "config.json").read_text()).items():
    print(f"  {key}: {setting}")

# %% [markdown]
# Three modules: the transformer (our `BertModel`), a pooling layer set to the mean over tokens,
# and a normalisation to unit length. Before comparing with the library, the four pieces that
# `BertModel` adds around the layers of lessons 3 to 6, each checked against the model.
#
# ## The attention mask
#
# The tokenizer returns a 0/1 `attention_mask` of shape (B, T). `BertModel` turns it into an
# *additive* mask, 0 for real tokens and `torch.finfo(torch.float32).min` for padding, that every
# layer adds to its attention scores. A 0/1 or bool mask added as it is runs without an error and is
# wrong: real tokens get +1, padding +0, so each padding key's weight is only divided by $e$
# relative to a real key's, and padding keeps a share of the attention (lesson 3, section "The
# additive mask", prints that share on the corpus:
# {{ 03-multi-head-attention: bool_mask_padding_share }}
# {{ claim: 03-multi-head-attention: bool_mask_leaves_padding_share }}).

# %%
from bertlab.masks import additive_mask

batch = corpus.batch(tokenizer)  # (B, T) tensors, padded to the longest sentence
m01 = batch["attention_mask"]  # (B, T)
extended = additive_mask(m01)  # (B, 1, T, T)
seen_by_layer = {}


def record_mask(module, args):  # a pre-hook that returns None leaves the call unchanged
    seen_by_layer["mask"] = args[1]


hook = model.encoder.layer[0].register_forward_pre_hook(record_mask)
with torch.no_grad():
    library = model(**batch, output_hidden_states=True)
hook.remove()
print(
    "our additive mask vs what layer 0 received: equal = "
    f"{torch.equal(extended, seen_by_layer['mask'])}"
)

# %% [markdown]
# ## The layer
#
# A `BertLayer` is `attention` (self-attention, then the first Add & Norm in `attention.output`)
# followed by the feed-forward half (`intermediate`, then the second Add & Norm in `output`).
# Leaving out the feed-forward half still runs, and gives another function:

# %%
x0 = library.hidden_states[0]  # (B, T, H): the embeddings' output
layer0 = model.encoder.layer[0]
with torch.no_grad():
    attention_output, _ = layer0.attention(x0, extended)  # (B, T, H)
    by_hand = layer0.output(layer0.intermediate(attention_output), attention_output)  # (B, T, H)
print(
    f"attention -> intermediate -> output vs hidden_states[1]: max abs diff "
    f"{(by_hand - library.hidden_states[1]).abs().max().item():.1e}"
)
print(
    f"attention alone (no feed-forward) vs hidden_states[1]: max abs diff "
    f"{(attention_output - library.hidden_states[1]).abs().max().item():.1e}"
)

# %% [markdown]
# ## The encoder
#
# The encoder is a loop over the layers, each reading the previous one's output and the same
# mask. `hidden_states` holds $L + 1$ tensors: the embeddings' output first, then one per layer.
# Without the mask, the padded sentences change and the unpadded one (the longest) does not:


# %%
def encoder_by_hand(x, mask):
    states = [x]
    for layer in model.encoder.layer:
        states.append(layer(states[-1], mask))  # (B, T, H)
    return states


with torch.no_grad():
    states = encoder_by_hand(x0, extended)
    unmasked = encoder_by_hand(x0, None)
pairs = zip(states, library.hidden_states, strict=True)
print(
    f"{len(states)} hidden states for {model.config.num_hidden_layers} layers; max abs diff to the "
    f"library {max((a - b).abs().max().item() for a, b in pairs):.1e}"
)
real = m01.bool()
longest = int(m01.sum(1).argmax())
drift = (unmasked[-1] - states[-1]).abs().amax(-1)  # (B, T)
print(
    f"no mask: real tokens of padded sentences move by up to "
    f"{drift[real & (m01.sum(1, keepdim=True) < m01.shape[1])].max().item():.2f}, "
    f"the unpadded sentence by {drift[longest].max().item():.1e}"
)

# %% [markdown]
# ## The pooler
#
# `pooler_output` is $\tanh(x_{L,0} W^P + b^P)$, with $W^P$ = `pooler.dense.weight.T`: a dense
# layer and a tanh applied to the first token (`[CLS]`) and no other. Our model's sentence vectors
# do not use it (they average all tokens, below),
# but `BertModel` still computes it, and its weights load with the others.

# %%
cls = library.last_hidden_state[:, 0]  # (B, H): the [CLS] token of each sentence
pooled = torch.tanh(model.pooler.dense(cls))  # (B, H)
print(
    "tanh(dense(x[:, 0])) vs pooler_output: max abs diff "
    f"{(pooled - library.pooler_output).abs().max().item():.1e}"
)
print(
    f"before the tanh: {model.pooler.dense(cls).min().item():.3f} .. "
    f"{model.pooler.dense(cls).max().item():.3f}, "
    f"after: {pooled.min().item():.3f} .. {pooled.max().item():.3f}"
)

# %% [markdown]
# ## Our composition against the library
#
# The encoder here is run by hand: the embeddings, then each layer's `attention.self`,
# `attention.output.dense`, LayerNorm, `intermediate`, `output.dense`, LayerNorm
# (`bertlab.experiments.lesions.run`, with no edits). Then mean pooling over the real tokens and
# L2 normalisation, against `SentenceTransformer.encode` on the same sentences.

# %%
with torch.no_grad():
    trace = lesions.run(model, batch)  # hand-composed encoder, sub-module by sub-module
mask = batch["attention_mask"]  # (B, T)
hidden = trace.last_hidden_state  # (B, T, H)

u = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # (B, H): mean over real tokens
ours = u / u.norm(dim=-1, keepdim=True)  # (B, H): unit length
theirs = st.encode(list(corpus.SENTENCES), convert_to_tensor=True)  # (B, H)

layers_diff = max(
    (a - b).abs().max().item()
    for a, b in zip(trace.hidden_states, library.hidden_states, strict=True)
)
print(f"hand-composed layers vs BertModel hidden states: max abs diff {layers_diff:.1e}")
print(
    "mean pooling + L2 norm vs SentenceTransformer.encode: max abs diff "
    f"{(ours - theirs).abs().max().item():.1e}"
)
print(
    f"lesions.sentence_embeddings (the helper lessons 8 and 9 use): max abs diff "
    f"{(lesions.sentence_embeddings(hidden, mask) - theirs).abs().max().item():.1e}"
)
print(
    f"embedding shape {tuple(ours.shape)}, norms {ours.norm(dim=-1).min().item():.6f} .. "
    f"{ours.norm(dim=-1).max().item():.6f}"
)

# %% [markdown]
# The layers match `BertModel` exactly and the sentence vectors match the library to float
# rounding (differences printed). The mask matters: padding tokens also get hidden states, and
# averaging them in would make a sentence's vector depend on which other sentences share its
# batch. Sentence 0 encoded alone (no padding) against the same sentence in the padded batch,
# pooled with and without the mask:

# %%
alone = tokenizer([corpus.SENTENCES[0]], return_tensors="pt")  # (1, T0): no padding
with torch.no_grad():
    h_alone = model(**alone).last_hidden_state  # (1, T0, H)
e_alone = F.normalize(h_alone.mean(1), dim=-1)  # (1, H): every token is real
e_masked = ours[:1]  # (1, H): mean over real tokens of the batch row
e_unmasked = F.normalize(hidden[:1].mean(1), dim=-1)  # (1, H): padding averaged in
n0 = int(mask[0].sum())
print(f"sentence 0: {n0} real tokens, padded to {hidden.shape[1]} in the batch")
print(
    "alone vs batch, mean over real tokens:  max abs diff "
    f"{(e_alone - e_masked).abs().max().item():.1e}"
)
print(
    "alone vs batch, mean over all positions: max abs diff "
    f"{(e_alone - e_unmasked).abs().max().item():.1e}, "
    f"cosine {(e_alone * e_unmasked).sum().item():.4f}"
)

# %% [markdown]
# ### What the padded positions hold
#
# The model computes an output vector at every position of the batch,
# the padded ones too, though the pooling leaves them out. What is in
# such a vector? Per layer, where the attention of padded and of real
# queries goes; then the last layer's padded vectors against the
# sentence vectors (`bertlab.experiments.padded_positions`):
#
# {{ predict: padded_vectors }}

# %% tags=["remove-input"]
# A question before the measurement below; the build selects its
# answer from the value recorded there.
from bertlab.experiments import predictions as ask

ask.predict(
    "padded_vectors",
    "A padded position's vector in the last layer: which sentence vector is it closest to?",
    [
        ask.between(
            "padded_own_over_other",
            1,
            None,
            "its own sentence's",
            "A padded query attends to "
            "its sentence's real keys only, so its vector is a "
            "mixture of that sentence: its cosine with its own "
            "sentence's vector is at least "
            "{{ padded_own_over_other }} times its mean cosine with "
            "the other sentences' vectors "
            "{{ claim: padded_vectors_about_own_sentence }}.",
        ),
        ask.between(
            "padded_own_over_other",
            None,
            1,
            "no sentence's in particular: it holds the [PAD] token, not the sentence",
            "That would hold if padding were cut out of the "
            "computation. The mask cuts it out only as a key: as a "
            "query it reads the real tokens of its sentence.",
        ),
    ],
    section="What the padded positions hold",
)

# %%
from bertlab.experiments import padded_positions

with torch.no_grad():
    seen = model(**batch, output_attentions=True)
shares = padded_positions.mask_shares(seen.attentions, m01)
print("share of attention, min or max over heads and queries:")
print("layer  padded q on real  padded q on pad  real q on pad")
for index, share in enumerate(shares):
    print(
        f"{index:>5} {share.padded_to_real:>17.7f} "
        f"{share.padded_to_padded:>16.1e} "
        f"{share.real_to_padded:>14.1e}"
    )
pads = (1 - m01).sum(1)  # (B,): padded positions per sentence
cos = padded_positions.padded_cosines(hidden, m01)
print("last layer, mean cosine with a sentence vector:")
print("sentence  pads  pad~own  real~own  pad~other  pad~pad (min)")
for s, own, real_own, other, alike in zip(
    cos.sentences.tolist(),
    cos.padded_to_own,
    cos.real_to_own,
    cos.padded_to_other,
    cos.padded_to_padded,
    strict=True,
):
    print(f"{s:>8} {int(pads[s]):>5}{own:>9.3f}{real_own:>10.3f}{other:>11.3f}{alike:>15.3f}")
the = tokenizer.convert_tokens_to_ids("the")
refilled = padded_positions.refill_padding(model, batch, the)
print(
    f"padding refilled with 'the': real tokens move by "
    f"{refilled.real_moved:.1e},\npadded positions by "
    f"{refilled.padded_moved:.2f}"
)

# %% tags=["remove-input"]
own_over_other = (cos.padded_to_own / cos.padded_to_other).min()
_ = claims.value("padded_own_over_other", own_over_other, "{:.2f}")
_ = claims.value("padded_own_mean", cos.padded_to_own.mean(), "{:.2f}")
_ = claims.value("padded_real_own_mean", cos.real_to_own.mean(), "{:.2f}")
_ = claims.value("padded_alike_min", cos.padded_to_padded.min(), "{:.2f}")
_ = claims.value("padded_refill_moved", refilled.padded_moved, "{:.1f}")
_ = claims.value("pads_min", pads.min(), "{:.0f}")
_ = claims.value("pads_max", pads.max(), "{:.0f}")
_ = claims.claim(
    "padding_gets_no_attention",
    max(max(s.padded_to_padded, s.real_to_padded) for s in shares),
    "==",
    0,
    "no query, real or padded, gives a padded key any attention",
)
_ = claims.claim(
    "padded_vectors_about_own_sentence",
    own_over_other,
    ">",
    1,
    "every padded sentence's padded vectors are "
    "closer to its own sentence vector than to any other",
)
_ = claims.claim(
    "padded_less_aligned_than_real",
    cos.padded_to_own.mean(),
    "<",
    cos.real_to_own.mean(),
    "on average padded vectors are less aligned with the sentence vector than its real tokens",
)
_ = claims.claim(
    "refill_leaves_real_tokens",
    refilled.real_moved,
    "==",
    0,
    "refilling the padding moves no real token",
)
_ = claims.claim(
    "refill_moves_padded",
    refilled.padded_moved,
    ">",
    0,
    "refilling the padding moves the padded positions",
)

# %% [markdown]
# The mask removes padding as a *key*, not as a *query*. A padded
# position enters the first layer with a vector like any token's (the
# `[PAD]` word embedding, its position, segment A), and in every layer
# it asks its own query of the sentence. In every layer, padded queries
# put all their attention on the sentence's real keys, and no query,
# real or padded, gives a padded
# key any weight at all {{ claim: padding_gets_no_attention }} (an
# exact zero: added to a score, float32's most negative number makes
# its exponential underflow to 0). So a padded position's vector is a
# reading of its own sentence: its cosine with that sentence's vector
# is at least {{ padded_own_over_other }} times its mean cosine with the
# other sentences' {{ claim: padded_vectors_about_own_sentence }}, and
# the padded vectors of one sentence resemble each other (cosines of
# {{ padded_alike_min }} or more; they differ by their position
# embeddings). They are a blurred copy, though: on average a padded
# vector's cosine with its sentence is {{ padded_own_mean }}, a real
# token's {{ padded_real_own_mean }}
# {{ claim: padded_less_aligned_than_real }}.
#
# Pooling leaves them out for three reasons this cell shows. They are
# not tokens of the sentence: the model would compute a vector at any
# position, whatever token sits there. Their number depends on the
# batch, not the sentence: here from {{ pads_min }} to {{ pads_max }}
# per sentence, so averaging them in would give the same sentence
# another vector in another batch (sentence 0 above). And what they
# hold depends on the token id that fills them, which nothing fixes:
# with `the` written in every padded slot, the real tokens' outputs do
# not move at all {{ claim: refill_leaves_real_tokens }}, the padded
# ones by up to {{ padded_refill_moved }}
# {{ claim: refill_moves_padded }}. The attention mask makes the real
# tokens' outputs independent of the padding; the pooling's mask is
# what keeps the sentence vector so.

# %% [markdown]
# ## Semantic search
#
# With unit vectors, the cosine similarity of two sentences is their dot product. Each query
# (`lesions.QUERIES`, written to be about a topic of the corpus in other words) is encoded the
# same way and the corpus sentences are ranked by cosine:

# %%
queries = corpus.batch(tokenizer, lesions.QUERIES)  # (Q, T') tensors
q_emb = lesions.encode(model, queries)  # (Q, H)
scores, order = lesions.search(q_emb, ours)  # (queries, sentences) each
TOP = 3
for qi, query in enumerate(lesions.QUERIES):
    print(f"query: {query!r}")
    for rank, doc in enumerate(order[qi, :TOP].tolist(), start=1):
        text = corpus.SENTENCES[doc]
        text = text if len(text) <= 84 else text[:81] + "..."  # cut to the page's width
        print(f"   {rank}. {scores[qi, doc].item():.3f}  {text}")
# (Q, 1): first minus second
margin = scores.gather(1, order[:, :1]) - scores.gather(1, order[:, 1:2])
print(
    f"margin between the first and second result: min {margin.min().item():.3f}, "
    f"mean {margin.mean().item():.3f}"
)
claims.value("search_gap_min", margin.min(), "{:.3f}")
claims.claim(
    "first_result_clear",
    margin.min(),
    ">",
    0.01,
    "every query's first result leads its second by more than 0.01 in cosine",
)

# %% [markdown]
# Every query finds a sentence on its topic first, although few words are shared; where two
# sentences of the corpus are about the same thing (the cat and the kitten, the markets and the
# investors, the bread and the recipe), they come first and second. Every first result leads the
# second by at least {{ search_gap_min }} in cosine {{ claim: first_result_clear }}; lessons 8 and 9
# use these queries to see whether
# a damaged model still ranks the same sentence first.
#
# The same cosines between the corpus sentences themselves:

# %%
# alt: Heat map of the cosine similarity between the sentence embeddings of every pair of corpus
#   sentences, the sentences listed on the vertical axis.
sim = ours @ ours.T  # (sentences, sentences)
fig, ax = plt.subplots(figsize=(6.5, 5))
im = ax.imshow(sim.numpy(), cmap="viridis", vmin=min(0.0, sim.min().item()), vmax=1)
labels = [s if len(s) <= 32 else s[:30] + "..." for s in corpus.SENTENCES]
ax.set_xticks(range(len(labels)))
ax.set_yticks(range(len(labels)))
ax.set_xticklabels(range(len(labels)))
ax.set_yticklabels([f"{i}: {s}" for i, s in enumerate(labels)], fontsize=8)
ax.set_title("cosine similarity of the corpus sentences")
fig.colorbar(im, ax=ax, fraction=0.046)
fig.tight_layout()
plt.show()

off = sim.clone()
off.fill_diagonal_(-2.0)
best = off.argmax(1)  # (sentences,): nearest other sentence
for i, j in enumerate(best.tolist()):
    print(f"{i}: nearest other sentence {j} (cosine {sim[i, j].item():.3f})")

# %% [markdown]
# ## What [CLS] attends to, and why this model averages instead
#
# BERT puts `[CLS]` first in every input. Devlin et al. (2019, Section 3) use its last vector,
# $C = x_{L,0}$, as "the aggregate sequence representation for classification tasks": in
# pretraining, $C$ is the input of next sentence prediction (NSP), a classifier that tells
# whether segment B followed segment A in the text, and in fine-tuning the input of the task's
# classifier. They add (Section 3.1) that without fine-tuning $C$ is not a meaningful sentence
# representation, since it was trained with NSP. What lets `[CLS]` summarise at all is
# attention: it reads every token in every layer, and it brings nothing of the sentence itself,
# its input vector being the same in every sentence (the same word, the first position,
# segment A), so whatever $x_{L,0}$ says about the sentence came in through attention.
#
# Where does this model's `[CLS]` look? Its attention as a query, split by the kind of key
# token (`[CLS]` itself, `[SEP]`, punctuation, the content tokens), averaged over the heads and
# over the corpus sentences, layer by layer (`bertlab.experiments.cls_attention`); the last line
# is the share a uniform attention row would give each kind:
#
# {{ predict: cls_last_layer }}

# %% tags=["remove-input"]
# A question before the measurement below; the build selects its answer from the claim recorded
# there.
from bertlab.experiments import predictions as ask

ask.predict(
    "cls_last_layer",
    "In the last layer, which kind of key token gets the largest share of `[CLS]`'s attention?",
    [
        ask.between(
            "cls_last_top_kind",
            None,
            1,
            "`[CLS]` itself",
            "That would hold if `[CLS]` kept to itself to the end, as it does in earlier layers. "
            "In the last one it turns to the content.",
        ),
        ask.between(
            "cls_last_top_kind",
            1,
            2,
            "the content tokens",
            "In the last layer `[CLS]` reads the "
            "sentence: the content tokens get {{ cls_content_last }} of its attention "
            "{{ claim: cls_last_layer_reads_content }}.",
        ),
        ask.between(
            "cls_last_top_kind",
            2,
            None,
            "`[SEP]` and punctuation together",
            "That would hold if `[CLS]` parked its attention on the separators, as many heads "
            "of BERT-base do on `[SEP]`. Here they get less than a uniform row's share.",
        ),
    ],
    section="What [CLS] attends to, and why this model averages instead",
)

# %%
from bertlab.experiments import cls_attention

with torch.no_grad():
    attentions = model(**batch, output_attentions=True).attentions  # L tensors (B, A, T, T)
by_layer = [
    cls_attention.cls_attention_shares(p, batch["input_ids"], m01, tokenizer) for p in attentions
]
print(f"{'layer':<8}" + "".join(f"{kind:>13}" for kind in cls_attention.KINDS))
for index, shares in enumerate(by_layer):
    print(f"{index:<8}" + "".join(f"{shares.mean(kind):13.1%}" for kind in cls_attention.KINDS))
print(
    f"{'uniform':<8}"
    + "".join(f"{by_layer[-1].uniform_mean(kind):13.1%}" for kind in cls_attention.KINDS)
)

last = by_layer[-1]
others_last = max(last.mean(kind) for kind in cls_attention.KINDS if kind != "content")
sep_punct, sep_punct_uniform = (
    sum(f(kind) for kind in ("[SEP]", "punctuation")) for f in (last.mean, last.uniform_mean)
)
self_over_content = min(s.mean("[CLS]") / s.mean("content") for s in by_layer[:-1])
# 0: [CLS] itself, 1: the content tokens, 2: [SEP] and punctuation together
last_shares = torch.tensor([last.mean("[CLS]"), last.mean("content"), sep_punct])
claims.value("cls_last_top_kind", last_shares.argmax(), "{:.0f}")
claims.value("cls_last_layer", len(by_layer) - 1, "{:.0f}")
claims.value("cls_content_last", 100 * last.mean("content"), "{:.0f}%")
claims.value("cls_self_last", 100 * last.mean("[CLS]"), "{:.0f}%")
claims.value("cls_self_uniform", 100 * last.uniform_mean("[CLS]"), "{:.0f}%")
claims.value("cls_sep_punct_last", 100 * sep_punct, "{:.1f}%")
claims.value("cls_sep_punct_uniform", 100 * sep_punct_uniform, "{:.0f}%")
claims.value("cls_self_earlier_min", 100 * min(s.mean("[CLS]") for s in by_layer[:-1]), "{:.0f}%")
claims.claim(
    "cls_last_layer_reads_content",
    last.mean("content"),
    ">",
    others_last,
    "in the last layer the content tokens get the largest share of [CLS]'s attention",
)
claims.claim(
    "cls_last_layer_self_above_uniform",
    last.mean("[CLS]"),
    ">",
    2 * last.uniform_mean("[CLS]"),
    "in the last layer [CLS] gives itself more than twice a uniform row's share",
)
claims.claim(
    "cls_last_layer_sep_punct_below_uniform",
    sep_punct,
    "<",
    sep_punct_uniform,
    "in the last layer [SEP] and punctuation get less than a uniform row's share",
)
claims.claim(
    "cls_earlier_layers_attend_to_itself",
    self_over_content,
    ">",
    1,
    "in every earlier layer [CLS] attends more to itself than to all content tokens together",
)

# %% [markdown]
# In the last layer (layer {{ cls_last_layer }}), the content tokens get {{ cls_content_last }}
# of `[CLS]`'s attention, the largest share {{ claim: cls_last_layer_reads_content }}.
# `[CLS]` gives {{ cls_self_last }} to itself, more than twice the {{ cls_self_uniform }} of a
# uniform row {{ claim: cls_last_layer_self_above_uniform }}, and `[SEP]` and punctuation
# together get {{ cls_sep_punct_last }}, less than a uniform row's {{ cls_sep_punct_uniform }}
# {{ claim: cls_last_layer_sep_punct_below_uniform }}. In every earlier layer `[CLS]` attends more
# to itself than to all the content tokens together
# {{ claim: cls_earlier_layers_attend_to_itself }},
# at least {{ cls_self_earlier_min }} of its attention. Clark et al. (2019, "What Does BERT
# Look At?", BlackboxNLP) found BERT-base's heads putting much of their attention on `[SEP]` in
# the middle layers and argued that such attention works as a no-op, a place for a head to look
# when its pattern does not apply. In this model, averaged over all the real queries of a layer
# and over its heads, {{ 03-multi-head-attention: sink_cls_min }} to
# {{ 03-multi-head-attention: sink_cls_max }} of the attention goes to `[CLS]`, in every layer
# (an average over `[CLS]`'s own row, the one in the table above, and the rows of every other
# query), and what `[CLS]` writes back through $W^O$ is short, as a no-op's would be
# ([lesson 3](03-multi-head-attention.py#where-the-attention-lands-layer-by-layer) measures
# both, layer by layer).
# So the last layer is where `[CLS]` reads the sentence, and its vector $x_{L,0}$ is one of the
# $T$ vectors the model's pooling averages.
#
# Why average, then? Reimers & Gurevych (2019, "Sentence-BERT", EMNLP) found that the two
# sentence vectors commonly taken from BERT, the mean of the last layer's vectors and the `[CLS]`
# vector, gave poor sentence embeddings for semantic similarity without training for it, often
# worse than averaged GloVe word vectors (Pennington et al. 2014: one fixed vector per word, no
# context). Sentence-BERT fine-tunes the encoder through a
# pooling layer, and of the poolings they compared (mean, max, `[CLS]`; their Section 6) they made
# the mean the default. all-MiniLM-L6-v2 was fine-tuned that way with mean pooling (its
# `1_Pooling/config.json`, printed at the top): its contrastive training shaped the average of
# the token vectors, of which $x_{L,0}$ is one term. A cheap check on the corpus's topic
# pairs (the cat and the kitten, the markets and the investors, the bread and the recipe): for
# each of their sentences, is its partner its nearest other sentence, and how far does the
# partner's cosine stand above the mean cosine with the other sentences, with each kind of vector
# from the same forward pass?
#
# {{ predict: pooling_partners }}

# %% tags=["remove-input"]
ask.predict(
    "pooling_partners",
    "Take the `[CLS]` vectors as sentence vectors: for how many of the six topical sentences "
    "is the partner the nearest other sentence?",
    [
        ask.between(
            "found_cls",
            None,
            3,
            "two or fewer",
            "That would hold if a `[CLS]` vector said nothing of its sentence without training "
            "for the job, as Devlin et al. warn for theirs. In the last layer `[CLS]` reads the "
            "content tokens, and that reading carries the topic part of the way.",
        ),
        ask.between(
            "found_cls",
            3,
            6,
            "three to five",
            "With `[CLS]`, {{ found_cls }} of the {{ topical }} find their partner nearest, with "
            "the mean all of them {{ claim: mean_pooling_finds_every_partner }}: the `[CLS]` "
            "vectors of any two sentences are alike, so a partner stands out less "
            "{{ claim: mean_pooling_separates_partners }}.",
        ),
        ask.between(
            "found_cls",
            6,
            None,
            "all six",
            "That would hold if the `[CLS]` vector were a sentence vector of its own. This model "
            "was fine-tuned through the mean, which trains `[CLS]` only as one term of it.",
        ),
    ],
    section="What [CLS] attends to, and why this model averages instead",
)

# %%
cls_vectors = cls_attention.cls_vectors(library.last_hidden_state)  # (B, H): x_{L,0}, unit length
pooling = {"mean pooling": ours, "[CLS] vector": cls_vectors}
topical = 2 * len(cls_attention.TOPIC_PAIRS)
contrast, found, alike = {}, {}, {}
print(
    "partner: for how many sentences the partner is nearest; contrast: the partner's cosine minus\n"
    "the others' mean; cosine: the mean cosine of two different sentences"
)
print(f"{'':<13}{'partner':>9}{'contrast mean':>15}{'min':>7}{'cosine':>8}")
for label, vectors in pooling.items():
    contrast[label] = cls_attention.partner_contrast(vectors)  # (topical,)
    found[label] = cls_attention.partners_found(vectors)
    unit = F.normalize(vectors.double(), dim=-1)
    alike[label] = (unit @ unit.T)[~torch.eye(len(unit), dtype=torch.bool)].mean().item()
    print(
        f"{label:<13}{f'{found[label]} of {topical}':>9}{contrast[label].mean():>15.3f}"
        f"{contrast[label].min():>7.3f}{alike[label]:>8.3f}"
    )
claims.value("topical", topical, "{:.0f}")
claims.value("found_mean", found["mean pooling"], "{:.0f}")
claims.value("found_cls", found["[CLS] vector"], "{:.0f}")
claims.value("contrast_mean", contrast["mean pooling"].mean(), "{:.2f}")
claims.value("contrast_cls", contrast["[CLS] vector"].mean(), "{:.2f}")
claims.value("alike_mean", alike["mean pooling"], "{:.2f}")
claims.value("alike_cls", alike["[CLS] vector"], "{:.2f}")
claims.claim(
    "mean_pooling_finds_every_partner",
    found["mean pooling"],
    "==",
    topical,
    "with mean pooling every topical sentence has its partner nearest",
)
claims.claim(
    "mean_pooling_separates_partners",
    contrast["mean pooling"].mean(),
    ">",
    contrast["[CLS] vector"].mean(),
    "mean pooling sets partners further apart from the other sentences than [CLS] vectors do",
)
claims.claim(
    "cls_vectors_alike",
    alike["[CLS] vector"],
    ">",
    alike["mean pooling"],
    "[CLS] vectors of different sentences are more alike than mean-pooled ones",
)

# %% [markdown]
# With mean pooling, each of the {{ topical }} topical sentences has its partner nearest
# {{ claim: mean_pooling_finds_every_partner }}; with the `[CLS]` vectors, {{ found_cls }} of them
# do. The `[CLS]` vectors of any two sentences are more alike (mean cosine {{ alike_cls }},
# against {{ alike_mean }} for mean pooling) {{ claim: cls_vectors_alike }}, and with them a
# partner's cosine exceeds the others' mean by {{ contrast_cls }} on average, where mean pooling
# sets it apart by more, {{ contrast_mean }} {{ claim: mean_pooling_separates_partners }}. This
# does not say that a `[CLS]` vector cannot be a good sentence vector: a model fine-tuned with
# `[CLS]` pooling trains that vector for the job. It says that this model was fine-tuned through
# the mean, which trains $x_{L,0}$ as one term of the average and not as a sentence vector of its
# own, and that the pooling a model was trained with is the one to use with it.

# %% [markdown]
# ## What one layer costs, and which part dominates
#
# How does a layer's work depend on the sentence length $T$ and the width $H$? The course's
# sentences are short: the batch pads them all to the length of the longest, printed above.
#
# {{ predict: layer_cost_part }}
#
# Count the multiply-adds for one sentence (a product of an $n \times k$ by a $k \times m$
# matrix is $nkm$ of them; $A$ heads of size $d$ with $Ad = H$):
#
# | part | multiply-adds |
# |---|---|
# | $Q$, $K$, $V$ projections | $3TH^2$ |
# | scores $Q_iK_i^\top$, all heads | $A T^2 d = T^2 H$ |
# | weighted sum $P_i V_i$, all heads | $T^2 H$ |
# | $W^O$ | $TH^2$ |
# | FFN, $W_1$ and $W_2$ | $2 \cdot T \cdot H \cdot 4H = 8TH^2$ |
#
# In all, $12TH^2 + 2T^2H$: linear in $T$ but for the attention pattern, quadratic in $H$. The
# $T^2$ terms (the scores and the weighted sum) catch up with the rest, all the other parts
# together (projections, $W^O$ and FFN, $12TH^2$), when $2T^2H = 12TH^2$, at $T = 6H$. Against
# one part alone they catch up earlier: the projections' $3TH^2$ at $T = 1.5H$
# {{ claim: passes_projections_at_1_5h }}, the FFN's $8TH^2$ at $T = 4H$
# {{ claim: passes_ffn_at_4h }}. PyTorch's FLOP counter
# (`torch.utils.flop_counter`, which counts $2nkm$ per product) checks the table on layer 0 of
# the pretrained model, part by part (`bertlab.experiments.layer_cost`), for a few lengths; the
# time is measured beside it, fastest of three runs.

# %% tags=["remove-input"]
ask.predict(
    "layer_cost_part",
    "For the course's sentences, which part of a layer does most of its multiply-adds?",
    [
        ask.between(
            "cost_top_part",
            None,
            1,
            "the $Q$, $K$, $V$ projections",
            "That would hold if attention's three projections were the widest products. The "
            "FFN's two products are each four times as wide.",
        ),
        ask.between(
            "cost_top_part",
            1,
            2,
            "the scores and the weighted sum",
            "That would hold for sentences far longer than the width, where the $T^2$ terms grow "
            "past the rest. The course's sentences are short.",
        ),
        ask.between(
            "cost_top_part",
            2,
            None,
            "the FFN",
            "At these lengths the terms in $H^2$ dominate, and the FFN's "
            "two $4H$-wide products are most of them: {{ ffn_share_here }} of the layer "
            "{{ claim: ffn_dominates_here }}.",
        ),
    ],
    section="What one layer costs, and which part dominates",
)

# %%
H, I = model.config.hidden_size, model.config.intermediate_size
layer0 = model.encoder.layer[0]
lengths = [8, 32, 128, model.config.max_position_embeddings]
mismatch = 0
print("multiply-adds of each part, and one layer's time on this machine, this build:")
print(f"{'T':>5}{'Q, K, V':>14}{'scores, sum':>14}{'W^O':>14}{'FFN':>14}{'ms':>9}")
for T_ in lengths:
    formula, measured = layer_cost.multiply_adds(T_, H, I), layer_cost.counted(layer0, T_)
    mismatch += sum(abs(formula[p] - measured[p]) for p in layer_cost.PARTS)
    seconds = layer_cost.fastest_seconds(layer0, T_)
    print(
        f"{T_:>5}"
        + "".join(f"{measured[p]:>14,}" for p in layer_cost.PARTS)
        + f"{seconds * 1e3:>9.2f}"
    )
claims.value("cost_mismatch", mismatch, "{:.0f}")
claims.claim(
    "cost_formula_counts",
    mismatch,
    "==",
    0,
    "the FLOP counter counts the formula's multiply-adds exactly",
)
claims.value("cost_lengths", ", ".join(map(str, lengths)))
# 0: Q, K, V projections, 1: scores and weighted sum, 2: FFN (W^O, a third of the projections,
# is never the largest), at the course's longest sentence
at_course = layer_cost.multiply_adds(int(mask.sum(1).max()), H, I)
candidates = ("Q, K, V projections", "scores and weighted sum", "FFN")
claims.value("cost_top_part", max(range(3), key=lambda k: at_course[candidates[k]]), "{:.0f}")

# %% [markdown]
# The counter agrees with the table at T = {{ cost_lengths }}: {{ cost_mismatch }} multiply-adds
# apart in all {{ claim: cost_formula_counts }}. The share of each part, from the same
# formula, against $T$:

# %%
# alt: Share of one layer's multiply-adds taken by each part (the Q, K, V projections, the scores
#   and weighted sum, W^O and the FFN) against the sentence length T on a log scale, with vertical
#   lines at the model's longest input, at T = 6H, and a band over the lengths of the course's
#   sentences.
sweep = torch.unique(
    torch.logspace(0, torch.log10(torch.tensor(8.0 * H)), 200).round().long()
).tolist()
shares = {p: [] for p in layer_cost.PARTS}
for T_ in sweep:
    parts = layer_cost.multiply_adds(T_, H, I)
    for p in layer_cost.PARTS:
        shares[p].append(parts[p] / sum(parts.values()))
lengths_here = mask.sum(1)  # (B,): the course's sentences, in tokens
cross = layer_cost.crossover(H, I)
fig, ax = plt.subplots(figsize=(7, 3.4))
for p in layer_cost.PARTS:
    ax.plot(sweep, shares[p], label=p.replace("W^O", "$W^O$"))  # mathtext, not a literal caret
ax.axvspan(
    lengths_here.min().item(),
    lengths_here.max().item(),
    color="gray",
    alpha=0.2,
    label="course's sentences",
)
ax.axvline(
    model.config.max_position_embeddings,
    color="gray",
    ls=":",
    label="longest input (max positions)",
)
ax.axvline(cross, color="black", ls="--", label=f"T = 6H = {cross}")
ax.set_xscale("log")
ax.set_xlabel("tokens per sentence, T")
ax.set_ylabel("share of the layer's multiply-adds")
ax.legend(frameon=False, fontsize=7, loc="center left")
fig.tight_layout()
plt.show()

longest = lengths_here.max().item()
at_longest = layer_cost.multiply_adds(longest, H, I)
ffn_share = at_longest["FFN"] / sum(at_longest.values())
quadratic_share = at_longest["scores and weighted sum"] / sum(at_longest.values())
at_max = layer_cost.multiply_adds(model.config.max_position_embeddings, H, I)
quadratic_at_max = at_max["scores and weighted sum"] / sum(at_max.values())
print(
    f"6H = {6 * H}; crossover of the formula: T = {cross}; longest input the model takes: "
    f"{model.config.max_position_embeddings}"
)
print(
    f"course's longest sentence, T = {longest}: FFN {ffn_share:.0%}, scores and weighted sum "
    f"{quadratic_share:.1%}"
)
claims.value("cross", cross, "{:.0f}")
claims.value("six_h", 6 * H, "{:.0f}")
claims.value("max_positions", model.config.max_position_embeddings, "{:.0f}")
claims.value("cross_over_max", cross / model.config.max_position_embeddings, "{:.1f}")
claims.value("course_longest", longest, "{:.0f}")
claims.value("ffn_share_here", 100 * ffn_share, "{:.0f}%")
claims.value("quadratic_share_here", 100 * quadratic_share, "{:.1f}%")
claims.value("quadratic_share_max", 100 * quadratic_at_max, "{:.0f}%")
claims.claim("crossover_is_6h", cross, "==", 6 * H, "the T^2 terms overtake the rest at T = 6H")


def passes(part: str) -> int:
    """The smallest T at which the scores and weighted sum do at least as much as ``part`` alone."""
    costs = (layer_cost.multiply_adds(T_, H, I) for T_ in range(1, 8 * H))
    return 1 + next(n for n, c in enumerate(costs) if c["scores and weighted sum"] >= c[part])


past_qkv, past_ffn = passes("Q, K, V projections"), passes("FFN")
print(
    f"the T^2 terms pass the Q, K, V projections alone at T = {past_qkv}, the FFN alone at T = "
    f"{past_ffn}"
)
claims.value("past_qkv", past_qkv, "{:.0f}")
claims.value("past_ffn", past_ffn, "{:.0f}")
claims.claim(
    "passes_one_part_before_the_rest",
    max(past_qkv, past_ffn),
    "<",
    cross,
    "the T^2 terms pass each single part before they pass all the other parts together",
)
claims.claim(
    "passes_projections_at_1_5h",
    past_qkv,
    "==",
    -(-3 * H // 2),
    "they pass the projections at T = 1.5H",
)
claims.claim("passes_ffn_at_4h", past_ffn, "==", 4 * H, "they pass the FFN at T = 4H")
claims.claim(
    "crossover_beyond_max_positions",
    cross,
    ">",
    model.config.max_position_embeddings,
    "the crossover lies beyond the longest input the model takes",
)
claims.claim(
    "ffn_dominates_here",
    ffn_share,
    ">",
    0.5,
    "the FFN does more than half the work for the course's longest sentence",
)
claims.claim(
    "quadratic_small_here",
    quadratic_share,
    "<",
    0.02,
    "the T^2 terms are under 2% of the work for the course's sentences",
)

# %% [markdown]
# For this model the $T^2$ terms would overtake all the other parts together at
# $T = 6H$ = {{ six_h }} tokens {{ claim: crossover_is_6h }} (on the figure, where each part has
# its own line, the scores and weighted sum pass the Q, K, V projections first, at
# T = {{ past_qkv }}, and the FFN at T = {{ past_ffn }}
# {{ claim: passes_one_part_before_the_rest }}),
# beyond the {{ max_positions }} positions it can take at all
# {{ claim: crossover_beyond_max_positions }}; even at {{ max_positions }} they are
# {{ quadratic_share_max }} of the work. The course's sentences, {{ course_longest }} tokens at
# most, sit at the far left: there the FFN does {{ ffn_share_here }} of the work
# {{ claim: ffn_dominates_here }} and the scores and weighted sum {{ quadratic_share_here }}
# {{ claim: quadratic_small_here }}. For short sentences a layer's cost is its matrices, and the
# FFN's are $8H^2$ of the $12H^2$ weights a token meets; attention's quadratic cost matters for
# long inputs, not here. bert-base ($H = 768$, 512 positions) has the same curve, stretched: its
# crossover is at $6 \cdot 768$ tokens. The times printed are this machine's, this build's, and
# the page claims nothing about them.
#
# ## What we found
#
# - The encoder composed by hand from the pretrained sub-modules reproduces `BertModel` exactly,
#   and mean pooling over the real tokens plus L2 normalisation reproduces
#   `SentenceTransformer.encode` for all-MiniLM-L6-v2 to float rounding.
# - The attention mask has to be used in the pooling as well as in attention; otherwise a
#   sentence's vector depends on the padding of its batch.
# - Cosine similarity of these vectors ranks the corpus sentences by topic for queries that
#   share few words with them.
# - `[CLS]` attends more to itself than to the content tokens until the last layer
#   {{ claim: cls_earlier_layers_attend_to_itself }}, where the content tokens get the largest
#   share of its attention {{ claim: cls_last_layer_reads_content }}; this model averages
#   all tokens because it was fine-tuned that way (Reimers & Gurevych 2019), and its `[CLS]`
#   vectors alone set topical partners apart less well {{ claim: mean_pooling_separates_partners }}.
# - One layer does $12TH^2 + 2T^2H$ multiply-adds (checked with PyTorch's FLOP counter
#   {{ claim: cost_formula_counts }}); for the course's sentences the FFN does most of it
#   {{ claim: ffn_dominates_here }}, and the $T^2$ terms would overtake all the other parts
#   together only at $T = 6H$,
#   beyond the model's longest input {{ claim: crossover_beyond_max_positions }}.
#
# **Exercise:** [06-bert-model](../exercises/06-bert-model/06-bert-model.ipynb): open it with
# `make lab`, then grade it with `bertlab grade 06`.
#
# ## Check yourself
#
# {{ predict: check_cls_earlier_layers }}
#
# {{ predict: check_mean_pooling_partners }}
#
# {{ predict: check_crossover }}

# %% tags=["remove-input"]
ask.check(
    "check_cls_earlier_layers",
    "Before the last layer, does `[CLS]` attend more to itself or to the content tokens?",
    [
        ask.holds(
            "cls_earlier_layers_attend_to_itself",
            "to itself",
            "Until the last layer `[CLS]` attends "
            "more to itself than to the content {{ claim: cls_earlier_layers_attend_to_itself }}: "
            "its own "
            "vector is not a summary of the sentence.",
        ),
        ask.fails(
            "cls_earlier_layers_attend_to_itself",
            "to the content tokens",
            "That would hold if `[CLS]` "
            "gathered the sentence layer after layer. It does so only in the last layer.",
        ),
    ],
    section="What [CLS] attends to, and why this model averages instead",
)
ask.check(
    "check_mean_pooling_partners",
    "With mean pooling, for how many of the six topical sentences is the partner the nearest "
    "other sentence?",
    [
        ask.between(
            "found_mean",
            None,
            4,
            "three or fewer",
            "That would hold if the sentence embeddings ranked by shared words. They rank by "
            "topic.",
        ),
        ask.between(
            "found_mean",
            4,
            6,
            "four or five",
            "That would hold if mean pooling did no better than the `[CLS]` vectors. It sets "
            "partners further apart.",
        ),
        ask.between(
            "found_mean",
            6,
            None,
            "all six",
            "Mean pooling finds {{ found_mean }} "
            "partners of {{ topical }} {{ claim: mean_pooling_finds_every_partner }}.",
        ),
    ],
    section="What [CLS] attends to, and why this model averages instead",
)
ask.check(
    "check_crossover",
    "At what length would a layer's $T^2$ terms overtake the rest, against the "
    "model's longest input?",
    [
        ask.between(
            "cross_over_max",
            None,
            1,
            "within it",
            "That would hold if one $T^2$ product only had to match one product in $H^2$, at "
            "$T = H$. It has to match the projections, $W^O$ and the FFN together.",
        ),
        ask.between(
            "cross_over_max",
            1,
            3,
            "beyond it, but under three times it",
            "That would hold without the FFN: attention's own terms in $H^2$ are passed at "
            "$T = 2H$. The FFN's $8TH^2$ pushes the crossover further.",
        ),
        ask.between(
            "cross_over_max",
            3,
            None,
            "beyond three times it",
            "At $T = 6H$, {{ six_h }} tokens, {{ cross_over_max }} times the {{ max_positions }} "
            "positions the model has {{ claim: crossover_beyond_max_positions }}.",
        ),
    ],
    section="What one layer costs, and which part dominates",
)

# %% [markdown]
# ## References
#
# - Reimers, N., & Gurevych, I. (2019). Sentence-BERT: Sentence Embeddings using Siamese
#   BERT-Networks. *EMNLP-IJCNLP*.
# - Devlin, J., Chang, M.-W., Lee, K., & Toutanova, K. (2019). BERT: Pre-training of Deep
#   Bidirectional Transformers for Language Understanding. *NAACL*.

# %% tags=["remove-input"]
claims.publish()  # the numbers and claims above, for the build that renders this page
