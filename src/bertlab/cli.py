"""The ``bertlab`` command: grade notebooks, check the installation, release exercises."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from bertlab.instructor import platform_cli
from bertlab.settings import DEFAULT_JOBS, DEFAULTS

_JOBS_DEFAULT = f"bertlab.toml's grade.jobs, else {DEFAULT_JOBS}"

EPILOG = "Documentation: the course site's Commands page (`make start`, then open it)."


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertlab",
        description="Build Hugging Face's BertLayer piece by piece, graded against a pretrained BERT.",
        epilog=EPILOG,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    grade = sub.add_parser(
        "grade",
        help="grade your exercise notebooks",
        description=(
            "Run each notebook the way nbgrader autograde does (every cell in order; each grade cell "
            "earns its points or 0), in its own process with a timeout. Your files are only read. "
            "Exit status: 0 all checks passed, 1 some failed, 2 nothing could be graded."
        ),
        epilog="Examples: bertlab grade 03 | bertlab grade --watch 05 | bertlab grade --path solutions --json",
    )
    grade.add_argument(
        "tasks",
        nargs="*",
        metavar="EXERCISE",
        help="an exercise (one notebook and its tasks), by number or folder name prefix "
        "(3, 03, 03-self-attention); default: every exercise",
    )
    grade.add_argument(
        "--path",
        type=Path,
        default=Path("exercises"),
        help="directory holding NN-name/NN-name.ipynb (default: exercises)",
    )
    grade.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    _limit_options(grade, "the process running a notebook's cells")
    grade.add_argument("--jobs", type=_positive(int), help=f"notebooks graded at once (default: {_JOBS_DEFAULT})")
    grade.add_argument(
        "--verbose", action="store_true", help="print every failure message, not just the first per task"
    )
    grade.add_argument(
        "--hint",
        type=int,
        choices=(1, 2, 3),
        metavar="N",
        help="show step N (1 to 3) of each failure's hint ladder: 1 what to look at, 2 where the lessons "
        "explain it, 3 the fix in words (default: the next step, 1 at a check's first failure, one more at "
        "each failing grade after it, back to 1 once the task passes)",
    )
    grade.add_argument(
        "--progress-dir",
        type=Path,
        metavar="DIR",
        help="write progress.json (and failure heatmaps) here for the site's Progress page "
        "(default: the course's site/, when it exists and the exercises are graded)",
    )
    grade.add_argument("--no-progress", action="store_true", help="do not write progress.json")
    grade.add_argument(
        "--watch",
        action="store_true",
        help="keep running: grade the exercise(s) again each time their notebook is saved (Ctrl-C stops)",
    )
    grade.add_argument(
        "--cold",
        action="store_true",
        help="start judges for this command even when warm ones run (`bertlab judges start`)",
    )
    _model_option(grade)
    _judges_parser(sub)

    doctor = sub.add_parser(
        "doctor",
        help="check the installation and the pretrained model",
        description="Print versions, the model's path and hash and offline status, each OK or a fix.",
    )
    _model_option(doctor)

    release = sub.add_parser(
        "release",
        help="instructors: regenerate exercises/ from solutions/ (nbgrader generate_assignment)",
        description="Regenerate the learner release exercises/ from the nbgrader source solutions/.",
    )
    release.add_argument(
        "assignment", nargs="?", default="*", help="one assignment, e.g. 03-self-attention (default: all)"
    )
    release.add_argument(
        "--check", action="store_true", help="do not write; exit 1 if exercises/ differs from a fresh release"
    )
    _autograde_parser(sub)
    platform_cli.add_parsers(sub)  # gradescope, classroom
    return parser


def _judges_parser(sub) -> None:
    judges = sub.add_parser(
        "judges",
        help="keep judges warm between `bertlab grade` commands (make start does)",
        description=(
            "Start, stop or show the warm judges: judge processes that have imported torch and "
            "the checks and loaded the model once, so that `bertlab grade` answers without waiting "
            "for them. `bertlab grade` uses them while they run from the same code, libraries and model "
            "(else it starts its own, as without them); every notebook still runs in a new process. "
            "They stop after --idle-minutes without a request."
        ),
        epilog="Examples: bertlab judges start | bertlab judges status | bertlab judges stop",
    )
    judges.add_argument("action", choices=("start", "stop", "status"), metavar="ACTION", help="start, stop or status")
    judges.add_argument(
        "--jobs",
        type=_positive(int),
        help=f"judges kept warm, notebooks graded at once (default: {_JOBS_DEFAULT})",
    )
    judges.add_argument(
        "--idle-minutes",
        type=_positive(float),
        default=60.0,
        metavar="MINUTES",
        help="stop after this long without a request (default: 60)",
    )
    _model_option(judges)


def _limit_options(parser, whose: str) -> None:
    """--timeout and --memory-limit, as `grade` and `autograde` take them (defaults from bertlab.toml)."""
    parser.add_argument(
        "--timeout",
        type=_positive(float),
        metavar="SECONDS",
        help=f"time limit per notebook (default: bertlab.toml's grade.timeout, else {DEFAULTS['timeout']:g})",
    )
    parser.add_argument(
        "--memory-limit",
        type=_positive(float),
        metavar="MB",
        help=f"memory {whose} may use (default: bertlab.toml's grade.memory_limit, else {DEFAULTS['memory_limit']:g})",
    )


def _autograde_parser(sub) -> None:
    autograde = sub.add_parser(
        "autograde",
        help="instructors: grade every collected submission in parallel, into nbgrader's gradebook",
        description=(
            "Grade every submission collected in the nbgrader course (submitted/<student>/<assignment>/) "
            "in parallel worker processes (on this machine, or on a Dask cluster's workers with --scheduler), "
            "and record the results as `nbgrader autograde` does: "
            "autograded/ notebooks and gradebook rows that `nbgrader export`, `nbgrader generate_feedback` "
            "and the formgrader read. Only submissions whose files changed since their last autograde are "
            "graded again, unless --force. A submission that hangs, crashes or is not a notebook gets 0 "
            "with the reason. Exit status: 0 graded, 2 nothing could be graded, 130 stopped by Ctrl-C "
            "(what was recorded is kept; the rest is graded next run)."
        ),
        epilog=(
            "Examples: bertlab autograde | bertlab autograde 05-feed-forward --jobs 2 | "
            "bertlab autograde --course path/to/course --timeout 120 --force | "
            "bertlab autograde --scheduler tcp://grading-host:8786"
        ),
    )
    autograde.add_argument(
        "assignments",
        nargs="*",
        metavar="ASSIGNMENT",
        help="assignment names, e.g. 05-feed-forward (default: every collected one)",
    )
    autograde.add_argument("--jobs", type=_positive(int), help=f"submissions graded at once (default: {_JOBS_DEFAULT})")
    autograde.add_argument(
        "--course",
        type=Path,
        metavar="DIR",
        help="the nbgrader course directory, holding nbgrader_config.py (default: the one at or above here)",
    )
    _limit_options(autograde, "a submission's process")
    autograde.add_argument(
        "--student",
        action="append",
        metavar="ID",
        help="grade only this student's submissions (repeat for several; default: everyone)",
    )
    autograde.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="grade on the workers of the Dask scheduler at ADDRESS (e.g. tcp://host:8786), "
        "not on this machine; each worker judges as many at once as it has threads, and --jobs is "
        "not used (default: bertlab.toml's grade.scheduler, else this machine)",
    )
    autograde.add_argument("--force", action="store_true", help="regrade every submission, changed or not")
    autograde.add_argument("--json", action="store_true", help="print the outcomes as JSON instead of a table")


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a {'whole ' if kind is int else ''}number, got {text!r}"
            ) from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _model_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        metavar="PATH",
        help="a local Hugging Face BERT directory (default: $BERTLAB_MODEL, else the bundled all-MiniLM-L6-v2)",
    )


def _grade(args) -> int:
    from bertlab.grading import GradingError, grade
    from bertlab.grading.notebooks import course_root
    from bertlab.grading.table import render
    from bertlab.settings import SettingsError, grade_settings
    from bertlab.terminated import on_sigterm, stopped_by

    def progress(msg):
        return print(msg, file=sys.stderr, flush=True)

    try:
        settings = grade_settings(course_root(args.path.resolve()) or course_root(Path.cwd()))
        options = {
            key: getattr(args, key) if getattr(args, key) is not None else settings.get(key, default)
            for key, default in DEFAULTS.items()
        }
        with on_sigterm():
            if args.watch:
                return _watch(args, options, progress)
            report = grade(args.path, args.tasks, model=args.model, progress=progress, warm=not args.cold, **options)
    except (GradingError, SettingsError) as err:
        print(f"bertlab grade: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (``terminated``)
        said, status = stopped_by(stop)
        print(f"bertlab grade: {said}; nothing was written", file=sys.stderr)
        return status
    print(json.dumps(report.to_dict(), indent=2) if args.json else render(report, verbose=args.verbose))
    if not args.json:
        _show_hints(args, report, progress)
    _write_progress(args, report, progress)
    return 0 if report.all_passed else 1


def _judges(args) -> int:
    from bertlab.grading import warm_judges
    from bertlab.grading.notebooks import course_root
    from bertlab.settings import SettingsError, grade_settings

    try:
        if args.action == "start":
            jobs = args.jobs or grade_settings(course_root(Path.cwd())).get("jobs", DEFAULT_JOBS)
            warm_judges.start(jobs, args.model, args.idle_minutes)
        elif args.action == "stop":
            print("warm judges stopped" if warm_judges.stop() else "no warm judges were running")
        else:
            _print_judges_status(warm_judges, args.model)
    except (warm_judges.JudgesError, SettingsError) as err:
        print(f"bertlab judges: {err}", file=sys.stderr)
        return 2
    return 0


def _print_judges_status(warm_judges, model: str | None) -> None:
    import time

    running = warm_judges.status()
    if not running:
        print("no warm judges are running: `bertlab grade` starts its own (`bertlab judges start` keeps them warm)")
        return
    usable = running["fingerprint"] == warm_judges.fingerprint(model)
    print(
        f"warm judges running: {running['jobs']} (pid {running['pid']}), up {time.time() - running['started']:.0f} s, "
        f"{running['graded']} notebook(s) graded, {running['busy']} grading now"
    )
    print(
        "  `bertlab grade` uses them"
        if usable
        else "  started from other code, libraries, model or kernel settings: `bertlab grade` starts its own "
        "(`bertlab judges start` replaces them)"
    )


def _watch(args, options: dict, say) -> int:
    from bertlab.grading.pool import Limits
    from bertlab.grading.table import render
    from bertlab.grading.watch import watch

    def show(report, seconds: float) -> None:
        print(render(report, verbose=args.verbose), flush=True)
        _show_hints(args, report, say)
        if seconds:
            say(f"graded {seconds:.1f} s after the save")
        _write_progress(args, report, say)

    watch(args.path, args.tasks, Limits(options["timeout"], options["memory_limit"]), show, say, model=args.model)
    return 0


def _progress_dir(args) -> Path | None:
    """Where ``bertlab grade`` writes progress.json: --progress-dir, else the course's built site
    when the learner's exercises/ are graded (an instructor grading solutions/ leaves it alone)."""
    from bertlab.grading.notebooks import course_root

    if args.no_progress:
        return None
    if args.progress_dir is not None:
        return args.progress_dir
    root = course_root(args.path.resolve())
    if root is None or args.path.resolve() != (root / "exercises").resolve() or not (root / "site").is_dir():
        return None
    return root / "site"


