# %% [markdown]
# # Lesson 2: Embeddings
#
# **Question.** Layer 0 receives one $H$-dimensional vector per token. Where does that vector
# come from, what are the three embedding tables for, and what happens to the positions and
# segments when we pass `input_ids` alone?
#
# ## The equation
#
# Devlin et al. (2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
# Understanding", NAACL, Section 3 and Figure 2) build each token's input representation by
# summing three learned embeddings: the token embedding (a token is a WordPiece, a word or a
# piece of one: [From text to ids](#from-text-to-ids)), the segment embedding (sentence A or B)
# and the position embedding. For the token with id $w_t$ at position $t$ in segment $s_t$
# (letters of the [notation page](../docs/notation.md)):
#
# $$z_t = E_\text{word}[w_t] + E_\text{type}[s_t] + E_\text{pos}[t].$$
#
# The released implementation, and Hugging Face's `BertEmbeddings`, then normalise and apply
# dropout:
#
# $$x_{0,t} = \mathrm{Dropout}\big(\mathrm{LayerNorm}(z_t)\big), \qquad
# \mathrm{LayerNorm}(z) = \gamma \odot \frac{z - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta,$$
#
# with $x_0$ the input of layer 0 (`hidden_states[0]`), and $\mu$ and $\sigma^2$ the mean and
# the (biased) variance over the $H$ features of one token
# (Ba, Kiros & Hinton 2016, "Layer Normalization", arXiv:1607.06450).
#
# The Transformer (Vaswani et al. 2017, "Attention Is All You Need", NeurIPS, Section 3.5) added
# fixed sinusoids for positions and reported that learned position embeddings did about as well;
# BERT uses learned ones, one row per position up to `max_position_embeddings`.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from bertlab import corpus
from bertlab.capture import capture
from bertlab.experiments import claims
from bertlab.reference import load_model, load_tokenizer

model, tokenizer = load_model(), load_tokenizer()
emb = model.embeddings
print(emb)

# %% [markdown]
# ## From text to ids
#
# The tokenizer turns the corpus into three (B, T) tensors. Sentences are padded to the longest
# one, and the `attention_mask` marks the real tokens.

# %%
batch = corpus.batch(tokenizer)
ids = batch["input_ids"]  # (B, T)
B, T = ids.shape
print(
    f"batch: B={B} sentences, T={T} tokens; padding tokens in the batch: "
    f"{int((batch['attention_mask'] == 0).sum())}"
)
row = 1
tokens = tokenizer.convert_ids_to_tokens(ids[row])
columns = {
    name: batch[name][row].tolist() for name in ("input_ids", "token_type_ids", "attention_mask")
}
print(f"{'position':>8}  {'token':<12}" + "".join(f"{name:>16}" for name in columns))
for t, token in enumerate(tokens):  # one row per token of sentence `row`
    print(f"{t:>8}  {token:<12}" + "".join(f"{columns[name][t]:>16}" for name in columns))

# %% [markdown]
# The tokenizer is BERT's WordPiece: a word its vocabulary lacks is cut into pieces it has, and
# `##` marks a piece that continues the token before it, so "windowsill" is `windows` then `##ill`.
# `[CLS]` opens every input and `[SEP]` ends each sentence (the special tokens); `[PAD]` fills a
# shorter sentence up to $T$, with `attention_mask` 0.
#
# A single sentence is all segment A, so the tokenizer's `token_type_ids` are all zero. Positions
# are not in the batch at all: the model makes them itself.
#
# ## Defaults: positions and token types
#
# `BertEmbeddings` keeps two non-trainable buffers for the case where the caller passes nothing:
# `position_ids` $= 0, 1, \dots$ and `token_type_ids` $= 0$. It slices the first $T$ of each,
# so every sentence counts positions from 0 at `[CLS]`, and every token is in segment A.

# %%
print(
    "position_ids buffer", tuple(emb.position_ids.shape), "starts", emb.position_ids[0, :8].tolist()
)
print(
    "token_type_ids buffer",
    tuple(emb.token_type_ids.shape),
    "values",
    emb.token_type_ids.unique().tolist(),
)
print("tokenizer's token_type_ids in this batch:", batch["token_type_ids"].unique().tolist())

# %% [markdown]
# ## The embeddings by hand
#
# Indexing a table with a tensor of ids gathers one row per id. We add the three lookups in the
# order the library does, normalise with the biased variance and the configured $\varepsilon$,
# and compare with the module called on `input_ids` alone.
#
# {{ predict: unbiased_variance }}

# %% tags=["remove-input"]
# A question before the measurement below; the build selects its answer from the claim recorded
# there.
from bertlab.experiments import predictions as ask

