"""Bad submissions: notebooks a learner could hand in, each with the verdict a good grader gives.

Every case starts from a course notebook, either as released (``exercise``: the stubs) or filled
in with the reference solution the way a learner who got it right would write it (``right``),
then breaks it in one way. ``build_course`` writes all cases into a temporary course directory
laid out like nbgrader's: ``nbgrader_config.py``, ``solutions/`` (the source that grade cells and
locked cells are restored from) and one folder of submissions per grading run.

Each case gets its own task folder, ``NN-<case name>/NN-<case name>.ipynb``, with a copy of the
source notebook of assignment ``NN`` under ``solutions/`` beside it: that way one ``grade()`` run
grades dozens of variants of the same assignment, each restored from the right source.

The expected verdicts say what a good grader must say, not what the grader says today.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat

from bertlab.grading.platforms.linux import landlock

ROOT = Path(__file__).resolve().parents[1]

NUMPY = "01-numpy-bert"
EMBEDDINGS = "02-embeddings"
ATTENTION = "03-self-attention"
ADD_NORM = "04-attention-output"
FFN = "05-feed-forward"
MODEL = "06-bert-model"

# What a passing notebook's first message says ("[Task 5.1] BertIntermediate passed ...").
PASSED = r"passed"
# A message that tells the learner their notebook reached for the grader. "replac" is left out on
# purpose: every "not implemented yet" message says "Replace `# YOUR CODE HERE` ...".
TAMPER = r"(?i)tamper|the grader|grader's|rebind|rebound|redefin|overwrit|patch"
NOT_A_NOTEBOOK = r"(?i)not a (valid )?notebook|not .*json|cannot be read|unreadable"

# Grading runs. "limits" holds the cases that only end at the time or memory limit: they get a
# short timeout and a small memory limit, and a right notebook beside them to show that the
# others are still graded. Everything else, including os._exit, is graded in "main".
RUNS = ("main", "limits")


@dataclass(frozen=True)
class Case:
    """One bad (or deceptively right) submission and the verdict it must get.

    Attributes:
        name: kebab-case; the test id and, prefixed with the assignment number, the task folder.
        assignment: the course notebook the case stands for, e.g. ``"05-feed-forward"``: its
            source is the one restored and its points are the task's maximum.
        build: returns the submitted file: a notebook, or raw bytes for files that are not one.
        scores: the scores a good grader may give; one value wherever the score is determined.
        status: the statuses a good grader may report (one wherever it is determined).
        message: regex the task's first failure message must match (``re.search``); for a
            notebook that passes, its first message.
        must_fail: grade cell ids that must be reported as failed.
        forbid: regex the first failure message must NOT match (a wrong hint).
        run: which grading run the case belongs to (see ``RUNS``).
        file_name: the submitted file's name when it is not ``<folder>.ipynb``.
    """

    name: str
    assignment: str
    build: Callable[[], nbformat.NotebookNode | bytes]
    scores: tuple[float, ...]
    status: tuple[str, ...]
    message: str
    must_fail: tuple[str, ...] = ()
    forbid: str | None = None
    run: str = "main"
    file_name: str | None = None

    @property
    def folder(self) -> str:
        return f"{self.assignment[:2]}-{self.name}"

    @property
    def submitted_name(self) -> str:
        return self.file_name or f"{self.folder}.ipynb"

    @property
    def max_score(self) -> float:
        return max_points(self.assignment)

    @property
    def why(self) -> str:
        return (self.build.__doc__ or "").strip()


CASES: list[Case] = []


def case(
    name: str,
    assignment: str,
    *,
    scores,
    status,
    message: str,
    must_fail=(),
    forbid=None,
    run: str = "main",
    file_name: str | None = None,
):
    """Register the decorated builder as a case (its docstring says why the verdict is right)."""

    def register(build):
        scores_ = tuple(float(s) for s in (scores if isinstance(scores, (tuple, list, range)) else (scores,)))
        status_ = (status,) if isinstance(status, str) else tuple(status)
        CASES.append(Case(name, assignment, build, scores_, status_, message, tuple(must_fail), forbid, run, file_name))
        return build

    return register


# -- notebooks to start from, and edits ----------------------------------------------------------


def _read(kind: str, assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / kind / assignment / f"{assignment}.ipynb", as_version=4)


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def max_points(assignment: str) -> float:
    """The assignment's maximum, from its nbgrader source: what the learner cannot change."""
    return sum(
        float(c.metadata["nbgrader"].get("points", 0))
        for c in _read("solutions", assignment).cells
        if c.get("metadata", {}).get("nbgrader", {}).get("grade")
    )


def grade_ids(assignment: str, prefix: str = "test-") -> tuple[str, ...]:
    """The grade cell ids of ``assignment`` starting with ``prefix``, in notebook order."""
    cells = _read("solutions", assignment).cells
    ids = (_grade_id(c) for c in cells if c.get("metadata", {}).get("nbgrader", {}).get("grade"))
    return tuple(i for i in ids if i is not None and i.startswith(prefix))


def exercise(assignment: str) -> nbformat.NotebookNode:
    """The notebook as released to learners: stubs that raise NotImplementedError."""
    return _read("exercises", assignment)


def right(assignment: str) -> nbformat.NotebookNode:
    """The released notebook with every solution cell written as a learner who got it right would.

    The solution cells' code comes from the source, without nbgrader's ``### BEGIN/END SOLUTION``
    marker lines; grade cells stay as released (no hidden tests), as in a real submission.
    """
    source = {_grade_id(c): c.source for c in _read("solutions", assignment).cells if _grade_id(c)}
    nb = exercise(assignment)
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            lines = source[_grade_id(cell)].splitlines()
            cell.source = "\n".join(
                line for line in lines if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
            )
    return nb


def cell(nb, grade_id: str):
    """The one cell of ``nb`` with ``grade_id``."""
    found = [c for c in nb.cells if _grade_id(c) == grade_id]
    assert len(found) == 1, f"{len(found)} cells have grade_id {grade_id!r}"
    return found[0]


def replace(nb, grade_id: str, old: str, new: str, count: int = 1):
    """Replace ``old`` with ``new`` in one cell; ``old`` must occur exactly ``count`` times there,
    so that a change to the course's notebooks breaks the builder instead of silently building a
    right notebook."""
    target = cell(nb, grade_id)
    hits = target.source.count(old)
    assert hits == count, f"{old!r} occurs {hits} times in cell {grade_id!r}, expected {count}"
    target.source = target.source.replace(old, new)
    return nb


def insert_after(nb, grade_id: str, source: str, metadata: dict | None = None):
    """Add a code cell the learner wrote right after the cell ``grade_id``."""
    new = nbformat.v4.new_code_cell(source)
    if metadata:
        new.metadata["nbgrader"] = metadata
    nb.cells.insert(nb.cells.index(cell(nb, grade_id)) + 1, new)
    return nb


def _raw(notebook) -> bytes:
    return nbformat.writes(notebook).encode()


# Lines of the solutions the cases break.
BRANCH_DROPOUT_THEN_ADD = (
    "hidden_states = self.dropout(hidden_states)  # drops part of the update, never the residual\n"
    "        hidden_states = self.LayerNorm(hidden_states + input_tensor)  # add first, then normalise"
)
ADD_NORM_LINE = "hidden_states = self.LayerNorm(hidden_states + input_tensor)  # add first, then normalise"
GELU_CALL = "hidden_states = self.intermediate_act_fn(hidden_states)  # (B, T, I): the FFN's only non-linearity"
INTERMEDIATE_RETURN = GELU_CALL + "\n        return hidden_states"
RELU = ("self.intermediate_act_fn = nn.GELU()", "self.intermediate_act_fn = nn.ReLU()")
FFN_5_1 = grade_ids(FFN, "test-5-1")
FFN_5_2 = grade_ids(FFN, "test-5-2")
# Task 6.1's cells. 6.2 and 6.4 hold the learner's BertLayer but are judged with HF's in its place,
# so a wrong BertLayer costs these 3 points only.
LAYER_CELLS = grade_ids(MODEL, "test-6-1")
ATTENTION_CALL = "        attention_output, _ = self.attention(hidden_states, attention_mask, **kwargs)  # (B, T, H)"


def _relu_ffn():
    """Task 5 with ReLU instead of GELU in 5.1 (a known mistake, named by the grader) and 5.2 right."""
    return replace(right(FFN), "bert-intermediate", *RELU)


# -- the classes named in the issue ---------------------------------------------------------------


@case("right-feed-forward", FFN, scores=9, status="passed", message=PASSED)
def _right_feed_forward():
    """The reference solution as a learner writes it: full marks. Graded in the same run as the
    os._exit cases, it shows the other notebooks of a run are still graded."""
    return right(FFN)


@case(
    "dropout-on-residual-sum",
    FFN,
    scores=8,
    status="failed",
    message=r"(?is)dropout.*residual|residual.*dropout",
    must_fail=["test-5-2-gradients"],
)
def _dropout_on_residual_sum_ffn():
    """Task 5.2: ``LayerNorm(dropout(dense(x) + input_tensor))`` drops the residual too. Eval mode
    hides it; only the dropout-and-gradients cell (1 point) runs train mode, so 8/9."""
    return replace(
        right(FFN),
        "bert-output",
        BRANCH_DROPOUT_THEN_ADD,
        "hidden_states = self.LayerNorm(self.dropout(hidden_states + input_tensor))",
    )


@case(
    "dropout-on-residual-sum",
    ADD_NORM,
    scores=9,
    status="failed",
    message=r"(?is)dropout.*residual|residual.*dropout",
    must_fail=["test-4-1-gradients"],
)
def _dropout_on_residual_sum_self_output():
    """Task 4.1, the same mistake in BertSelfOutput: its train-mode cell loses its point. Task 4.2
    is judged with HF's BertSelfOutput in place of the learner's (a bug upstream never fails a
    later task), so it keeps its 5: 9/10."""
    return replace(
        right(ADD_NORM),
        "bert-self-output",
        BRANCH_DROPOUT_THEN_ADD,
        "hidden_states = self.LayerNorm(self.dropout(hidden_states + input_tensor))",
    )


@case("literal-sizes", FFN, scores=range(0, 9), status="failed", message=r"(?i)config|hard-?coded|literal")
def _literal_sizes():
    """Tasks 5.1 and 5.2 built from this model's numbers (384, 1536, eps 1e-12) instead of the
    config: right for the pretrained model only, so a grader that only ever passes that config
    cannot tell. It must not get full marks, and the message must say the config is ignored."""
    nb = right(FFN)
    replace(nb, "bert-intermediate", "nn.Linear(config.hidden_size, config.intermediate_size)", "nn.Linear(384, 1536)")
    replace(nb, "bert-output", "nn.Linear(config.intermediate_size, config.hidden_size)", "nn.Linear(1536, 384)")
    replace(
        nb, "bert-output", "nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)", "nn.LayerNorm(384, eps=1e-12)"
    )
    return nb


@case("literal-heads", ATTENTION, scores=range(3, 8), status="failed", message=r"(?i)config|hard-?coded|literal")
def _literal_heads():
    """Task 3.2 with 12 heads of size 32 and width 384 typed in. Task 3.1 (3 points) is untouched;
    3.2 must lose points, with a message saying the config is ignored."""
    nb = right(ATTENTION)
    replace(
        nb,
        "bert-self-attention",
        "self.num_attention_heads = config.num_attention_heads",
        "self.num_attention_heads = 12",
    )
    replace(
        nb,
        "bert-self-attention",
        "self.attention_head_size = config.hidden_size // config.num_attention_heads",
        "self.attention_head_size = 32  # 384 / 12",
    )
    replace(
        nb,
        "bert-self-attention",
        "nn.Linear(config.hidden_size, self.all_head_size)",
        "nn.Linear(384, self.all_head_size)",
        count=3,
    )
    return nb


