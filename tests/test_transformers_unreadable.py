"""A learner's process being graded cannot read transformers, nor find it in memory (Linux).

Issue: code that hides its use of transformers' BertLayer from every watch in its own process
(the watch switched off, the module imported late, the source read and run under another name)
passed where only detection stood in the way. Where Landlock exists, the learner's process is
denied reading transformers and sentence-transformers (``platforms/linux/landlock.py``), and
builds on the course's own modules (``bertlab.bert``), as the judge does, which never imports
transformers (``tests/test_judge_imports.py``). These learner solutions are written the way a
learner would hide the call, independently of the checks, and each must lose the task it hides in.
"""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from bertlab.grading.execute import run_notebook
from bertlab.grading.platforms.linux import landlock
from tests.conftest import solution_notebook

needs_landlock = pytest.mark.skipif(
    not sys.platform.startswith("linux") or landlock.abi() < 1,
    reason="this kernel has no Landlock: detection alone stands (the honest-grading page says so)",
)

CONFINED = """
import json, os, sys
from bertlab.grading.platforms.linux import landlock
root, work = sys.argv[1], sys.argv[2]
assert landlock.confine(work, [root, "/usr", "/lib", "/lib64"], [os.path.join(root, "lib", "pkg", "denied")])
seen = {}
for name in ["lib/pkg/denied/mod.py", "lib64/pkg/denied/mod.py", "lib/pkg/ok.py", "lib/other.txt", "../elsewhere.txt"]:
    try:
        with open(os.path.join(root, name)) as f:
            seen[name] = f.read()
    except PermissionError:
        seen[name] = "refused"
for name in ["lib/pkg/denied", "lib/pkg"]:
    try:
        seen["listed " + name] = os.listdir(os.path.join(root, name))
    except PermissionError:
        seen["listed " + name] = "refused"
for name, folder in [("write inside", work), ("write outside", root)]:
    try:
        with open(os.path.join(folder, "new.txt"), "w") as f:
            f.write("x")
        seen[name] = "written"
    except PermissionError:
        seen[name] = "refused"
print(json.dumps(seen))
"""


@needs_landlock
def test_confine_denies_reads_beneath_a_folder_however_it_is_reached(tmp_path):
    """Landlock only grants: the rest of a readable tree is granted piece by piece, and a link to a
    folder on the way (as a venv's ``lib64 -> lib``) must not grant that folder whole."""
    root, work = tmp_path / "root", tmp_path / "work"
    (root / "lib" / "pkg" / "denied").mkdir(parents=True)
    (root / "lib" / "pkg" / "denied" / "mod.py").write_text("secret")
    (root / "lib" / "pkg" / "ok.py").write_text("ok")
    (root / "lib" / "other.txt").write_text("other")
    (tmp_path / "elsewhere.txt").write_text("neither readable nor denied")
    (root / "lib64").symlink_to("lib")
    work.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", CONFINED, str(root), str(work)], capture_output=True, text=True, check=True
    )
    seen = json.loads(out.stdout)
    assert seen["lib/pkg/denied/mod.py"] == "refused"
    assert seen["lib64/pkg/denied/mod.py"] == "refused"
    assert seen["lib/pkg/ok.py"] == "ok" and seen["lib/other.txt"] == "other"
    assert seen["../elsewhere.txt"] == "refused"  # only what is named readable is
    # Folders on the way can be listed (imports list site-packages), names only
    assert seen["listed lib/pkg/denied"] == ["mod.py"]
    assert sorted(seen["listed lib/pkg"]) == ["denied", "ok.py"]
    assert seen["write inside"] == "written" and seen["write outside"] == "refused"


# Two ways a learner could hide a call of transformers' BertIntermediate in Task 5.1, written as a
# learner would: each switches off any profile hook first (spelled so the static scan misses it),
# so no watch in the process sees the call.
LATE_IMPORT = """
class BertIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = nn.GELU()

    def forward(self, hidden_states):
        import importlib, sys
        getattr(sys, "setpro" + "file")(None)
        hf = importlib.import_module("transformers.models.bert." + "modeling_bert")
        twin = hf.BertIntermediate.__new__(hf.BertIntermediate)
        twin.__dict__.update(self.__dict__)
        return hf.BertIntermediate.forward(twin, hidden_states)
"""

SOURCE_UNDER_ANOTHER_NAME = """
import importlib.util, os, sys
_folder = importlib.util.find_spec("trans" + "formers").submodule_search_locations[0]
_source = open(os.path.join(_folder, "models", "bert", "modeling_bert.py")).read()


class BertIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = nn.GELU()

    def forward(self, hidden_states):
        getattr(sys, "setpro" + "file")(None)
        hf = {"__name__": "my_layers"}
        exec(compile(_source, "my_layers.py", "exec"), hf)
        return hf["BertIntermediate"].forward(self, hidden_states)
"""