ask.predict(
    "unbiased_variance",
    "The module normalises with the biased variance, dividing by $H$. Divide by $H-1$ "
    "instead: how far does the by-hand result land from the module's output, at most?",
    [
        ask.between(
            "unbiased_diff",
            None,
            1e-5,
            "below $10^{-5}$: float32 rounding hides it",
            "That would hold if a change of about one part in $2H$ were below float32's "
            "rounding. Float32 keeps about seven digits, and this change shows in the third.",
        ),
        ask.between(
            "unbiased_diff",
            1e-5,
            0.1,
            "between $10^{-5}$ and $10^{-1}$",
            "The two variances differ by the factor $H/(H-1)$, so the normalised part of each "
            "output shrinks by about one part in $2H$: the largest moves by {{ unbiased_diff }}, "
            "where the biased variance matches the module to {{ no_skip_diff }}. A tight "
            "tolerance sees it.",
        ),
        ask.between(
            "unbiased_diff",
            0.1,
            None,
            "$10^{-1}$ or more",
            "That would hold if the variance were off by a large factor. $H$ and $H-1$ differ "
            "by one part in $H$, and the output moves by about half of that.",
        ),
    ],
    section="The embeddings by hand",
)

# %%
eps = model.config.layer_norm_eps
position_ids = torch.arange(T)  # (T,): the default positions, shared by every sentence
token_type_ids = torch.zeros_like(ids)  # (B, T): the default segment, A everywhere

word = emb.word_embeddings.weight[ids]  # (B, T, H)
typ = emb.token_type_embeddings.weight[token_type_ids]  # (B, T, H)
pos = emb.position_embeddings.weight[position_ids]  # (T, H), broadcast over the batch
z = word + typ + pos  # (B, T, H)

mu = z.mean(-1, keepdim=True)  # (B, T, 1)
var = z.var(-1, keepdim=True, unbiased=False)  # (B, T, 1): divide by H, not H - 1
e = emb.LayerNorm.weight * (z - mu) / torch.sqrt(var + eps) + emb.LayerNorm.bias  # (B, T, H)
# eval mode: dropout is the identity, so e is the output

with torch.no_grad():
    library = emb(input_ids=ids)  # (B, T, H): positions and token types left to their defaults
print(f"eps = {eps:g}, dropout p = {emb.dropout.p}, module in training mode: {emb.training}")
print(
    "by hand vs model.embeddings(input_ids):    max abs diff "
    f"{(e - library).abs().max().item():.1e}"
)
print(
    "by hand vs hidden_states[0] of the model:  max abs diff "
    f"{(e - capture().hidden_states[0]).abs().max().item():.1e}"
)

var_unbiased = z.var(-1, keepdim=True, unbiased=True)
e_wrong = emb.LayerNorm.weight * (z - mu) / torch.sqrt(var_unbiased + eps) + emb.LayerNorm.bias
print(
    "same, with the unbiased variance (H - 1): max abs diff "
    f"{(e_wrong - library).abs().max().item():.1e}"
)
with_skip = z + e  # what a residual around the embeddings' LayerNorm would give: z + LN(z)
print(
    "z + LN(z), a residual the layers have:    max abs diff "
    f"{(with_skip - library).abs().max().item():.1e}"
)
claims.value("no_skip_diff", (e - library).abs().max(), "{:.1e}")
claims.value("unbiased_diff", (e_wrong - library).abs().max(), "{:.1e}")
claims.value("with_skip_diff", (with_skip - library).abs().max(), "{:.2g}")
claims.claim(
    "embeddings_have_no_residual",
    (e - library).abs().max(),
    "<",
    (with_skip - library).abs().max() / 1000,
    "LN(z) reproduces the embeddings; z + LN(z), a residual around them, does not",
)

# %% [markdown]
# The by-hand result matches the module to float32 rounding. Dividing by $H-1$ instead of $H$
# puts it off by {{ unbiased_diff }}, a visible error, which is why the checks of this course use
# a tight tolerance.
#
# Note what the embeddings' LayerNorm lacks: a residual. Every block of the encoder computes
# $\mathrm{LN}(x + F(x))$, but the embeddings compute $\mathrm{LN}(z)$: there is no stream yet
# to carry around them, and nothing for a skip to preserve, since $z$ is the first thing the
# model computes from the token ids. $\mathrm{LN}(z)$ matches the module to {{ no_skip_diff }};
# $z + \mathrm{LN}(z)$ is off by {{ with_skip_diff }} {{ claim: embeddings_have_no_residual }}.
# The LayerNorm's output *starts* the residual stream, $x_0$, which every layer then adds its
# updates to.
#
# ## How big is each part?
#
# The three lookups are simply added, so their sizes say how much each contributes to $z_t$
# before normalisation. Over the real (non-padding) tokens of the corpus:

# %%
real = batch["attention_mask"].bool()  # (B, T)
pos_bt = pos.expand(B, T, -1)  # (B, T, H)
for label, part in [
    ("word", word),
    ("position", pos_bt),
    ("token type", typ),
    ("sum z", z),
    ("after LayerNorm", e),
]:
    norms = part[real].norm(dim=-1)  # (N,) one norm per real token
    print(
        f"{label:<16} L2 norm: mean {norms.mean():6.3f}, min {norms.min():6.3f}, max "
        f"{norms.max():6.3f}, "
        f"std/mean {norms.std() / norms.mean():.3f}"
    )

