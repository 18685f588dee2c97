"""``bertlab autograde``'s command line: options from the command, else bertlab.toml, else defaults."""

from __future__ import annotations

import sys
from pathlib import Path


def run(args) -> int:
    from bertlab.grading.notebooks import course_root
    from bertlab.instructor.autograde import autograde, summary, to_json
    from bertlab.instructor.course import CourseError
    from bertlab.settings import DEFAULT_JOBS, DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT, SettingsError, grade_settings
    from bertlab.terminated import on_sigterm, stopped_by

    if args.scheduler:  # first: a wrong address is named in a second, whatever else is wrong
        from bertlab.instructor.cluster_judges import ClusterError, check_address

        try:
            check_address(args.scheduler)
        except ClusterError as err:
            print(f"bertlab autograde: {err}", file=sys.stderr)
            return 2
    root = args.course.resolve() if args.course else course_root(Path.cwd())
    if root is None:
        print("bertlab autograde: no nbgrader_config.py here or above (use --course DIR)", file=sys.stderr)
        return 2
    try:
        settings = grade_settings(root)

        def option(key: str, default):
            return getattr(args, key) if getattr(args, key) is not None else settings.get(key, default)

        with on_sigterm():
            outcomes = autograde(
                root,
                args.assignments,
                students=args.student,
                force=args.force,
                timeout=option("timeout", DEFAULT_TIMEOUT),
                memory_limit=option("memory_limit", DEFAULT_MEMORY_MB),
                jobs=option("jobs", DEFAULT_JOBS),
                scheduler=option("scheduler", None),
            )
    except (CourseError, SettingsError) as err:
        print(f"bertlab autograde: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (``terminated``)
        said, status = stopped_by(stop)
        print(f"bertlab autograde: {said}; what was recorded is kept", file=sys.stderr)
        return status
    print(to_json(outcomes) if args.json else summary(outcomes))
    return 0
