"""Task 6: the whole model.

- Task 6.1 ``BertLayer``: attention, then the feed-forward block; returns a tensor (transformers 5).
- Task 6.2 ``BertEncoder``: ``layer``, a ModuleList of BertLayer; returns
  ``(last_hidden_state, hidden_states)``, ``hidden_states`` holding the encoder's input and then
  the output of every layer (``num_hidden_layers + 1`` tensors).
- Task 6.3 ``BertPooler``: tanh(dense(hidden state of the first token, [CLS])).
- Task 6.4 ``BertModel``: embeddings, the additive mask built from the (B, T) 0/1
  ``attention_mask``, encoder, pooler; returns ``(last_hidden_state, pooler_output, hidden_states)``.

BertLayer, BertEncoder and BertModel are checked with HF's own modules in place of the learner's
parts (``BuiltOnParts``), so a wrong BertLayer fails Task 6.1 only, not 6.2 and 6.4 too. Only
Task 6.4's names check loads the learner's complete model, and says which task a wrong name is in.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import torch

from bertlab import corpus, diagnose, reference
from bertlab.checks import call_forms, encoder_contract
from bertlab.checks.built_on_parts import BuiltOnParts
from bertlab.checks.compare import RTOL, allclose
from bertlab.checks.embeddings import NON_PERSISTENT
from bertlab.checks.framework import ATOL, MASKED_STAGES, CheckFailed, _describe
from bertlab.checks.harness import reference_package, state_shapes
from bertlab.checks.module_task import ModuleTask
from bertlab.checks.self_attention import random_attention_batch
from bertlab.diagnose import bert_model as flawed
from bertlab.masks import random_padding
from bertlab.pooling import sentence_embeddings

HIDDEN = ("batch", "token", "dim")
LESSON = "07-putting-it-together"


class _Dims(dict):
    """Output name -> dim names; every ``hidden_states[i]`` has the dims of ``hidden_states``."""

    def __missing__(self, key):
        return self[key.split("[")[0]]


def _is_hf(module) -> bool:
    """Whether ``module`` is the reference's own (the expected side, called directly), not the learner's."""
    return bool(reference_package(type(module).__module__))


class _VariantDiagnosis(ModuleTask):
    """Also recognise the mistakes that take several forms (see ``diagnose.bert_model.VARIANTS``)."""

    def compare(self, expected, got, dims, against, diagnose_with=None):
        # A check run on its own (`only=`) has no shapes check before it: compare shapes here too.
        for name, want in expected.items():
            if name in got and tuple(got[name].shape) != tuple(want.shape):
                have, dims_named = list(got[name].shape), ", ".join(dims[name])
                self.fail(f"`{name}` has shape {have}, expected {list(want.shape)} ({dims_named})")
        try:
            super().compare(expected, got, dims, against, diagnose_with)
        except CheckFailed as err:
            mistake = None
            if err.mistake is None and diagnose_with is not None:
                mistake = flawed.diagnose_variants(self.id, *diagnose_with, got, expected)
            if mistake is None:
                raise
            raise err.adding(mistake.hint(), mistake=mistake.id) from None


# Float32's rounding grows layer by layer through a stack: on the corpus, HF's own float32
# hidden_states[5] is 2.9 layer tolerances from the exact (float64) answer at a padding token, so
# right code more exact than HF's (float64 inside, cast back) or summing in another order is that
# far from HF's. A stack's outputs are compared with the layer's tolerance times its six layers:
# HF's own error takes under half of it. Their layers are HF's in these checks (BuiltOnParts):
# what they judge is the wiring, whose mistakes stay far over it.
STACK_TOLERANCE = 6


class _HiddenStates(_VariantDiagnosis):
    """For outputs that include ``hidden_states``: a tuple flattened into ``hidden_states[i]``."""

    atol = STACK_TOLERANCE * ATOL
    rtol = STACK_TOLERANCE * RTOL

    def raw_order(self, named: dict) -> list:
        """The learner returns ``(last_hidden_state[, pooler_output], hidden_states)``."""
        hidden = [v for k, v in named.items() if k.startswith("hidden_states[")]
        return [named[k] for k in ("last_hidden_state", "pooler_output") if k in named] + hidden

    def hidden_states(self, value) -> tuple:
        if not isinstance(value, (tuple, list)) or not all(isinstance(h, torch.Tensor) for h in value):
            self.fail(f"`hidden_states` must be a tuple of tensors (B, T, H); got {_describe(value)}")
        return tuple(value)

    def check_count(self, expected: dict, got: dict) -> None:
        """Fail unless ``got`` has as many hidden states as ``expected``; name a missing input."""
        count = lambda d: sum(k.startswith("hidden_states[") for k in d)  # noqa: E731
        want, have = count(expected), count(got)
        if want == have:
            return
        mistake = None
        if have == want - 1 and all(
            allclose(expected[f"hidden_states[{i + 1}]"], got[f"hidden_states[{i}]"], diagnose.MATCH_ATOL)
            for i in range(have)
        ):
            mistake = diagnose.REGISTRY["hidden-states-missing-embeddings"]
        self.fail(
            f"`hidden_states` has {have} entries, expected {want}: the encoder's input (the embeddings "
            f"output) first, then the output of each of the {want - 1} layers",
            mistake=mistake,
        )

    def compare(self, expected, got, dims, against, diagnose_with=None):
        self.check_count(expected, got)
        super().compare(expected, got, dims, against, diagnose_with)

    def check_shapes(self, cls, ctx):
        inputs, expected = self.captured(ctx, None)
        with torch.no_grad():
            got = self.call(self.learner_for(cls, ctx, None), inputs)
        self.check_count(expected, got)
        for name, want in expected.items():
            if tuple(got[name].shape) != tuple(want.shape):
                dims = ", ".join(self.outputs[name])
                self.fail(f"`{name}` has shape {list(got[name].shape)}, expected {list(want.shape)} ({dims})")


class BertLayerTask(BuiltOnParts, _VariantDiagnosis, ModuleTask):
    id = "6.1"
    title = "BertLayer"
    lesson = LESSON
    hf_path = "encoder.layer.{layer}"
    outputs = {"layer_output": HIDDEN}
    parts = {"attention": "4.2", "intermediate": "5.1", "output": "5.2"}
    dropouts = {}  # the dropouts live in the sub-modules, checked in Tasks 3 to 5

    def captured(self, ctx, layer):
        call = ctx.corpus.layer(layer)
        return {"hidden_states": call.args[0], "attention_mask": call.args[1]}, {"layer_output": call.output}

    stages = MASKED_STAGES

    def random_inputs(self, ctx):
        return random_attention_batch(ctx)

    def call_forms(self, ctx):
        return call_forms.mask_forms(ctx)


class BertEncoderTask(BuiltOnParts, _HiddenStates, ModuleTask):
    id = "6.2"
    title = "BertEncoder"
    lesson = LESSON
    hf_path = "encoder"
    outputs = _Dims(last_hidden_state=HIDDEN, hidden_states=HIDDEN)
    parts = {"layer": "6.1"}  # a ModuleList of num_hidden_layers BertLayer
    stack = "layer"
    # No dropout of its own: the dropout check sees that it runs HF's layers as they are in train mode.
    stages = MASKED_STAGES
    random_trials = 3  # each runs every layer: fewer batches than for one layer

    def captured(self, ctx, layer):
        call = ctx.corpus.calls["encoder"]
        inputs = {"hidden_states": call.args[0], "attention_mask": call.kwargs["attention_mask"]}
        return inputs, flawed.flatten(ctx.corpus.hidden_states, call.output["last_hidden_state"])

    def random_inputs(self, ctx):
        return random_attention_batch(ctx)

    def call_forms(self, ctx):
        return call_forms.mask_forms(ctx)

    def part_reference(self, ctx, attr):
        from bertlab.checks.harness import given

        layers = super().part_reference(ctx, attr)
        for block in layers:  # the learner's loop calls each layer: each is HF's, given by the grader
            given(block)
        return layers

    def call(self, module, inputs, what="forward", seed=None):
        if _is_hf(module):  # the expected output: HF's encoder, its layers' outputs caught by hooks
            if seed is not None:
                torch.manual_seed(seed)
            states = [inputs["hidden_states"]]
            hooks = [block.register_forward_hook(lambda m, args, out: states.append(out)) for block in module.layer]
            try:
                last = module(**inputs).last_hidden_state
            finally:
                for hook in hooks:
                    hook.remove()
            return flawed.flatten(states, last)
        out = self.call_learner(what, module, seed=seed, **inputs)
        if not isinstance(out, (tuple, list)) or len(out) != 2 or not isinstance(out[0], torch.Tensor):
            self.fail(f"forward must return a tuple (last_hidden_state, hidden_states); got {_describe(out)}")
        return flawed.flatten(self.hidden_states(out[1]), out[0])


class BertPoolerTask(_VariantDiagnosis, ModuleTask):
    id = "6.3"
    title = "BertPooler"
    lesson = LESSON
    hf_path = "pooler"
    outputs = {"pooled_output": ("batch", "dim")}
    stages = ("names", "shapes", "values", "batches", "calls", "config", "gradients")  # no mask, no dropout

    def captured(self, ctx, layer):
        call = ctx.corpus.calls["pooler"]
        return {"hidden_states": call.args[0]}, {"pooled_output": call.output}

    def random_inputs(self, ctx):
        g = ctx.generator
        B, T = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(2, 21, (1,), generator=g))
        hidden_states = torch.randn(B, T, ctx.model.config.hidden_size, generator=g)
        return {"hidden_states": hidden_states}, f"random hidden states (batch {B}, length {T})"

    def check_batches(self, cls, ctx):
        self.check_masks(cls, ctx)


def random_model_batch(ctx) -> tuple[dict, str]:
    """Random ids (B, T) with random padding (or no mask) and random token types (or none)."""
    g, config = ctx.generator, ctx.model.config
    B, T = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(2, 21, (1,), generator=g))
    with_mask, with_types = (bool(torch.randint(4, (1,), generator=g) > 0) for _ in range(2))
    mask = random_padding(B, T, g) if with_mask else None
    inputs = {
        "input_ids": torch.randint(config.vocab_size, (B, T), generator=g),
        "attention_mask": mask,
        "token_type_ids": torch.randint(config.type_vocab_size, (B, T), generator=g) if with_types else None,
    }
    padded = int((mask.sum(1) < T).sum()) if mask is not None else 0
    return inputs, (
        f"random ids (batch {B}, length {T}, "
        + (f"{padded} padded" if mask is not None else "no attention_mask")
        + (", random token types)" if with_types else ")")
    )


# sentence-transformers' embeddings of the corpus by the bundled model, computed once and shipped:
# a judge reads them instead of importing sentence-transformers (and with it transformers, 3 s and
# more). tests/test_judge_reference.py computes them afresh and compares; ``write_sentence_embeddings``
# writes the file again when the corpus changes.
SENTENCE_EMBEDDINGS = Path(__file__).with_name("sentence_embeddings.json")


@functools.cache
def sentence_transformer_embeddings(path) -> torch.Tensor:
    """``SentenceTransformer(path).encode(corpus.SENTENCES)``: (sentences, H), L2-normalised.

    Read from ``SENTENCE_EMBEDDINGS`` when it holds the bundled model's embeddings of these very
    sentences; else computed here by sentence-transformers (which imports transformers)."""
    stored = _stored_sentence_embeddings(path)
    return stored if stored is not None else computed_sentence_embeddings(path)


def computed_sentence_embeddings(path) -> torch.Tensor:
    """What sentence-transformers computes: ``SentenceTransformer(path).encode(corpus.SENTENCES)``."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu")
    return model.encode(list(corpus.SENTENCES), convert_to_tensor=True).float()