HF_SELF_OUTPUT = "from transformers.models.bert.modeling_bert import BertSelfOutput as HFBertSelfOutput\n\n\n"
# Where a graded notebook cannot read transformers (Linux with Landlock), the cell importing it
# fails, its BertSelfOutput is never defined, and Task 4.2, whose BertAttention builds one, fails
# with it. Elsewhere the import works, the shortcut is refused in 4.1 alone and 4.2 keeps its 5.
TRANSFORMERS_UNREADABLE = (
    sys.platform.startswith("linux") and os.environ.get("BERTLAB_PORTABLE") != "1" and landlock.abi() >= 1
)
SCORE_WITH_HF_IMPORT = 0 if TRANSFORMERS_UNREADABLE else 5


@case(
    "subclass-hf-self-output",
    ADD_NORM,
    scores=SCORE_WITH_HF_IMPORT,
    status="failed",
    message=r"(?i)transformers|yourself|shortcut",
    must_fail=grade_ids(ADD_NORM, "test-4-1"),
)
def _subclass_hf_self_output():
    """Task 4.1 as a subclass of transformers' own BertSelfOutput: the task is to write it, so 4.1
    gets nothing. Task 4.2 is the learner's own BertAttention, judged with HF's parts in place of
    theirs, so it keeps its 5: 5/10, where the import works (``SCORE_WITH_HF_IMPORT``)."""
    nb = right(ADD_NORM)
    cell(nb, "bert-self-output").source = HF_SELF_OUTPUT + (
        "class BertSelfOutput(HFBertSelfOutput):\n"
        '    """The attention sub-layer\'s output, reused from transformers."""\n'
    )
    return nb


@case(
    "wrap-hf-self-output",
    ADD_NORM,
    scores=SCORE_WITH_HF_IMPORT,
    status="failed",
    message=r"(?i)transformers|yourself|shortcut",
    must_fail=grade_ids(ADD_NORM, "test-4-1"),
)
def _wrap_hf_self_output():
    """Task 4.1 with the learner's own attributes, but a forward that calls transformers'
    BertSelfOutput.forward on them: a wrapper is the same shortcut as a subclass. 4.1 gets
    nothing, 4.2 (judged with HF's parts) keeps its 5: 5/10, where the import works
    (``SCORE_WITH_HF_IMPORT``)."""
    nb = right(ADD_NORM)
    replace(
        nb, "bert-self-output", "class BertSelfOutput(nn.Module):", HF_SELF_OUTPUT + "class BertSelfOutput(nn.Module):"
    )
    replace(
        nb,
        "bert-self-output",
        BRANCH_DROPOUT_THEN_ADD,
        "hidden_states = HFBertSelfOutput.forward(self, hidden_states, input_tensor)",
    )
    return nb


# Hidden uses of transformers' BertIntermediate in Task 5.1: the profile hook is switched off first
# (spelled so the static scan misses it), so nothing in the learner's process sees the call. Only
# a process that cannot read transformers stops them; elsewhere they are a known limit (the
# honest-grading page), so they are cases only where reads are confined.
SWITCH_OFF_WATCH = 'getattr(sys, "setpro" + "file")(None)'
HIDDEN_HF_LATE_IMPORT = (
    "import importlib, sys\n"
    f"        {SWITCH_OFF_WATCH}\n"
    '        hf = importlib.import_module("transformers.models." + "bert.modeling_bert")\n'
    "        return hf.BertIntermediate.forward(self, hidden_states)"
)
HIDDEN_HF_BY_PATH = (
    "import importlib.util, sys\n"
    f"        {SWITCH_OFF_WATCH}\n"
    '        folder = importlib.util.find_spec("trans" + "formers").submodule_search_locations[0]\n'
    '        spec = importlib.util.spec_from_file_location("mine", folder + "/models/bert/modeling_bert.py")\n'
    "        hf = importlib.util.module_from_spec(spec)\n"
    "        spec.loader.exec_module(hf)\n"
    "        return hf.BertIntermediate.forward(self, hidden_states)"
)
HIDDEN_SCORE = max_points(FFN) - sum(
    float(c.metadata["nbgrader"].get("points", 0))
    for c in _read("solutions", FFN).cells
    if (_grade_id(c) or "").startswith("test-5-1")
)


def _hidden_hf_intermediate(body: str) -> nbformat.NotebookNode:
    return replace(
        right(FFN),
        "bert-intermediate",
        "hidden_states = self.dense(hidden_states)  # (B, T, I)\n        " + INTERMEDIATE_RETURN,
        body,
    )


if TRANSFORMERS_UNREADABLE:

    @case(
        "hidden-hf-late-import",
        FFN,
        scores=HIDDEN_SCORE,
        status="failed",
        message=r"transformers",
        must_fail=grade_ids(FFN, "test-5-1"),
    )
    def _hidden_hf_late_import():
        """Task 5.1's forward imports transformers' module late, by a name built at run time, with
        the watch switched off: the import is refused, so 5.1 gets nothing and 5.2 keeps its points."""
        return _hidden_hf_intermediate(HIDDEN_HF_LATE_IMPORT)

    @case(
        "hidden-hf-loaded-by-path",
        FFN,
        scores=HIDDEN_SCORE,
        status="failed",
        message=r"transformers",
        must_fail=grade_ids(FFN, "test-5-1"),
    )
    def _hidden_hf_loaded_by_path():
        """Task 5.1's forward loads modeling_bert.py by its file path under another module name, with
        the watch switched off: reading the file is refused, so 5.1 gets nothing."""
        return _hidden_hf_intermediate(HIDDEN_HF_BY_PATH)


@case("tamper-rebind-check", FFN, scores=0, status="failed", message=TAMPER)
def _tamper_rebind_check():
    """The released stubs plus a learner cell after the class that rebinds ``check`` to a no-op:
    under a plain autograde every grade cell would pass. It must score 0 and say why."""
    return insert_after(exercise(FFN), "bert-intermediate", "check = lambda *args, **kwargs: None\n")


@case("tamper-patch-check-function", FFN, scores=0, status="failed", message=TAMPER)
def _tamper_patch_check_function():
    """The stubs plus a cell that patches ``bertlab.checks.check`` itself (its code object), so the
    name the setup cell imported does nothing any more: 0 and told why."""
    return insert_after(
        exercise(FFN),
        "bert-intermediate",
        "import bertlab.checks\n\nbertlab.checks.check.__code__ = (lambda *args, **kwargs: None).__code__\n",
    )


@case("tamper-patch-tasks", FFN, scores=0, status="failed", message=TAMPER)
def _tamper_patch_tasks():
    """The stubs plus a cell that replaces every task's ``run`` in ``bertlab.checks.TASKS`` with one
    that reports success: 0 and told why."""
    return insert_after(
        exercise(FFN),
        "bert-intermediate",
        "import bertlab.checks\n\n"
        "for task in bertlab.checks.TASKS.values():\n"
        '    task.run = lambda *args, **kwargs: "passed"\n',
    )


@case("tamper-in-cell-marked-locked", FFN, scores=0, status="failed", message=TAMPER)
def _tamper_in_cell_marked_locked():
    """The stubs plus a new cell that rebinds ``check`` and claims, in its own metadata, to be a
    locked instructor cell. Only the source says which cells are locked: the learner wrote this
    one, so it is tampering like any other: 0 and told why."""
    meta = {
        "grade": False,
        "grade_id": "setup-2",
        "locked": True,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }
    return insert_after(exercise(FFN), "setup", "check = lambda *args, **kwargs: None\n", metadata=meta)


@case(
    "in-place-residual",
    FFN,
    scores=4,
    status="failed",
    message=r"(?is)input_tensor.*in place|in place.*input_tensor",
    must_fail=FFN_5_2,
    forbid=r"known mistake",
)
def _in_place_residual():
    """Task 5.2 adds the residual with ``input_tensor += ...``: the values are right, but the
    caller's tensor is destroyed. The first forward call (in the names-and-shapes cell) fails,
    naming ``input_tensor``, never a known mistake it is not: 5.2 gets 0, so 4/9."""
    return replace(
        right(FFN),
        "bert-output",
        ADD_NORM_LINE,
        "input_tensor += hidden_states  # saves a tensor\n        hidden_states = self.LayerNorm(input_tensor)",
    )


@case(
    "second-residual-from-layer-input",
    MODEL,
    scores=10,
    status="failed",
    message=r"(?is)\[Task 6\.1\].*differ",
    must_fail=LAYER_CELLS,
)
def _second_residual_from_layer_input():
    """Task 6.1 adds the layer's input as the second residual instead of the attention output.
    Both 6.1 cells fail (3 points); BertEncoder (6.2) and BertModel (6.4) are judged with HF's
    BertLayer in place of the learner's, so nothing else is lost: 10/13."""
    return replace(
        right(MODEL),
        "bert-layer",
        "self.output(intermediate_output, attention_output)",
        "self.output(intermediate_output, hidden_states)",
    )


@case(
    "ffn-fed-layer-input",
    MODEL,
    scores=10,
    status="failed",
    message=r"(?is)\[Task 6\.1\].*differ",
    must_fail=LAYER_CELLS,
)
def _ffn_fed_layer_input():
    """Task 6.1 feeds the feed-forward network the layer's input instead of the attention output:
    10/13, as for the wrong residual."""
    return replace(
        right(MODEL), "bert-layer", "self.intermediate(attention_output)", "self.intermediate(hidden_states)"
    )


@case("ffn-twice", MODEL, scores=10, status="failed", message=r"(?is)\[Task 6\.1\].*differ", must_fail=LAYER_CELLS)
def _ffn_twice():
    """Task 6.1 applies the feed-forward block twice: 10/13."""
    return replace(
        right(MODEL),
        "bert-layer",
        "        return layer_output",
        "        layer_output = self.output(self.intermediate(layer_output), layer_output)  # once more\n"
        "        return layer_output",
    )


# The first Add & Norm done by hand with the attention output's own parts, as most published
# student layers write it: the grader supplies HF's BertAttention, and its children are its parts.
CHILDREN_ADD_NORM = (
    "        context = self.attention.self(hidden_states, attention_mask)[0]  # (B, T, H)\n"
    "        out = self.attention.output\n"
    "        attention_output = out.LayerNorm(out.dropout(out.dense(context)){residual})"
)


@case("layer-calls-attention-children", MODEL, scores=13, status="passed", message=PASSED)
def _layer_calls_attention_children():
    """Task 6.1 calls ``self.attention.self`` and then ``attention.output``'s dense, dropout and
    LayerNorm itself: the same numbers as HF's layer, so full marks. It was refused as a shortcut:
    the parts the grader supplies were allowed, their children not."""
    return replace(right(MODEL), "bert-layer", ATTENTION_CALL, CHILDREN_ADD_NORM.format(residual=" + hidden_states"))


@case(
    "layer-calls-attention-children-no-residual",
    MODEL,
    scores=10,
    status="failed",
    message=r"(?is)\[Task 6\.1\].*differ",
    must_fail=LAYER_CELLS,
    forbid=r"transformers",
)
def _layer_calls_attention_children_no_residual():
    """The same hand-written first Add & Norm without its residual: told its values differ, not
    that it uses transformers: 10/13."""
    return replace(right(MODEL), "bert-layer", ATTENTION_CALL, CHILDREN_ADD_NORM.format(residual=""))


# The feed-forward block on chunks of four tokens, as HF's apply_chunking_to_forward runs it when
# chunk_size_feed_forward is set: the dropout checks' fixed masks must not depend on the split.
CHUNKED_FFN = (
    "        chunks = [self.output(self.intermediate(chunk), chunk)  # (B, 4, H) each\n"
    "                  for chunk in attention_output.split(4, dim=1)]\n"
    "        layer_output = torch.cat(chunks, dim=1)  # (B, T, H)"
)


