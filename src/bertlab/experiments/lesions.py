"""BERT's encoder composed by hand from its pretrained sub-modules, with parts removed or changed.

Every experiment of lessons 8 and 9 runs the same forward pass: the embeddings, then for each
layer the two "Add & Norm" blocks of Post-LN BERT,

    attention block:  h = LayerNorm_att(x + a),  a = W_O(MultiHeadSelfAttention(x))
    feed-forward:     y = LayerNorm_out(h + f),  f = W_2(GELU(W_1 h))

built from ``attention.self``, ``attention.output.dense``, ``attention.output.LayerNorm``,
``intermediate``, ``output.dense`` and ``output.LayerNorm`` of the pretrained model. With no
edit it reproduces ``BertModel``'s hidden states exactly. A ``LayerEdit`` says what to change in
one layer; the rules, shared by the lesions here and the rank-collapse variants of
``bertlab.experiments.rank_collapse``, are:

- *Removing a sub-layer* (``attention=False`` or ``ffn=False``) replaces its whole Add & Norm
  block by the identity, LayerNorm included: the stream passes through untouched. In Post-LN the
  LayerNorm sits on the main path, but the stream entering a block has just left the previous
  block's LayerNorm, so it is already on the scale the next block expects. This is also how Dong,
  Cordonnier & Loukas (2021) remove the MLP in their code.
- *Removing a skip connection* (``attention_skip=False`` / ``ffn_skip=False``) keeps the
  sub-layer and its LayerNorm, which then normalises the branch alone: ``LayerNorm(a)`` instead
  of ``LayerNorm(x + a)``. LayerNorm acts on each token separately, so it can rescale tokens but
  never make identical tokens different again.
- *Masking heads* (``heads_off``) zeroes those heads' context vectors before W_O, which removes
  exactly their term of the attention output (W_O's bias stays).
- ``relu_after_attention`` applies a ReLU to the attention update ``a`` (after W_O and its bias);
  ``relu_on_skip`` applies a ReLU to what the skip connections carry, in both blocks:
  ``LayerNorm(ReLU(x) + a)`` and ``LayerNorm(ReLU(h) + f)``.

Effects are measured on sentence embeddings (mean over real tokens of the last hidden state,
L2-normalised, as all-MiniLM-L6-v2 does): cosine similarity to the intact model's embedding of the
same sentence, and agreement of a small semantic search (``QUERIES`` against the corpus) with the
intact model's: is each query's best sentence still first, and do the search scores still
correlate with the intact ones.

All functions are deterministic: the model must be in eval mode (dropout off) and nothing random
is drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import torch
import torch.nn.functional as F

from bertlab.masks import additive_mask
from bertlab.pooling import sentence_embeddings

# Queries for the semantic-search measures (and lesson 7), each about one topic of the course
# corpus, mostly in other words than the sentence it should find.
QUERIES: tuple[str, ...] = (
    "a kitten napping in the sunshine",
    "a cat dozing on a windowsill",
    "interest rates went up and stocks dropped",
    "shares lost value as loans got pricier",
    "someone was baking",
    "dough left to rise overnight with yeast",
    "bad weather caused flooding",
    "which way to the railway station",
    "how does a language model read text",
)


@dataclass(frozen=True)
class LayerEdit:
    """What to change in one encoder layer; the default changes nothing.

    Attributes:
        attention: keep the attention block; ``False`` replaces it (branch, add and LayerNorm)
            by the identity.
        attention_skip: keep the skip connection around attention; ``False`` gives
            ``LayerNorm_att(a)`` instead of ``LayerNorm_att(x + a)``.
        ffn: keep the feed-forward block; ``False`` replaces it by the identity.
        ffn_skip: keep the skip connection around the feed-forward network.
        heads_off: indices of attention heads whose context vectors are zeroed before W_O.
        relu_after_attention: apply a ReLU to the attention update, after W_O.
        relu_on_skip: apply a ReLU to what both skip connections carry.
    """

    attention: bool = True
    attention_skip: bool = True
    ffn: bool = True
    ffn_skip: bool = True
    heads_off: frozenset[int] = field(default_factory=frozenset)
    relu_after_attention: bool = False
    relu_on_skip: bool = False

    def __post_init__(self):
        object.__setattr__(self, "heads_off", frozenset(self.heads_off))


INTACT = LayerEdit()

#: The single-layer lesions of lesson 8, by name.
LESIONS: Mapping[str, LayerEdit] = MappingProxyType(
    {
        "layer": LayerEdit(attention=False, ffn=False),
        "attention": LayerEdit(attention=False),
        "ffn": LayerEdit(ffn=False),
        "attention_skip": LayerEdit(attention_skip=False),
        "ffn_skip": LayerEdit(ffn_skip=False),
    }
)

Edits = LayerEdit | Mapping[int, LayerEdit] | None


@dataclass
class Trace:
    """Everything one hand-composed forward pass computed.

    Layer ``i`` reads ``hidden_states[i]`` (the stream ``x``), adds ``attention_updates[i]``
    (``a``) to give ``ffn_inputs[i]`` (``h``, after LayerNorm), adds ``ffn_updates[i]`` (``f``)
    and writes ``hidden_states[i + 1]``. An update is ``None`` where its block was removed.

    Attributes:
        hidden_states: ``L + 1`` tensors (B, T, H); [0] is the embeddings output.
        attention_updates: ``L`` tensors (B, T, H) or ``None``.
        ffn_inputs: ``L`` tensors (B, T, H): the stream between the two blocks of a layer.
        ffn_updates: ``L`` tensors (B, T, H) or ``None``.
        attention_mask: (B, T), 1 for real tokens, 0 for padding.
    """

    hidden_states: tuple[torch.Tensor, ...]
    attention_updates: tuple[torch.Tensor | None, ...]
    ffn_inputs: tuple[torch.Tensor, ...]
    ffn_updates: tuple[torch.Tensor | None, ...]
    attention_mask: torch.Tensor

    @property
    def last_hidden_state(self) -> torch.Tensor:
        """(B, T, H)."""
        return self.hidden_states[-1]


def edit_list(edits: Edits, num_layers: int) -> list[LayerEdit]:
    """One ``LayerEdit`` per layer.

    Args:
        edits: ``None`` (intact), one ``LayerEdit`` applied to every layer, or a mapping from
            layer index to ``LayerEdit`` (layers not named stay intact).
        num_layers: number of encoder layers.

    Returns:
        A list of ``num_layers`` edits.
    """
    if edits is None:
        return [INTACT] * num_layers
    if isinstance(edits, LayerEdit):
        return [edits] * num_layers
    out = [INTACT] * num_layers
    for index, edit in edits.items():
        if not 0 <= index < num_layers:
            raise ValueError(f"layer {index} does not exist; the model has layers 0..{num_layers - 1}")
        out[index] = edit
    return out


def layer_forward(layer, x: torch.Tensor, mask: torch.Tensor, edit: LayerEdit = INTACT):
    """Run one ``BertLayer`` by hand, with ``edit`` applied.

    Args:
        layer: a pretrained ``BertLayer`` in eval mode.
        x: the stream entering the layer, (B, T, H).
        mask: additive attention mask, (B, 1, T, T) or (B, 1, 1, T).
        edit: what to change.

    Returns:
        ``(y, a, h, f)``: the layer output (B, T, H); the attention update (B, T, H) or ``None``;
        the stream between the two blocks (B, T, H); the feed-forward update (B, T, H) or ``None``.
    """
    attention = layer.attention
    if edit.attention:
        context = attention.self(x, attention_mask=mask)[0]  # (B, T, H): heads concatenated
        if edit.heads_off:
            B, T, H = context.shape
            heads = attention.self.num_attention_heads
            if not all(0 <= j < heads for j in edit.heads_off):
                raise ValueError(f"heads_off={sorted(edit.heads_off)}: heads are 0..{heads - 1}")
            keep = torch.ones(heads, 1, dtype=context.dtype)
            keep[sorted(edit.heads_off)] = 0.0
            context = (context.view(B, T, heads, H // heads) * keep).view(B, T, H)  # (B, T, heads, d) -> (B, T, H)
        a = attention.output.dense(context)  # (B, T, H)
        if edit.relu_after_attention:
            a = F.relu(a)
        skip = F.relu(x) if edit.relu_on_skip else x
        h = attention.output.LayerNorm(skip + a if edit.attention_skip else a)  # (B, T, H)
    else:
        a, h = None, x

    if edit.ffn:
        f = layer.output.dense(layer.intermediate(h))  # (B, T, I) -> (B, T, H)
        skip = F.relu(h) if edit.relu_on_skip else h
        y = layer.output.LayerNorm(skip + f if edit.ffn_skip else f)  # (B, T, H)
    else:
        f, y = None, h
    return y, a, h, f


def run(
    model, batch: Mapping[str, torch.Tensor], edits: Edits = None, start: tuple[int, torch.Tensor] | None = None
) -> Trace:
    """The hand-composed forward pass of ``model`` on ``batch``.

    Args:
        model: a ``BertModel`` in eval mode.
        batch: ``input_ids`` and ``attention_mask`` (B, T), optionally ``token_type_ids`` (B, T).
        edits: see ``edit_list``.
        start: ``(i, x)`` to begin at layer ``i`` with stream ``x`` (B, T, H) instead of running
            the embeddings and layers ``0..i-1`` (used to reuse an intact prefix). The returned
            trace then covers layers ``i..L-1`` only: its ``hidden_states`` begin with ``x`` and
            its per-layer tuples have ``L - i`` entries.

    Returns:
        A ``Trace``. Without edits its ``hidden_states`` equal ``model(...).hidden_states``.
    """
    if model.training:
        raise ValueError("call model.eval() first: the experiments compare deterministic passes")
    layers = model.encoder.layer
    per_layer = edit_list(edits, len(layers))
    attention_mask = batch["attention_mask"]  # (B, T)
    mask = additive_mask(attention_mask)  # (B, 1, T, T)
    if start is None:
        first, x = 0, model.embeddings(input_ids=batch["input_ids"], token_type_ids=batch.get("token_type_ids"))
    else:
        first, x = start
    hidden, updates_a, mids, updates_f = [x], [], [], []
    for layer, edit in zip(layers[first:], per_layer[first:], strict=True):
        x, a, h, f = layer_forward(layer, x, mask, edit)
        hidden.append(x)
        updates_a.append(a)
        mids.append(h)
        updates_f.append(f)
    return Trace(tuple(hidden), tuple(updates_a), tuple(mids), tuple(updates_f), attention_mask)


@torch.no_grad()
def encode(model, batch: Mapping[str, torch.Tensor], edits: Edits = None) -> torch.Tensor:
    """Sentence embeddings of ``batch`` under ``edits``: (B, H), unit length."""
    trace = run(model, batch, edits)
    return sentence_embeddings(trace.last_hidden_state, trace.attention_mask)


def token_ratio(update: torch.Tensor, stream: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over real tokens of ``||update_t|| / ||stream_t||`` (L2 norms over the features).

    Args:
        update: (B, T, H) what a block adds to the stream.
        stream: (B, T, H) the stream it is added to.
        attention_mask: (B, T).

    Returns:
        A 0-d tensor.
    """
    real = attention_mask.bool()  # (B, T)
    return (update.norm(dim=-1)[real] / stream.norm(dim=-1)[real]).mean()