def _show_hints(args, report, say) -> None:
    """Print a step of each failure's hint ladder (``--hint N``, else the next one) and keep the
    counts in the user's cache (``bertlab.hint_steps``), site or no site."""
    from bertlab import hint_steps, hints

    old = _progress_dir(args)  # where older versions kept the counts
    counts = hint_steps.load(args.path, old)
    shown, kept = hints.advance(report, counts, forced=args.hint, verbose=args.verbose)
    text = hints.render(shown, forced=args.hint)
    if text:
        print("\n" + text, flush=True)
    if kept != counts or hint_steps.left_behind(old):
        try:
            hint_steps.save(args.path, kept, old)
        except OSError as err:
            say(f"bertlab grade: could not keep the hint steps: {err}")


def _write_progress(args, report, say) -> None:
    from bertlab import progress

    out = _progress_dir(args)
    if out is None:
        return
    try:
        path = progress.write(report, out)
    except OSError as err:  # the grades are printed already: a read-only site costs only the page
        say(f"bertlab grade: could not write the progress page's data: {err}")
        return
    say(f"progress page updated: {path} (refresh the site's Progress page)")


def _release(args) -> int:
    from bertlab import release
    from bertlab.grading.notebooks import course_root

    root = course_root(Path.cwd())
    if root is None:
        print("bertlab release: run it inside the course (no nbgrader_config.py here or above)", file=sys.stderr)
        return 2
    if args.check:
        problems = release.drift(root)
        for problem in problems:
            print(problem)
        print(
            "exercises/ matches solutions/" if not problems else "run `bertlab release` to regenerate", file=sys.stderr
        )
        return 1 if problems else 0
    release.generate(root, root / "exercises", args.assignment)
    print(f"regenerated exercises/ ({args.assignment}) from solutions/")
    return 0


def main(argv: list[str] | None = None) -> int:
    user_env = dict(os.environ)  # the doctor reports the user's own setting, not the one set below
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = _parser().parse_args(argv)
    if args.command == "grade":
        return _grade(args)
    if args.command == "doctor":
        from bertlab import doctor

        return doctor.run(args.model, env=user_env)
    if args.command == "release":
        return _release(args)
    if args.command == "judges":
        return _judges(args)
    if args.command == "autograde":
        from bertlab.instructor.cli import run

        return run(args)
    if args.command in ("gradescope", "classroom"):
        return platform_cli.run(args)
    _parser().print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