@case("layer-ffn-in-chunks", MODEL, scores=13, status="passed", message=PASSED)
def _layer_ffn_in_chunks():
    """Task 6.1's feed-forward block run on chunks of tokens: HF's numbers, so full marks. It
    failed the train-mode dropout check, whose masks assumed one dropout call on the whole tensor."""
    nb = replace(
        right(MODEL),
        "bert-layer",
        "        intermediate_output = self.intermediate(attention_output)  # (B, T, I)\n",
        "",
    )
    return replace(
        nb,
        "bert-layer",
        "        layer_output = self.output(intermediate_output, attention_output)  # (B, T, H)",
        CHUNKED_FFN,
    )


# BertSelfAttention one head at a time, with its own dropout module on each head's probabilities.
ATTENTION_BODY = """        context_layer, attention_probs = eager_attention_forward(
            self,
            query_layer,
            key_layer,
            value_layer,
            attention_mask,
            scaling=self.scaling,
            dropout=self.dropout.p if self.training else 0.0,
        )
        context_layer = context_layer.reshape(B, T, self.all_head_size)  # (B, T, A, d) -> (B, T, H)"""
PER_HEAD_ATTENTION = """        contexts, probs = [], []
        for h in range(self.num_attention_heads):  # one head at a time: (B, T, d) slices
            scores = query_layer[:, h] @ key_layer[:, h].transpose(-1, -2) * self.scaling  # (B, T, T)
            if attention_mask is not None:
                scores = scores + attention_mask[:, 0]
            p = self.dropout(torch.softmax(scores, dim=-1))
            probs.append(p)
            contexts.append(p @ value_layer[:, h])  # (B, T, d)
        context_layer, attention_probs = torch.cat(contexts, dim=-1), torch.stack(probs, dim=1)"""


@case("self-attention-one-head-at-a-time", ATTENTION, scores=8, status="passed", message=PASSED)
def _self_attention_one_head_at_a_time():
    """Task 3.2 computed head by head, dropout applied to each head's probabilities: HF's numbers,
    so full marks. It failed the train-mode dropout check (masks drawn per call)."""
    return replace(right(ATTENTION), "bert-self-attention", ATTENTION_BODY, PER_HEAD_ATTENTION)


# BertSelfAttention in other memory layouts, as published implementations write it.
SEQUENCE_FIRST_ATTENTION = """        q = query_layer.permute(2, 0, 1, 3)  # (T, B, heads, d): sequence first
        k = key_layer.permute(2, 0, 1, 3)
        v = value_layer.permute(2, 0, 1, 3)
        scores = torch.einsum("ibnd,jbnd->ijbn", q, k) * self.scaling  # (T_q, T_k, B, heads)
        if attention_mask is not None:
            scores = scores + attention_mask.permute(2, 3, 0, 1)  # (B, 1, T|1, T) -> (T|1, T, B, 1)
        probs = self.dropout(torch.softmax(scores, dim=1))  # over the keys, axis 1 here
        context = torch.einsum("ijbn,jbnd->ibnd", probs, v)  # (T, B, heads, d)
        context_layer = context.permute(1, 0, 2, 3).reshape(B, T, self.all_head_size)
        attention_probs = probs.permute(2, 3, 0, 1)  # (B, heads, T_q, T_k)"""
MERGED_HEADS_ATTENTION = """        n = self.num_attention_heads
        q = query_layer.reshape(B * n, T, -1)  # (B * heads, T, d): batch and heads merged
        k = key_layer.reshape(B * n, T, -1)
        v = value_layer.reshape(B * n, T, -1)
        scores = torch.bmm(q, k.transpose(1, 2)) * self.scaling  # (B * heads, T, T)
        if attention_mask is not None:
            scores = (scores.view(B, n, T, T) + attention_mask).view(B * n, T, T)
        probs = nn.functional.dropout(torch.softmax(scores, dim=-1), self.dropout.p, self.training)
        context_layer = torch.bmm(probs, v).view(B, n, T, -1).transpose(1, 2).reshape(B, T, self.all_head_size)
        attention_probs = probs.view(B, n, T, T)"""
# Dropout with one mask shared over rows ("locked"), as some frameworks' broadcast dropout draws it.
LOCKED_ATTENTION = """        context_layer, attention_probs = eager_attention_forward(
            self, query_layer, key_layer, value_layer, attention_mask, scaling=self.scaling, dropout=0.0
        )
        # one mask over (T_q, T_k), shared by every sentence and head
        keep = self.dropout(torch.ones_like(attention_probs[:1, :1]))  # (1, 1, T, T)
        attention_probs = attention_probs * keep
        context_layer = (attention_probs @ value_layer).transpose(1, 2).reshape(B, T, self.all_head_size)"""


@case("self-attention-sequence-first", ATTENTION, scores=8, status="passed", message=PASSED)
def _self_attention_sequence_first():
    """Task 3.2 computed sequence-first, (T, T, B, heads), with einsum, as some published
    implementations do; element-wise dropout of the same probabilities: HF's dropout in another
    layout, so full marks. The dropout check tied its masks to the tensor's shape and refused it."""
    return replace(right(ATTENTION), "bert-self-attention", ATTENTION_BODY, SEQUENCE_FIRST_ATTENTION)


@case("self-attention-merged-heads", ATTENTION, scores=8, status="passed", message=PASSED)
def _self_attention_merged_heads():
    """Task 3.2 with batch and heads merged, (B * heads, T, T), and bmm, dropout by
    nn.functional.dropout on the merged probabilities: HF's numbers and HF's dropout, so full marks."""
    return replace(right(ATTENTION), "bert-self-attention", ATTENTION_BODY, MERGED_HEADS_ATTENTION)


@case(
    "locked-attention-dropout",
    ATTENTION,
    scores=7,
    status="failed",
    message=r"(?is)\[Task 3\.2\].*train mode",
    must_fail=("test-3-2-gradients",),
)
def _locked_attention_dropout():
    """Task 3.2's dropout draws one (T, T) mask and shares it with every sentence and head: a
    broadcast dropout, not HF's element-wise one. It passed, because the dropout check's masks
    were the same for every row. 7/8."""
    return replace(right(ATTENTION), "bert-self-attention", ATTENTION_BODY, LOCKED_ATTENTION)


@case(
    "locked-output-dropout",
    ADD_NORM,
    scores=9,
    status="failed",
    message=r"(?is)\[Task 4\.1\].*train mode.*shared",
    must_fail=("test-4-1-gradients",),
)
def _locked_output_dropout():
    """Task 4.1's dropout draws one mask per sentence over the features and shares it with every
    position (variational, "locked" dropout), with nn.functional.dropout on a slice of ones. It
    passed, because the dropout check's masks were the same for every row. 9/10: the 4.1 dropout
    cell fails (Task 4.2 is checked on HF's parts)."""
    return replace(
        right(ADD_NORM),
        "bert-self-output",
        "        hidden_states = self.dropout(hidden_states)  # drops part of the update, never the residual",
        "        keep = nn.functional.dropout(torch.ones_like(hidden_states[:, :1]), self.dropout.p, self.training)\n"
        "        hidden_states = hidden_states * keep  # (B, 1, H): one mask per sentence, for every token",
    )


@case(
    "dropout-in-place-on-weights",
    ATTENTION,
    scores=6,
    status="failed",
    message=r"(?is)\[Task 3\.1\].*backward raises.*in place",
    must_fail=("test-3-1-masks", "test-3-2-gradients"),
)
def _dropout_in_place_on_weights():
    """Task 3.1's dropout written in place on the softmax's output: HF's values in eval mode and
    under no_grad, but in training the softmax's backward finds its output changed and raises.
    It passed, because no check ran backward in train mode. The 3.1 and 3.2 cells with the
    gradients fail: 6/8."""
    return replace(
        right(ATTENTION),
        "eager-attention-forward",
        "    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)",
        "    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training, inplace=True)",
    )


@case("self-attention-keeps-probabilities", ATTENTION, scores=8, status="passed", message=PASSED)
def _self_attention_keeps_probabilities():
    """Task 3.2 keeps its last attention probabilities in ``self.attn`` "for visualisation", as
    published implementations do: nothing reads them and every answer is HF's, so full marks. The
    calls check took a point for any attribute changed from one call to the next."""
    return replace(
        right(ATTENTION),
        "bert-self-attention",
        "        return context_layer, attention_probs",
        "        self.attn = attention_probs.detach()  # (B, heads, T, T), for a plot later\n"
        "        return context_layer, attention_probs",
    )


@case(
    "layernorm-stats-detached",
    ADD_NORM,
    scores=9,
    status="failed",
    message=r"(?is)\[Task 4\.1\].*gradient",
    must_fail=("test-4-1-gradients",),
)
def _layernorm_stats_detached():
    """Task 4.1's LayerNorm written by hand with its mean and variance detached: every value is
    HF's, only the gradients differ. The last 4.1 cell (dropout and gradients) fails: 9/10."""
    return replace(
        right(ADD_NORM),
        "bert-self-output",
        "        hidden_states = self.LayerNorm(hidden_states + input_tensor)  # add first, then normalise",
        "        x = hidden_states + input_tensor  # (B, T, H)\n"
        "        mean = x.mean(-1, keepdim=True).detach()  # statistics as constants\n"
        "        var = x.var(-1, keepdim=True, unbiased=False).detach()\n"
        "        hidden_states = (x - mean) / torch.sqrt(var + self.LayerNorm.eps) * self.LayerNorm.weight "
        "+ self.LayerNorm.bias",
    )


@case(
    "dropout-probability-typed",
    ADD_NORM,
    scores=9,
    status="failed",
    message=r"(?is)\[Task 4\.1\].*another config",
    must_fail=("test-4-1-gradients",),
)
def _dropout_probability_typed():
    """Task 4.1's dropout written with BERT's 0.1 typed in: the pretrained model (0.1 everywhere)
    cannot tell it from config.hidden_dropout_prob; another config can. 9/10."""
    return replace(
        right(ADD_NORM),
        "bert-self-output",
        "        hidden_states = self.dropout(hidden_states)  # drops part of the update, never the residual",
        "        hidden_states = nn.functional.dropout(hidden_states, 0.1, self.training)  # BERT's 0.1",
    )


@case(
    "mask-cached-by-shape",
    ATTENTION,
    scores=7,
    status="failed",
    message=r"(?is)\[Task 3\.2\].*second call",
    must_fail=("test-3-2-gradients",),
)
def _mask_cached_by_shape():
    """Task 3.2 keeps the first mask it sees for each mask shape: right on every single call, wrong
    when called again with another mask of the same shape. The full 3.2 check fails: 7/8."""
    return replace(
        right(ATTENTION),
        "bert-self-attention",
        "        B, T, _ = hidden_states.shape\n",
        "        B, T, _ = hidden_states.shape\n"
        "        if attention_mask is not None:  # one batch shape, one mask\n"
        "            attention_mask = self.__dict__.setdefault('masks', {}).setdefault(\n"
        "                tuple(attention_mask.shape), attention_mask)\n",
    )


ATTENTION_3_1 = grade_ids(ATTENTION, "test-3-1")
ATTENTION_3_2 = grade_ids(ATTENTION, "test-3-2")


@case(
    "mask-over-queries",
    ATTENTION,
    scores=1,
    status="failed",
    message=r"(?s)\[Task 3\.1\].*`mask-over-queries`",
    must_fail=(*ATTENTION_3_1, "test-3-2-values"),
)
def _mask_over_queries():
    """Task 3.1 adds the mask with its last two axes swapped, so it masks the padded queries' rows
    and every query attends to the padding keys. Both 3.1 cells fail and name the mistake; 3.2
    calls this function, so only its names-and-shapes cell stands: 1/8."""
    return replace(
        right(ATTENTION),
        "eager-attention-forward",
        "scores = scores + attention_mask",
        "scores = scores + attention_mask.transpose(-1, -2)  # one value per token",
    )


