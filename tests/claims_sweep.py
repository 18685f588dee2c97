"""The lessons' claims under every CPU condition this machine can reproduce, and their margins.

``python -m tests.claims_sweep`` runs each lesson that makes claims as a plain script (the
experiments, not the page: no kernel, no HTML, figures closed unseen) once per kernel set this
machine dispatches, with the one thread every build gives a lesson (``kernels.lesson_conditions``;
``run_all`` runs them side by side, one per core), and prints each claim's margin: the smallest
ratio of its two sides over all the runs (``bertlab.experiments.claims.margin``). ``--write``
records them in ``tests/claim_margins.json``, the file the contributor page's table is built from.
``tests/test_claims_under_kernels.py`` runs the same sweep and fails when a claim's verdict
differs between runs or its margin is under ``FLOOR``.

A run is lenient (``BERTLAB_CLAIMS`` unset), so that one claim that does not hold does not hide
the others: the sweep reads the verdicts, it does not rely on the lesson stopping.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

from tests.docs_hooks import load_hook
from tests.kernels import Condition, lesson_conditions, run_all

ROOT = Path(__file__).resolve().parents[1]
MARGINS_FILE = ROOT / "tests" / "claim_margins.json"
# The thinnest a claim between two measured quantities may hold by, over every condition. The
# sides of the course's claims move by at most a few parts in a million between kernel sets here
# (and between thread counts, which a build leaves out by giving each lesson one). The claims that
# compare with a rounding difference are counted in float32 steps, not in one machine's rounding;
# another BLAS or Apple's kernels sum in other orders, but move nothing built from whole layers by
# percents. A claim thinner than 1.25 rests on the sample (which sentences, which dropout draw)
# more than on the model: reword it or measure it on more.
FLOOR = 1.25
# Claims comparing two counts (multiply-adds, a crossover length): no rounding reaches them, and
# how far apart the counts are is the architecture's fact, not a measurement's margin.
COUNTED = frozenset({"ffn_dominates_here", "quadratic_small_here", "crossover_beyond_max_positions"})

# The child: run each lesson given on the command line, print {stem: {"claims": .., "error": ..}}.
CHILD = """
import json, runpy, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.show = lambda *args, **kwargs: plt.close("all")
from bertlab.experiments import claims
found = {}
for path in sys.argv[1:]:
    claims._values.clear()
    claims._claims.clear()
    try:
        runpy.run_path(path, run_name="__main__")
        error = None
    except BaseException as err:  # noqa: BLE001  (reported with the claims recorded up to it)
        error = f"{type(err).__name__}: {err}"
    found[path] = {"claims": claims.records()["claims"], "error": error}
print(json.dumps(found))
"""


def lessons_with_claims() -> list[Path]:
    return [p for p in sorted((ROOT / "lessons").glob("[0-9][0-9]-*.py")) if "claims.claim(" in p.read_text()]


def run(condition: Condition, lessons: list[Path]) -> dict[str, dict]:
    """Each lesson's claims (and error, if it stopped) under ``condition``."""
    env = condition.env()
    env.pop("BERTLAB_CLAIMS", None)
    env.update(MPLBACKEND="Agg", HF_HUB_OFFLINE="1", PYTHONHASHSEED="0")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *map(str, lessons)], env=env, capture_output=True, text=True, cwd=ROOT
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the lessons did not run under {condition.name}:\n{proc.stderr[-3000:]}")
    last = proc.stdout.strip().splitlines()[-1]
    return {Path(path).stem: found for path, found in json.loads(last).items()}


def sweep(conds: list[Condition] | None = None, only: list[str] | None = None) -> dict[str, dict[str, dict]]:
    """``{condition name: {lesson stem: {"claims": .., "error": ..}}}`` over ``conds`` (default: every
    lesson condition), for the lessons whose stems are ``only`` (default: every lesson that makes claims)."""
    lessons = [p for p in lessons_with_claims() if only is None or p.stem in only]
    return run_all(lambda c: run(c, lessons), lesson_conditions() if conds is None else conds)


def built_condition(env: dict[str, str]) -> Condition:
    """The condition a site built in ``env`` runs its lessons under: the kernel set torch picks
    there and the threads the build gives each lesson process (``lessons_parallel.lesson_env``)."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability(), torch.get_num_threads())"
    env = load_hook("lessons_parallel").lesson_env(env)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    capability, threads = proc.stdout.split()
    return Condition(capability.lower(), int(threads))


def claims_hook():
    """The site's claims hook (``docs/hooks/claims.py``), loaded as a module: hooks are not a package."""
    return load_hook("claims")