parts = {"word": word, "position": pos_bt, "token type": typ}
part_norms = {label: part[real].norm(dim=-1) for label, part in parts.items()}  # (N,) each
# (N,)
word_first = part_norms["word"] > torch.maximum(part_norms["position"], part_norms["token type"])
at = torch.arange(T).expand(B, T)[real]  # (N,): each real token's position
print(
    f"the word vector is the longest of the three for {word_first.float().mean():.0%} of the real "
    "tokens;\n"
    f"where it is not, the token stands at position {sorted(set(at[~word_first].tolist()))}"
)
claims.value("word_norm", part_norms["word"].mean(), "{:.2f}")
claims.value("position_norm", part_norms["position"].mean(), "{:.2f}")
claims.value("type_norm", part_norms["token type"].mean(), "{:.2f}")
claims.value("word_first_share", 100 * word_first.float().mean(), "{:.0f}%")
claims.value("word_not_first_positions", ", ".join(map(str, sorted(set(at[~word_first].tolist())))))
claims.claim(
    "word_table_dominates",
    part_norms["word"].mean(),
    ">",
    max(part_norms["position"].mean(), part_norms["token type"].mean()),
    "on average the word vector is the largest of the three terms",
)

# %% [markdown]
# Compare the rows for the size of each table's term, and for how much the norms vary from token to
# token. The word table dominates: over the real tokens of the corpus its vectors' mean norm is
# {{ word_norm }}, against {{ position_norm }} for the position vectors and {{ type_norm }} for the
# token-type vector {{ claim: word_table_dominates }}. The word vector is the longest of the three
# for {{ word_first_share }} of the real tokens; the exceptions are the tokens at position
# {{ word_not_first_positions }}, where every sentence has its `[CLS]`. The token-type term is one
# and the same vector for every token here (all are segment A). LayerNorm gives every token the same
# statistics (zero mean, unit variance, then the learned $\gamma$ and $\beta$), so the *relative*
# spread of the norms (std/mean) shrinks, while the scale is now set by $\gamma$.
#
# ## Token types in use: a sentence pair
#
# Given two texts, the tokenizer builds one input, `[CLS] A [SEP] B [SEP]`, and marks the
# tokens of segment B with type 1. That is the input of BERT's pretraining, whose next-sentence
# task asks whether B followed A in the text (Devlin et al. 2019, Section 3.1), and of tasks
# that judge two texts in one pass. Two sentences of the corpus about the same thing:

# %%
from bertlab.experiments import token_types
from bertlab.experiments.cls_attention import TOPIC_PAIRS

text_a, text_b = (corpus.SENTENCES[i] for i in TOPIC_PAIRS[0])
pair = tokenizer(text_a, text_b, return_tensors="pt")
pair_tokens = tokenizer.convert_ids_to_tokens(pair["input_ids"][0])
pair_types = pair["token_type_ids"][0].tolist()
b_start = token_types.segment_b_start(pair)
first_sep = pair_tokens.index(tokenizer.sep_token)
print(f"{'position':>8}  {'token':<12}{'token_type_ids':>16}")
for t, (token, kind) in enumerate(zip(pair_tokens, pair_types, strict=True)):
    print(f"{t:>8}  {token:<12}{kind:>16}")
print(
    f"segment B starts at position {b_start}; the first [SEP] is at position {first_sep}, "
    f"type {pair_types[first_sep]}; the last [SEP] is type {pair_types[-1]}"
)
claims.value("b_start", b_start, "{:.0f}")
claims.claim(
    "b_starts_after_first_sep",
    b_start,
    "==",
    first_sep + 1,
    "segment B starts right after the first [SEP]",
)
claims.claim(
    "first_sep_in_a", pair_types[first_sep], "==", 0, "the [SEP] that closes A is of type 0"
)
claims.claim("last_sep_in_b", pair_types[-1], "==", 1, "the last [SEP] is of type 1")

# %% [markdown]
# Segment B starts at position {{ b_start }}, right after the first `[SEP]`
# {{ claim: b_starts_after_first_sep }}; that `[SEP]` closes A and is of type 0
# {{ claim: first_sep_in_a }}, the last one is of type 1 {{ claim: last_sep_in_b }}.
#
# The table has {{ type_rows }} rows, one per type. Are they far apart, and did this model learn
# anything for row 1? The norms of the rows, their difference, their cosine, and two yardsticks:
# the mean length of a row of the word table, taken this time over all the table's rows, one
# per vocabulary entry (the mean norm above counts the corpus's tokens, so frequent words count
# many times and the rows no sentence uses not at all), and the cosine two directions drawn at
# random in $H$ dimensions typically have, about $\pm 1/\sqrt{H}$:

# %%
type_table = emb.token_type_embeddings.weight.double()  # (2, H)
type_gap = (type_table[1] - type_table[0]).norm().item()
type_cos = F.cosine_similarity(type_table[0], type_table[1], dim=0).item()
# mean row length of the word table
word_length = emb.word_embeddings.weight.norm(dim=-1).double().mean().item()
width = type_table.shape[1]
print(
    f"token_type_embeddings {tuple(type_table.shape)}: row norms "
    + ", ".join(f"{norm:.3f}" for norm in type_table.norm(dim=-1).tolist())
)
print(f"|row 1 - row 0| = {type_gap:.3f}; cosine of the rows {type_cos:.3f}")
print(
    f"mean length of a row of the word table {word_length:.3f};\nrandom directions in H = {width}: "
    f"cosine about +-1/sqrt(H) = {width**-0.5:.3f}"
)
claims.value("type_rows", type_table.shape[0], "{:.0f}")
claims.value("type_gap", type_gap, "{:.3f}")
claims.value("type_cos", type_cos, "{:.2f}")
claims.value("word_length", word_length, "{:.2f}")
claims.value("random_cos", width**-0.5, "{:.2f}")
claims.claim(
    "type_rows_differ_little",
    type_gap,
    "<",
    word_length / 4,
    "the two token-type rows differ by less than a quarter of the mean length of a word-table row",
)
claims.claim(
    "type_row_one_learned",
    type_cos,
    ">",
    10 * width**-0.5,
    "the rows' cosine is more than ten times what two random directions typically have",
)

# %% [markdown]
# The rows differ by a vector of length {{ type_gap }}, less than a quarter of the mean length
# of a word-table row, {{ word_length }} {{ claim: type_rows_differ_little }}. Nor is row 1 a
# random row that training never touched: its cosine with row 0 is {{ type_cos }}, more than ten
# times the {{ random_cos }} two random directions typically have
# {{ claim: type_row_one_learned }}. It was shaped before the fine-tuning that made
# all-MiniLM-L6-v2, which did not use it: the model card describes a contrastive training on pairs
# of texts, each text encoded on its own
# and the two vectors compared by cosine, the arrangement of Sentence-BERT (Reimers & Gurevych
# 2019). So that training saw pairs, never one pair in one input; every token it saw was of type 0,
# and `SentenceTransformer.encode` passes type 0 too.
#
# What does the model make of the types it was not fine-tuned with? Each topic pair of the corpus
# is run with the tokenizer's types, with every token of type 0 (the default when no
# `token_type_ids` are passed), and with A's and B's types swapped. Measured: how far the
# token vectors of the last layer move, relative to their length (all tokens, and A's tokens
# alone), and $1 - \cos$ of the pair's sentence vector (the model's mean pooling) with the
# one from the tokenizer's types. Beside them, a change of another kind: the same two texts in
# the other order, B first, with the tokenizer's types:

# %%
given, all_zero, swapped = token_types.VARIANTS
token_moves, a_moves, vector_moves, order_moves = [], [], [], []
for first, second in TOPIC_PAIRS:
    enc_ab = tokenizer(corpus.SENTENCES[first], corpus.SENTENCES[second], return_tensors="pt")
    enc_ba = tokenizer(corpus.SENTENCES[second], corpus.SENTENCES[first], return_tensors="pt")
    runs = token_types.pair_outputs(model, enc_ab)  # variant -> (1, T, H)
    with torch.no_grad():
        reordered = model(**enc_ba).last_hidden_state  # (1, T, H): B first
    # (1, H) each
    vectors = {name: token_types.pooled(h, enc_ab["attention_mask"]) for name, h in runs.items()}
    a_end = token_types.segment_b_start(enc_ab)  # A's tokens are positions 0 .. a_end - 1
    order_moves.append(
        token_types.embedding_change(
            token_types.pooled(reordered, enc_ba["attention_mask"]), vectors[given]
        )
    )
    line = f"pair {first}, {second}:"
    for name in (all_zero, swapped):
        moved = token_types.token_change(runs[name], runs[given])  # (T,)
        token_moves.append(moved.mean().item())
        vector_moves.append(token_types.embedding_change(vectors[name], vectors[given]))
        line += (
            f"\n  {name}: tokens move {moved.mean():.1%} (A's {moved[:a_end].mean():.1%}), "
            f"1 - cos {vector_moves[-1]:.1e};"
        )
        if name == all_zero:
            a_moves.append(moved[:a_end].mean().item())  # A's types did not change
    print(line + f"\n  B first: 1 - cos {order_moves[-1]:.1e}")
claims.value("pairs", len(TOPIC_PAIRS), "{:.0f}")
claims.value("type_token_move", 100 * sum(token_moves) / len(token_moves), "{:.0f}%")
claims.value("type_a_move_min", 100 * min(a_moves), "{:.0f}%")
claims.value("type_vector_move_max", max(vector_moves), "{:.1e}")
claims.value("order_vector_move_min", min(order_moves), "{:.1e}")
claims.claim(
    "a_tokens_move_with_b_types",
    min(a_moves),
    ">",
    1000 * torch.finfo(torch.float32).eps,
    "with all types 0, A's tokens move by far more than float32 rounding, in every pair",
)
claims.claim(
    "order_moves_pair_vector_more_than_types",
    min(order_moves),
    ">",
    max(vector_moves),
    "putting B first moves the pair's vector more than any change of the types, in every pair",
)