@case(
    "attention-probs-none",
    ATTENTION,
    scores=3,
    status="failed",
    message=r"(?s)\[Task 3\.2\].*returns None for `attention_probs`.*passed every check of this cell",
    must_fail=ATTENTION_3_2,
)
def _attention_probs_none():
    """Task 3.2 returns None for the attention probabilities, its context right. Every 3.2 cell
    checks the context (and passes it) and then fails for the probabilities, saying so: 3/8."""
    return replace(
        right(ATTENTION),
        "bert-self-attention",
        "        return context_layer, attention_probs",
        "        return context_layer, None  # nobody reads the probabilities",
    )


@case(
    "query-scaled-in-init",
    ATTENTION,
    scores=4,
    status="failed",
    message=r"(?s)\[Task 3\.2\].*`no-scaling`.*scaling=1\.0.*folded into `query`'s weights",
    forbid=r"fix 3\.1 first",
    must_fail=ATTENTION_3_2[1:],
)
def _query_scaled_in_init():
    """Task 3.2 folds the scaling into `query`'s weights in __init__ and passes scaling=1.0: the
    grader loads the pretrained weights after __init__, so the scaling is lost. Its 3.1 is right,
    so the message must not send the learner there. 3.1 and the names cell stand: 4/8."""
    nb = replace(
        right(ATTENTION),
        "bert-self-attention",
        "        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)\n",
        "        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)\n"
        "        with torch.no_grad():  # scaled once here, not on every call\n"
        "            self.query.weight *= self.scaling\n"
        "            self.query.bias *= self.scaling\n",
    )
    return replace(nb, "bert-self-attention", "scaling=self.scaling,", "scaling=1.0,")


@case(
    "no-token-type-buffer",
    EMBEDDINGS,
    scores=4,
    status="failed",
    message=r"`self\.token_type_ids` is missing",
    must_fail=("test-2-1-buffers",),
)
def _no_token_type_buffer():
    """Task 2.1 without the `token_type_ids` buffer (its forward still reads it when no token types
    are given). Only the buffers cell fails; every other check passes token types: 4/5."""
    return replace(
        right(EMBEDDINGS),
        "bert-embeddings",
        '        self.register_buffer("token_type_ids", torch.zeros_like(position_ids), persistent=False)\n',
        "",
    )


@case(
    "encoder-one-layer-repeated",
    MODEL,
    scores=max_points(MODEL) - 3,
    status="failed",
    message=r"the 6 entries of `self\.layer` are 1 module object",
    must_fail=grade_ids(MODEL, "test-6-2"),
)
def _encoder_one_layer_repeated():
    """Task 6.2 builds its ModuleList as [layer] * n: six entries, one object, one set of weights.
    Both 6.2 cells fail (3 points), saying the entries are one object; the rest stands."""
    return replace(
        right(MODEL),
        "bert-encoder",
        "nn.ModuleList([BertLayer(config, layer_idx=i) for i in range(config.num_hidden_layers)])",
        "nn.ModuleList([BertLayer(config)] * config.num_hidden_layers)",
    )


@case("log-sum-exp-softmax", NUMPY, scores=13, status="passed", message=PASSED)
def _log_sum_exp_softmax_numpy():
    """Task 1.1 as exp(x - logsumexp(x)), logsumexp shifted by the row maximum: another stable
    softmax, right to float precision. It must get full marks, never a mistake's name."""
    return replace(
        right(NUMPY),
        "softmax",
        "    shifted = x - np.max(x, axis=axis, keepdims=True)  # each row's largest entry becomes 0, so exp <= 1\n"
        "    exps = np.exp(shifted)\n"
        "    return exps / np.sum(exps, axis=axis, keepdims=True)",
        "    m = np.max(x, axis=axis, keepdims=True)\n"
        "    log_sum_exp = m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))\n"
        "    return np.exp(x - log_sum_exp)",
    )


@case("log-sum-exp-softmax", ATTENTION, scores=8, status="passed", message=PASSED)
def _log_sum_exp_softmax_attention():
    """Task 3.1 with the attention weights as exp(scores - logsumexp(scores)): right, full marks."""
    return replace(
        right(ATTENTION),
        "eager-attention-forward",
        "attn_weights = torch.softmax(scores, dim=-1)",
        "attn_weights = torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))",
    )


@case("crash-on-inputs-embeds-only", EMBEDDINGS, scores=(1, 2, 3, 4), status="failed", message=r"inputs_embeds")
def _crash_on_inputs_embeds_only():
    """Task 2.1 reads the shape from ``input_ids``, so a call with ``inputs_embeds`` alone (as the
    docstring allows, and as HF's BertModel makes) crashes. The names cell stands (1 point); the
    cell that calls it that way must fail, naming ``inputs_embeds``."""
    return replace(right(EMBEDDINGS), "bert-embeddings", "B, T, _ = inputs_embeds.shape", "B, T = input_ids.shape")


@case(
    "padding-idx-typed-zero",
    EMBEDDINGS,
    scores=4,
    status="failed",
    message=r"\[PAD\] rows only.*HF keeps row 1",
    must_fail=("test-2-1-gradients",),
)
def _padding_idx_typed_zero():
    """Task 2.1 with ``padding_idx=0``, the pretrained model's [PAD] id typed in: under the pretrained
    config every output and gradient is HF's; under another config ([PAD] = 1) row 0 of the word
    table gets no gradient and row 1 does. The arguments check is in the gradients cell: 4/5."""
    return replace(right(EMBEDDINGS), "bert-embeddings", "padding_idx=config.pad_token_id", "padding_idx=0")


# -- a names check that blocks nothing: its own cell fails, the later cells are judged on their own --


@case(
    "padding-idx-missing",
    EMBEDDINGS,
    scores=3,
    status="failed",
    message=r"padding_idx=None, expected config\.pad_token_id",
    must_fail=("test-2-1-names", "test-2-1-gradients"),
)
def _padding_idx_missing():
    """Task 2.1 with no ``padding_idx``: the module loads the pretrained weights and every output is
    HF's, but the [PAD] row gets a gradient. The names cell says so, the values, batches and
    buffers cells pass on their own, and the gradients cell fails on the [PAD] row's gradient: 3/5."""
    return replace(right(EMBEDDINGS), "bert-embeddings", ", padding_idx=config.pad_token_id)", ")")


@case(
    "layernorm-eps-default-self-output",
    ADD_NORM,
    scores=5,
    status="failed",
    message=r"`self\.LayerNorm\.eps` is 1e-05, expected config\.layer_norm_eps = 1e-12",
    must_fail=grade_ids(ADD_NORM, "test-4-1"),
)
def _layernorm_eps_default_self_output():
    """Task 4.1's LayerNorm with torch's default eps: the weights load, so the names check blocks
    nothing, but that eps moves the outputs by 4.6e-4, so each later 4.1 cell fails on its own
    values: a check that goes on past the names check still sees the mistake. 4.2 (judged with
    HF's parts) keeps its 5: 5/10."""
    return replace(
        right(ADD_NORM),
        "bert-self-output",
        "nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)",
        "nn.LayerNorm(config.hidden_size)",
    )


@case(
    "activation-not-an-attribute",
    FFN,
    scores=8,
    status="failed",
    message=r"`self\.intermediate_act_fn` is missing",
    must_fail=("test-5-1-names",),
)
def _activation_not_an_attribute():
    """Task 5.1 calls the exact GELU in forward instead of keeping it in ``intermediate_act_fn``:
    right outputs and gradients, HF's layout missed. The names cell fails; 5.1's other cells and
    5.2 pass: 8/9."""
    nb = replace(right(FFN), "bert-intermediate", "        self.intermediate_act_fn = nn.GELU()\n", "")
    return replace(nb, "bert-intermediate", GELU_CALL, "hidden_states = nn.functional.gelu(hidden_states)")


@case(
    "embeddings-layernorm-missing",
    EMBEDDINGS,
    scores=0,
    status="failed",
    message=r"missing: LayerNorm\.bias, LayerNorm\.weight",
)
def _embeddings_layernorm_missing():
    """Task 2.1 normalises with ``F.layer_norm`` and no ``self.LayerNorm``: the pretrained weights
    cannot load, so no check can judge the module and every cell gets nothing: 0/5."""
    nb = replace(
        right(EMBEDDINGS),
        "bert-embeddings",
        "        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)\n",
        "        self.eps = config.layer_norm_eps\n",
    )
    return replace(
        nb,
        "bert-embeddings",
        "self.LayerNorm(embeddings)",
        "nn.functional.layer_norm(embeddings, embeddings.shape[-1:], eps=self.eps)",
    )


@case(
    "scaling-argument-ignored",
    ATTENTION,
    scores=7,
    status="failed",
    message=r"called with scaling=0\.3",
    must_fail=("test-3-1-masks",),
)
def _scaling_argument_ignored():
    """Task 3.1 always scales by the head size's 1/sqrt(d), whatever ``scaling`` says. HF's
    BertSelfAttention passes exactly that, so only a call with another scaling shows it: the cell
    of the full Task 3.1 check (1 point) fails, Task 3.2 (which passes 1/sqrt(d)) stands: 7/8."""
    return replace(
        right(ATTENTION),
        "eager-attention-forward",
        "    if scaling is None:\n        scaling = query.shape[-1] ** -0.5\n",
        "    scaling = query.shape[-1] ** -0.5\n",
    )


@case(
    "model-default-types-from-ids",
    MODEL,
    scores=max_points(MODEL) - 1,
    status="failed",
    message=r"(?s)raised.*inputs_embeds",
    must_fail=("test-6-4-sentences",),
)
def _model_default_types_from_ids():
    """Task 6.4 builds the default token types with ``zeros_like(input_ids)``, which raises when
    the caller gives ``inputs_embeds`` instead. Only the full Task 6.4 check calls it so: 12/13."""
    return replace(
        right(MODEL),
        "bert-model",
        "        embedding_output = self.embeddings(",
        "        if token_type_ids is None:\n"
        "            token_type_ids = torch.zeros_like(input_ids)\n"
        "        embedding_output = self.embeddings(",
    )


@case(
    "gelu-returns-float64",
    NUMPY,
    scores=range(6, 12),
    status="failed",
    message=r"(?i)float64|dtype",
    must_fail=["test-1-3-values", "test-1-3-edge-cases"],
)
def _gelu_returns_float64():
    """Task 1.3 with np.vectorize(math.erf) and no cast back: it gives float64, so float32 in comes
    out float64, against the docstring ("of the same dtype"). Both 1.3 cells fail (2 points); 1.5,
    which calls this gelu, may lose its points too."""
    return replace(right(NUMPY), "gelu", "erf(x / math.sqrt(2.0))", "np.vectorize(math.erf)(x / math.sqrt(2.0))")


# -- errors while the notebook runs ---------------------------------------------------------------


@case("syntax-error", FFN, scores=5, status="failed", message=r"(?i)syntax", must_fail=FFN_5_1)
def _syntax_error():
    """A missing parenthesis in the Task 5.1 class cell: the class never exists, its 4 points are
    lost, 5.2 (5 points) is graded as usual."""
    return replace(
        right(FFN),
        "bert-intermediate",
        "self.dense(hidden_states)  # (B, T, I)",
        "self.dense(hidden_states  # (B, T, I)",
    )


@case("import-error", FFN, scores=5, status="failed", message=r"GeLU|ImportError|cannot import", must_fail=FFN_5_1)
def _import_error():
    """The Task 5.1 class cell starts with an import that fails: 5/9, and the message names it."""
    nb = right(FFN)
    target = cell(nb, "bert-intermediate")
    target.source = "from torch.nn import GeLU  # the class is spelled GELU\n\n\n" + target.source
    return nb


@case("exception-in-init", FFN, scores=4, status="failed", message=r"hiden_size", must_fail=FFN_5_2)
def _exception_in_init():
    """A typo in BertOutput.__init__ raises AttributeError on the config: Task 5.2 gets 0, 4/9."""
    return replace(
        right(FFN),
        "bert-output",
        "nn.Linear(config.intermediate_size, config.hidden_size)",
        "nn.Linear(config.intermediate_size, config.hiden_size)",
    )