def site_run(site: Path, lessons: list[Path], condition: Condition) -> dict[str, dict]:
    """Each lesson's claims as a built site's page carries them, shaped as ``run``'s: the build
    is strict, so a page it wrote is a lesson that ran through. A page that ran under another
    condition than ``condition`` (the one the sweep left to the site) is an error."""
    hook = claims_hook()
    found = {}
    for lesson in lessons:
        records = hook.read((site / "lessons" / lesson.stem / "index.html").read_text(encoding="utf-8"))
        error = None if records else "the built page carries no claim records"
        if records and Condition(**records["condition"]) != condition:
            error = f"the page ran under {Condition(**records['condition']).name}, not {condition.name}"
        found[lesson.stem] = {"claims": records["claims"] if records else {}, "error": error}
    return found


def summarise(runs: dict[str, dict[str, dict]]) -> dict[str, dict]:
    """Per claim (``"stem: name"``): its verdicts, its margin over the runs, and the conditions run."""
    from bertlab.experiments.claims import holds, margin

    by_claim: dict[str, dict[str, dict]] = {}
    for condition, lessons in runs.items():
        for stem, found in lessons.items():
            for name, record in found["claims"].items():
                by_claim.setdefault(f"{stem}: {name}", {})[condition] = record
    summary = {}
    for key, records in sorted(by_claim.items()):
        margins = [margin(r) for r in records.values()]
        finite = [m for m in margins if m is not None]
        first = next(iter(records.values()))
        summary[key] = {
            "says": first["says"],
            "op": first["op"],
            "holds": {c: holds(r) for c, r in records.items()},
            "margin": min(finite) if finite else None,
            "counted": key.partition(": ")[2] in COUNTED,
        }
    return summary


def thin(summary: dict[str, dict]) -> list[str]:
    """The measured claims whose margin is under ``FLOOR`` (exact and counted claims have none)."""
    return [
        f"{key}: margin {s['margin']:.3g} < {FLOOR} ({s['says']})"
        for key, s in summary.items()
        if s["margin"] is not None and not s["counted"] and s["margin"] < FLOOR
    ]


def record(
    summary: dict[str, dict], conds: list[Condition], path: Path = MARGINS_FILE, only: list[str] | None = None
) -> None:
    """Write the margins; with ``only`` (lesson stems), replace those lessons' entries and keep the rest."""
    kept = {}
    if only is not None and path.exists():
        kept = {k: v for k, v in json.loads(path.read_text())["claims"].items() if k.partition(": ")[0] not in only}
    table = kept | {
        key: {
            "says": s["says"],
            "margin": None if s["margin"] is None else round(s["margin"], 4),  # inf: a sign claim
            "kind": "exact" if s["op"] in ("==", "!=") else "counted" if s["counted"] else "measured",
        }
        for key, s in summary.items()
    }
    table = dict(sorted(table.items()))
    stamp = {"measured": date.today().isoformat(), "conditions": [c.name for c in conds], "floor": FLOOR}
    path.write_text(json.dumps({**stamp, "claims": table}, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.claims_sweep",
        description="Run the lessons' claims under every CPU capability this machine can dispatch, with "
        "the one thread every build gives a lesson; print each claim's margin (the smallest ratio of its two sides).",
    )
    parser.add_argument("--write", action="store_true", help=f"record the margins in {MARGINS_FILE.relative_to(ROOT)}")
    parser.add_argument(
        "--lessons",
        nargs="+",
        metavar="STEM",
        help="only these lessons (e.g. 02-embeddings); --write then replaces their entries and keeps the others'",
    )
    args = parser.parse_args(argv)
    conds = lesson_conditions()
    print(f"conditions: {'; '.join(c.name for c in conds)}", file=sys.stderr)
    runs = sweep(conds, args.lessons)
    errors = [f"{c} {stem}: {f['error']}" for c, ls in runs.items() for stem, f in ls.items() if f["error"]]
    summary = summarise(runs)
    for key, s in summary.items():
        verdicts = set(s["holds"].values())
        m = "exact" if s["margin"] is None else f"{s['margin']:.3g}"
        print(f"{key:<62} {m:>8}  {'holds' if verdicts == {True} else 'DIFFERS' if len(verdicts) > 1 else 'FAILS'}")
    for line in errors + thin(summary):
        print(line, file=sys.stderr)
    if args.write:
        record(summary, conds, only=args.lessons)
    return 1 if errors or thin(summary) else 0


if __name__ == "__main__":
    os.chdir(ROOT)
    raise SystemExit(main())