def _stored_sentence_embeddings(path) -> torch.Tensor | None:
    if not reference.is_bundled(Path(path)) or not SENTENCE_EMBEDDINGS.is_file():
        return None
    stored = json.loads(SENTENCE_EMBEDDINGS.read_text(encoding="utf-8"))
    if stored.get("weights_sha256") != reference.BUNDLED_SHA256 or stored.get("sentences") != list(corpus.SENTENCES):
        return None
    return torch.tensor(stored["embeddings"], dtype=torch.float32)


def write_sentence_embeddings() -> None:
    """Compute the bundled model's embeddings of the corpus with sentence-transformers, and store them."""
    path = reference.bundled_model_dir()
    embeddings = computed_sentence_embeddings(path)
    stored = {
        "model": reference.BUNDLED_NAME,
        "weights_sha256": reference.BUNDLED_SHA256,
        "sentences": list(corpus.SENTENCES),
        "embeddings": embeddings.tolist(),  # float32 -> float: exact, and read back exactly
    }
    SENTENCE_EMBEDDINGS.write_text(json.dumps(stored) + "\n", encoding="utf-8")


# Where each key of BertModel's state_dict is written, deepest part first: a wrong name in the
# learner's complete model is blamed on the shallowest part whose keys differ.
PART_KEYS = [
    (r"^encoder\.layer\.\d+\.attention\.self\.", "3.2", 4),
    (r"^encoder\.layer\.\d+\.attention\.output\.", "4.1", 4),
    (r"^encoder\.layer\.\d+\.attention\.", "4.2", 3),
    (r"^encoder\.layer\.\d+\.intermediate\.", "5.1", 3),
    (r"^encoder\.layer\.\d+\.output\.", "5.2", 3),
    (r"^encoder\.layer\.\d+\.", "6.1", 2),
    (r"^encoder\.", "6.2", 1),
    (r"^embeddings\.", "2.1", 1),
    (r"^pooler\.", "6.3", 1),
]