# %% [markdown]
# Changing the types moves the last layer's token vectors by {{ type_token_move }} of their
# length on average. With every token of type 0, A's tokens move too, by {{ type_a_move_min }}
# at least, although their own types did not change: attention carries B's change to them
# {{ claim: a_tokens_move_with_b_types }}. The pair's sentence vector, the mean of those token
# vectors, moves by $1 - \cos$ = {{ type_vector_move_max }} at most over the {{ pairs }} pairs,
# and putting B first moves it by {{ order_vector_move_min }} at least, more than any change of the
# types does {{ claim: order_moves_pair_vector_more_than_types }}: for this model's sentence
# vector, which text comes first matters more than the segment each token is marked with. What
# this does not show is what a model trained on pairs in one input does with its types: BERT's
# pretraining gave them a use (the next-sentence task reads B against A), and a model fine-tuned
# on pairs would be trained to use them again; this one was not.

# %% [markdown]
# ## Word order without positions
#
# What becomes of word order when every token gets the *same* position vector? We test this by
# passing `position_ids` of all zeros and swapping two words.
#
# {{ predict: order_without_positions }}

# %% tags=["remove-input"]
# Answered by the cosines measured below (recorded at the end of the lesson).
ask.predict(
    "order_without_positions",
    "With every token given the same position, the first, how do the sentence embeddings of "
    '"the dog bit the man" and "the man bit the dog" compare?',
    [
        ask.between(
            "order_blind_gap",
            None,
            1e-5,
            "the same, up to rounding",
            "Attention compares every token "
            "with every other one whatever their places, and the rest acts on each token alone: "
            "without "
            "positions the model reads a bag of words. One minus their cosine is {{ "
            "order_blind_gap }}; "
            "with the default positions it is {{ order_default_gap }}.",
        ),
        ask.between(
            "order_blind_gap",
            1e-5,
            1e-3,
            "nearly the same, but not to rounding",
            "That would hold if something besides the positions, the `[CLS]` and `[SEP]` at the "
            "ends say, told the model a little of where each word stands. The ends are the same "
            "in both sentences, and what lies between them reaches the model as a bag of words.",
        ),
        ask.between(
            "order_blind_gap",
            1e-3,
            None,
            "clearly different, as with positions",
            "That would hold if attention or "
            "the FFN knew where a token stands. Only the position vectors tell them.",
        ),
    ],
    section="Word order without positions",
)


# %%
def sentence_embedding(text, position_ids=None):
    """Mean of the last hidden states over the tokens, L2-normalised: (H,)."""
    enc = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, position_ids=position_ids(enc["input_ids"]) if position_ids else None)
    return F.normalize(out.last_hidden_state[0].mean(0), dim=-1)


a, b = "the dog bit the man", "the man bit the dog"
same_position = torch.zeros_like  # every token at position 0
cos_normal = torch.dot(sentence_embedding(a), sentence_embedding(b)).item()
cos_blind = torch.dot(
    sentence_embedding(a, same_position), sentence_embedding(b, same_position)
).item()
print(f"cosine({a!r}, {b!r})")
print(f"  with positions 0..T-1:      {cos_normal:.6f}")
print(f"  every token at position 0:  {cos_blind:.6f}")
claims.value("order_cos_normal", cos_normal, "{:.3f}")
claims.claim(
    "same_position_order_blind",
    abs(1 - cos_blind),
    "<",
    1e-5,
    "with every token at position 0 the sentence and its reordering have cosine 1 to within 1e-5",
)
claims.claim(
    "positions_tell_order",
    1 - cos_normal,
    ">",
    1e-3,
    "with the default positions the two orders' embeddings differ, cosine below 0.999",
)

# %% [markdown]
# With the default positions the two sentences differ (cosine {{ order_cos_normal }}); with all
# tokens at position 0 their
# sentence embeddings coincide up to rounding: the model sees a bag of words. Attention compares
# every token with every other one whatever their places, and everything else acts on each token
# separately, so the positions are the only source of word order
# {{ claim: same_position_order_blind }}. The token
# vectors themselves are then just permuted along with the words, as this check shows on a
# longer sentence:

# %%
enc = tokenizer(corpus.SENTENCES[1], return_tensors="pt")
n = enc["input_ids"].shape[1]
perm = torch.randperm(n, generator=torch.Generator().manual_seed(0))  # (T,)
with torch.no_grad():
    for label, pid in [
        ("positions 0..T-1", None),
        ("all at position 0", torch.zeros(1, n, dtype=torch.long)),
    ]:
        h = model(input_ids=enc["input_ids"], position_ids=pid).last_hidden_state[0]  # (T, H)
        # (T, H)
        h_perm = model(input_ids=enc["input_ids"][:, perm], position_ids=pid).last_hidden_state[0]
        print(
            f"{label:<18}: outputs of the shuffled sentence vs shuffled outputs, max abs diff "
            f"{(h_perm - h[perm]).abs().max().item():.1e}"
        )