MEMORY_PROBE = """
import gc, json, sys
_theirs = ("transformers", "sentence_transformers")
_held = sorted(name for name in sys.modules if name.split(".")[0] in _theirs)
_homes = {getattr(o, "__module__", None) for o in gc.get_objects() if isinstance(o, type)}  # every class alive
_objects = sorted(h for h in _homes if isinstance(h, str) and h.split(".")[0] in _theirs)
json.dump({"modules": _held, "objects": _objects}, open("memory.json", "w"))
"""


def _feed_forward_with(source: str, probe: bool = False):
    nb = nbformat.read(solution_notebook("05-feed-forward"), as_version=4)
    index, cell = next(
        (i, c) for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "bert-intermediate"
    )
    cell.source = source
    if probe:
        nb.cells.insert(index, nbformat.v4.new_code_cell(MEMORY_PROBE))
    return nb


def _verdicts(nb, cwd) -> dict:
    result = run_notebook(nb, timeout=300, cwd=str(cwd))
    return {c.name: c for c in result.checks}


@needs_landlock
@pytest.mark.slow
@pytest.mark.parametrize("source", [LATE_IMPORT, SOURCE_UNDER_ANOTHER_NAME], ids=["late-import", "source-as-text"])
def test_hidden_use_of_transformers_cannot_run(source, tmp_path):
    verdicts = _verdicts(_feed_forward_with(source, probe=True), tmp_path)
    intermediate = [c for grade_id, c in verdicts.items() if grade_id.startswith("test-5-1")]
    output = [c for grade_id, c in verdicts.items() if grade_id.startswith("test-5-2")]
    assert intermediate and not any(c.passed for c in intermediate), [c.message for c in intermediate]
    assert any("transformers" in c.message for c in intermediate), [c.message for c in intermediate]
    assert output and all(c.passed for c in output), [c.message for c in output]
    memory = json.loads((tmp_path / "memory.json").read_text())
    assert memory == {"modules": [], "objects": []}, "transformers is in the learner's memory"


def test_the_course_reference_modules_are_refused_as_the_task(capsys):
    """What the learner's process is given instead of transformers is refused the same way."""
    from bertlab import bert
    from bertlab.checks import CheckFailed, check

    with pytest.raises(CheckFailed, match=r"course's reference BertIntermediate"):
        check("5.1", bert.BertIntermediate)

    class Wrapped(bert.BertIntermediate.__mro__[1]):  # nn.Module, calling the course's forward
        def __init__(self, config):
            super().__init__()
            self.inner = bert.BertIntermediate(config)

        def forward(self, hidden_states):
            return self.inner(hidden_states)

    with pytest.raises(CheckFailed, match=r"course's reference"):
        check("5.1", Wrapped)


def test_learner_process_parts_are_the_judges_course_modules():
    """What crosses to a learner's process: the judge's own parts (the course's classes, the judge
    compares with nothing else), holding the very same values, with the grader's marks."""
    import torch

    from bertlab import bert
    from bertlab.checks.framework import Context
    from bertlab.checks.harness import GIVEN, given
    from bertlab.grading import wire

    model = Context.load().model
    assert type(model) is bert.BertModel
    layer = given(model.encoder.layer[0])
    try:
        sent = wire.SentTensors()
        payload = wire.dump_request(("x", layer, model.config), {}, None, sent)
        received = wire.load_request(payload, {}, None, {})[1:]
    finally:
        for part in layer.modules():
            part.__dict__.pop(GIVEN, None)
    course_layer, config = received
    assert type(course_layer) is bert.BertLayer and type(config) is bert.BertConfig
    assert type(course_layer.intermediate.intermediate_act_fn).__module__.startswith("bertlab.bert")
    assert all(getattr(part, GIVEN, False) for part in course_layer.modules())
    assert config == model.config
    assert b"transformers." not in payload  # no module of transformers named (its version is a config value)

    x = torch.randn(2, 5, model.config.hidden_size)
    with torch.no_grad():
        assert torch.equal(course_layer(x), layer(x))


def test_transformers_objects_are_refused_on_the_way_to_a_learner():
    """The judge holds none of transformers' objects; one handed to the wire is refused there, with
    the reason, not sent to a process that could not load it."""
    from bertlab import reference
    from bertlab.grading import wire

    hf = reference.load_model()
    for obj in (hf, hf.encoder.layer[0].intermediate.intermediate_act_fn, hf.config):
        with pytest.raises(TypeError, match=r"cannot send transformers' .*\(bertlab\.bert\)"):
            wire.dump_request((obj,), {}, None, wire.SentTensors())