@case(
    "nan-output",
    FFN,
    scores=5,
    status="failed",
    message=r"(?i)\bnan\b",
    must_fail=["test-5-2-values", "test-5-2-batches", "test-5-2-gradients"],
)
def _nan_output():
    """Task 5.2 returns NaN (standing for any 0/0): the right shape (names-and-shapes cell, 1
    point), every value wrong: 5/9, and the message says NaN."""
    return replace(
        right(FFN),
        "bert-output",
        ADD_NORM_LINE,
        ADD_NORM_LINE + '\n        hidden_states = hidden_states * float("nan")',
    )


@case(
    "inf-output",
    FFN,
    scores=6,
    status="failed",
    message=r"(?i)\binf\b",
    must_fail=["test-5-1-values", "test-5-1-batches"],
)
def _inf_output():
    """Task 5.1 returns inf wherever the activation exceeds 1: 6/9, and the message says inf."""
    return replace(
        right(FFN),
        "bert-intermediate",
        INTERMEDIATE_RETURN,
        GELU_CALL + '\n        return hidden_states.masked_fill(hidden_states > 1.0, float("inf"))',
    )


@case(
    "float64-output",
    FFN,
    scores=(5, 6),
    status="failed",
    message=r"(?i)float64|dtype|double",
    must_fail=["test-5-1-values", "test-5-1-batches"],
)
def _float64_output():
    """Task 5.1 returns float64: the numbers are right but HF's module returns float32, and
    everything downstream would be upcast. Whether the names-and-shapes cell or the values cell
    catches it, the message must name the dtype: 5 or 6 of 9."""
    return replace(
        right(FFN), "bert-intermediate", INTERMEDIATE_RETURN, GELU_CALL + "\n        return hidden_states.double()"
    )


@case(
    "output-on-another-device",
    FFN,
    scores=(5, 6),
    status="failed",
    message=r"(?i)device",
    must_fail=["test-5-1-values", "test-5-1-batches"],
)
def _output_on_another_device():
    """Task 5.1 returns its output on another device than its input (the meta device stands for a
    GPU on this CPU-only machine): a failure that says "device", not an error of the grader."""
    return replace(
        right(FFN), "bert-intermediate", INTERMEDIATE_RETURN, GELU_CALL + '\n        return hidden_states.to("meta")'
    )


@case("tuple-instead-of-tensor", FFN, scores=5, status="failed", message=r"(?i)tuple", must_fail=FFN_5_1)
def _tuple_instead_of_tensor():
    """Task 5.1 returns ``(hidden_states,)``, as transformers 4 layers did: 5.1 gets 0, 5/9."""
    return replace(
        right(FFN), "bert-intermediate", INTERMEDIATE_RETURN, GELU_CALL + "\n        return (hidden_states,)"
    )


@case(
    "tensor-instead-of-tuple",
    ADD_NORM,
    scores=5,
    status="failed",
    message=r"(?i)tuple",
    must_fail=grade_ids(ADD_NORM, "test-4-2"),
)
def _tensor_instead_of_tuple():
    """Task 4.2 returns the attention output alone, without the attention weights: 4.2 gets 0, 5/10."""
    return replace(
        right(ADD_NORM), "bert-attention", "return attention_output, attn_weights", "return attention_output"
    )


GLOBAL_STATE = {
    "default-dtype": "torch.set_default_dtype(torch.float64)  # more precision for my experiments\n",
    "grad-mode": "torch.set_grad_enabled(False)  # my experiments need no gradients\n",
    "seed": "torch.manual_seed(1234)  # reproducible experiments\n",
    "thread-count": "torch.set_num_threads(1)\n",
}


def _global_state(change: str):
    def build():
        return insert_after(right(FFN), "bert-intermediate", GLOBAL_STATE[change])

    build.__doc__ = (
        f"Right code plus a learner cell, before every grade cell, that changes torch's global "
        f"{change.replace('-', ' ')}. The grader's inputs and comparisons must not depend on it: 9/9."
    )
    return build


for _change in GLOBAL_STATE:
    case(f"global-{_change}", FFN, scores=9, status="passed", message=PASSED)(_global_state(_change))


@case("grad-disabled-in-forward", FFN, scores=8, status="failed", message=r"(?i)grad", must_fail=["test-5-2-gradients"])
def _grad_disabled_in_forward():
    """Task 5.2's forward switches gradients off globally: values are right, but no gradient
    reaches the weights, so only the gradients cell fails: 8/9."""
    return replace(
        right(FFN),
        "bert-output",
        "        hidden_states = self.dense(hidden_states)",
        "        torch.set_grad_enabled(False)  # faster\n        hidden_states = self.dense(hidden_states)",
    )


@case(
    "default-dtype-set-in-init", FFN, scores=4, status="failed", message=r"(?i)dtype|double|float64", must_fail=FFN_5_2
)
def _default_dtype_set_in_init():
    """BertOutput.__init__ sets the default dtype to float64 before creating its layers: its
    weights are float64 and the float32 input cannot go through them. 5.2 gets 0: 4/9."""
    return replace(
        right(FFN),
        "bert-output",
        "        self.dense = nn.Linear(config.intermediate_size",
        "        torch.set_default_dtype(torch.float64)\n        self.dense = nn.Linear(config.intermediate_size",
    )


@case("megabytes-of-printing", FFN, scores=9, status="passed", message=PASSED)
def _megabytes_of_printing():
    """Right code plus a cell that prints 20 MB to stdout and 10 MB to stderr: still 9/9, and no
    message holds the printout."""
    return insert_after(
        right(FFN),
        "bert-intermediate",
        'import sys\n\nprint("=" * 20_000_000)\nsys.stderr.write("warning\\n" * 1_250_000)\n',
    )


@case("printing-in-forward", FFN, scores=9, status="passed", message=PASSED)
def _printing_in_forward():
    """Right code whose forward prints 100 kB on every call, while the grade cells call it: 9/9."""
    return replace(
        right(FFN),
        "bert-intermediate",
        "        hidden_states = self.dense(hidden_states)  # (B, T, I)",
        '        print("debug", "-" * 100_000)\n        hidden_states = self.dense(hidden_states)  # (B, T, I)',
    )


@case("sys-exit-in-forward", FFN, scores=5, status="failed", message=r"(?i)exit", must_fail=FFN_5_1)
def _sys_exit_in_forward():
    """Task 5.1's forward calls ``sys.exit()``: SystemExit is an exception like any other there;
    5.1 gets 0, the rest is graded: 5/9."""
    return replace(
        right(FFN),
        "bert-intermediate",
        "        hidden_states = self.dense(hidden_states)  # (B, T, I)",
        '        import sys\n        sys.exit("stop here while debugging")\n'
        "        hidden_states = self.dense(hidden_states)  # (B, T, I)",
    )


@case("sys-exit-in-cell", FFN, scores=9, status="passed", message=PASSED)
def _sys_exit_in_cell():
    """Right code plus a cell calling ``sys.exit()``. A Jupyter kernel (and so nbgrader autograde)
    reports SystemExit and goes on with the next cell: 9/9."""
    return insert_after(right(FFN), "bert-intermediate", "import sys\n\nsys.exit()\n")


@case("os-exit-in-cell", FFN, scores=0, status="error", message=r"(?i)exit|died|ended")
def _os_exit_in_cell():
    """Right code plus a cell calling ``os._exit(0)`` before the first grade cell: the notebook's
    process ends with status 0 and no grade cell ever runs: 0/9, an error, not a pass."""
    return insert_after(right(FFN), "bert-intermediate", "import os\n\nos._exit(0)\n")


@case("os-exit-in-forward", FFN, scores=(0, 4), status="error", message=r"(?i)exit|died|ended")
def _os_exit_in_forward():
    """Task 5.2's forward calls ``os._exit(3)``: the process dies in the middle of a grade cell.
    5.2 gets nothing; Task 5.1, judged before, may keep its 4 points."""
    return replace(
        right(FFN),
        "bert-output",
        "        hidden_states = self.dense(hidden_states)",
        "        import os\n        os._exit(3)\n        hidden_states = self.dense(hidden_states)",
    )


# -- the limits run: endless loops and runaway memory -----------------------------------------------


@case("right-beside-limits", FFN, scores=9, status="passed", message=PASSED, run="limits")
def _right_beside_limits():
    """The reference solution, graded in the same run as the endless loops and the runaway memory."""
    return right(FFN)


@case(
    "infinite-loop-in-cell", FFN, scores=0, status="timeout", message=r"(?i)timed out|time limit|timeout", run="limits"
)
def _infinite_loop_in_cell():
    """Right code plus a cell whose loop never ends (the increment forgotten), before any grade
    cell: the notebook is stopped at the timeout, 0/9."""
    return insert_after(
        right(FFN), "bert-intermediate", "x, steps = -5.0, 0\nwhile x < 5.0:\n    steps += 1  # `x += 0.1` forgotten\n"
    )


@case(
    "infinite-loop-in-forward",
    FFN,
    scores=0,
    status="timeout",
    message=r"(?i)timed out|time limit|timeout",
    run="limits",
)
def _infinite_loop_in_forward():
    """Task 5.1's forward loops forever: the first grade cell never returns, the notebook is
    stopped at the timeout, 0/9."""
    return replace(
        right(FFN),
        "bert-intermediate",
        "        hidden_states = self.dense(hidden_states)  # (B, T, I)",
        "        steps = 0\n"
        "        while steps < 10:  # `steps += 1` forgotten\n"
        "            hidden_states = hidden_states + 0.0\n"
        "        hidden_states = self.dense(hidden_states)  # (B, T, I)",
    )


@case("runaway-memory", FFN, scores=(0, 5), status=("error", "failed", "memory"), message=r"(?i)memory", run="limits")
def _runaway_memory():
    """Task 5.1's forward keeps allocating 128 MB blocks. Killed at the memory limit, the notebook
    scores 0; stopped by an allocation error inside forward, 5.1 alone fails (5/9). Either way the
    message says memory. The growth stops at 5 GB and then waits, so that a grader without a
    memory limit ends it at the timeout instead of exhausting the machine."""
    return replace(
        right(FFN),
        "bert-intermediate",
        "        hidden_states = self.dense(hidden_states)  # (B, T, I)",
        "        import time\n"
        "        cache = []\n"
        "        while len(cache) < 40:\n"
        "            cache.append(torch.ones(2**25))  # 128 MB more each time\n"
        "        time.sleep(3600)\n"
        "        hidden_states = self.dense(hidden_states)  # (B, T, I)",
    )


# -- grade cells and locked cells -----------------------------------------------------------------


@case(
    "grade-cell-deleted", FFN, scores=7, status="failed", message=r"(?i)deleted|missing", must_fail=["test-5-2-values"]
)
def _grade_cell_deleted():
    """Right code, the 2-point values cell of Task 5.2 deleted. nbgrader autograde (by default)
    does not add it back: its points are lost, the maximum stays 9: 7/9."""
    nb = right(FFN)
    nb.cells.remove(cell(nb, "test-5-2-values"))
    return nb


@case(
    "grade-cell-edited",
    FFN,
    scores=6,
    status="failed",
    message=r"(?i)relu",
    must_fail=["test-5-1-values", "test-5-1-batches"],
)
def _grade_cell_edited():
    """ReLU in Task 5.1, and the two 5.1 cells that would catch it edited to print a success line.
    Grade cells are restored from the source, so the ReLU is found: 6/9."""
    nb = _relu_ffn()
    for grade_id in ("test-5-1-values", "test-5-1-batches"):
        cell(nb, grade_id).source = 'print("[Task 5.1] BertIntermediate passed")'
    return nb