# %% [markdown]
# ## What the position table learned
#
# {{ predict: position_similarity }}
#
# Cosine similarity between the learned position vectors. Adjacent positions have the most
# similar vectors {{ claim: adjacent_positions_most_similar }} and similarity falls with distance
# {{ claim: similarity_falls_with_distance }}, though not strictly
# {{ claim: similarity_not_monotone }}: the figure shows how regular the pattern is. Roughly, "near"
# in the sentence is "near" in embedding space.

# %%
# alt: Heat map of the cosine similarity between the position embeddings of the first 128 positions,
#   position against position, on a red-blue scale from -1 to 1.
P = F.normalize(emb.position_embeddings.weight[:128], dim=-1)  # (128, H)
sim = P @ P.T  # (128, 128)
by_distance = torch.stack([sim.diagonal(k).mean() for k in range(1, 128)])  # (127,)
for k in (1, 2, 5, 20, 60):
    print(f"mean cosine between positions t and t+{k:<2}: {by_distance[k - 1]:.3f}")
print(f"distance with the highest mean cosine: {int(by_distance.argmax()) + 1}")
claims.claim(
    "adjacent_positions_most_similar",
    by_distance[0],
    ">",
    by_distance[1:].max(),
    "positions one apart have a higher mean cosine than at any larger distance",
)
claims.claim(
    "similarity_falls_with_distance",
    by_distance[:5].mean(),
    ">",
    by_distance[19:40].mean(),
    "the mean cosine over distances 1 to 5 is above that over distances 20 to 40",
)
claims.claim(
    "similarity_not_monotone",
    (by_distance[1:] - by_distance[:-1]).max(),
    ">",
    0,
    "at some distance the mean cosine rises again",
)

fig, ax = plt.subplots(figsize=(4.6, 4))
im = ax.imshow(sim.numpy(), cmap="RdBu_r", vmin=-1, vmax=1)
ax.set_xlabel("position")
ax.set_ylabel("position")
ax.set_title("cosine similarity of position embeddings")
fig.colorbar(im, ax=ax, fraction=0.046)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Added, not concatenated
#
# The position vector is *added* to the word vector, $E_\text{word}[w_t] + E_\text{pos}[t]$,
# rather than written beside it. Concatenation would give each token $H_\text{word} +
# H_\text{pos}$ features: either the stream gets wider than $H$, and with it every matrix of every
# layer, or, at the same $H$, the word part shrinks to make room, by a split fixed in advance.
# The residual stream keeps one width from the embeddings to the last layer (lesson 8), and the
# sum keeps it. Devlin et al. (2019) sum the three embeddings without discussing the
# alternative, as did Vaswani et al. (2017, Section 3.5) for their sinusoids.
#
# Does the sum mix the two kinds of information beyond recovery? Not in the trained model: the
# two tables occupy different directions of the $H$ dimensions. The principal directions of each
# table (of its rows, centred) say how many dimensions each needs, and projecting one table onto
# the other's leading directions says how much of it lives there:


# %%
# alt: Cumulative share of the variance of the word table and of the position table against the
#   number of principal directions, log scale, with the share a random subspace of that size would
#   hold for comparison.
def principal(table):
    """Principal directions (rows of an (H, H) matrix) and cumulative variance share of a
    table's rows."""
    centred = table - table.mean(0)
    _, sv, directions = torch.linalg.svd(centred, full_matrices=False)
    return directions, (sv**2).cumsum(0) / (sv**2).sum(), centred


def share_in(centred, directions):
    """Share of a centred table's variance inside the span of ``directions`` (k, H)."""
    return ((centred @ directions.T).pow(2).sum() / centred.pow(2).sum()).item()


with torch.no_grad():
    word_dirs, word_cum, word_c = principal(emb.word_embeddings.weight)
    pos_dirs, pos_cum, pos_c = principal(emb.position_embeddings.weight)
