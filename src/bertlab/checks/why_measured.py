"""Task 7: the measurements behind lessons 8 and 9, written by the learner, on the pretrained model.

- Task 7.1 ``relative_residual(hidden_states, attention_mask)``: Dong et al.'s
  ``||X - 1 x̄ᵀ||_F / ||X||_F`` per sentence, over its real tokens only.
- Task 7.2 ``layer_variant(layer, hidden_states, attention_mask, attention_skip, ffn, ffn_skip)``:
  one pretrained ``BertLayer`` composed by hand with a skip or a block removed.
- Task 7.3 ``residual_curves(model, batch)``: the mean relative residual after every layer for
  Dong et al.'s four variants.
- Task 7.4 ``sentence_cosine(hidden_a, hidden_b, attention_mask)``: cosine between the sentence
  embeddings (mean over real tokens, L2-normalised) of two passes over the same batch.
- Task 7.5 ``lesion_effects(model, batch)``: the mean cosine to the intact model's sentence
  embeddings when one layer loses its FFN, or its attention skip.

The references are ``bertlab.experiments.rank_collapse`` and ``bertlab.experiments.lesions``,
the code lessons 8 and 9 run. Tasks 7.3 and 7.5 also check the *conclusions* the lessons draw:
each claim is evaluated on the reference numbers and on the learner's, and the two must agree,
so nothing about the model is typed here. Known mistakes are simulated in
``bertlab.diagnose.why_measured``.
"""

from __future__ import annotations

import copy
import functools
import itertools
import weakref
from collections.abc import Callable, Mapping

import torch
from torch import nn

from bertlab.checks.framework import Context, Task, _describe
from bertlab.checks.harness import in_learner_process
from bertlab.diagnose import why_measured as flawed
from bertlab.experiments import lesions, rank_collapse
from bertlab.experiments.lesions import LayerEdit
from bertlab.masks import additive_mask, random_padding

TOKENS = ("batch", "token", "dim")
LESSON = "08-residual-connections"

# The measures are ratios and cosines of order 1, computed in float32. A valid implementation
# that sums in another order (a loop over sentences, boolean indexing, F.cosine_similarity)
# differs from the reference by ~1e-7; a collapsed curve sits at the float32 floor (~1e-7), so
# an absolute tolerance is the right kind. 1e-5 leaves two orders of magnitude for rounding,
# while the closest known mistake moves some value by more than 1e-2 (tests/test_checks_why_measured.py).
ATOL = 1e-5

# A curve has collapsed when its last value is below this fraction of its first (the embeddings,
# shared by every variant): three orders of magnitude, far outside rounding either way.
COLLAPSED = 1e-3


def _randn(ctx: Context, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=ctx.generator)


def _randint(ctx: Context, low: int, high: int) -> int:
    return int(torch.randint(low, high, (1,), generator=ctx.generator))


