"""A class of submissions built from the real exercises, laid out as nbgrader collects them.

Each member is one student's hand-in of one assignment: complete, partial, several known
mistakes, untouched, broken (not JSON, an import that fails), a deleted grade cell, tampering, and
one that hangs. Only the two cheapest assignments are used (01-numpy-bert and 05-feed-forward):
every case shows there as well as anywhere, and each graded submission costs seconds.

``write_class`` puts the notebooks in ``<course>/instructor/submitted/<student>/<assignment>/``
(nbgrader's layout under the course's ``nbgrader_config.py``); ``write_grade_view`` lays the same
notebooks out for one ``bertlab grade`` run. The agreement test and the class benchmark use both.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat

from tests import submissions as sub
from tests.submissions import FFN, NUMPY, ROOT

SUBMITTED = Path("instructor") / "submitted"


@dataclass(frozen=True)
class Member:
    """One submission of the class.

    Attributes:
        name: what the submission is; with a number, the student's id.
        assignment: the assignment handed in.
        build: the submitted file: a notebook, or raw bytes for a file that is not one.
        kernel_differs: True where running the notebook's cells in a kernel cannot give the
            judged score: the notebook disables ``check`` itself, so its grade cells pass there.
        hangs: the notebook never finishes; graded with a short timeout.
    """

    name: str
    assignment: str
    build: Callable[[], nbformat.NotebookNode | bytes]
    kernel_differs: bool = False
    hangs: bool = False


def _case(name: str, assignment: str) -> Callable:
    """The builder of a registered bad-submission case (tests/submissions.py)."""
    (found,) = [c for c in sub.CASES if c.name == name and c.assignment == assignment]
    return found.build


def _partial_ffn():
    """Task 5.1 done, Task 5.2 left as released."""
    nb = sub.right(FFN)
    sub.cell(nb, "bert-output").source = sub.cell(sub.exercise(FFN), "bert-output").source
    return nb


def _partial_numpy():
    """Tasks 1.1 and 1.2 done, the rest left as released."""
    nb, stubs = sub.right(NUMPY), sub.exercise(NUMPY)
    for grade_id in ("gelu", "linear", "bert-layer-forward"):
        sub.cell(nb, grade_id).source = sub.cell(stubs, grade_id).source
    return nb


def _unbiased_variance():
    """Task 1.2 with the unbiased variance (divided by H - 1): a known mistake."""
    return sub.replace(
        sub.right(NUMPY), "layer-norm", "np.var(x, axis=-1, keepdims=True)", "np.var(x, axis=-1, keepdims=True, ddof=1)"
    )


def _tanh_gelu():
    """Task 1.3 with the tanh approximation of GELU: a known mistake."""
    return sub.replace(
        sub.right(NUMPY), "gelu", "erf(x / math.sqrt(2.0))", "np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))"
    )


def _import_fails():
    """Task 5.1's cell starts with an import that raises: BertIntermediate is never defined."""
    return sub.replace(
        sub.right(FFN),
        "bert-intermediate",
        "class BertIntermediate(nn.Module):",
        "from torch import nnn  # a typo: ImportError\n\n\nclass BertIntermediate(nn.Module):",
    )


def _hangs():
    """The released stubs plus a cell that never ends, before every grade cell. It waits rather
    than spins: each grader stops it at its limit all the same, and the endless loop that keeps a
    core busy is the bad submissions' case (tests/submissions.py), graded on both paths."""
    return sub.insert_after(sub.exercise(FFN), "bert-intermediate", "import time\n\nwhile True:\n    time.sleep(1)\n")


MEMBERS: list[Member] = [
    Member("complete", FFN, lambda: sub.right(FFN)),
    Member("complete", NUMPY, lambda: sub.right(NUMPY)),
    Member("untouched", FFN, lambda: sub.exercise(FFN)),
    Member("untouched", NUMPY, lambda: sub.exercise(NUMPY)),
    Member("partial", FFN, _partial_ffn),
    Member("partial", NUMPY, _partial_numpy),
    Member("relu", FFN, sub._relu_ffn),
    Member("dropout-on-residual-sum", FFN, _case("dropout-on-residual-sum", FFN)),
    Member("in-place-residual", FFN, _case("in-place-residual", FFN)),
    Member("grad-disabled-in-forward", FFN, _case("grad-disabled-in-forward", FFN)),
    Member("unbiased-variance", NUMPY, _unbiased_variance),
    Member("tanh-gelu", NUMPY, _tanh_gelu),
    Member("not-json", FFN, _case("not-json", FFN)),
    Member("import-fails", FFN, _import_fails),
    Member("grade-cell-deleted", FFN, _case("grade-cell-deleted", FFN)),
    Member("grade-cell-edited", FFN, _case("grade-cell-edited", FFN)),
    Member("sys-exit-in-forward", FFN, _case("sys-exit-in-forward", FFN)),
    Member("tamper-rebind-check", FFN, _case("tamper-rebind-check", FFN), kernel_differs=True),
    Member("empty-notebook", FFN, _case("empty-notebook", FFN)),
    Member("hangs", FFN, _hangs, hangs=True),
]