H = word_c.shape[1]
k_pos = int((pos_cum < 0.9).sum()) + 1  # directions holding 90% of the position table's variance
k_word = int((word_cum < 0.9).sum()) + 1
word_in_pos = share_in(word_c, pos_dirs[:k_pos])
pos_in_word = share_in(pos_c, word_dirs[:k_word])
print(f"90% of the variance: position table {k_pos} directions, word table {k_word}, of H = {H}")
print(
    f"word table's variance in the position table's top {k_pos} directions: {word_in_pos:.2%}\n"
    f"(a random {k_pos}-dimensional subspace holds {k_pos / H:.2%} on average)"
)
print(
    f"position table's variance in the word table's top {k_word} directions: {pos_in_word:.2%} "
    f"(random: {k_word / H:.2%})"
)
claims.value("k_pos", k_pos, "{:.0f}")
claims.value("k_word", k_word, "{:.0f}")
claims.value("hidden", H, "{:.0f}")
claims.value("word_in_pos", 100 * word_in_pos, "{:.2g}%")
claims.value("word_in_random", 100 * k_pos / H, "{:.2g}%")
claims.value("word_pos_over_random", word_in_pos / (k_pos / H), "{:.2f}")
claims.value("pos_in_word", 100 * pos_in_word, "{:.2g}%")
claims.value("pos_in_random", 100 * k_word / H, "{:.2g}%")
claims.claim(
    "positions_need_few_directions",
    k_pos,
    "<",
    k_word / 10,
    "the position table needs fewer than a tenth of the word table's directions",
)
claims.claim(
    "words_avoid_position_directions",
    word_in_pos,
    "<",
    k_pos / H / 2,
    "the word table holds less than half a random subspace's share in the position directions",
)
claims.claim(
    "positions_avoid_word_directions",
    pos_in_word,
    "<",
    k_word / H / 2,
    "the position table holds less than half a random subspace's share in the word directions",
)