def random_tokens(ctx: Context, hidden_size: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Random token vectors (B, T, H) with a shared offset and junk in the padded rows, and (B, T).

    The offset makes the mean token matter; the padded rows are large and unlike the real tokens,
    so a measure that lets them in gives clearly different numbers.
    """
    B, T = _randint(ctx, 2, 6), _randint(ctx, 2, 13)
    padding = random_padding(B, T, ctx.generator)  # (B, T)
    hidden = _randn(ctx, B, T, hidden_size) + 3 * _randn(ctx, 1, 1, hidden_size)  # (B, T, H)
    junk = 20 * _randn(ctx, B, T, hidden_size)
    hidden = torch.where(padding[..., None].bool(), hidden, junk)
    padded = int((padding.sum(1) < T).sum())
    return hidden, padding, f"batch {B}, length {T}, {padded} padded, hidden size {hidden_size}"


class FunctionTask(Task):
    """A learner function checked against the course's reference measurements."""

    atol = ATOL
    rtol = 0.0  # values of order 1: the absolute tolerance alone, which DECISIVE rests on
    # These functions measure the reference model itself, which they are given.
    forbid_shortcuts = False
    arguments: tuple[str, ...]
    outputs: dict[str, tuple[str, ...]]  # output name -> dim names

    def function(self, fn) -> Callable:
        if not callable(fn) or isinstance(fn, type):
            self.fail(f'pass your function itself, e.g. check("{self.id}", {self.title}); got {fn!r}')
        return fn

    def tensor(self, value, name: str, shape: tuple[int, ...], dims: tuple[str, ...]) -> torch.Tensor:
        """``value`` as a detached float tensor of ``shape``, or a failure that says what came back."""
        if isinstance(value, (list, tuple)) and all(isinstance(v, (torch.Tensor, float, int)) for v in value):
            value = torch.stack([torch.as_tensor(v, dtype=torch.float32) for v in value]) if value else torch.empty(0)
        if not isinstance(value, torch.Tensor):
            self.fail(f"{name} must be a tensor of shape {list(shape)} ({', '.join(dims)}); got {_describe(value)}")
        if tuple(value.shape) != tuple(shape):
            self.fail(f"{name} has shape {list(value.shape)}, expected {list(shape)} ({', '.join(dims)})")
        return value.detach().float()

    def call(self, fn, *args) -> object:
        """Call the learner's function outside autograd, never on the reference's own objects.

        In this process (the in-notebook check) it gets copies of tensors and modules. A function
        in the learner's process gets fresh copies with every request anyway; there the reference's
        own tensors are sent, so that each crosses the pipe once per notebook (copies made here
        crossed anew every call: a gigabyte per notebook).
        """
        if not in_learner_process(fn):
            args = tuple(_copied(a) for a in args)
        with torch.no_grad():
            return self.call_learner(f"{self.title}({', '.join(self.arguments)})", fn, *args)


def _copied(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, nn.Module):
        return copy.deepcopy(value)
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    return value


# -- Task 7.1 -------------------------------------------------------------------------------


class RelativeResidualTask(FunctionTask):
    id = "7.1"
    title = "relative_residual"
    lesson = LESSON
    arguments = ("hidden_states", "attention_mask")
    stages = ("shapes", "values", "masks")
    outputs = {"residual": ("sentence",)}
    random_trials = 4

    def run_case(self, fn, hidden, mask, against: str) -> None:
        expected = rank_collapse.relative_residual(hidden, mask)  # (B,)
        got = self.tensor(self.call(fn, hidden, mask), "the output", tuple(expected.shape), self.outputs["residual"])
        inputs = {"hidden_states": hidden, "attention_mask": mask}
        self.compare({"residual": expected}, {"residual": got}, self.outputs, against, (None, inputs))

    def check_shapes(self, fn, ctx: Context) -> None:
        hidden, mask = ctx.corpus.hidden_states[0], ctx.corpus.batch["attention_mask"]
        self.tensor(
            self.call(self.function(fn), hidden, mask), "the output", (hidden.shape[0],), self.outputs["residual"]
        )

    def check_values(self, fn, ctx: Context) -> None:
        mask = ctx.corpus.batch["attention_mask"]  # (B, T): the corpus has padding
        for i, hidden in enumerate(ctx.corpus.hidden_states):
            where = "the embeddings output" if i == 0 else f"the output of layer {i - 1}"
            self.run_case(self.function(fn), hidden, mask, f"the reference on {where} of the pretrained model (corpus)")

    def check_masks(self, fn, ctx: Context) -> None:
        fn = self.function(fn)
        for _ in range(self.random_trials):
            hidden, mask, description = random_tokens(ctx, _randint(ctx, 3, 40))
            self.run_case(fn, hidden, mask, f"the reference on random tokens ({description})")
        # Identical real tokens: the residual is 0 whatever the padded rows hold.
        hidden, mask, description = random_tokens(ctx, ctx.model.config.hidden_size)
        hidden = torch.where(mask[..., None].bool(), hidden[:, :1], hidden)
        self.run_case(fn, hidden, mask, f"the reference on sentences whose real tokens are all alike ({description})")


# -- Task 7.2 -------------------------------------------------------------------------------


def _flags(attention_skip: bool, ffn: bool, ffn_skip: bool) -> str:
    return f"attention_skip={attention_skip}, ffn={ffn}, ffn_skip={ffn_skip}"


# Every distinct combination: without the FFN block its skip has nothing to go around.
FLAG_SETS = [f for f in itertools.product((True, False), repeat=3) if f[1] or f[2]]


class LayerVariantTask(FunctionTask):
    id = "7.2"
    title = "layer_variant"
    lesson = LESSON
    arguments = ("layer", "hidden_states", "attention_mask", "attention_skip", "ffn", "ffn_skip")
    stages = ("shapes", "values", "masks")
    outputs = {"layer_output": TOKENS}
    random_trials = 4

    def run_case(self, fn, layer, hidden, mask, flags, against: str) -> None:
        attention_skip, ffn, ffn_skip = flags
        edit = LayerEdit(attention_skip=attention_skip, ffn=ffn, ffn_skip=ffn_skip)
        with torch.no_grad():
            expected = lesions.layer_forward(layer, hidden, mask, edit)[0]  # (B, T, H)
        got = self.call(fn, layer, hidden, mask, *flags)
        got = self.tensor(got, "the output", tuple(expected.shape), TOKENS)
        inputs = {
            "hidden_states": hidden,
            "attention_mask": mask,
            "attention_skip": attention_skip,
            "ffn": ffn,
            "ffn_skip": ffn_skip,
        }
        self.compare(
            {"layer_output": expected},
            {"layer_output": got},
            self.outputs,
            f"{against} with {_flags(*flags)}",
            (layer, inputs),
        )

    def check_shapes(self, fn, ctx: Context) -> None:
        call = ctx.corpus.layer(0)
        hidden, mask = call.args[0], call.args[1]
        got = self.call(self.function(fn), ctx.model.encoder.layer[0], hidden, mask, True, True, True)
        self.tensor(got, "the output", tuple(hidden.shape), TOKENS)

    def check_values(self, fn, ctx: Context) -> None:
        fn = self.function(fn)
        for i, layer in enumerate(ctx.model.encoder.layer):
            call = ctx.corpus.layer(i)  # the layer's captured input and additive mask
            for flags in FLAG_SETS:
                self.run_case(
                    fn, layer, call.args[0], call.args[1], flags, f"the reference on the pretrained layer {i}"
                )

    def check_masks(self, fn, ctx: Context) -> None:
        fn = self.function(fn)
        layers = ctx.model.encoder.layer
        for _ in range(self.random_trials):
            i = _randint(ctx, 0, len(layers))
            flags = FLAG_SETS[_randint(ctx, 0, len(FLAG_SETS))]
            hidden, padding, description = random_tokens(ctx, ctx.model.config.hidden_size)
            per_query = bool(_randint(ctx, 0, 2))
            mask = additive_mask(padding, per_query=per_query)  # (B, 1, T, T) or (B, 1, 1, T)
            self.run_case(
                fn,
                layers[i],
                hidden,
                mask,
                flags,
                f"the reference on the pretrained layer {i}, random tokens ({description}, mask {list(mask.shape)})",
            )


# -- Tasks 7.3 and 7.5: measurements over the whole model -----------------------------------


class Claim:
    """One conclusion a lesson draws from a measurement, as a function of the numbers.

    Attributes:
        question: the question, as the failure message quotes it.
        answer: numbers -> the answer (a value comparable with ``==``).
        margin: numbers -> how far the deciding comparison is from going the other way. A claim
            is only asked when the reference's margin exceeds ``DECISIVE``: then numbers within
            the values check's tolerance of the reference cannot answer it differently, and a
            near tie (two collapsed curves both at the float32 floor) is never asked.
    """

    def __init__(self, question: str, answer: Callable, margin: Callable):
        self.question = question
        self.answer = answer
        self.margin = margin


# Numbers that pass the values check are within ATOL of the reference, so a comparison whose
# two sides are more than 2 * ATOL apart in the reference goes the same way in them; 10 * ATOL
# leaves room.
DECISIVE = 10 * ATOL


def _gap(values) -> float:
    """The smallest distance between two of ``values`` (inf for fewer than two)."""
    values = sorted(float(v) for v in values)
    return min((b - a for a, b in itertools.pairwise(values)), default=float("inf"))


class MeasurementTask(FunctionTask):
    """A learner function ``fn(model, batch) -> {name: tensor}`` checked against a reference one.

    The learner's result on the pretrained model is computed once per function object and reused
    by the later stages (each call runs the encoder dozens of times).
    """

    arguments = ("model", "batch")
    measure: str  # passed to the mistake simulations
    names: tuple[str, ...]
    dims: tuple[str, ...]  # a name per dimension of every output
    claims: tuple[Claim, ...] = ()

    def __init__(self) -> None:
        self._results: dict = {}  # (learner function, id(model)) -> (model, result), for one run
        # model -> its reference result, for as long as the model lives (the pretrained one: the
        # judge's whole life; a random one: while a check holds it).
        self._references: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def forget_run(self) -> None:
        self._results.clear()

    # -- what subclasses provide ----------------------------------------------------------

    def reference_result(self, model, batch) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def length(self, model) -> int:
        raise NotImplementedError

    # -- helpers ----------------------------------------------------------------------------

    def reference_on(self, model, batch) -> dict[str, torch.Tensor]:
        if model not in self._references:
            with torch.no_grad():
                self._references[model] = self.reference_result(model, batch)
        return self._references[model]

    def learner_on(self, fn, model, batch, cache: bool = True) -> dict[str, torch.Tensor]:
        key = (fn, id(model))
        if cache and key in self._results and self._results[key][0] is model:
            return self._results[key][1]
        out = self.call(self.function(fn), model, batch)
        if not isinstance(out, Mapping):
            self.fail(
                f"must return a dict {{name: tensor}} with keys {', '.join(map(repr, self.names))}; "
                f"got {_describe(out)}"
            )
        if set(out) != set(self.names):
            self.fail(
                f"must return a dict with keys {', '.join(map(repr, self.names))}; got keys "
                f"{', '.join(map(repr, out)) or 'none'}"
            )
        n = self.length(model)
        got = {k: self.tensor(out[k], f"the output[{k!r}]", (n,), self.dims) for k in self.names}
        if cache:
            try:
                self._results[key] = (model, got)
            except TypeError:  # an unhashable function object: just don't remember it
                pass
        return got

    def compare_on(self, fn, model, batch, against: str, cache: bool = True) -> dict[str, torch.Tensor]:
        expected = self.reference_on(model, batch)
        got = self.learner_on(fn, model, batch, cache)
        dims = dict.fromkeys(self.names, self.dims)
        self.compare(expected, got, dims, against, (model, {"batch": batch, "measure": self.measure}))
        return got

    # -- the checks, in order ---------------------------------------------------------------

    def check_shapes(self, fn, ctx: Context) -> None:
        self.learner_on(fn, ctx.model, ctx.corpus.batch)

    def check_values(self, fn, ctx: Context) -> None:
        self.compare_on(fn, ctx.model, ctx.corpus.batch, "the reference on the pretrained model (corpus)")

    def check_conclusions(self, fn, ctx: Context) -> None:
        batch = ctx.corpus.batch
        reference, got = self.reference_on(ctx.model, batch), self.learner_on(fn, ctx.model, batch)
        for claim in self.claims:
            if claim.margin(reference) <= DECISIVE:
                continue  # a near tie in the reference itself: no conclusion to draw
            want, have = claim.answer(reference), claim.answer(got)
            if want != have:
                self.fail(
                    f'your numbers answer "{claim.question}" with {have!r}; the reference\'s answer is {want!r}',
                    "The conclusion comes from the numbers: fix the values check first.",
                )


def _with_skip(curves: Mapping[str, torch.Tensor]) -> float:
    """The lowest last value among the variants that keep the skip around attention."""
    return min(curves["full"][-1].item(), curves["attention_skip"][-1].item())


def _without_skip(curves: Mapping[str, torch.Tensor]) -> float:
    """The highest last value among the variants without the skip around attention."""
    return max(curves["attention_only"][-1].item(), curves["attention_ffn"][-1].item())


class CurvesTask(MeasurementTask):
    id = "7.3"
    title = "residual_curves"
    lesson = LESSON
    measure = "curves"
    names = tuple(rank_collapse.VARIANTS)
    dims = ("hidden state",)
    stages = ("shapes", "values", "random_init", "conclusions")
    claims = (
        Claim(
            f"which variants end below {COLLAPSED:g} of their embeddings' residual (collapsed)?",
            lambda c: sorted(k for k, v in c.items() if v[-1] < COLLAPSED * v[0]),
            lambda c: min(abs(v[-1] - COLLAPSED * v[0]).item() for v in c.values()),
        ),
        Claim(
            "which variant ends with the largest residual?",
            lambda c: max(c, key=lambda k: c[k][-1].item()),
            lambda c: _gap(sorted((v[-1].item() for v in c.values()), reverse=True)[:2]),
        ),
        Claim(
            "does every variant with the attention skip end above every variant without it?",
            lambda c: bool(_with_skip(c) > _without_skip(c)),
            lambda c: abs(_with_skip(c) - _without_skip(c)),
        ),
    )

    def reference_result(self, model, batch):
        return rank_collapse.curves(model, batch)

    def length(self, model) -> int:
        return model.config.num_hidden_layers + 1

    def check_random_init(self, fn, ctx: Context) -> None:
        # Freshly initialised weights (seeded): the learner's code must not depend on the
        # pretrained ones, and lesson 8's "at initialisation" curves come out the same.
        seed = _randint(ctx, 0, 2**16)
        model = _fresh_model(ctx.model, seed)
        self.compare_on(
            fn,
            model,
            ctx.corpus.batch,
            f"the reference on a freshly initialised BertModel (seed {seed}, corpus)",
            cache=False,
        )


@functools.lru_cache(maxsize=2)
def _fresh_model(pretrained: nn.Module, seed: int) -> nn.Module:
    """A freshly initialised BertModel of the pretrained model's config: the same for the same seed,
    so a judge grading notebook after notebook builds it and computes its reference once (0.4 s),
    not for each. The checks never change it; the learner's process gets copies of its weights."""
    return rank_collapse.random_model(pretrained.config, seed=seed)


def _lesion_reference(model, batch) -> dict[str, torch.Tensor]:
    intact = lesions.run(model, batch)
    reference = lesions.sentence_embeddings(intact.last_hidden_state, intact.attention_mask)  # (B, H)
    out = {}
    for kind in flawed.LESION_KINDS:
        row = []
        for i in range(len(model.encoder.layer)):
            # Layers before i are intact: start from their recorded output.
            trace = lesions.run(model, batch, {i: lesions.LESIONS[kind]}, start=(i, intact.hidden_states[i]))
            edited = lesions.sentence_embeddings(trace.last_hidden_state, trace.attention_mask)  # (B, H)
            row.append((edited * reference).sum(-1).mean())
        out[kind] = torch.stack(row)  # (L,)
    return out


def _worst_lesion(effects: Mapping[str, torch.Tensor]) -> tuple[str, int]:
    kind = min(effects, key=lambda k: effects[k].min().item())
    return kind, int(effects[kind].argmin())


class LesionTask(MeasurementTask):
    id = "7.5"
    title = "lesion_effects"
    lesson = LESSON
    measure = "lesions"
    names = tuple(flawed.LESION_KINDS)
    dims = ("layer",)
    stages = ("shapes", "values", "conclusions")
    claims = (
        Claim(
            "which single lesion (kind, layer) moves the sentence embeddings most?",
            _worst_lesion,
            lambda e: _gap(torch.cat(list(e.values())).sort().values[:2]),
        ),
        Claim(
            "in which layers does removing the FFN hurt more than removing the attention skip?",
            lambda e: torch.nonzero(e["ffn"] < e["attention_skip"]).flatten().tolist(),
            lambda e: (e["ffn"] - e["attention_skip"]).abs().min().item(),
        ),
        Claim(
            "averaged over the layers, does removing the attention skip hurt more than removing the FFN?",
            lambda e: bool(e["attention_skip"].mean() < e["ffn"].mean()),
            lambda e: abs(e["attention_skip"].mean() - e["ffn"].mean()).item(),
        ),
    )

    def reference_result(self, model, batch):
        return _lesion_reference(model, batch)

    def length(self, model) -> int:
        return model.config.num_hidden_layers


# -- Task 7.4 -------------------------------------------------------------------------------


class SentenceCosineTask(FunctionTask):
    id = "7.4"
    title = "sentence_cosine"
    lesson = LESSON
    arguments = ("hidden_a", "hidden_b", "attention_mask")
    stages = ("shapes", "values", "masks")
    outputs = {"cosine": ("sentence",)}
    random_trials = 4

    def run_case(self, fn, a, b, mask, against: str) -> None:
        expected = (lesions.sentence_embeddings(a, mask) * lesions.sentence_embeddings(b, mask)).sum(-1)  # (B,)
        got = self.tensor(self.call(fn, a, b, mask), "the output", tuple(expected.shape), self.outputs["cosine"])
        inputs = {"hidden_a": a, "hidden_b": b, "attention_mask": mask}
        self.compare({"cosine": expected}, {"cosine": got}, self.outputs, against, (None, inputs))

    def check_shapes(self, fn, ctx: Context) -> None:
        hidden, mask = ctx.corpus.last_hidden_state, ctx.corpus.batch["attention_mask"]
        self.tensor(
            self.call(self.function(fn), hidden, hidden, mask), "the output", (hidden.shape[0],), self.outputs["cosine"]
        )

    def check_values(self, fn, ctx: Context) -> None:
        fn = self.function(fn)
        last, mask = ctx.corpus.last_hidden_state, ctx.corpus.batch["attention_mask"]
        for i, hidden in enumerate(ctx.corpus.hidden_states[:-1]):
            where = "the embeddings output" if i == 0 else f"the output of layer {i - 1}"
            self.run_case(
                fn,
                hidden,
                last,
                mask,
                f"the reference between {where} and the last hidden state (pretrained model, corpus)",
            )

    def check_masks(self, fn, ctx: Context) -> None:
        fn = self.function(fn)
        for _ in range(self.random_trials):
            a, mask, description = random_tokens(ctx, _randint(ctx, 3, 40))
            b = a + _randn(ctx, *a.shape)  # a perturbed copy: cosines well inside (-1, 1)
            self.run_case(fn, a, b, mask, f"the reference on random tokens ({description})")


TASKS = [RelativeResidualTask(), LayerVariantTask(), CurvesTask(), SentenceCosineTask(), LesionTask()]