@dataclass(frozen=True)
class Student:
    """A member handed in by one student (``id``)."""

    id: str
    member: Member

    @property
    def assignment(self) -> str:
        return self.member.assignment


def roster(size: int | None = None, hangs: bool = True) -> list[Student]:
    """``size`` students (every member once when None), cycling through the members.

    Args:
        hangs: include the member that hangs (a benchmark leaves it out: its time is the timeout).
    """
    members = [m for m in MEMBERS if hangs or not m.hangs]
    size = len(members) if size is None else size
    return [Student(f"s{i + 1:02d}-{m.name}", m) for i, m in zip(range(size), itertools.cycle(members))]


def _bytes(member: Member) -> bytes:
    built = member.build()
    return built if isinstance(built, bytes) else nbformat.writes(built).encode()


def write_course(root: Path, assignments: set[str]) -> Path:
    """A course directory: the repository's nbgrader_config.py and the sources of ``assignments``."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    for name in sorted(assignments):
        shutil.copytree(ROOT / "solutions" / name, root / "solutions" / name)
    return root


def graded_course(root: Path, assignment: str, notebooks: dict[str, nbformat.NotebookNode]) -> Path:
    """A course with ``assignment`` in its gradebook (``nbgrader generate_assignment``) and one
    collected submission per student: student -> notebook."""
    import os
    import subprocess
    import sys

    course = write_course(root, {assignment})
    subprocess.run(
        [sys.executable, "-m", "nbgrader", "generate_assignment", assignment, "--force"],
        cwd=course,
        check=True,
        capture_output=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    for student, nb in notebooks.items():
        folder = course / SUBMITTED / student / assignment
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{assignment}.ipynb")
    return course


def write_class(root: Path, students: list[Student]) -> None:
    """Each student's notebook in ``root/instructor/submitted/<student>/<assignment>/``, as collected."""
    for student in students:
        folder = root / SUBMITTED / student.id / student.assignment
        folder.mkdir(parents=True)
        (folder / f"{student.assignment}.ipynb").write_bytes(_bytes(student.member))


def write_grade_view(root: Path, students: list[Student]) -> Path:
    """The class as one ``bertlab grade --path`` run sees it; returns the path to pass.

    ``bertlab grade`` restores grade cells from ``solutions/<task folder>/``: each student gets a
    task folder named after them, with a copy of their assignment's source under that name.
    """
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    view = root / "submitted"
    for student in students:
        folder = view / student.id
        folder.mkdir(parents=True)
        source = root / "solutions" / student.id
        source.mkdir(parents=True)
        shutil.copy(
            ROOT / "solutions" / student.assignment / f"{student.assignment}.ipynb", source / f"{student.id}.ipynb"
        )
        (folder / f"{student.id}.ipynb").write_bytes(_bytes(student.member))
    return view


def kernel_recorder(course: Path, out: Path) -> None:
    """Make ``nbgrader autograde`` in ``course`` also record what the notebook's own grade cells gave.

    ``KernelScores`` runs right after nbgrader's ``Execute`` (the notebook's cells in order in a
    kernel: what a learner running the notebook sees) and before the judge replaces the outputs.
    """
    with open(course / "nbgrader_config.py", "a") as config:
        config.write(
            "\n# Test only: record the in-kernel grade of every grade cell before the judge's verdict.\n"
            'c.Autograde.autograde_preprocessors.insert(1, "tests.class_submissions.KernelScores")\n'
            f"c.KernelScores.out = {str(out)!r}\n"
        )


def _kernel_scores_class():
    import json

    from nbgrader import utils
    from nbgrader.preprocessors import NbGraderPreprocessor
    from traitlets import Unicode

    class KernelScores(NbGraderPreprocessor):
        """Write ``<out>/<student>/<assignment>.json``: grade id -> points, as the kernel run left them."""

        out = Unicode("").tag(config=True)

        def preprocess(self, nb, resources):
            info = resources["nbgrader"]
            scores = {
                c.metadata.nbgrader["grade_id"]: utils.determine_grade(c, self.log)[0]
                for c in nb.cells
                if utils.is_grade(c)
            }
            path = Path(self.out) / info["student"] / f"{info['assignment']}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(scores))
            return nb, resources

    return KernelScores


def __getattr__(name: str):
    # nbgrader imports the recorder by name; defined lazily so importing the class builder stays cheap.
    if name == "KernelScores":
        return _kernel_scores_class()
    raise AttributeError(name)
