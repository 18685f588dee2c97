"""What the judge compares with is transformers' BERT, bit for bit, on everything the checks use.

The checks' expected side is the course's own BERT (``bertlab.bert``): a judge never imports
transformers (``tests/test_judge_imports.py``). ``tests/test_course_bert.py`` proves each class
equal to transformers' own on inputs of its choosing; this file proves it on the checks' own
inputs, drawn by the checks' own code, so a form a check adds is covered here with no edit:

- every module task's reference module (Tasks 2.1 to 6.4), under the pretrained model and under
  the other config's random model (``other_config``), on its captured inputs, its random batches
  and every call form of its arguments check (``call_forms``: every mask form, None, left out,
  (B, 1, 1, T), (B, 1, T, T), a (B, T) 0/1 mask for BertModel, ids or embeddings, positions,
  token types, a past length), called as the checks call it (``task.call``): the outputs in eval
  mode, the outputs in train mode under the same seed (the same dropout draws), and the gradient
  of every parameter and every floating-point input;
- Task 3.1's function on every form of its table, in eval and train mode (its dropout);
- the capture (every recorded call of every module on the corpus, the tokenizer's batch too),
  the other config and its random model, the small layer of Task 1.5, Task 7's random models and
  the reference numbers of Task 7's measurements;
- Task 6.4's stored sentence embeddings against sentence-transformers computing them now.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping

import pytest
import torch
from transformers import BertConfig as HFBertConfig
from transformers import BertModel as HFBertModel
from transformers.models.bert import modeling_bert as hf_bert

from bertlab import bert, capture, checks, corpus, reference
from bertlab.checks.bert_model import computed_sentence_embeddings, sentence_transformer_embeddings
from bertlab.checks.eager_call_watch import Training
from bertlab.checks.framework import Context
from bertlab.checks.other_config import _config_key, _random_model, other_config, randomised
from bertlab.experiments import lesions, rank_collapse

# About a minute and a half of processor time (every form, pretrained and other, eval, train and
# backward): `make test` runs it, `make check` keeps to tests/test_course_bert.py's per-class parity.
pytestmark = pytest.mark.slow

MODULE_TASKS = ("2.1", "3.2", "4.1", "4.2", "5.1", "5.2", "6.1", "6.2", "6.3", "6.4")
KINDS = ("pretrained", "other")
SEED = 7  # dropout's seed in train mode


def _values(config) -> dict:
    """Every value of ``config`` (either side's) but the version of transformers that wrote it."""
    return {**config.to_dict(), "transformers_version": None}


def hf_config(config) -> HFBertConfig:
    """transformers' BertConfig of the course's ``config``: every value the same."""
    hf = HFBertConfig.from_dict(config.to_dict(), attn_implementation="eager")
    assert _values(hf) == _values(config)
    return hf


@functools.cache
def contexts(kind: str) -> tuple[Context, HFBertModel]:
    """The checks' context of ``kind`` (its model the course's), and transformers' model the same.

    The pretrained one is transformers' own loading of the files; the other config's is built and
    drawn by ``other_config.randomised``, as the course's is."""
    ctx = Context.load()
    if kind == "pretrained":
        return ctx, reference.load_model()
    other = ctx.other()
    return other, randomised(HFBertModel, hf_config(other.model.config))


def test_the_models_the_judge_compares_with_hold_transformers_weights():
    for kind in KINDS:
        ctx, hf = contexts(kind)
        assert type(ctx.model) is bert.BertModel
        state, hf_state = ctx.model.state_dict(), hf.state_dict()
        assert list(state) == list(hf_state), kind
        assert all(torch.equal(state[k], hf_state[k]) for k in hf_state), kind
        assert _values(ctx.model.config) == _values(hf.config), kind


def test_the_other_config_is_transformers_config():
    pretrained = bert.load_config()
    course = other_config(pretrained)
    assert type(course) is bert.BertConfig
    hf_config(course)  # the same values, transformers' defaults for the rest
    assert _random_model(_config_key(pretrained)).config == course


def _floats(inputs: dict, names) -> dict:
    """``inputs`` with fresh leaves that require grad for the floating-point tensors (all of them
    when ``names`` is None)."""
    out = dict(inputs)
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and (names is None or key in names):
            out[key] = value.detach().clone().requires_grad_()
    return out


def _tensors(output) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, Mapping):
        return [t for value in output.values() for t in _tensors(value)]
    if isinstance(output, (tuple, list)):
        return [t for value in output for t in _tensors(value)]
    return []


def assert_equal(expected, got, what: str) -> None:
    expected, got = _tensors(expected), _tensors(got)
    assert len(got) == len(expected), what
    for i, (e, g) in enumerate(zip(expected, got, strict=True)):
        assert g.shape == e.shape and g.dtype == e.dtype, f"{what}: output {i}"
        assert torch.equal(g, e), f"{what}: output {i}, max |diff| {(g - e).abs().max().item():.3g}"


