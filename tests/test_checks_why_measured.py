"""Task 7's checks: the lessons' reference code and a different valid implementation pass, on the
pretrained and on a tiny random BERT; the known mistakes are named; a wrong conclusion fails."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from bertlab import capture, corpus, diagnose, reference
from bertlab.checks import CheckFailed, check
from bertlab.checks import why_measured as checks
from bertlab.diagnose import why_measured as flawed
from bertlab.experiments import lesions, rank_collapse
from bertlab.experiments.lesions import LayerEdit
from bertlab.masks import additive_mask

torch.set_num_threads(1)  # tiny matrices: threads only add overhead

# -- the references behind the learner's signatures -------------------------------------------


def ref_residual(hidden_states, attention_mask):
    return rank_collapse.relative_residual(hidden_states, attention_mask)


def ref_variant(layer, hidden_states, attention_mask, attention_skip=True, ffn=True, ffn_skip=True):
    edit = LayerEdit(attention_skip=attention_skip, ffn=ffn, ffn_skip=ffn_skip)
    return lesions.layer_forward(layer, hidden_states, attention_mask, edit)[0]


def ref_curves(model, batch):
    return rank_collapse.curves(model, batch)


def ref_cosine(hidden_a, hidden_b, attention_mask):
    return (
        lesions.sentence_embeddings(hidden_a, attention_mask) * lesions.sentence_embeddings(hidden_b, attention_mask)
    ).sum(-1)


def ref_lesions(model, batch):
    return checks._lesion_reference(model, batch)


REFERENCE = {"7.1": ref_residual, "7.2": ref_variant, "7.3": ref_curves, "7.4": ref_cosine, "7.5": ref_lesions}

# -- another valid implementation, with flaws on demand -------------------------------------
#
# Written the way a learner might (a loop over sentences with the real tokens sliced out, HF's
# own sub-layers where a skip is kept, F.cosine_similarity), independently of the simulations
# in bertlab.diagnose.why_measured; ``flaw`` names the known mistake to make, as a learner would.


def loop_residual(hidden_states, attention_mask, flaw=None):
    out = []
    for x, m in zip(hidden_states, attention_mask, strict=True):
        X = x if flaw == "residual-includes-padding" else x[m.bool()]  # (n, H): real tokens only
        if flaw == "residual-mean-over-features":
            centred = X - X.mean(1, keepdim=True)  # each token minus its own mean
        elif flaw == "residual-mean-includes-padding":
            centred = X - x.mean(0)  # the mean token over every position, padding included
        else:
            centred = X - X.mean(0)  # each token minus the mean token
        whole = x if flaw == "residual-norm-includes-padding" else X
        num, den = torch.linalg.matrix_norm(centred), torch.linalg.matrix_norm(whole)
        if flaw == "residual-not-relative":
            out.append(num)
        elif flaw == "residual-squared-norms":
            out.append(num**2 / den**2)
        else:
            out.append(num / den)
    return torch.stack(out)


def module_variant(layer, hidden_states, attention_mask, attention_skip=True, ffn=True, ffn_skip=True, flaw=None):
    # HF's own BertSelfOutput / BertOutput where the skip is kept (they add it inside).
    context = layer.attention.self(hidden_states, attention_mask=attention_mask)[0]
    out = layer.attention.output
    if attention_skip or flaw == "variant-skip-kept":
        h = out(context, hidden_states)
    elif flaw == "skip-removed-layernorm-dropped":
        h = out.dense(context)
    else:
        h = out.LayerNorm(out.dense(context))
    if not ffn:
        return layer.output.LayerNorm(h) if flaw == "removed-ffn-keeps-layernorm" else h
    inter = layer.intermediate(h)
    if ffn_skip or flaw == "variant-ffn-skip-kept":
        return layer.output(inter, h)
    if flaw == "skip-removed-layernorm-dropped":
        return layer.output.dense(inter)
    return layer.output.LayerNorm(layer.output.dense(inter))


def loop_curves(model, batch, flaw=None):
    mask = additive_mask(batch["attention_mask"], per_query=False)  # the other mask shape
    out = {}
    for name, flags in flawed.VARIANTS.items():
        x = model.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
        values = [loop_residual(x, batch["attention_mask"], flaw).mean()]
        for layer in model.encoder.layer:
            x = module_variant(layer, x, mask, **flags, flaw=flaw)
            values.append(loop_residual(x, batch["attention_mask"], flaw).mean())
        out[name] = [v.item() for v in values]  # a list of floats is accepted too
    return out


def library_cosine(hidden_a, hidden_b, attention_mask, flaw=None):
    m = attention_mask[..., None].float()
    if flaw == "pooling-includes-padding":
        m = torch.ones_like(m)
    a, b = (h[:, 0] if flaw == "cls-pooling" else (h * m).sum(1) / m.sum(1) for h in (hidden_a, hidden_b))
    if flaw == "cosine-not-normalised":
        return (a * b).sum(-1)
    return F.cosine_similarity(a, b, dim=-1)


def loop_lesions(model, batch, flaw=None):
    mask = additive_mask(batch["attention_mask"])
    L = len(model.encoder.layer)

    def last(edit_at=None, flags=None):
        x = model.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
        for i, layer in enumerate(model.encoder.layer):
            lesioned = i == edit_at or (edit_at is not None and flaw == "lesion-in-every-layer")
            x = module_variant(layer, x, mask, **(flags if lesioned else {}), flaw=flaw)
        return x

    intact = last()
    return {
        k: torch.stack([library_cosine(last(i, f), intact, batch["attention_mask"], flaw).mean() for i in range(L)])
        for k, f in flawed.LESION_KINDS.items()
    }


ALTERNATIVE = {
    "7.1": loop_residual,
    "7.2": module_variant,
    "7.3": loop_curves,
    "7.4": library_cosine,
    "7.5": loop_lesions,
}


@pytest.mark.parametrize("task", sorted(REFERENCE))
def test_reference_and_another_valid_implementation_pass(task, capsys):
    check(task, REFERENCE[task])
    check(task, ALTERNATIVE[task])
    out = capsys.readouterr().out
    assert out.count(f"[Task {task}]") == 2 and "passed (" in out


def test_nothing_hard_wired_to_the_pretrained_sizes(tiny_bert_dir, monkeypatch, capsys):
    monkeypatch.setenv(reference.ENV_VAR, str(tiny_bert_dir))
    for task in sorted(ALTERNATIVE):
        check(task, ALTERNATIVE[task])
    assert capture.capture().hidden_states[0].shape[-1] == 32
    assert capsys.readouterr().out.count("passed (") == len(ALTERNATIVE)


# -- the simulations behind the diagnosis ------------------------------------------------------


@functools.cache
def _setup():
    model = reference.load_model()
    return model, corpus.batch(reference.load_tokenizer())


def test_the_simulation_without_a_flaw_is_the_reference():
    model, batch = _setup()
    with torch.no_grad():
        for mine, theirs in (
            (flawed.curves(model, batch), rank_collapse.curves(model, batch)),
            (flawed.lesion_effects(model, batch), ref_lesions(model, batch)),
        ):
            assert set(mine) == set(theirs)
            for k in theirs:
                assert torch.allclose(mine[k], theirs[k], atol=1e-7, rtol=0), k


def test_the_valid_alternative_is_far_inside_the_tolerance_and_every_mistake_far_outside():
    """The tolerance argument of ``checks.why_measured.ATOL``, measured."""
    model, batch = _setup()
    with torch.no_grad():
        want = rank_collapse.curves(model, batch)
        alt = {k: torch.tensor(v) for k, v in loop_curves(model, batch).items()}
        assert max((alt[k] - want[k]).abs().max().item() for k in want) < checks.ATOL / 10
        mistakes = diagnose.for_task("7.3")
        assert mistakes, "no known mistake registered for Task 7.3"
        for mistake in mistakes:
            wrong = mistake.outputs(model, {"batch": batch, "measure": "curves"})
            assert max((wrong[k] - want[k]).abs().max().item() for k in want) > 100 * checks.ATOL, mistake.id


def with_flaw(fn, flaw):
    """``fn`` with ``flaw`` made, behind the learner's signature."""

    def flawed_fn(*args, **kwargs):
        return fn(*args, **kwargs, flaw=flaw)

    return flawed_fn