@case(
    "grade-cell-points-edited",
    FFN,
    scores=6,
    status="failed",
    message=r"(?i)relu",
    must_fail=["test-5-1-values", "test-5-1-batches"],
)
def _grade_cell_points_edited():
    """ReLU in Task 5.1; the learner set the failing cells' points to 0 and a passing cell's to 50.
    Points come from the source: 6/9."""
    nb = _relu_ffn()
    for grade_id, points in (("test-5-1-values", 0), ("test-5-1-batches", 0), ("test-5-2-values", 50)):
        cell(nb, grade_id).metadata["nbgrader"]["points"] = points
    return nb


@case(
    "grade-cells-reordered",
    FFN,
    scores=6,
    status="failed",
    message=r"(?i)relu",
    must_fail=["test-5-1-values", "test-5-1-batches"],
)
def _grade_cells_reordered():
    """ReLU in Task 5.1; both classes first, then Task 5.2's grade cells before Task 5.1's. Points
    follow grade ids, not positions: 6/9."""
    nb = _relu_ffn()
    code = {_grade_id(c): c for c in nb.cells if _grade_id(c)}
    order = ["setup", "bert-intermediate", "bert-output", *FFN_5_2, *FFN_5_1]
    moved = [code[grade_id] for grade_id in order]
    slots = iter(moved)  # the code cells take each other's places; the markdown stays put
    nb.cells = [next(slots) if c.cell_type == "code" else c for c in nb.cells]
    return nb


@case(
    "fake-grade-cell",
    FFN,
    scores=6,
    status="failed",
    message=r"(?i)relu",
    must_fail=["test-5-1-values", "test-5-1-batches"],
)
def _fake_grade_cell():
    """ReLU in Task 5.1, plus a cell the learner marked as a 20-point grade cell that prints. A
    grade cell the source does not have earns nothing, and the maximum stays 9: 6/9."""
    meta = {
        "grade": True,
        "grade_id": "test-5-3-bonus",
        "locked": True,
        "points": 20,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }
    return insert_after(_relu_ffn(), "test-5-2-gradients", 'print("[Task 5.3] bonus passed")\n', metadata=meta)


@case(
    "locked-setup-cell-edited",
    FFN,
    scores=0,
    status="failed",
    message=r"(?i)not implemented|locked|tamper|edited|restored",
)
def _locked_setup_cell_edited():
    """The stubs, with the locked setup cell edited to define a ``check`` that always passes.
    Locked cells are restored from the source (as nbgrader does), so the stubs score 0."""
    nb = exercise(FFN)
    cell(nb, "setup").source = (
        "import torch\nfrom torch import nn\n\nfrom bertlab.reference import load_config\n\n\n"
        'def check(*args, **kwargs):\n    print("passed")\n\n\nconfig = load_config()\n'
    )
    return nb


# -- files that are not this task's notebook ------------------------------------------------------


@case(
    "empty-notebook",
    FFN,
    scores=0,
    status=("error", "failed"),
    message=r"(?i)empty|no (code |grade )?cells|deleted|missing",
)
def _empty_notebook():
    """A valid notebook without a single cell: 0 of the task's 9 points (not 0/0, which would
    hide the loss from the total)."""
    return nbformat.v4.new_notebook()


@case("not-json", FFN, scores=0, status="error", message=NOT_A_NOTEBOOK)
def _not_json():
    """A truncated file: 0/9, an error that says it is not a notebook."""
    return _raw(right(FFN))[:2000]


@case("zero-bytes", FFN, scores=0, status="error", message=NOT_A_NOTEBOOK)
def _zero_bytes():
    """An empty file named like the notebook: 0/9."""
    return b""


@case("python-script", FFN, scores=0, status="error", message=NOT_A_NOTEBOOK)
def _python_script():
    """The learner's classes saved as a Python script under the notebook's name: 0/9."""
    nb = right(FFN)
    return "\n\n".join(c.source for c in nb.cells if c.cell_type == "code").encode()


@case("binary-garbage", FFN, scores=0, status="error", message=NOT_A_NOTEBOOK)
def _binary_garbage():
    """Bytes that are not even text: 0/9, no decoding traceback."""
    return bytes(range(256)) * 16


@case("json-not-notebook", FFN, scores=0, status="error", message=NOT_A_NOTEBOOK)
def _json_not_notebook():
    """Valid JSON that is not a notebook: 0/9."""
    return b'{"cells": "none", "grade": 9}'


@case(
    "other-task-notebook",
    FFN,
    scores=0,
    status=("error", "failed"),
    message=r"04-attention-output|05-other-task-notebook\.ipynb|another task",
    file_name=f"{ADD_NORM}.ipynb",
)
def _other_task_notebook():
    """The task folder holds Task 4's finished notebook (under its own name) instead of Task 5's.
    Task 5 was not handed in: 0/9, and the message names the stray or the missing notebook, never
    Task 4's 10 points counted as Task 5's."""
    return right(ADD_NORM)


@case(
    "other-task-notebook-renamed",
    FFN,
    scores=0,
    status=("error", "failed"),
    message=r"(?i)deleted|missing|another task|task 4|04-attention-output",
)
def _other_task_notebook_renamed():
    """Task 4's finished notebook saved under Task 5's name: none of Task 5's grade cells is there,
    and Task 4's grade cells earn nothing here: 0/9."""
    return right(ADD_NORM)


# == issue 48: wrong code that earned full marks (stale caches; reference code on another thread) ==
# Each written as a learner would, independently of the checks, from the right notebook.

ATTENTION_3_2 = grade_ids(ATTENTION, "test-3-2")
ONLY_3_1 = max_points(ATTENTION) - sum(
    float(c.metadata["nbgrader"].get("points", 0))
    for c in _read("solutions", ATTENTION).cells
    if (_grade_id(c) or "").startswith("test-3-2")
)
SELF_ATTENTION_FORWARD_HEAD = (
    "    def forward(self, hidden_states, attention_mask=None, **kwargs):\n"
    '        """Attend from every token to every (unmasked) token, in every head.'
)
# The course's own BertSelfAttention, holding the learner's weights, run on a thread of its own.
COURSE_TWIN = (
    "from concurrent.futures import ThreadPoolExecutor\n"
    "from bertlab import bert\n\n\n"
    "def course_twin(module):\n"
    "    twin = bert.BertSelfAttention(module.config)\n"
    "    twin.load_state_dict(module.state_dict())\n"
    "    return twin.train(module.training)\n\n\n"
)


def _self_attention_forward_replaced(prelude: str, body: str) -> nbformat.NotebookNode:
    nb = right(ATTENTION)
    replace(
        nb,
        "bert-self-attention",
        "class BertSelfAttention(nn.Module):",
        prelude + "class BertSelfAttention(nn.Module):",
    )
    replace(
        nb,
        "bert-self-attention",
        SELF_ATTENTION_FORWARD_HEAD,
        body + '\n\n    def _own_forward(self, hidden_states, attention_mask=None, **kwargs):\n        """Unused.',
    )
    return nb


@case(
    "course-attention-on-a-pool",
    ATTENTION,
    scores=ONLY_3_1,
    status="failed",
    message=r"course's reference BertSelfAttention.*thread of its own",
    must_fail=ATTENTION_3_2,
)
def _course_attention_on_a_pool():
    """Task 3.2's forward builds the course's own BertSelfAttention (what the notebook's process
    holds in place of transformers) with its weights and runs it on a ThreadPoolExecutor's thread,
    which no per-thread watch sees: the course's module refuses it there, so 3.2 gets nothing."""
    return _self_attention_forward_replaced(
        COURSE_TWIN,
        "    def forward(self, hidden_states, attention_mask=None, **kwargs):\n"
        "        with ThreadPoolExecutor(max_workers=1) as pool:\n"
        "            return pool.submit(course_twin(self), hidden_states, attention_mask, **kwargs).result()",
    )


@case(
    "course-attention-on-an-earlier-thread",
    ATTENTION,
    scores=ONLY_3_1,
    status="failed",
    message=r"course's reference BertSelfAttention",
    must_fail=ATTENTION_3_2,
)
def _course_attention_on_an_earlier_thread():
    """Task 3.2's forward hands each call to a worker thread the notebook started before any
    check, which runs the course's module: refused on that thread too, so 3.2 gets nothing."""
    worker = (
        "import queue, threading\n"
        "_calls = queue.Queue()\n\n\n"
        "def _serve():\n"
        "    while True:\n"
        "        fn, args, kwargs, answer = _calls.get()\n"
        "        try:\n"
        "            answer.put(fn(*args, **kwargs))\n"
        "        except Exception as err:\n"
        "            answer.put(err)\n\n\n"
        "threading.Thread(target=_serve, daemon=True).start()\n\n\n"
    )
    return _self_attention_forward_replaced(
        COURSE_TWIN + worker,
        "    def forward(self, hidden_states, attention_mask=None, **kwargs):\n"
        "        answer = queue.Queue()\n"
        "        _calls.put((course_twin(self), (hidden_states, attention_mask), kwargs, answer))\n"
        "        got = answer.get()\n"
        "        if isinstance(got, Exception):\n"
        "            raise got\n"
        "        return got",
    )


@case("layer-runs-its-given-attention-on-a-pool", MODEL, scores=max_points(MODEL), status="passed", message=PASSED)
def _layer_runs_its_given_attention_on_a_pool():
    """Right: Task 6.1's BertLayer runs its attention (the part the grader gives) on a worker
    thread: the grader's part runs on any thread, full marks."""
    nb = right(MODEL)
    replace(
        nb,
        "bert-layer",
        "class BertLayer(nn.Module):",
        "from concurrent.futures import ThreadPoolExecutor\n\n\nclass BertLayer(nn.Module):",
    )
    return replace(
        nb,
        "bert-layer",
        ATTENTION_CALL,
        "        with ThreadPoolExecutor(max_workers=1) as pool:\n"
        "            running = pool.submit(self.attention, hidden_states, attention_mask, **kwargs)\n"
        "            attention_output, _ = running.result()",
    )


# -- feedback that names the mistake and points the right way (issue 48, items 5 to 7) ------------

WHY = "07-why-measured"
SELF_OUTPUT_BODY = "hidden_states = self.dense(hidden_states)  # (B, T, H): heads mixed by W_O\n        " + (
    BRANCH_DROPOUT_THEN_ADD
)
PRE_LN = "hidden_states = input_tensor + self.dropout(self.dense(self.LayerNorm(hidden_states)))"
PRE_LN_NAMED = r"known mistake `pre-ln-order`\)\.\n  See lessons/06-layernorm \(section \"Post-LN and Pre-LN\"\)"


@case(
    "pre-ln-self-output",
    ADD_NORM,
    scores=6,
    status="failed",
    message=r"values differ(?s:.*)" + PRE_LN_NAMED,
    must_fail=("test-4-1-values", "test-4-1-batches", "test-4-1-gradients"),
)
def _pre_ln_self_output():
    """Task 4.1 in the Pre-LN order, x + dropout(sublayer(norm(x))), as ported from an implementation
    of that order: the LayerNorm loads and has the config's eps, so the names cell passes; the values
    are another order's, named with the lesson that compares the two. 4.2 keeps its 5: 6/10."""
    return replace(right(ADD_NORM), "bert-self-output", SELF_OUTPUT_BODY, PRE_LN)


@case(
    "pre-ln-eps-1e-6-self-output",
    ADD_NORM,
    scores=5,
    status="failed",
    message=r"BertSelfOutput: Your output matches a Pre-LN sub-layer(?s:.*)"
    + PRE_LN_NAMED
    + r"\.\n  Also `self\.LayerNorm\.eps` is 1e-06(?s:.*)with eps = config\.layer_norm_eps yours still differ",
    must_fail=grade_ids(ADD_NORM, "test-4-1"),
)
def _pre_ln_eps_1e_6_self_output():
    """The same port with its own eps, 1e-6: the names cell fails, but the eps is not what moves the
    outputs by 1e+01. Its message names the Pre-LN order first, the mistake to fix, then the eps,
    measured again with the config's. 5/10."""
    nb = replace(right(ADD_NORM), "bert-self-output", SELF_OUTPUT_BODY, PRE_LN)
    return replace(
        nb,
        "bert-self-output",
        "nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)",
        "nn.LayerNorm(config.hidden_size, eps=1e-6)",
    )


