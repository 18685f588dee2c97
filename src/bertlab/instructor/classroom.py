"""``bertlab classroom``: the GitHub Actions workflow that grades a learner's repository on each push.

The learner's repository is a copy of the course's template (the course without ``solutions/``).
The workflow installs the course as ``make`` does (the pins read by ``install_pins``), grades every
notebook once with ``bertlab grade --json``, then reports each grade cell as a test of GitHub
Classroom's autograding: ``autograding-command-grader`` runs ``classroom_verdict`` for the cell
and gives it the cell's points from the nbgrader source when it passed, and
``autograding-grading-reporter`` sends the points to Classroom. Tests are named for the task, so
Classroom's report reads as points per task.

Hidden tests are in ``solutions/``, which the learner's repository must not hold. When the
classroom's organisation has the secret ``BERTLAB_SOURCES_TOKEN`` and the variable
``BERTLAB_SOURCES_REPO`` (a private repository holding ``solutions/``), the workflow checks the
sources out beside ``exercises/`` and the hidden tests run; without them, only the visible ones do.
"""

from __future__ import annotations

import json
from pathlib import Path

from bertlab.grading import notebooks
from bertlab.instructor import install_pins
from bertlab.instructor.gradescope import source_notebook
from bertlab.instructor.gradescope_results import grade_cells

GRADES = "${{ runner.temp }}/bertlab-grades.json"

HEAD = """\
# Written by `bertlab classroom`: put it at .github/workflows/classroom.yml in the classroom's
# template repository. Write it again with the command after the course's pins or grade cells change.
name: bertlab autograding
"on":
  push:
  workflow_dispatch:
permissions:
  checks: write
  actions: read
  contents: read
jobs:
  grade:
    runs-on: ubuntu-latest
    # Classroom's own first commit in a new repository is the released notebooks: nothing to grade.
    if: github.actor != 'github-classroom[bot]'
    timeout-minutes: 60
    env:
      HF_HUB_OFFLINE: "1"
      SOURCES_TOKEN: ${{{{ secrets.BERTLAB_SOURCES_TOKEN }}}}
    steps:
      - uses: actions/checkout@v5
      - name: The instructor's sources, for the hidden tests (when the classroom has them)
        if: env.SOURCES_TOKEN != ''
        uses: actions/checkout@v5
        with:
          repository: ${{{{ vars.BERTLAB_SOURCES_REPO }}}}
          token: ${{{{ env.SOURCES_TOKEN }}}}
          path: .bertlab-sources
          sparse-checkout: solutions
      - name: Put the sources beside exercises/
        if: env.SOURCES_TOKEN != ''
        run: rm -rf solutions && mv .bertlab-sources/solutions solutions && rm -rf .bertlab-sources
      - uses: actions/setup-python@v6
        with:
          python-version: "{python}"
          cache: pip
          cache-dependency-path: constraints.txt
      # As `make` installs it: torch alone and first, CPU-only (PyPI's Linux torch is a CUDA build
      # of several GB), then the course under its constraints.
      - name: Install the course
        run: |
          python -m pip install "pip=={pip}"
          python -m pip install "torch=={torch}" --index-url "{torch_index}"
          python -m pip install -c constraints.txt -e .
      - name: Grade the notebooks
        # Exit status 1 means a check failed: the tests below give each grade cell its points or 0.
        run: |
          bertlab grade --json --no-progress --cold --path exercises {tasks} \
            > "$RUNNER_TEMP/bertlab-grades.json" || true
"""

TEST = """\
      - name: {name}
        id: {id}
        uses: classroom-resources/autograding-command-grader@v1
        with:
          test-name: {name}
          command: python -m bertlab.instructor.classroom_verdict "{grades}" {assignment} {grade_id}
          timeout: 1
          max-score: {points}
"""

REPORT = """\
      - name: Report the points to GitHub Classroom
        uses: classroom-resources/autograding-grading-reporter@v1
        env:
{env}
        with:
          runners: {runners}
"""


def step_id(assignment: str, grade_id: str) -> str:
    """A step id (a letter first; letters, digits, - and _) unique across assignments."""
    return f"t{assignment.split('-')[0]}-{grade_id}"


def workflow(root: Path, assignments: list[str]) -> str:
    """The workflow grading ``assignments`` (every one in ``solutions/`` when empty)."""
    if not assignments:
        assignments = sorted(p.name for p in (root / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())
    pins = install_pins.read(root)
    text = HEAD.format(tasks=" ".join(assignments), **vars(pins))
    ids = []
    for assignment in assignments:
        for cell in grade_cells(notebooks.read(source_notebook(root, assignment))):
            ids.append(step_id(assignment, cell["grade_id"]))
            text += TEST.format(
                name=json.dumps(f"{assignment}: {cell['name']}"),  # a JSON string is a YAML string
                id=ids[-1],
                grades=GRADES,
                assignment=assignment,
                grade_id=cell["grade_id"],
                points=f"{cell['points']:g}",
            )
    env = "\n".join(f'          {i.upper()}_RESULTS: "${{{{ steps.{i}.outputs.result }}}}"' for i in ids)
    return text + REPORT.format(env=env, runners=",".join(ids))


def write(root: Path, assignments: list[str], out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(workflow(root, assignments))
    return out