def assert_same_everywhere(call, course: torch.nn.Module, hf: torch.nn.Module, inputs: dict, what: str) -> None:
    """``call(module, inputs, seed)`` on both: equal in eval mode, and in train mode under one seed
    with the same gradients of every parameter and floating-point input."""
    with torch.no_grad():
        course.eval(), hf.eval()
        assert_equal(call(hf, inputs, None), call(course, inputs, None), f"{what}, eval")
    runs = []
    for module in (hf, course):
        module.train()
        module.zero_grad(set_to_none=True)
        given = _floats(inputs, None)
        out = call(module, given, SEED)
        upstream = torch.Generator().manual_seed(3)
        loss = sum((t * torch.randn(t.shape, generator=upstream)).sum() for t in _tensors(out) if t.is_floating_point())
        loss.backward()
        leaves = {k: v.grad for k, v in given.items() if isinstance(v, torch.Tensor) and v.requires_grad}
        runs.append((out, {n: p.grad for n, p in module.named_parameters()}, leaves))
        module.eval()
    (hf_out, hf_grads, hf_leaves), (out, grads, leaves) = runs
    assert_equal(hf_out, out, f"{what}, train (seed {SEED})")
    assert grads.keys() == hf_grads.keys()
    assert any(g is not None for g in hf_grads.values()), what
    for name, g in hf_grads.items():
        assert (grads[name] is None) == (g is None), f"{what}: {name}"
        assert g is None or torch.equal(grads[name], g), f"{what}: gradient of {name}"
    for name, g in hf_leaves.items():
        assert (leaves[name] is None) == (g is None) and (g is None or torch.equal(leaves[name], g)), (
            f"{what}: gradient of the input {name}"
        )


def _input_sets(task, ctx: Context, layer) -> list[tuple[str, dict]]:
    """Every set of inputs the task's checks call its reference module with."""
    sets = []
    if ctx.capture is not None:
        sets.append(("the captured inputs", task.captured(ctx, layer)[0]))
    for _ in range(2):
        inputs, description = task.random_inputs(ctx)
        sets.append((f"random inputs ({description})", inputs))
    forms = [*task.call_forms(ctx)]
    if task.id == "2.1":
        from bertlab.checks import call_forms

        forms += call_forms.embeddings_forms(ctx, token_types=False)  # the buffers check's forms
    sets += [(f"call form {form.name}", form.inputs) for form in forms]
    return sets


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("task_id", MODULE_TASKS)
def test_each_module_task_reference_equals_transformers_on_the_checks_inputs(task_id, kind):
    task = checks.TASKS[task_id]
    ctx, hf_model = contexts(kind)
    course_model = copy.deepcopy(ctx.model).requires_grad_()
    hf_model = copy.deepcopy(hf_model).requires_grad_()
    layers = task.layers(ctx)
    for layer in (layers[0], layers[-1]) if len(layers) > 1 else layers:
        path = task.hf_path.format(layer=layer)
        course, hf = course_model.get_submodule(path), hf_model.get_submodule(path)
        assert type(hf).__module__ == hf_bert.__name__ and type(course).__name__ == type(hf).__name__
        assert type(task.reference(ctx, layer)) is type(course)

        def call(module, inputs, seed):
            return task.call(module, inputs, seed=seed)

        for what, inputs in _input_sets(task, ctx, layer):
            assert_same_everywhere(call, course, hf, inputs, f"Task {task_id} ({kind}, layer {layer}): {what}")


@pytest.mark.parametrize("kind", KINDS)
def test_the_eager_function_equals_transformers_on_task_3_1s_forms(kind):
    task = checks.TASKS["3.1"]
    ctx, _ = contexts(kind)
    p = ctx.model.config.attention_probs_dropout_prob
    sets = [*_input_sets(task, ctx, 0)]
    for what, inputs in sets:
        for training, extra in ((False, {}), (True, {"dropout": p}), (True, {})):
            results = []
            for fn in (hf_bert.eager_attention_forward, bert.eager_attention_forward):
                given = _floats(inputs, None)
                torch.manual_seed(SEED)
                out = fn(Training().train(training), **{**given, **extra})
                sum(t.sum() for t in out if t is not None).backward()
                results.append(
                    (out, [v.grad for v in given.values() if isinstance(v, torch.Tensor) and v.requires_grad])
                )
            (hf_out, hf_grads), (out, grads) = results
            assert_equal(hf_out, out, f"Task 3.1 ({kind}): {what}, training {training} {extra}")
            assert all(torch.equal(g, h) for g, h in zip(grads, hf_grads, strict=True)), what