# A ReLU's worst position may be positive (z = 0.75: ReLU 0.75, GELU 0.58) or negative: the message
# must describe both sides, never "negative pre-activations" alone.
RELU_BOTH_SIDES = r"z itself where z > 0 and exactly 0 where z < 0"


RELU_CELLS = ("test-5-1-values", "test-5-1-batches")


@case("relu-module-intermediate", FFN, scores=6, status="failed", message=RELU_BOTH_SIDES, must_fail=RELU_CELLS)
def _relu_module_intermediate():
    """Task 5.1 with `nn.ReLU()` as `intermediate_act_fn`: named, both sides of 0 described; its
    names cell passes (ReLU has no weights). 6/9."""
    return _relu_ffn()


@case("relu-in-forward", FFN, scores=6, status="failed", message=RELU_BOTH_SIDES, must_fail=RELU_CELLS)
def _relu_in_forward():
    """Task 5.1 keeps its GELU attribute but applies torch.relu in forward: the same mistake. 6/9."""
    return replace(right(FFN), "bert-intermediate", GELU_CALL, "hidden_states = torch.relu(hidden_states)")


@case(
    "residual-mean-over-padding",
    WHY,
    scores=8,
    status="failed",
    message=r"known mistake `residual-mean-includes-padding`",
    must_fail=("test-7-1-values", "test-7-3-values"),
)
def _residual_mean_over_padding():
    """Task 7.1 whose mean token averages all T positions (the notebook warns against padding) while
    its norms keep to the real tokens: named. Task 7.3 calls it and fails too (the learner guide says
    so); its message says that it is Task 7.1's mistake. 8/13."""
    return replace(
        right(WHY),
        "relative-residual",
        "mean = (hidden_states * real).sum(1, keepdim=True) / n",
        "mean = hidden_states.mean(1, keepdim=True)",
    )


LOOPED_RESIDUAL = """    out = []
    for x, m in zip(hidden_states, attention_mask):  # one sentence: (T, H), (T,)
        mean = x.mean(0)  # the mean token
        real = x[m.bool()]  # (n, H): the real tokens
        out.append((real - mean).norm() / real.norm())
    return torch.stack(out)
"""


@case(
    "residual-mean-over-padding-looped",
    WHY,
    scores=8,
    status="failed",
    message=r"known mistake `residual-mean-includes-padding`",
    must_fail=("test-7-1-values", "test-7-3-values"),
)
def _residual_mean_over_padding_looped():
    """The same mistake written one sentence at a time: the real tokens picked by boolean indexing
    for the norms, the mean taken over the whole row. Named alike: 8/13."""
    nb = right(WHY)
    target = cell(nb, "relative-residual")
    target.source = target.source[: target.source.index("    real = attention_mask")] + LOOPED_RESIDUAL
    return nb


# -- right code that rounds otherwise than HF's, and half precision (issue 48, item 2) ----------------
# A computation more exact than HF's (float64 inside, float32 out) or summed in another order
# (einsum, addmm on the flattened tokens) is right code: full marks. float16 and bfloat16 are
# not float32's precision: their rounding alone is over the tolerance, and the message says so.

INTERMEDIATE_DENSE = "hidden_states = self.dense(hidden_states)  # (B, T, I)\n        "
OUTPUT_DENSE = "hidden_states = self.dense(hidden_states)  # (B, T, H): back to the residual stream's width\n        "
SELF_OUTPUT_DENSE = "hidden_states = self.dense(hidden_states)  # (B, T, H): heads mixed by W_O\n        "
INTERMEDIATE_FLOAT64 = """x = torch.nn.functional.linear(
            hidden_states.double(), self.dense.weight.double(), self.dense.bias.double()
        )  # (B, T, I) in float64
        return self.intermediate_act_fn(x).to(hidden_states.dtype)  # back to float32"""
ADD_NORM_FLOAT64 = """x = torch.nn.functional.linear(
            hidden_states.double(), self.dense.weight.double(), self.dense.bias.double()
        )  # (B, T, H) in float64
        x = self.dropout(x) + input_tensor.double()
        ln = self.LayerNorm
        x = torch.nn.functional.layer_norm(x, ln.normalized_shape, ln.weight.double(), ln.bias.double(), ln.eps)
        return x.to(input_tensor.dtype)  # back to float32"""
EINSUM_DENSE = (
    'hidden_states = torch.einsum("bti,oi->bto", hidden_states, self.dense.weight) + self.dense.bias\n        '
)
ADDMM_DENSE = """hidden_states = torch.addmm(  # every token of every sentence as one row of a (B*T, in) matrix
            self.dense.bias, hidden_states.reshape(-1, hidden_states.shape[-1]), self.dense.weight.t()
        ).reshape(*hidden_states.shape[:-1], -1)
        """
INTERMEDIATE_HALF = """x = torch.nn.functional.linear(
            hidden_states.half(), self.dense.weight.half(), self.dense.bias.half()
        )  # (B, T, I) in float16
        return self.intermediate_act_fn(x.float())  # GELU in float32"""
INTERMEDIATE_BFLOAT16 = """x = torch.nn.functional.linear(
            hidden_states.bfloat16(), self.dense.weight.bfloat16(), self.dense.bias.bfloat16()
        )  # (B, T, I) in bfloat16
        return self.intermediate_act_fn(x).float()  # back to float32"""
LAYER_FFN = (
    "        intermediate_output = self.intermediate(attention_output)  # (B, T, I)\n"
    "        # The second residual is the attention block's output, not the layer's input.\n"
    "        layer_output = self.output(intermediate_output, attention_output)  # (B, T, H)"
)
LAYER_FFN_FLOAT64 = """        # The feed-forward block in float64, with the same weights; back to float32 at the end.
        f = torch.nn.functional
        w1, w2, ln = self.intermediate.dense, self.output.dense, self.output.LayerNorm
        x = attention_output.double()
        h = f.gelu(f.linear(x, w1.weight.double(), w1.bias.double()))
        h = self.output.dropout(f.linear(h, w2.weight.double(), w2.bias.double()))
        h = f.layer_norm(h + x, ln.normalized_shape, ln.weight.double(), ln.bias.double(), ln.eps)
        layer_output = h.to(attention_output.dtype)"""


@case("intermediate-in-float64", FFN, scores=9, status="passed", message=PASSED)
def _intermediate_in_float64():
    """Task 5.1 computed in float64 and cast back: nearer the exact answer than HF's float32 (at a
    value of 20.3, HF's output is 1.6e-5 from it, this one 9e-7), and refused by an absolute 1e-5
    alone. Full marks."""
    return replace(right(FFN), "bert-intermediate", INTERMEDIATE_DENSE + INTERMEDIATE_RETURN, INTERMEDIATE_FLOAT64)


@case("output-in-float64", FFN, scores=9, status="passed", message=PASSED)
def _output_in_float64():
    """Task 5.2, dense, dropout, residual and LayerNorm in float64, cast back at the end: full marks."""
    nb = replace(right(FFN), "bert-output", OUTPUT_DENSE + BRANCH_DROPOUT_THEN_ADD, ADD_NORM_FLOAT64)
    return replace(nb, "bert-output", ADD_NORM_FLOAT64 + "\n        return hidden_states", ADD_NORM_FLOAT64)


@case("self-output-in-float64", ADD_NORM, scores=max_points(ADD_NORM), status="passed", message=PASSED)
def _self_output_in_float64():
    """Task 4.1 in float64, cast back at the end: full marks."""
    nb = replace(right(ADD_NORM), "bert-self-output", SELF_OUTPUT_DENSE + BRANCH_DROPOUT_THEN_ADD, ADD_NORM_FLOAT64)
    return replace(nb, "bert-self-output", ADD_NORM_FLOAT64 + "\n        return hidden_states", ADD_NORM_FLOAT64)


@case("feed-forward-einsum", FFN, scores=9, status="passed", message=PASSED)
def _feed_forward_einsum():
    """Both dense layers of Task 5 written with torch.einsum: another order of the same sums."""
    nb = replace(right(FFN), "bert-intermediate", INTERMEDIATE_DENSE, EINSUM_DENSE)
    return replace(nb, "bert-output", OUTPUT_DENSE, EINSUM_DENSE)


@case("feed-forward-addmm", FFN, scores=9, status="passed", message=PASSED)
def _feed_forward_addmm():
    """Both dense layers of Task 5 as one addmm over the flattened tokens: full marks."""
    nb = replace(right(FFN), "bert-intermediate", INTERMEDIATE_DENSE, ADDMM_DENSE)
    return replace(nb, "bert-output", OUTPUT_DENSE, ADDMM_DENSE)


@case("self-output-addmm", ADD_NORM, scores=max_points(ADD_NORM), status="passed", message=PASSED)
def _self_output_addmm():
    """Task 4.1's W_O as one addmm over the flattened tokens: full marks."""
    return replace(right(ADD_NORM), "bert-self-output", SELF_OUTPUT_DENSE, ADDMM_DENSE)


@case("layer-ffn-in-float64", MODEL, scores=13, status="passed", message=PASSED)
def _layer_ffn_in_float64():
    """Task 6.1's feed-forward block computed in float64 from its parts' weights: full marks."""
    return replace(right(MODEL), "bert-layer", LAYER_FFN, LAYER_FFN_FLOAT64)


HALF_CELLS = ("test-5-1-values", "test-5-1-batches")


@case(
    "intermediate-in-float16",
    FFN,
    scores=6,
    status="failed",
    message=r"computes in float16: float16 keeps 11 bits(?s:.*)compute in float32",
    must_fail=HALF_CELLS,
)
def _intermediate_in_float16():
    """Task 5.1's dense layer in float16, GELU in float32: the output is float32, yet float16's
    rounding moves it by 1e-2. The message names the precision, not a wrong formula: 6/9."""
    return replace(right(FFN), "bert-intermediate", INTERMEDIATE_DENSE + INTERMEDIATE_RETURN, INTERMEDIATE_HALF)


@case(
    "intermediate-in-bfloat16",
    FFN,
    scores=6,
    status="failed",
    message=r"every value is a bfloat16 number(?s:.*)compute in float32",
    must_fail=HALF_CELLS,
)
def _intermediate_in_bfloat16():
    """Task 5.1 in bfloat16, cast back to float32: every value is a bfloat16 number. 6/9."""
    return replace(right(FFN), "bert-intermediate", INTERMEDIATE_DENSE + INTERMEDIATE_RETURN, INTERMEDIATE_BFLOAT16)


@case(
    "output-under-autocast",
    FFN,
    scores=5,
    status="failed",
    message=r"computes in bfloat16(?s:.*)compute in float32",
    must_fail=("test-5-2-values", "test-5-2-batches", "test-5-2-gradients"),
)
def _output_under_autocast():
    """Task 5.2's forward under torch.autocast("cpu"): its dense layer runs in bfloat16, its
    LayerNorm in float32, so the output is float32 and no bfloat16 number. The watch of the forward
    names the precision: 5/9."""
    return replace(
        right(FFN),
        "bert-output",
        OUTPUT_DENSE,
        'with torch.autocast("cpu"):  # bfloat16 where autocast deems it safe\n            '
        + OUTPUT_DENSE.rstrip()
        + "\n        ",
    )


@case(
    "intermediate-returns-float16",
    FFN,
    scores=(5, 6),
    status="failed",
    message=r"is float16, expected float32(?s:.*)compute in float32",
    must_fail=HALF_CELLS,
)
def _intermediate_returns_float16():
    """Task 5.1 returns float16: the dtype check names it, with the advice: 5 or 6 of 9."""
    return replace(
        right(FFN), "bert-intermediate", INTERMEDIATE_RETURN, GELU_CALL + "\n        return hidden_states.half()"
    )


