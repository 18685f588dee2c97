"""nbgrader configuration: solutions/ is the source, exercises/ the generated release.

Everything nbgrader writes while a class runs (the gradebook, the exchange, submitted/,
autograded/, feedback/) lives in ``instructor/`` next to this file, which git ignores: no system
path, nothing to clean out of the repository.
"""

import os
import sys

from bertlab import kernel_template
from bertlab.grading.pool import spin_briefly

c = get_config()  # noqa: F821  (injected by nbgrader)

HERE = os.path.dirname(os.path.abspath(__file__))
WORKSPACE = os.path.join(HERE, "instructor")
os.makedirs(os.path.join(WORKSPACE, "exchange"), exist_ok=True)
# nbgrader creates a new gradebook by running `alembic`, found on PATH: the one installed beside
# the Python running nbgrader, so a fresh course works without activating the venv.
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")

# The judge runs in nbgrader's own process: its OpenMP threads must not spin on the core the
# learner's process needs (set before anything imports torch).
spin_briefly(os.environ)
# Execute runs each notebook in a kernel forked from a template that imported torch and the course
# once per nbgrader command (bertlab/kernel_template.py), not seconds a notebook.
kernel_template.use_in_nbgrader(c, WORKSPACE)

c.CourseDirectory.root = HERE
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = "instructor/submitted"
c.CourseDirectory.autograded_directory = "instructor/autograded"
c.CourseDirectory.feedback_directory = "instructor/feedback"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(WORKSPACE, "gradebook.db")
c.CourseDirectory.course_id = "bertlab"
c.Exchange.root = os.path.join(WORKSPACE, "exchange")
c.Exchange.cache = os.path.join(WORKSPACE, "cache")  # not the user's data directory
# Learners' notebooks need no kernel other than the course venv's.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
# Grade cells call the pretrained model: allow a slow first load, never hang forever.
c.ExecutePreprocessor.timeout = 300
# Feedback is rendered from the autograded notebooks, whose grade cells hold the hidden tests
# again: nbgrader's default feedback would show them to the learner, so clear them first (with
# nbgrader's ClearHiddenTests, on the instructor's cells only and quiet about nbconvert's display
# settings: bertlab/nbgrader_feedback.py).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "bertlab.nbgrader_feedback.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
# Autograde judges each notebook as `bertlab grade` does (the learner's code in its own process,
# the verdict outside it) after nbgrader's own run, so both give the same score per grade cell.
c.Autograde.autograde_preprocessors = [
    "bertlab.nbgrader_execute.Execute",  # nbgrader's, with a reason where a cell ended its kernel
    "bertlab.nbgrader_verdicts.JudgeVerdicts",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
