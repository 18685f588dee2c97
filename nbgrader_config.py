"""nbgrader configuration: solutions/ is the source, exercises/ the generated release."""

c = get_config()  # noqa: F821  (injected by nbgrader)

c.CourseDirectory.root = "."
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.course_id = "bertlab"
# Learners' notebooks need no kernel other than the course venv's.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
# Grade cells call the pretrained model: allow a slow first load, never hang forever.
c.ExecutePreprocessor.timeout = 300
# Autograde judges each notebook as `bertlab grade` does (the learner's code in its own process,
# the verdict outside it) after nbgrader's own run, so both give the same score per grade cell.
c.Autograde.autograde_preprocessors = [
    "nbgrader.preprocessors.Execute",
    "bertlab.nbgrader_verdicts.JudgeVerdicts",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
