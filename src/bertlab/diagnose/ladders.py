"""Hint ladders as data: three steps for each known mistake and for each task.

Step 1 says what to look at (the idea), step 2 where the course explains it (a lesson's section,
and the equation where there is one), step 3 the fix in words. No step is code: an inline code
span names an identifier the learner must know (`attention_mask`, `config.layer_norm_eps`), never
an expression that could be pasted into an exercise (tests/test_hint_ladder.py). A mistake's
lesson and section are the ``Mistake``'s own, which the judge writes into the verdict; ``LADDERS``
holds its steps 1 and 3 and its equation. A task's ladder (``TASK_LADDERS``), used when a failure
names no known mistake and for the notebooks' hint folds, holds all of its steps.
``bertlab.hints`` renders both. Importing this module loads nothing but dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Steps:
    """A known mistake's ladder, but for its lesson and section (the ``Mistake``'s).

    Attributes:
        look: step 1, what to look at.
        fix: step 3, the fix in words.
        equation: step 2's equation, in plain text ("" when the section has none to quote).
    """

    look: str
    fix: str
    equation: str = ""


@dataclass(frozen=True)
class TaskLadder:
    """A task's ladder: steps 1 and 3, and step 2's lesson, section and equation."""

    look: str
    lesson: str
    section: str
    equation: str
    fix: str


# The equations quoted by step 2, once each.
SOFTMAX = "softmax(z)ᵢ = exp(zᵢ - max z) / Σⱼ exp(zⱼ - max z), over the keys"
ATTENTION = "P = softmax(Q Kᵀ / √d + M), head = P V"
LAYERNORM = "LN(x) = γ ⊙ (x - μ) / √(σ² + ε) + β, with μ and σ² over each token's H features (σ² divided by H)"  # noqa: RUF001
GELU = "GELU(z) = z Φ(z) = z · ½ (1 + erf(z / √2))"
ADD_NORM = "h = LN₁(x + Dropout(c W^O + b^O))"
SECOND_ADD_NORM = "y = LN₂(h + Dropout(GELU(h W₁ + b₁) W₂ + b₂))"
LAYER = "h = LN₁(x + Attention(x)), y = LN₂(h + FFN(h))"
EMBEDDINGS = "x₀ = Dropout(LN(E_word[ids] + E_pos[positions] + E_type[types]))"
MASK = "M = (1 - δ) · finfo(float32).min, shaped (B, 1, 1, T)"
RESIDUAL = "r(X) = ‖X - 1 x̄ᵀ‖_F / ‖X‖_F, over the real tokens only"
POOLER = "pooler_output = tanh(x_L[:, 0] W_p + b_p)"
COSINE = "cos(u, v) = u · v / (‖u‖ ‖v‖), u and v the means over the real tokens"
LINEAR = "y = x Wᵀ + b, W of shape (out_features, in_features)"

LADDERS: dict[str, Steps] = {
    # -- Task 1: numpy
    "softmax-unstable": Steps(
        "Look at what exp does to large scores: scores around 1e4 overflow to infinity before you divide.",
        "Subtract each row's maximum (over the softmax axis) from the scores before exponentiating; "
        "the result is the same, and the largest exponent is 1.",
        SOFTMAX,
    ),
    "softmax-wrong-axis-numpy": Steps(
        "Look at which axis your softmax sums over: each query's weights must sum to 1 over the keys.",
        "Take the maximum, the exponentials' sum and the normalisation along the `axis` argument "
        "(the last axis by default), keeping that axis so the division broadcasts.",
        SOFTMAX,
    ),
    "unbiased-variance": Steps(
        "Look at what your variance divides by: LayerNorm's variance is the plain mean of the squared deviations.",
        "Use the biased variance: divide the sum of squared deviations by H, the number of features, not by H - 1.",
        LAYERNORM,
    ),
    "layernorm-wrong-axis": Steps(
        "Look at the axis of your mean and variance: LayerNorm normalises each token on its own.",
        "Take the mean and the variance over the last axis, each token's H features, keeping the axis "
        "so they broadcast back over the features.",
        LAYERNORM,
    ),
    "layernorm-eps-missing": Steps(
        "Look at a row whose features are all equal: its variance is 0, and you divide by its square root.",
        "Add eps to the variance inside the square root.",
        LAYERNORM,
    ),
    "layernorm-eps-outside-sqrt": Steps(
        "Look at where eps enters your denominator: inside or outside the square root.",
        "Add eps to the variance first, then take the square root of the sum.",
        LAYERNORM,
    ),
    "tanh-gelu-numpy": Steps(
        "Look at which GELU you wrote: BERT's is the exact one, not the tanh approximation.",
        "Multiply x by the standard normal CDF of x, written with the error function: one half times "
        "one plus erf of x over the square root of 2.",
        GELU,
    ),
    "relu-instead-of-gelu-numpy": Steps(
        "Look at any input x, positive or negative: GELU gives x Φ(x), a little below x where x > 0 and a little "
        "below 0 where x < 0; ReLU gives exactly x or exactly 0.",
        "Compute GELU: x times the standard normal CDF of x, written with the error function.",
        GELU,
    ),
    "weight-not-transposed": Steps(
        "Look at the shape of the weight: PyTorch stores a Linear's weight as (out_features, in_features).",
        "Multiply x by the transpose of the weight, then add the bias.",
        LINEAR,
    ),
    "numpy-layer-no-scaling": Steps(
        "Look at the size of your attention scores: they grow with the head size d.",
        "Divide each head's scores by the square root of the head size before adding the mask and taking the softmax.",
        ATTENTION,
    ),
    "numpy-layer-mask-ignored": Steps(
        "Look at what `attention_mask` does in your layer: padding keys must get no attention.",
        "Add `attention_mask` to the scaled scores, before the softmax; it broadcasts over the heads and queries.",
        ATTENTION,
    ),
    "numpy-layer-second-residual-from-input": Steps(
        "Look at what the second residual adds back: the input of the feed-forward sub-layer.",
        "In the second Add & Norm, add the first Add & Norm's output h, not the layer's input, to the FFN's output.",
        SECOND_ADD_NORM,
    ),
    "numpy-layer-ffn-fed-layer-input": Steps(
        "Look at what the feed-forward sub-layer reads: it comes after attention, not beside it.",
        "Feed the first Add & Norm's output h to the intermediate dense layer, not the layer's input.",
        LAYER,
    ),
    "numpy-layer-ffn-applied-twice": Steps(
        "Count your sub-layers: one layer has one attention sub-layer and one feed-forward sub-layer.",
        "Apply the FFN and its Add & Norm once, to h, and return that result.",
        LAYER,
    ),
    "numpy-layer-layernorm-before-add": Steps(
        "Look at the order in each Add & Norm: BERT is Post-LN.",
        "In both Add & Norms, add the residual to the sub-layer's output first, then normalise the sum.",
        ADD_NORM,
    ),
    # -- dropout and LayerNorm settings, in every module task
    "dropout-in-eval": Steps(
        "Look at what decides whether dropout acts: in eval mode two identical calls must agree.",
        "Drop only in train mode: use the module's `self.dropout` (which follows the module's mode), or pass "
        "the module's `training` flag (or a probability of 0 in eval mode) to the functional form.",
    ),
    "dropout-missing": Steps(
        "Look at your forward in train mode: the `dropout` you created is never applied.",
        "Apply `self.dropout` where HF applies it; the task's hint and the lesson section say where.",
    ),
    "dropout-mask-shared": Steps(
        "Look at the shape of the tensor you draw a dropout mask for: it must be the whole tensor that is dropped.",
        "Apply dropout to the full tensor, so every element is kept or dropped on its own, not one mask broadcast "
        "over tokens, features, sentences or heads.",
    ),
    "dropout-not-scaled": Steps(
        "Look at the elements your dropout keeps: on average the output must equal the input.",
        "Divide the kept elements by the probability of keeping one (one minus the dropout probability), as "
        "`nn.Dropout` does.",
    ),
    "dropout-applied-twice": Steps(
        "Count the dropouts your forward applies to one tensor: HF applies each dropout once.",
        "Apply the dropout once, at its place, and remove the other call.",
    ),
    "pre-ln-order": Steps(
        "Look at what your LayerNorm normalises: in BERT it is the last step, applied to the residual sum.",
        "Keep BERT's Post-LN order: apply `dense`, then dropout, add `input_tensor`, and normalise that sum; "
        "normalise nothing before `dense`.",
        ADD_NORM,
    ),
    "layernorm-eps-typed": Steps(
        "Look at where your LayerNorms' eps comes from: another model's config has another eps.",
        "Read eps from `config.layer_norm_eps` in every LayerNorm; type no number.",
        LAYERNORM,
    ),
    # -- Task 2.1
    "embeddings-layernorm-eps-default": Steps(
        "Look at the eps of your embeddings' LayerNorm: torch's default, 1e-05, is not BERT's.",
        "Create `LayerNorm` with eps read from `config.layer_norm_eps`; leave out no eps and type none.",
        EMBEDDINGS,
    ),
    "embeddings-dropout-before-layernorm": Steps(
        "Look at the order of the last two steps of the embeddings.",
        "Normalise the sum of the three embeddings first, then apply dropout to the LayerNorm's output.",
        EMBEDDINGS,
    ),
    "position-ids-off-by-one": Steps(
        "Look at the position of the first token, [CLS]: positions count from 0.",
        "Take the default positions from the `position_ids` buffer starting at `past_key_values_length` "
        "(0 for an encoder), T of them.",
        EMBEDDINGS,
    ),
    "token-types-ignored": Steps(
        "Count the embeddings you add: there are three tables.",
        "Add the token-type embedding of `token_type_ids` to the word and position embeddings.",
        EMBEDDINGS,
    ),
    "token-types-always-zero": Steps(
        "Look at what happens to the `token_type_ids` the caller passes.",
        "Use the `token_type_ids` argument when it is given; fall back to the all-zeros buffer only when it is None.",
        EMBEDDINGS,
    ),
    "embeddings-no-layernorm": Steps(
        "Look at what happens to the sum of the three embeddings before it is returned.",
        "Pass the sum through `LayerNorm` (then dropout) before returning it.",
        EMBEDDINGS,
    ),
    # -- Task 3
    "no-scaling": Steps(
        "Look at the size of your attention scores: they grow with the head size d.",
        "Multiply the scores by `scaling` (one over the square root of the head size) before the mask and the softmax.",
        ATTENTION,
    ),
    "softmax-wrong-axis": Steps(
        "Look at which axis your softmax normalises: each query's weights sum to 1 over the keys.",
        "Take the softmax over the last axis, the keys.",
        ATTENTION,
    ),
    "mask-ignored": Steps(
        "Look at what `attention_mask` does in your code: padding keys must get no attention.",
        "When `attention_mask` is not None, add it to the scaled scores before the softmax.",
        ATTENTION,
    ),
    "mask-multiplied": Steps(
        "Look at how the mask meets the scores: the mask is additive.",
        "Add the mask to the scores instead of multiplying by it: 0 leaves a real key alone, a huge negative "
        "number removes a padding key.",
        ATTENTION,
    ),
    "keep-mask-times-scores": Steps(
        "Look at what a padding key's score becomes: a score of 0 still gets a share of the softmax.",
        "Add the additive mask to the scores (0 for real tokens, a huge negative number for padding) instead of "
        "multiplying by a 0/1 mask.",
        ATTENTION,
    ),
    "keep-mask-times-probs": Steps(
        "Look at the sum of each row of your probabilities: it must be 1.",
        "Mask before the softmax, by adding the additive mask to the scores, not after it.",
        ATTENTION,
    ),
    "mask-wrong-sign": Steps(
        "Look at the sign with which the mask enters the scores.",
        "Add the mask to the scores; it is already negative where attention must not go.",
        ATTENTION,
    ),
    "mask-over-queries": Steps(
        "Look at which axis of the scores your mask lines up with: padding removes keys, not queries.",
        "Use the mask as it is given, shaped (B, 1, 1, T) or (B, 1, T, T), so its last axis meets the keys' axis; "
        "do not swap its last two axes.",
        ATTENTION,
    ),
    "heads-split-wrong": Steps(
        "Look at the axes after you split the heads: a reshape alone does not reorder them.",
        "Reshape to (B, T, A, d) first, then swap the token and head axes to get (B, A, T, d).",
        ATTENTION,
    ),
    "heads-merged-without-transpose": Steps(
        "Look at the axis order before you merge the heads: tokens must come before heads.",
        "Move the head axis back after the token axis, (B, T, A, d), before reshaping to (B, T, H).",
        ATTENTION,
    ),
    "heads-merged-dims-swapped": Steps(
        "Look at the order of the last two axes before the merge: head, then feature within the head.",
        "Merge from (B, T, A, d), heads before each head's features, so head i fills features i·d to (i+1)·d - 1.",
        ATTENTION,
    ),
    "attention-dropout-on-context": Steps(
        "Look at which tensor your attention dropout thins: in BERT it is the attention probabilities.",
        "Apply dropout to the probabilities, after the softmax and before they weight the values; "
        "leave the context layer alone.",
        "head = Dropout(P) V",
    ),
    # -- Task 4.1, 4.2 and 5.2
    "layernorm-before-residual": Steps(
        "Look at the order of the add and the LayerNorm: BERT is Post-LN.",
        "Add `input_tensor` to the dropped-out dense output first, then apply `LayerNorm` to the sum.",
        ADD_NORM,
    ),
    "residual-missing": Steps(
        "Look at what your sub-layer adds: the residual connection carries the sub-layer's input around it.",
        "Add `input_tensor` to the (dropped-out) dense output before the LayerNorm.",
        ADD_NORM,
    ),
    "residual-wrong-tensor": Steps(
        "Look at which tensor your residual adds back: the input of the whole sub-layer, not the input of `dense`.",
        "Add `input_tensor`, not `hidden_states`, to the dense output before the LayerNorm.",
        ADD_NORM,
    ),
    "attention-output-wrong-order": Steps(
        "Look at the order of the two arguments you pass to `self.output`.",
        "Give `self.output` the context layer first (what `dense` transforms) and the sub-layer's input, "
        "`hidden_states`, second (the residual).",
        ADD_NORM,
    ),
    "attention-mask-not-passed": Steps(
        "Look at what your `self.self` call receives: the mask has to reach the scores.",
        "Pass `attention_mask` on to self-attention.",
        ATTENTION,
    ),
    "layernorm-eps-default": Steps(
        "Look at your LayerNorm's eps: torch's default is not BERT's.",
        "Create the LayerNorm with eps read from `config.layer_norm_eps`.",
        LAYERNORM,
    ),
    "dropout-after-layernorm": Steps(
        "Look at where your dropout acts: after the LayerNorm it also thins the residual path.",
        "Apply dropout to the dense output only, before the residual add; nothing after the LayerNorm.",
        ADD_NORM,
    ),
    "dropout-on-residual-sum": Steps(
        "Look at what your dropout thins: the sum includes the residual, which is never dropped.",
        "Apply dropout to the dense output alone, then add `input_tensor`, then normalise.",
        ADD_NORM,
    ),
    "dropout-on-sublayer-input": Steps(
        "Look at where your dropout acts: before `dense` it thins the sub-layer's input.",
        "Apply dropout to the dense output, the update added to the residual, not to the input of `dense`.",
        ADD_NORM,
    ),
    # -- Task 6
    "layer-skips-ffn": Steps(
        "Count the sub-layers your BertLayer runs: attention, then the feed-forward sub-layer.",
        "After attention, run `intermediate` on the attention output, then `output` on that with the attention "
        "output as its residual, and return that.",
        LAYER,
    ),
    "encoder-mask-not-applied": Steps(
        "Follow `attention_mask` down: does it reach every layer's attention?",
        "Pass the additive mask to every layer's attention call, down to self-attention.",
        ATTENTION,
    ),
    "bool-mask-added": Steps(
        "Look at what the tokenizer's mask holds (1 for tokens, 0 for padding) and what the layers expect "
        "(0 for tokens, a huge negative number for padding).",
        "Turn the 0/1 mask into the additive mask before the encoder: one minus the mask, times the most "
        "negative float32, reshaped so it broadcasts over heads and queries.",
        MASK,
    ),
    "extended-mask-not-broadcast": Steps(
        "Look at the shape of the additive mask where it meets the (B, A, T, T) scores.",
        "Give the mask the shape (B, 1, 1, T): one axis for the heads and one for the queries, the keys last.",
        MASK,
    ),
    "pooler-no-tanh": Steps(
        "Look at the pooler's last step: it has an activation.",
        "Apply tanh to the dense output of the [CLS] vector.",
        POOLER,
    ),
    "pooler-wrong-token": Steps(
        "Look at which token the pooler reads: the first one.",
        "Take the hidden state at index 0 of the token axis, [CLS], for every sentence, then dense and tanh.",
        POOLER,
    ),
    "extended-mask-wrong-sign": Steps(
        "Look at where your additive mask is very negative: it must be on padding, and nowhere positive.",
        "Build the mask from one minus the 0/1 mask, times the most negative float32: 0 on tokens, "
        "most negative on padding.",
        MASK,
    ),
    "hidden-states-missing-embeddings": Steps(
        "Count your hidden states: one per layer plus one.",
        "Start the list with the encoder's input (the embeddings output), then add each layer's output.",
        "hidden_states = (x₀, x₁, …, x_L)",
    ),
    "second-residual-from-input": Steps(
        "Look at what the second residual adds back: the input of the feed-forward sub-layer.",
        "Pass the attention output, not the layer's input, as the residual argument of `output`.",
        SECOND_ADD_NORM,
    ),
    "ffn-fed-layer-input": Steps(
        "Look at what `intermediate` reads: the feed-forward block comes after attention.",
        "Feed the attention output, not `hidden_states`, to `intermediate`.",
        LAYER,
    ),
    "ffn-applied-twice": Steps(
        "Count your sub-layers: one attention sub-layer and one feed-forward sub-layer per layer.",
        "Run `intermediate` and `output` once and return their result.",
        LAYER,
    ),
    # -- Task 5.1
    "tanh-gelu": Steps(
        "Look at which GELU your `intermediate_act_fn` is: BERT's is the exact one.",
        "Use the exact, erf-based GELU, not its tanh approximation.",
        GELU,
    ),
    "relu-instead-of-gelu": Steps(
        "Look at any pre-activation z, positive or negative: GELU gives z Φ(z), a little below z where z > 0 and "
        "a little below 0 where z < 0; ReLU gives exactly z or exactly 0.",
        "Use GELU, the exact erf form that `config.hidden_act` names, as `intermediate_act_fn`.",
        GELU,
    ),
    "activation-missing": Steps(
        "Look at what happens after `dense`: without a nonlinearity the two matrices of the FFN collapse into one.",
        "Apply `intermediate_act_fn` to the dense output and return that.",
        "m = GELU(h W₁ + b₁)",
    ),
    # -- Task 7
    "residual-includes-padding": Steps(
        "Look at which positions your measure counts: padding is not part of the sentence.",
        "Use only each sentence's real tokens (from `attention_mask`) in the mean token and in both norms.",
        RESIDUAL,
    ),
    "residual-norm-includes-padding": Steps(
        "Look at your denominator: it counts padded rows the numerator leaves out.",
        "Take the norm of X over the real tokens only, as for the numerator.",
        RESIDUAL,
    ),
    "residual-not-relative": Steps(
        "Look at what the measure is relative to: the size of X itself.",
        "Divide the norm of X minus its mean token by the norm of X.",
        RESIDUAL,
    ),
    "residual-mean-over-features": Steps(
        "Look at which mean you subtract: the mean token, averaged over the tokens.",
        "Subtract the mean over the (real) tokens, one H-vector per sentence, not each token's mean over its features.",
        RESIDUAL,
    ),
    "residual-squared-norms": Steps(
        "Look at whether your norms are squared: the measure is a ratio of norms.",
        "Take the square roots: the Frobenius norms themselves, not their squares.",
        RESIDUAL,
    ),
    "variant-skip-kept": Steps(
        "Look at what your layer does when `attention_skip` is False.",
        "When `attention_skip` is False, normalise the attention branch alone, without adding the layer's input.",
        "h = LN₁(a) without the attention skip, LN₁(x + a) with it",
    ),
    "variant-ffn-skip-kept": Steps(
        "Look at what your layer does when `ffn_skip` is False.",
        "When `ffn_skip` is False, normalise the feed-forward branch alone, without adding h.",
        "y = LN₂(f) without the FFN skip, LN₂(h + f) with it",
    ),
    "skip-removed-layernorm-dropped": Steps(
        "Look at what a removed skip takes away: only the addition, not the LayerNorm.",
        "Without a skip, keep the LayerNorm and apply it to the branch alone.",
        "h = LN₁(a) without the attention skip; y = LN₂(f) without the FFN skip",
    ),
    "removed-ffn-keeps-layernorm": Steps(
        "Look at what a removed feed-forward block leaves: the identity, LayerNorm included.",
        "When `ffn` is False, return h as it is, with no second LayerNorm.",
        "y = h when the FFN block is removed",
    ),
    "residual-mean-includes-padding": Steps(
        "Look at which positions your mean token averages: padding is not part of the sentence.",
        "Average only the real tokens, those `attention_mask` marks with 1: weight by the mask and divide by "
        "the number of real tokens, as the norms already do.",
        RESIDUAL,
    ),
    "cosine-not-normalised": Steps(
        "Look at whether your similarity depends on the vectors' lengths: a cosine does not.",
        "Divide the dot product by both vectors' lengths (or normalise each vector to length 1 first).",
        COSINE,
    ),
    "pooling-includes-padding": Steps(
        "Look at which positions your mean pooling averages: padding is not part of the sentence.",
        "Average over the real tokens only: weight by `attention_mask` and divide by the number of real tokens.",
        COSINE,
    ),
    "cls-pooling": Steps(
        "Look at how you make one vector per sentence: this model averages, it does not read [CLS].",
        "Mean-pool the hidden states over the real tokens.",
        COSINE,
    ),
    "lesion-in-every-layer": Steps(
        "Look at how many layers your lesion touches: one experiment per layer.",
        "Apply the lesion to layer i alone, leave the other layers intact, and measure; repeat for each i.",
    ),
}


TASK_LADDERS: dict[str, TaskLadder] = {
    "1.1": TaskLadder(
        "A softmax turns each row of scores into weights that sum to 1 along one axis; think about what exp "
        "does to very large scores.",
        "03-multi-head-attention",
        "A numerically stable softmax",
        SOFTMAX,
        "Subtract the maximum along `axis` before exponentiating, then divide by the sum along the same axis, "
        "keeping that axis for the broadcast.",
    ),
    "1.2": TaskLadder(
        "LayerNorm normalises each token's feature vector on its own, then scales and shifts it.",
        "06-layernorm",
        "LayerNorm by hand",
        LAYERNORM,
        "Take the mean and the biased variance over the last axis, add eps inside the square root, then "
        "multiply by the weight and add the bias.",
    ),
    "1.3": TaskLadder(
        "BERT's GELU is the exact one: x weighted by the probability that a standard normal is below x.",
        "05-feed-forward",
        "Exact GELU",
        GELU,
        "Write the standard normal CDF with SciPy's error function, which works elementwise on any shape, "
        "and multiply x by it; not the tanh approximation.",
    ),
    "1.4": TaskLadder(
        "A Linear's weight is stored as (out_features, in_features): look at the shapes before you multiply.",
        "01-anatomy",
        "What `intermediate.dense` is",
        LINEAR,
        "Multiply x by the weight's transpose and add the bias; it must work for 1-D and 2-D inputs alike.",
    ),
    "1.5": TaskLadder(
        "Follow the layer's equation in order: queries, keys and values; split into heads; scaled scores plus "
        "the mask; softmax over the keys; weight the values and merge the heads; the first Add & Norm; the "
        "feed-forward network; the second Add & Norm.",
        "04-add-and-norm",
        "One layer by four calls",
        "P = softmax(Q Kᵀ / √d + M); a = Concat(heads) W^O + b^O; h = LN₁(x + a); y = LN₂(h + GELU(h W₁ + b₁) W₂ + b₂)",
        "Split each projection into A heads of size d and move the head axis before the tokens; scale the scores "
        "by one over the square root of d and add `attention_mask`; merge the heads back after the tokens; add "
        "the layer's input x before the first LayerNorm and h, not x, before the second; read every size and eps "
        "from `config`.",
    ),
    "2.1": TaskLadder(
        "Three lookups, added, then normalised and dropped out: the word vectors (or `inputs_embeds`), "
        "the positions and the token types. Arguments left as None take HF's defaults.",
        "02-embeddings",
        "The embeddings by hand",
        EMBEDDINGS,
        "Default positions are a slice of the `position_ids` buffer starting at `past_key_values_length`, so "
        "[CLS] is at position 0; default token types are all zeros. Create `LayerNorm` with eps from "
        "`config.layer_norm_eps` and `dropout` with `config.hidden_dropout_prob`, and apply dropout after "
        "the LayerNorm.",
    ),
    "3.1": TaskLadder(
        "For every head at once: scores from queries and keys, scaled; the additive mask; a softmax over the "
        "keys; dropout on the probabilities; the weighted sum of the values.",
        "03-multi-head-attention",
        "Scaled scores",
        ATTENTION,
        "Multiply the scores by `scaling`, add `attention_mask` when it is not None, take the softmax over "
        "the last axis, drop the probabilities only when `module.training` is true, and return the weighted "
        "values with the head axis moved after the token axis, together with the probabilities.",
    ),
    "3.2": TaskLadder(
        "One projection each for queries, keys and values, for all heads at once; then split into heads, "
        "attend, and merge the heads back.",
        "03-multi-head-attention",
        "Splitting into heads",
        ATTENTION,
        "Split each projection to (B, T, A, d) and move the heads before the tokens; call your "
        "`eager_attention_forward` with dropout probability `self.dropout.p` in train mode and 0 in eval mode; "
        "merge its output, already (B, T, A, d), back to (B, T, H).",
    ),
    "4.1": TaskLadder(
        "The first Add & Norm: a dense layer on the heads' output, dropout on that update, the residual "
        "added, then the LayerNorm.",
        "04-add-and-norm",
        "The first Add & Norm",
        ADD_NORM,
        "Apply `dense`, then `dropout` to its output only; add `input_tensor`; normalise the sum with a "
        "LayerNorm whose eps is `config.layer_norm_eps`, not torch's default.",
    ),
    "4.2": TaskLadder(
        "BertAttention only wires its two parts: self-attention, then `self.output`, which ends the block: "
        "W^O, the residual add and the LayerNorm.",
        "04-add-and-norm",
        "The first Add & Norm",
        ADD_NORM,
        "Run `self.self` on `hidden_states` with the mask; give `self.output` the context layer and, as the "
        "residual, `hidden_states`, the sub-layer's input; return its result with the attention probabilities.",
    ),
    "5.1": TaskLadder(
        "The first half of the feed-forward network: widen each token to `intermediate_size`, then the "
        "nonlinearity that `config.hidden_act` names: for every config of the course, the exact GELU.",
        "05-feed-forward",
        "Exact GELU",
        GELU,
        "Apply `dense`, then `intermediate_act_fn`, the exact erf-based GELU (not its tanh approximation, not ReLU).",
    ),
    "5.2": TaskLadder(
        "The second Add & Norm: the same three steps as Task 4.1, with `dense` starting from `intermediate_size`.",
        "04-add-and-norm",
        "The second Add & Norm",
        SECOND_ADD_NORM,
        "Apply `dense`, then `dropout` to its output only; add `input_tensor`, the attention block's "
        "output h; normalise the sum with eps from `config.layer_norm_eps`.",
    ),
    "6.1": TaskLadder(
        "A layer is attention, then the feed-forward block: which tensor does each sub-module receive, "
        "and which one does each residual add back?",
        "07-putting-it-together",
        "The layer",
        LAYER,
        "Take the first element of what `attention` returns as h; run `intermediate` on h; run `output` on "
        "that with h, not the layer's input, as the residual; return the tensor alone, not a tuple.",
    ),
    "6.2": TaskLadder(
        "The encoder runs its layers one after another, each on the previous one's output, and keeps every "
        "hidden state.",
        "07-putting-it-together",
        "The encoder",
        "x_{l+1} = Layer_l(x_l, M); hidden_states = (x₀, …, x_L)",
        "Pass the same additive mask to every layer; start the hidden states with the encoder's input and "
        "append each layer's output.",
    ),
    "6.3": TaskLadder(
        "The pooler reads one token per sentence, the first, through a dense layer and an activation.",
        "07-putting-it-together",
        "The pooler",
        POOLER,
        "Take each sentence's hidden state at token index 0, apply `dense`, then tanh.",
    ),
    "6.4": TaskLadder(
        "The model chains embeddings, encoder and pooler; between them, the tokenizer's 0/1 `attention_mask` "
        "must become the additive mask the layers expect.",
        "07-putting-it-together",
        "The attention mask",
        MASK,
        "Build the additive mask from one minus the 0/1 mask times the most negative float32, reshaped to "
        "(B, 1, 1, T) (None stays None): the 0/1 mask passed as it is raises no error but lets every token "
        "attend to the padding. Then run the encoder on the embeddings with it, and the pooler on the last "
        "hidden state.",
    ),
    "7.1": TaskLadder(
        "The measure asks how far each sentence's tokens are from their mean token, relative to their size, "
        "counting the real tokens only.",
        "08-residual-connections",
        "The measure by hand",
        RESIDUAL,
        "Per sentence, keep the real tokens (from `attention_mask`), subtract their mean token, and divide the "
        "Frobenius norm of the difference by the Frobenius norm of the tokens.",
    ),
    "7.2": TaskLadder(
        "The variants remove a skip connection or a whole block; what stays must be exactly the pretrained layer's.",
        "08-residual-connections",
        "Four variants, pretrained and at initialisation",
        "h = LN₁(x + a) or LN₁(a); y = LN₂(h + f) or LN₂(f), or y = h when the FFN block is removed",
        "Without a skip, keep the LayerNorm and apply it to the branch alone; without the FFN block, return h "
        "untouched, no second LayerNorm.",
    ),
    "7.3": TaskLadder(
        "Each curve is your Task 7.1 measure of the embeddings output and of every layer's output, for one "
        "variant in every layer, averaged over the sentences.",
        "08-residual-connections",
        "Four variants, pretrained and at initialisation",
        RESIDUAL,
        "For each variant, run the embeddings, then every layer through your `layer_variant` with that "
        "variant's flags and the additive mask; measure each hidden state with `relative_residual` and average "
        "over the sentences: L + 1 numbers per variant.",
    ),
    "7.4": TaskLadder(
        "A sentence's embedding is the mean of its real tokens' vectors, normalised to length 1; two passes "
        "are compared by the cosine of their embeddings.",
        "08-residual-connections",
        "Lesions: remove one piece of the pretrained model",
        COSINE,
        "Mean-pool each pass's hidden states over the real tokens (weighted by `attention_mask`, divided by "
        "their count), normalise both to length 1, and take their dot product, one number per sentence.",
    ),
    "7.5": TaskLadder(
        "A lesion removes one piece of one layer and keeps every other layer intact; its harm is how far the "
        "sentence embeddings move.",
        "08-residual-connections",
        "Lesions: remove one piece of the pretrained model",
        COSINE,
        "For each kind of lesion and each layer alone, run the model with that lesion only, and report the "
        "mean over the sentences of your `sentence_cosine` between the lesioned and the intact last hidden "
        "states.",
    ),
}