SHAPE_LINE = "        B, T, _ = hidden_states.shape\n"
CALLS_3_2 = ("test-3-2-gradients",)  # the cell whose full run holds the calls check


def _self_attention_mask_prepared(prelude: str, lines: str) -> nbformat.NotebookNode:
    """Task 3.2 whose forward passes the mask through ``lines`` first (right on any one call)."""
    nb = right(ATTENTION)
    replace(
        nb,
        "bert-self-attention",
        "class BertSelfAttention(nn.Module):",
        prelude + "class BertSelfAttention(nn.Module):",
    )
    return replace(nb, "bert-self-attention", SHAPE_LINE, lines + SHAPE_LINE)


@case(
    "mask-cached-by-data-ptr",
    ATTENTION,
    scores=max_points(ATTENTION) - 1,
    status="failed",
    message=r"(?s)refilled in place.*`self\._mask_cache`|keeps `self\._mask_cache` from one call to the next",
    must_fail=CALLS_3_2,
)
def _mask_cached_by_data_ptr():
    """Task 3.2 keeps its float copy of the mask by the tensor's ``data_ptr()`` ("the same mask
    tensor every step"): a caller that refills that tensor in place gets the old mask. The calls
    check's long run refills its tensors in place: the cell with the calls check fails, named.
    Where the learner's process puts a later call's mask at a freed one's address (its allocator
    decides, run by run), the short run's third call meets the stale mask first: named alike."""
    return _self_attention_mask_prepared(
        "",
        "        if attention_mask is not None:\n"
        "            cache = self.__dict__.setdefault('_mask_cache', {})\n"
        "            if attention_mask.data_ptr() not in cache:\n"
        "                cache[attention_mask.data_ptr()] = attention_mask.float().clone()\n"
        "            attention_mask = cache[attention_mask.data_ptr()]\n",
    )


@case(
    "mask-in-an-lru-cache",
    ATTENTION,
    scores=max_points(ATTENTION) - 1,
    status="failed",
    message=r"`as_float \(an lru_cache\)`",
    must_fail=CALLS_3_2,
)
def _mask_in_an_lru_cache():
    """Task 3.2 converts the mask through ``functools.lru_cache`` keyed on the tensor (tensors hash
    by identity): the same tensor refilled gets the old answer; the calls check names the cache."""
    return _self_attention_mask_prepared(
        "import functools\n\n\n"
        "@functools.lru_cache(maxsize=None)\n"
        "def as_float(mask):\n"
        "    return mask.float().clone()\n\n\n",
        "        if attention_mask is not None:\n            attention_mask = as_float(attention_mask)\n",
    )


@case("mask-cached-by-its-values", ATTENTION, scores=max_points(ATTENTION), status="passed", message=PASSED)
def _mask_cached_by_its_values():
    """Right: Task 3.2 keeps its masks in a cache keyed on their values (shape and bytes): a
    refilled tensor is a new key. Full marks."""
    return _self_attention_mask_prepared(
        "",
        "        if attention_mask is not None:\n"
        "            cache = self.__dict__.setdefault('_by_value', {})\n"
        "            key = (tuple(attention_mask.shape), attention_mask.numpy().tobytes())\n"
        "            attention_mask = cache.setdefault(key, attention_mask.clone())\n",
    )


@case(
    "self-output-frozen-weights-from-sixth-call",
    ADD_NORM,
    scores=max_points(ADD_NORM) - 1,
    status="failed",
    message=r"no gradient reaches dense\.weight.*after \d+ calls|other weights loaded",
    must_fail=("test-4-1-gradients",),
)
def _self_output_frozen_weights_from_sixth_call():
    """Task 4.1 counts its calls and from the sixth multiplies by a copy of its weights made under
    no_grad: right values until other weights are loaded, and no gradient reaches the weights.
    The calls check makes more calls than that, checks the gradients after them and loads other
    weights: the cell with the calls check fails, naming what was kept."""
    return replace(
        right(ADD_NORM),
        "bert-self-output",
        "        hidden_states = self.dense(hidden_states)  # (B, T, H): heads mixed by W_O\n",
        "        self.calls = getattr(self, 'calls', 0) + 1\n"
        "        if self.calls >= 6 and not hasattr(self, 'fast_weights'):\n"
        "            with torch.no_grad():\n"
        "                self.fast_weights = (self.dense.weight.clone(), self.dense.bias.clone())\n"
        "        if self.calls >= 6:\n"
        "            hidden_states = torch.nn.functional.linear(hidden_states, *self.fast_weights)\n"
        "        else:\n"
        "            hidden_states = self.dense(hidden_states)\n",
    )


# -- dropout drawn by hand, or out of Python's sight (issue 48, item 1) -----------------------------

HF_ATTENTION_DROPOUT = "    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)"
OUTPUT_DROPOUT = "hidden_states = self.dropout(hidden_states)  # drops part of the update, never the residual"


@case("attention-dropout-rand-like", ATTENTION, scores=max_points(ATTENTION), status="passed", message=PASSED)
def _attention_dropout_rand_like():
    """Right: Task 3.1's dropout as from-scratch courses teach it, ``w * (rand_like(w) > p) / (1 - p)``:
    each weight kept on its own with probability 1 - p, at HF's place. Full marks."""
    return replace(
        right(ATTENTION),
        "eager-attention-forward",
        HF_ATTENTION_DROPOUT,
        "    if module.training and dropout > 0:\n"
        "        attn_weights = attn_weights * (torch.rand_like(attn_weights) > dropout) / (1 - dropout)",
    )


@case("output-dropout-bernoulli", FFN, scores=max_points(FFN), status="passed", message=PASSED)
def _output_dropout_bernoulli():
    """Right: Task 5.2's dropout as a keep-mask ``torch.bernoulli(torch.full_like(x, 1 - p))`` times
    1 / (1 - p). Full marks."""
    return replace(
        right(FFN),
        "bert-output",
        OUTPUT_DROPOUT,
        "if self.training:\n"
        "            keep = torch.bernoulli(torch.full_like(hidden_states, 1 - self.dropout.p))\n"
        "            hidden_states = hidden_states * keep / (1 - self.dropout.p)",
    )


@case("self-output-dropout-randn-quantile", ADD_NORM, scores=max_points(ADD_NORM), status="passed", message=PASSED)
def _self_output_dropout_randn_quantile():
    """Right: Task 4.1 keeps the elements whose standard normal draw lies above its p-quantile, a
    share 1 - p, each on its own: HF's law, drawn differently. Full marks."""
    return replace(
        right(ADD_NORM),
        "bert-self-output",
        OUTPUT_DROPOUT,
        "if self.training:\n"
        "            p = self.dropout.p\n"
        "            t = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(p))  # P(z < t) = p\n"
        "            hidden_states = hidden_states * (torch.randn_like(hidden_states) > t) / (1 - p)",
    )


@case(
    "output-dropout-by-hand-unscaled",
    FFN,
    scores=max_points(FFN) - 1,
    status="failed",
    message=r"known mistake `dropout-not-scaled`",
    must_fail=("test-5-2-gradients",),
    forbid=r"HF applies `self\.dropout` to dense",
)
def _output_dropout_by_hand_unscaled():
    """Wrong: Task 5.2 drops the right elements by hand but never scales the kept ones by
    1 / (1 - p): train-mode outputs are 1 - p too small on average. Named; 8/9."""
    return replace(
        right(FFN),
        "bert-output",
        OUTPUT_DROPOUT,
        "if self.training:\n"
        "            hidden_states = hidden_states * (torch.rand_like(hidden_states) > self.dropout.p)",
    )


@case(
    "output-dropout-by-hand-shared-over-tokens",
    FFN,
    scores=max_points(FFN) - 1,
    status="failed",
    message=r"known mistake `dropout-mask-shared`",
    must_fail=("test-5-2-gradients",),
)
def _output_dropout_by_hand_shared_over_tokens():
    """Wrong: Task 5.2 draws one mask per sentence, ``rand(B, 1, H)``, shared by every token: not
    each element on its own. Named; 8/9."""
    return replace(
        right(FFN),
        "bert-output",
        OUTPUT_DROPOUT,
        "if self.training:\n"
        "            B, _, H = hidden_states.shape\n"
        "            keep = torch.rand(B, 1, H) > self.dropout.p\n"
        "            hidden_states = hidden_states * keep / (1 - self.dropout.p)",
    )


@case(
    "attention-checkpoint-new-masks",
    ATTENTION,
    scores=max_points(ATTENTION) - 1,
    status="failed",
    message=r"(?s)in train mode.*preserve_rng_state",
    must_fail=("test-3-2-gradients",),
    forbid=r"cut from the graph",
)
def _attention_checkpoint_new_masks():
    """Wrong: Task 3.2 runs attention under ``torch.utils.checkpoint`` with
    ``preserve_rng_state=False`` to save memory: backward runs the forward again and draws other
    dropout masks, so the train-mode gradients are not those of the forward's masks. 7/8."""
    nb = replace(
        right(ATTENTION),
        "bert-self-attention",
        "class BertSelfAttention(nn.Module):",
        "from torch.utils.checkpoint import checkpoint\n\n\nclass BertSelfAttention(nn.Module):",
    )
    return replace(
        nb,
        "bert-self-attention",
        ATTENTION_BODY,
        "        def attend(q, k, v):\n"
        "            p = self.dropout.p if self.training else 0.0\n"
        "            return eager_attention_forward(self, q, k, v, attention_mask, scaling=self.scaling, dropout=p)\n"
        "\n"
        "        context_layer, attention_probs = checkpoint(\n"
        "            attend, query_layer, key_layer, value_layer, use_reentrant=False, preserve_rng_state=False\n"
        "        )\n"
        "        context_layer = context_layer.reshape(B, T, self.all_head_size)",
    )


# -- the course directory ---------------------------------------------------------------------------


def build_course(root: Path, cases: list[Case] = CASES) -> dict[str, Path]:
    """Write a course directory under ``root`` holding every case.

    ``root`` gets ``nbgrader_config.py``, ``solutions/`` with the course's sources plus one copy per
    case folder (so the grader restores each case from its assignment's source), and one folder of
    submissions per run, ``submitted-<run>/<case folder>/<file>``.

    Returns:
        run name -> the folder to pass to ``grade()``.
    """
    shutil.copy(ROOT / "nbgrader_config.py", root)
    shutil.copytree(ROOT / "solutions", root / "solutions")
    runs = {run: root / f"submitted-{run}" for run in RUNS}
    for c in cases:
        source = root / "solutions" / c.folder
        source.mkdir()
        shutil.copy(ROOT / "solutions" / c.assignment / f"{c.assignment}.ipynb", source / f"{c.folder}.ipynb")
        built = c.build()
        target = runs[c.run] / c.folder / c.submitted_name
        target.parent.mkdir(parents=True)
        target.write_bytes(built if isinstance(built, bytes) else _raw(built))
    return runs


def check_cases(cases: list[Case] = CASES) -> list[str]:
    """Problems with the case list itself (names, expectations that contradict each other)."""
    problems = []
    folders = [c.folder for c in cases]
    problems += [f"duplicate case {f}" for f in sorted({f for f in folders if folders.count(f) > 1})]
    for c in cases:
        if c.run not in RUNS:
            problems.append(f"{c.name}: unknown run {c.run!r}")
        if any(s > c.max_score or s < 0 for s in c.scores):
            problems.append(f"{c.folder}: scores {c.scores} outside 0..{c.max_score:g}")
        if ("passed" in c.status) != (c.scores == (c.max_score,)):
            problems.append(f"{c.folder}: passes exactly when it expects full marks, not {c.status} {c.scores}")
        for pattern in filter(None, (c.message, c.forbid)):
            re.compile(pattern)
    return problems