def update_ratios(trace: Trace) -> dict[str, torch.Tensor]:
    """How big each block's update is next to the stream it is added to, per layer.

    ``"attention"``: ``||a|| / ||x||`` with ``x`` the layer input; ``"ffn"``: ``||f|| / ||h||``
    with ``h`` the stream between the blocks. Both are means over the real tokens of the batch
    (``token_ratio``); a removed block gives NaN.

    Returns:
        ``{"attention": (L,), "ffn": (L,)}``.
    """
    nan = torch.tensor(float("nan"))
    attention, ffn = [], []
    for i, (a, h, f) in enumerate(zip(trace.attention_updates, trace.ffn_inputs, trace.ffn_updates, strict=True)):
        x = trace.hidden_states[i]
        attention.append(nan if a is None else token_ratio(a, x, trace.attention_mask))
        ffn.append(nan if f is None else token_ratio(f, h, trace.attention_mask))
    return {"attention": torch.stack(attention), "ffn": torch.stack(ffn)}


def search(queries: torch.Tensor, documents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``documents`` for each query by cosine similarity.

    Args:
        queries: (Q, H) unit vectors.
        documents: (N, H) unit vectors.

    Returns:
        ``(scores, order)``: cosine similarities (Q, N), and document indices (Q, N) from best to
        worst (ties keep the lower index first).
    """
    scores = queries @ documents.T  # (Q, N): dot products of unit vectors are cosines
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices  # (Q, N)
    return scores, order


@dataclass
class Baseline:
    """The intact model's passes on the corpus and the queries, reused by every lesion.

    Attributes:
        corpus: the intact ``Trace`` of the corpus batch (N sentences).
        queries: the intact ``Trace`` of the query batch (Q queries).
        corpus_embeddings: (N, H) unit sentence vectors.
        query_embeddings: (Q, H) unit query vectors.
        scores: (Q, N) cosine of every query to every corpus sentence.
        top: (Q,) index of each query's best corpus sentence.
    """

    corpus: Trace
    queries: Trace
    corpus_embeddings: torch.Tensor
    query_embeddings: torch.Tensor
    scores: torch.Tensor
    top: torch.Tensor


@dataclass(frozen=True)
class Effect:
    """How much an edit changes the sentence embeddings and the search results.

    Attributes:
        cosine: (N,) cosine between each corpus sentence's edited and intact embedding.
        top_kept: fraction of queries whose best corpus sentence is unchanged.
        rank_of_top: (Q,) 1-based rank, under the edited model, of the intact model's best
            sentence for each query (1 everywhere when nothing changed).
        score_correlation: Pearson correlation between the edited and the intact (Q, N) matrices
            of query-to-sentence cosines, flattened (1 when the search scores move together).
    """

    cosine: torch.Tensor
    top_kept: float
    rank_of_top: torch.Tensor
    score_correlation: float

    @property
    def mean_cosine(self) -> float:
        """Mean of ``cosine`` over the corpus sentences."""
        return self.cosine.mean().item()

    @property
    def min_cosine(self) -> float:
        """The least similar sentence's cosine."""
        return self.cosine.min().item()

    @property
    def mean_rank(self) -> float:
        """Mean of ``rank_of_top`` over the queries."""
        return self.rank_of_top.float().mean().item()


@torch.no_grad()
def baseline(model, corpus_batch: Mapping[str, torch.Tensor], query_batch: Mapping[str, torch.Tensor]) -> Baseline:
    """Run the intact model once on the corpus (N, T) and on the queries (Q, T')."""
    corpus, queries = run(model, corpus_batch), run(model, query_batch)
    docs = sentence_embeddings(corpus.last_hidden_state, corpus.attention_mask)
    qs = sentence_embeddings(queries.last_hidden_state, queries.attention_mask)
    scores, order = search(qs, docs)
    return Baseline(corpus, queries, docs, qs, scores, order[:, 0])


def _first_edited(per_layer: Sequence[LayerEdit]) -> int:
    return next((i for i, e in enumerate(per_layer) if e != INTACT), len(per_layer))


@torch.no_grad()
def effect(
    model,
    corpus_batch: Mapping[str, torch.Tensor],
    query_batch: Mapping[str, torch.Tensor],
    edits: Edits,
    base: Baseline | None = None,
) -> Effect:
    """Measure what ``edits`` do to the sentence embeddings and to semantic search.

    Layers before the first edited one are taken from the intact pass (same numbers, less work).

    Args:
        model: a ``BertModel`` in eval mode.
        corpus_batch: the documents, (N, T) tensors.
        query_batch: the queries, (Q, T') tensors.
        edits: see ``edit_list``.
        base: ``baseline(model, corpus_batch, query_batch)``, computed here if not given.

    Returns:
        An ``Effect``.
    """
    base = base or baseline(model, corpus_batch, query_batch)
    per_layer = edit_list(edits, len(model.encoder.layer))
    i = _first_edited(per_layer)
    mapping = dict(enumerate(per_layer))
    corpus = run(model, corpus_batch, mapping, start=(i, base.corpus.hidden_states[i]))
    queries = run(model, query_batch, mapping, start=(i, base.queries.hidden_states[i]))
    docs = sentence_embeddings(corpus.last_hidden_state, corpus.attention_mask)  # (N, H)
    qs = sentence_embeddings(queries.last_hidden_state, queries.attention_mask)  # (Q, H)
    cosine = (docs * base.corpus_embeddings).sum(-1)  # (N,)
    scores, order = search(qs, docs)  # (Q, N), (Q, N)
    rank = (order == base.top[:, None]).float().argmax(-1) + 1  # (Q,)
    pair = torch.stack([scores.flatten(), base.scores.flatten()])  # (2, Q*N)
    return Effect(
        cosine=cosine,
        top_kept=(rank == 1).float().mean().item(),
        rank_of_top=rank,
        score_correlation=torch.corrcoef(pair)[0, 1].item(),
    )


@dataclass(frozen=True)
class LesionResult:
    """One row of the lesion table: which lesion, where, and its ``Effect``."""

    kind: str
    layer: int
    effect: Effect


def layer_lesions(
    model,
    corpus_batch: Mapping[str, torch.Tensor],
    query_batch: Mapping[str, torch.Tensor],
    kinds: Sequence[str] = tuple(LESIONS),
) -> list[LesionResult]:
    """Apply each lesion of ``LESIONS`` to each layer in turn, one at a time.

    Args:
        model: a ``BertModel`` in eval mode.
        corpus_batch: the documents, (N, T) tensors.
        query_batch: the queries, (Q, T') tensors.
        kinds: which keys of ``LESIONS`` to apply.

    Returns:
        ``len(kinds) * L`` results, ordered by kind then layer.
    """
    base = baseline(model, corpus_batch, query_batch)
    return [
        LesionResult(kind, i, effect(model, corpus_batch, query_batch, {i: LESIONS[kind]}, base))
        for kind in kinds
        for i in range(len(model.encoder.layer))
    ]


@torch.no_grad()
def head_lesions(model, corpus_batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Mask each head of each layer alone; mean cosine of the edited to the intact embeddings.

    Masking head ``j`` of layer ``i`` is ``{i: LayerEdit(heads_off={j})}``. For speed, the
    ``heads`` edits of one layer run together as one batch of ``heads * N`` sentences, which
    gives the same numbers as running them one by one up to float rounding.

    Args:
        model: a ``BertModel`` in eval mode.
        corpus_batch: the sentences, (N, T) tensors.

    Returns:
        (L, heads): for each masked head, the mean over sentences of the cosine similarity
        between the edited and the intact sentence embedding.
    """
    intact = run(model, corpus_batch)
    mask01 = intact.attention_mask  # (N, T)
    reference = sentence_embeddings(intact.last_hidden_state, mask01)  # (N, H)
    N, T, H = intact.last_hidden_state.shape
    A = model.config.num_attention_heads
    keep = (1.0 - torch.eye(A))[:, None, None, :, None]  # (A, 1, 1, A, 1): copy j lacks head j
    repeated = {"attention_mask": mask01.repeat(A, 1)}  # (A*N, T)
    table = torch.empty(len(model.encoder.layer), A)
    for i, layer in enumerate(model.encoder.layer):
        x = intact.hidden_states[i]  # (N, T, H)
        context = layer.attention.self(x, attention_mask=additive_mask(mask01))[0]  # (N, T, H)
        context = (context.view(1, N, T, A, H // A) * keep).reshape(A * N, T, H)  # (A*N, T, H)
        h = layer.attention.output.LayerNorm(x.repeat(A, 1, 1) + layer.attention.output.dense(context))
        y = layer.output.LayerNorm(h + layer.output.dense(layer.intermediate(h)))  # (A*N, T, H)
        trace = run(model, repeated, start=(i + 1, y))
        edited = sentence_embeddings(trace.last_hidden_state, repeated["attention_mask"]).view(A, N, H)
        table[i] = (edited * reference).sum(-1).mean(1)  # (A,)
    return table