fig, ax = plt.subplots(figsize=(5.5, 3.2))
dims = torch.arange(1, H + 1)
ax.plot(dims, word_cum, label="word table")
ax.plot(dims, pos_cum, label="position table")
ax.plot(dims, dims / H, ":", color="gray", label="random subspace")
ax.axhline(0.9, color="gray", lw=0.8, ls="--")
ax.set_xscale("log")
ax.set_xlabel("principal directions kept")
ax.set_ylabel("share of the table's variance")
ax.legend(frameon=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# Nine tenths of the position table's variance lies in {{ k_pos }} of the {{ hidden }}
# directions, where the word table needs {{ k_word }} {{ claim: positions_need_few_directions }}.
# And the two avoid each other: the word table keeps {{ word_in_pos }} of its variance in the
# position table's {{ k_pos }} leading directions, where a random subspace of that size would
# hold {{ word_in_random }} {{ claim: words_avoid_position_directions }}; the position table
# keeps {{ pos_in_word }} of its variance in the word table's {{ k_word }} leading directions,
# where a random subspace of that size would hold {{ pos_in_random }}
# {{ claim: positions_avoid_word_directions }}. So training did, within one width, what
# concatenation would have fixed by hand: it gave positions a few directions of their own and left
# the rest to the words, with the split learned rather than chosen. A linear map of a later layer
# can read the position out of $z_t$ by projecting onto those few directions, as it would read a
# concatenated part (nearly: the split is not exact, and the LayerNorm mixes in each token's
# mean and scale).
#
# ## Dropout
#
# In training, `BertEmbeddings` zeroes each feature with probability $p$
# (`hidden_dropout_prob`) and scales the survivors by $1/(1-p)$, so the expected value is
# unchanged. In eval mode it is the identity, which is why the by-hand result above needed no
# dropout. One training-mode draw:

# %%
torch.manual_seed(0)
p = emb.dropout.p
dropped = F.dropout(e, p=p, training=True)  # (B, T, H)
kept = dropped != 0
print(
    f"p = {p}: fraction zeroed {1 - kept.float().mean().item():.4f}; "
    f"survivors scaled by {(dropped[kept] / e[kept]).mean().item():.4f} (1/(1-p) = "
    f"{1 / (1 - p):.4f})"
)

# %% [markdown]
# ## What we found
#
# - The input of layer 0 is
#   $x_{0,t} = \mathrm{LayerNorm}(E_\text{word}[w_t] + E_\text{type}[s_t] + E_\text{pos}[t])$,
#   then dropout; rebuilding it from the three tables matched `model.embeddings` to rounding.
# - Left out, the positions default to $0, \dots, T-1$ in every sentence and the token types
#   to 0 (segment A).
# - In a pair `[CLS] A [SEP] B [SEP]`, type 1 starts right after the first `[SEP]`
#   {{ claim: b_starts_after_first_sep }}. This model's two type rows are close
#   {{ claim: type_rows_differ_little }}, its fine-tuning never used type 1, and its sentence
#   vector moves more when B comes first than under any change of the types
#   {{ claim: order_moves_pair_vector_more_than_types }}.
# - The position embeddings are the model's only knowledge of word order: with every token at
#   the same position, a sentence and its reordering get the same sentence embedding
#   {{ claim: same_position_order_blind }}, and with positions they differ
#   {{ claim: positions_tell_order }}.
# - Positions are added, not concatenated, so the stream keeps one width; in the trained tables
#   positions occupy {{ k_pos }} directions the words mostly avoid
#   {{ claim: words_avoid_position_directions }}.
# - There is no residual around the embeddings' LayerNorm: it starts the residual stream
#   {{ claim: embeddings_have_no_residual }}.
#
# **Exercise:** [02-embeddings](../exercises/02-embeddings/02-embeddings.ipynb): open it with
# `make lab`, then grade it with `bertlab grade 02`.
#
# ## Check yourself
#
# {{ predict: check_largest_term }}
#
# {{ predict: check_segment_b }}
#
# {{ predict: check_position_directions }}

# %% tags=["remove-input"]
# The numbers the questions of this page rest on, measured above, and the questions.
_ = claims.value("order_blind_gap", abs(1 - cos_blind), "{:.1e}")
_ = claims.value("order_default_gap", 1 - cos_normal, "{:.1e}")
_ = claims.value(
    "near_minus_far_cosine", by_distance[:5].mean() - by_distance[19:40].mean(), "{:.2f}"
)
_ = claims.value("near_cosine", by_distance[:5].mean(), "{:.2f}")
_ = claims.value("far_cosine", by_distance[19:40].mean(), "{:.2f}")
# which of the three terms has the largest mean norm: 0 word, 1 position, 2 token type
_ = claims.value(
    "largest_term",
    torch.stack([part_norms[label].mean() for label in parts]).argmax().item(),
    "{:.0f}",
)
ask.predict(
    "position_similarity",
    "The position vectors are learned from scratch. How similar are the "
    "vectors of two positions, as their distance grows?",
    [
        ask.between(
            "near_minus_far_cosine",
            0.2,
            None,
            "clearly more similar when nearer (mean cosine higher by 0.2 or more)",
            "The mean cosine of positions up to five apart is {{ near_cosine }}, of "
            "positions twenty to forty apart {{ far_cosine }}: near in the sentence is near in the "
            "table.",
        ),
        ask.between(
            "near_minus_far_cosine",
            0,
            0.2,
            "barely more similar when nearer (higher by less than 0.2)",
            "That would hold if nothing but chance tied neighbouring rows together, each learned "
            "on its "
            "own. Neighbouring positions see the same words in nearly the same contexts, and "
            "training "
            "pulled their rows together: the difference is {{ near_minus_far_cosine }}.",
        ),
        ask.between(
            "near_minus_far_cosine",
            None,
            0,
            "no more similar when nearer",
            "That would hold if "
            "training had left the randomly initialised rows as they were. It shaped them by where "
            "words "
            "stand.",
        ),
    ],
    section="What the position table learned",
)
ask.check(
    "check_largest_term",
    "Of the three vectors added into $z_t$ (word, position, token type), which is "
    "the largest on average?",
    [
        ask.between(
            "largest_term",
            0.5,
            1.5,
            "the position vector",
            "That would hold if where a token stands mattered more to the model than what it is.",
        ),
        ask.between(
            "largest_term",
            1.5,
            None,
            "the token-type vector",
            "That would hold if the segment a token belongs to mattered more to the model than "
            "what the token is. The token-type vector is one and the same for every token of a "
            "segment: it cannot tell the tokens apart.",
        ),
        ask.between(
            "largest_term",
            None,
            0.5,
            "the word vector",
            "Its mean norm is {{ word_norm }}, "
            "against {{ position_norm }} for the position vector and {{ type_norm }} for the "
            "token-type "
            "vector {{ claim: word_table_dominates }}.",
        ),
    ],
    section="How big is each part?",
)
ask.check(
    "check_segment_b",
    "In a sentence pair `[CLS] A [SEP] B [SEP]`, where does the second segment's token type begin?",
    [
        ask.holds(
            "b_starts_after_first_sep",
            "right after the first `[SEP]`",
            "The `[SEP]` that closes A still "
            "has A's type; B starts at position {{ b_start }}, right after it "
            "{{ claim: b_starts_after_first_sep }}.",
        ),
        ask.fails(
            "b_starts_after_first_sep",
            "at the first `[SEP]`",
            "That would hold if the "
            "separator belonged to the sentence after it. The tokenizer gives it to the sentence "
            "it closes.",
        ),
    ],
    section="Token types in use: a sentence pair",
)
ask.check(
    "check_position_directions",
    "Positions are added to the word vectors, not concatenated. Do the "
    "trained word vectors use the directions the positions occupy?",
    [
        ask.between(
            "word_pos_over_random",
            None,
            0.5,
            "little: they mostly avoid them",
            "The positions occupy "
            "{{ k_pos }} directions, and the word vectors keep {{ word_in_pos }} of their variance "
            "there, "
            "against {{ word_in_random }} in as many random directions "
            "{{ claim: words_avoid_position_directions }}.",
        ),
        ask.between(
            "word_pos_over_random",
            0.5,
            2,
            "about as much as any other directions",
            "That would hold if "
            "adding mixed the two beyond repair. Training keeps them apart in the one width they "
            "share.",
        ),
        ask.between(
            "word_pos_over_random",
            2,
            None,
            "more than other directions",
            "That would hold if words and positions crowded into the few directions that matter "
            "most to both. The word vectors steer clear of the positions' directions.",
        ),
    ],
    section="Added, not concatenated",
)

# %% tags=["remove-input"]
claims.publish()  # the numbers and claims above, for the build that renders this page