# Every known mistake of every Task 7 function, made by the independent implementation above.
NAMED = [(t, m.id) for t in sorted(ALTERNATIVE) for m in diagnose.for_task(t)]


def test_every_task_has_known_mistakes_to_name():
    """The parametrisation below is built from the registry: an empty registry would test nothing."""
    for task in ALTERNATIVE:
        assert diagnose.for_task(task), f"no known mistake registered for Task {task}"
        assert any(t == task for t, _ in NAMED)


@pytest.mark.parametrize("task, mistake", NAMED)
def test_known_mistakes_are_named(task, mistake):
    with pytest.raises(CheckFailed) as err:
        check(task, with_flaw(ALTERNATIVE[task], mistake), upto="values" if task in ("7.3", "7.5") else None)
    assert err.value.mistake == mistake, str(err.value)
    assert f"(known mistake `{mistake}`)" in str(err.value)
    assert "See lessons/0" in str(err.value)


def test_a_wrong_conclusion_fails_with_the_question_and_both_answers():
    """Curves whose labels are swapped: the values check would fail first; the conclusions alone say why."""

    def swapped(model, batch):
        c = rank_collapse.curves(model, batch)
        return {**c, "attention_only": c["attention_skip"], "attention_skip": c["attention_only"]}

    with pytest.raises(CheckFailed) as err:
        check("7.3", swapped, only="conclusions")
    message = str(err.value)
    assert message.startswith('[Task 7.3] residual_curves: your numbers answer "which variants end below')
    assert "the reference's answer is" in message


def test_failures_say_what_came_back():
    with pytest.raises(CheckFailed, match=r"must return a dict with keys 'full', .* got keys 'full'"):
        check("7.3", lambda model, batch: {"full": torch.zeros(model.config.num_hidden_layers + 1)}, upto="shapes")
    B = len(corpus.SENTENCES)
    with pytest.raises(CheckFailed, match=rf"the output has shape \[{B}, 1\], expected \[{B}\] \(sentence\)"):
        check("7.1", lambda h, m: ref_residual(h, m)[:, None], upto="shapes")
    with pytest.raises(
        CheckFailed, match=r"not implemented yet: sentence_cosine\(hidden_a, hidden_b, attention_mask\)"
    ):
        check("7.4", lambda a, b, m: (_ for _ in ()).throw(NotImplementedError()))