def test_the_capture_equals_transformers_capture():
    """Every call the checks read from the capture (every module of every layer, its arguments,
    keywords and outputs), the hidden states, attentions and the tokenized corpus."""
    course = capture.capture()
    hf = capture.run(reference.load_model(), corpus.batch(reference.load_tokenizer()))
    assert course.batch.keys() == hf.batch.keys()
    assert all(torch.equal(course.batch[k], hf.batch[k]) for k in hf.batch)
    assert course.calls.keys() == hf.calls.keys()
    for name, call in hf.calls.items():
        mine = course.calls[name]
        assert len(mine.args) == len(call.args) and set(mine.kwargs) <= set(call.kwargs), name
        # transformers passes an encoder's keywords too (no cache, no cross-attention): unset ones
        unset = {k: v for k, v in call.kwargs.items() if k not in mine.kwargs}
        assert all(v is None or v is False or v == 0 for v in unset.values()), f"{name}: {unset}"
        assert_equal(call.args, mine.args, f"{name}: arguments")
        assert_equal([call.kwargs[k] for k in mine.kwargs], list(mine.kwargs.values()), f"{name}: keywords")
        assert_equal(call.output, mine.output, f"{name}: output")
    for field in ("hidden_states", "attentions", "last_hidden_state", "pooler_output"):
        assert_equal(getattr(hf, field), getattr(course, field), field)


def test_task_1_5s_small_layer_is_transformers_layer():
    task = checks.TASKS["1.5"]
    ctx = Context.load()
    layer, config = task.small_layer(ctx, 1e-3)
    assert type(layer) is bert.BertLayer
    hf = hf_bert.BertLayer(hf_config(config)).eval()
    hf.load_state_dict(layer.state_dict(), strict=True)
    hidden = torch.randn(2, 5, config.hidden_size)
    mask = torch.zeros(2, 1, 5, 5)
    mask[1, :, :, 3:] = torch.finfo(torch.float32).min
    with torch.no_grad():
        for m in (None, mask):
            assert_equal(hf(hidden, attention_mask=m), layer(hidden, attention_mask=m), "Task 1.5's layer")


def test_task_7s_models_and_measurements_equal_transformers():
    """Task 7.3's freshly initialised models are transformers' draws; 7.2's layer edits, 7.3's
    curves and 7.5's lesions measure the course's model as they measure transformers'."""
    ctx, hf = contexts("pretrained")
    batch = ctx.corpus.batch
    for seed in (0, 123):
        course_random = rank_collapse.random_model(ctx.model.config, seed)
        hf_random = rank_collapse.random_model(hf.config, seed)
        assert type(course_random) is bert.BertModel and type(hf_random) is HFBertModel
        state, hf_state = course_random.state_dict(), hf_random.state_dict()
        assert list(state) == list(hf_state) and all(torch.equal(state[k], hf_state[k]) for k in hf_state)
    for task_id in ("7.3", "7.5"):
        task = checks.TASKS[task_id]
        with torch.no_grad():
            assert_equal(task.reference_result(hf, batch), task.reference_result(ctx.model, batch), f"Task {task_id}")
            assert_equal(
                task.reference_result(hf_random, batch),
                task.reference_result(course_random, batch),
                f"Task {task_id}, random model",
            )
    hidden, mask = ctx.corpus.layer(2).args[:2]  # the layer's captured input and additive mask
    for edit in (lesions.INTACT, *lesions.LESIONS.values()):
        with torch.no_grad():
            assert_equal(
                lesions.layer_forward(hf.encoder.layer[2], hidden, mask, edit),
                lesions.layer_forward(ctx.model.encoder.layer[2], hidden, mask, edit),
                f"Task 7.2's layer_forward, {edit}",
            )


def test_the_stored_sentence_embeddings_are_sentence_transformers():
    """Task 6.4 compares with sentence-transformers' embeddings of the corpus, which the course
    ships (a judge reads them, never imports sentence-transformers). Computed again here; if the
    corpus changed, ``bertlab.checks.bert_model.write_sentence_embeddings()`` writes them anew."""
    path = reference.bundled_model_dir()
    stored = sentence_transformer_embeddings(path)
    assert sentence_transformer_embeddings.cache_info().currsize == 1
    from bertlab.checks import bert_model

    assert bert_model._stored_sentence_embeddings(path) is not None, (
        "the stored embeddings are not those of the corpus: run bertlab.checks.bert_model.write_sentence_embeddings()"
    )
    fresh = computed_sentence_embeddings(path)
    assert stored.shape == fresh.shape == (len(corpus.SENTENCES), bert.load_config().hidden_size)
    assert torch.allclose(stored, fresh, rtol=0, atol=1e-6), (stored - fresh).abs().max()