def part_of(keys) -> str | None:
    """The id of the shallowest task whose module writes one of ``keys``; None if one is BertModel's own."""
    found = []
    for key in keys:
        match = next(((task, depth) for pattern, task, depth in PART_KEYS if re.match(pattern, key)), None)
        if match is None:
            return None
        found.append(match)
    return min(found, key=lambda m: m[1])[0] if found else None


class BertModelTask(BuiltOnParts, _HiddenStates, ModuleTask):
    id = "6.4"
    title = "BertModel"
    lesson = LESSON
    hf_path = ""  # the whole model: its complete state_dict must load strictly
    outputs = _Dims(hidden_states=HIDDEN, last_hidden_state=HIDDEN, pooler_output=("batch", "dim"))
    grad_inputs = ()  # integer ids
    parts = {"embeddings": "2.1", "encoder": "6.2", "pooler": "6.3"}
    # No dropout of its own (its parts are checked in Tasks 2.1 to 6.1); one more check at the end:
    # the sentence embeddings of sentence-transformers.
    stages = ("names", "shapes", "values", "masks", "calls", "config", "arguments", "dropout", "gradients", "sentences")

    def check_shapes(self, cls, ctx):
        self._named_if_square(super().check_shapes, cls, ctx)

    def check_values(self, cls, ctx):
        self._named_if_square(super().check_values, cls, ctx)

    def _named_if_square(self, stage, cls, ctx):
        """A mask left at (B, T) raises unless B == T: on an error, diagnose on the corpus cut to n x n."""
        try:
            stage(cls, ctx)
        except CheckFailed as err:
            if err.mistake is not None or err.cause != "raised":
                raise
            inputs = flawed.square_inputs(self.captured(ctx, None)[0])
            hf, module = self.reference(ctx, None), self.learner_for(cls, ctx, None)
            with torch.no_grad():
                expected = self.call(hf, inputs)
                try:
                    got = self.call(module, inputs)
                except CheckFailed:
                    raise err from None
            mistake = diagnose.diagnose(self.id, hf, inputs, got, expected)
            if mistake is None:
                raise
            raise err.adding(
                f"On a square batch ({len(inputs['input_ids'])} x {len(inputs['input_ids'])}) "
                f"it runs: {mistake.hint()}",
                mistake=mistake.id,
            ) from None

    def part_reference(self, ctx, attr):
        module = super().part_reference(ctx, attr)
        if attr == "encoder":  # HF's encoder returns a ModelOutput; the course's contract is a tuple
            module.__class__ = encoder_contract.CourseEncoder
        return module

    random_trials = 3

    def captured(self, ctx, layer):
        batch = ctx.corpus.batch
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
        cap = ctx.corpus
        return inputs, flawed.flatten(cap.hidden_states, cap.last_hidden_state, cap.pooler_output)

    def random_inputs(self, ctx):
        return random_model_batch(ctx)

    def call(self, module, inputs, what="forward", seed=None):
        if _is_hf(module):
            if seed is not None:
                torch.manual_seed(seed)
            out = module(**inputs, output_hidden_states=True)
            return flawed.flatten(out.hidden_states, out.last_hidden_state, out.pooler_output)
        out = self.call_learner(what, module, seed=seed, **inputs)
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            self.fail(
                f"forward must return a tuple (last_hidden_state, pooler_output, hidden_states); got {_describe(out)}"
            )
        for name, value in zip(("last_hidden_state", "pooler_output"), out, strict=False):
            if not isinstance(value, torch.Tensor):
                self.fail(f"`{name}` must be a tensor; got {_describe(value)}")
        return flawed.flatten(self.hidden_states(out[2]), out[0], out[1])

    def check_names(self, cls, ctx):
        """The complete pretrained state_dict loads strictly into the learner's own model (no HF part)."""
        module = self.own_module(cls, ctx)
        mine = state_shapes(module)
        saved = [f"embeddings.{b}" for b in NON_PERSISTENT if f"embeddings.{b}" in mine]
        blame = "fails because your BertEmbeddings (task 2.1) differs; fix 2.1 first."
        if saved:
            self.fail(
                f"{' and '.join(saved)} is saved in the state_dict, so the pretrained weights cannot load",
                "Register BertEmbeddings' buffers with persistent=False, like HF.",
                blame,
            )
        theirs = state_shapes(ctx.model)
        missing, unexpected = sorted(set(theirs) - set(mine)), sorted(set(mine) - set(theirs))
        wrong = [k for k in theirs if k in mine and mine[k] != theirs[k]]
        if missing or unexpected or wrong:
            task = part_of(missing + unexpected + wrong)
            title = {
                "2.1": "BertEmbeddings",
                "3.2": "BertSelfAttention",
                "4.1": "BertSelfOutput",
                "4.2": "BertAttention",
                "5.1": "BertIntermediate",
                "5.2": "BertOutput",
                "6.1": "BertLayer",
                "6.2": "BertEncoder",
                "6.3": "BertPooler",
            }.get(task)
            self.fail(
                "the complete pretrained state_dict does not load into your BertModel",
                f"missing: {', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''}" if missing else "",
                f"unexpected: {', '.join(unexpected[:4])}{', ...' if len(unexpected) > 4 else ''}"
                if unexpected
                else "",
                "shapes differ: "
                + ", ".join(f"{k}: expected {list(theirs[k])}, got {list(mine[k])}" for k in wrong[:3])
                if wrong
                else "",
                f"fails because your {title} (task {task}) differs; fix {task} first."
                if task
                else "Use HF's attribute names exactly: embeddings, encoder, pooler.",
            )
        self.load(module, ctx, None)

    def call_forms(self, ctx):
        return call_forms.model_forms(ctx)

    def check_sentences(self, cls, ctx):
        self._on_parts(self._check_sentences, cls, ctx)

    def _check_sentences(self, cls, ctx):
        """Mean pooling + L2 norm of the output equals the sentence-transformers pipeline."""
        path = reference.model_dir()
        if not reference.is_bundled(path):
            print(
                f"[Task {self.id}] note: the SentenceTransformer check is skipped: ${reference.ENV_VAR} "
                f"names {path.name}, not the bundled {reference.BUNDLED_NAME} (a sentence-transformers "
                "model that averages its token vectors)."
            )
            return
        inputs, _ = self.captured(ctx, None)
        with torch.no_grad():
            got = self.call(self.learner_for(cls, ctx, None), inputs)["last_hidden_state"]
        self.compare(
            {"sentence_embeddings": sentence_transformer_embeddings(path)},
            {"sentence_embeddings": sentence_embeddings(got, inputs["attention_mask"])},
            {"sentence_embeddings": ("sentence", "dim")},
            f"SentenceTransformer({reference.BUNDLED_NAME}).encode(corpus.SENTENCES) after mean pooling "
            "and L2 normalisation",
        )


TASKS = [BertLayerTask(), BertEncoderTask(), BertPoolerTask(), BertModelTask()]