def test_a_whole_model_crosses_as_it_is():
    """Task 7's checks hand the learner's functions a whole BertModel (random weights, say)."""
    import torch

    from bertlab import bert, corpus
    from bertlab.experiments import rank_collapse
    from bertlab.grading import wire

    model = rank_collapse.random_model(bert.load_config(), seed=3)
    (crossed,) = wire.load_request(wire.dump_request((model,), {}, None, wire.SentTensors()), {}, None, {})
    assert type(crossed) is bert.BertModel and crossed is not model
    batch = dict(corpus.batch(bert.load_tokenizer()))
    with torch.no_grad():
        got, want = crossed(**batch, output_attentions=True), model(**batch, output_attentions=True)
    assert torch.equal(got.last_hidden_state, want.last_hidden_state)
    assert all(torch.equal(g, w) for g, w in zip(got.attentions, want.attentions, strict=True))


# Placed after the class cell: the learner's class exists only while the process holds nothing of
# transformers, so a verdict of the judge itself says whether it does.
FORGET_CLASS_IF_HELD = MEMORY_PROBE.replace(
    'json.dump({"modules": _held, "objects": _objects}, open("memory.json", "w"))',
    "if _held or _objects:\n    del BertIntermediate",
)


@needs_landlock
@pytest.mark.slow
def test_the_judge_factorys_learners_hold_no_transformers(tmp_path):
    """The learner template each judge uses is forked from a process that loaded nothing of the
    judge's (``template.TemplateMaker``), and the judge factory imports no transformers either."""
    from bertlab.grading import runner
    from bertlab.grading.pool import JudgePool, Limits, judge_env

    nb = nbformat.read(solution_notebook("05-feed-forward"), as_version=4)
    index = next(
        i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "bert-intermediate"
    )
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(FORGET_CLASS_IF_HELD))
    path = tmp_path / "05-feed-forward.ipynb"
    nbformat.write(nb, path)
    pool = JudgePool(judge_env(1))
    try:
        result = runner.grade_task("05-feed-forward", [path], Limits(timeout=300), pool)
        assert pool.factory is not None and pool.factory.alive, "graded without the judge factory"
    finally:
        pool.close()
    assert result.status == "passed", [c.message for c in result.checks if not c.passed]


@pytest.mark.parametrize("dressed", ["namespace", "config"])
def test_a_reference_forward_run_on_a_stand_in_for_self_is_refused(dressed):
    """Reading a config is data, not a call into transformers' modules; a module's forward run with
    a non-module as ``self`` (a namespace, or a config given the module's attributes) is the module."""
    import copy
    import types

    from torch import nn
    from transformers.models.bert import modeling_bert

    from bertlab.checks import CheckFailed, check

    class BertIntermediate(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
            self.intermediate_act_fn = nn.GELU()
            self.config = config

        def forward(self, hidden_states):
            if dressed == "namespace":
                twin = types.SimpleNamespace(dense=self.dense, intermediate_act_fn=self.intermediate_act_fn)
            else:  # a copy of the config it was given (the grader's own must stay as it is)
                twin = copy.copy(self.config)
                twin.dense, twin.intermediate_act_fn = self.dense, self.intermediate_act_fn
            return modeling_bert.BertIntermediate.forward(twin, hidden_states)

    with pytest.raises(CheckFailed, match=r"calls transformers' forward \(modeling_bert\.py\)"):
        check("5.1", BertIntermediate)


@pytest.mark.parametrize("marked", [True, False], ids=["given", "taken"])
def test_a_given_parts_recording_hook_is_the_parts(marked):
    """The course's parts record hidden states and attentions with hook objects; such a hook, run
    by torch right after a given part's forward, is the grader's part, not the learner's call."""
    import torch
    from torch import nn

    from bertlab import bert
    from bertlab.bert import recording
    from bertlab.checks.harness import given, invoke

    config = bert.load_config()
    attention = bert.BertAttention(config).eval()
    recording.install_hooks(attention, {"attentions": bert.BertSelfAttention})
    assert attention.self._forward_hooks, "the recording hook is not where this test needs it"
    if marked:
        given(attention)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = attention

        def forward(self, hidden_states):  # the part's children one by one, as most layers do
            context = self.attention.self(hidden_states)[0]
            return self.attention.output(context, hidden_states)

    outcome = invoke(Layer(), (torch.randn(1, 3, config.hidden_size),), forbid_shortcuts=True)
    assert outcome.kind == ("ok" if marked else "shortcut"), outcome
