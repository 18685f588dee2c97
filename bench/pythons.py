"""Run the course on each admitted Python, from an empty environment: ``make pythons``.

``tests/test_wheels.py`` resolves the pins for every Python the Makefile's ``PYTHONS`` admits;
this runs them. It creates (once, then reuses) a Debian chroot with ``debootstrap``, by default of
Debian's testing suite, which ships the newest Pythons, in the user's cache, not in the course.
For each admitted Python the suite packages it installs ``python3.X`` and ``python3.X-venv``,
clones the course's committed HEAD afresh into the chroot, and runs there, as a learner would:

1. install: ``make doctor PYTHON=python3.X`` (creates ``.venv/`` as ``make start`` does, then
   ``bertlab doctor``: every line must be OK);
2. grade: ``bertlab grade --path solutions``: the reference solutions earn full marks;
3. site: ``make site``: every lesson runs and every claim holds (``mkdocs build --strict``);
4. check: ``make check``: lint, types and every test not marked slow.

A step runs only when the install passed. It prints each step as it starts, a line a minute while
it runs, and a table at the end; each step's full output is in a log beside the chroot. The
results, with their date, go to ``bench/pythons.json``, which the Setup page shows ("What runs
where", ``docs/hooks/pythons.py``); a Python this run did not cover keeps its earlier results.
Exit status: 0 every step passed, 1 a step failed, 2 nothing could be run.

Needs root (``debootstrap``, ``chroot``, ``mount``), ``debootstrap`` and the network (Debian's
and Python's package registries); tens of minutes per Python, and several GB of disk for each.
/proc, /sys and /dev (with /dev/shm) are mounted in the chroot while it runs, and unmounted at the
end, also after a failure, Ctrl-C or SIGTERM. The chroot shares the kernel, so the grader's
Landlock sandbox and cgroups work as on the machine itself.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "pythons.json"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bertlab"
# What every leg needs besides its Python: make and git for the course, certificates for pip, and
# procps (pgrep), with which the tests look for a process left behind.
BASE_PACKAGES = ("make", "git", "ca-certificates", "procps")
READY = ".bertlab-ready"  # written once debootstrap has finished: a half-made chroot is made again
WORKDIR = "/srv/bertlab"  # each Python's clone, inside the chroot
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MOUNTS = ("proc", "sys", "dev")
STEPS = ("install", "grade", "site", "check")
HEARTBEAT_S = 60


class SetupError(Exception):
    """The chroot could not be made ready: nothing was run."""


def commands(minor: str, torch_index: str | None) -> dict[str, str]:
    """Each step's command, run in the clone's directory as a learner would type it."""
    index = f" TORCH_INDEX={shlex.quote(torch_index)}" if torch_index else ""
    return {
        "install": f"make doctor PYTHON=python{minor}{index}",
        "grade": ".venv/bin/bertlab grade --path solutions --no-progress",
        "site": "make site",
        "check": "make check",
    }


def admitted(root: Path = ROOT) -> list[str]:
    found = re.search(r"^PYTHONS := (.*)$", (root / "Makefile").read_text(), re.M)
    if not found:
        raise SystemExit("the Makefile sets no PYTHONS")
    return found.group(1).split()


@dataclass
class Step:
    step: str
    command: str
    result: str = "not run"  # passed, failed, not run
    seconds: float = 0.0
    summary: str = ""


@dataclass
class Run:
    python: str  # "3.14"
    version: str = ""  # "3.14.0", as the chroot's python3.14 reports it
    date: str = ""
    commit: str = ""
    system: str = ""
    steps: list[Step] = field(default_factory=list)


def summary(step: str, log: str) -> str:
    """The line of a step's output that says what it did: the grade's total, pytest's count."""
    patterns = {
        "install": r"^\s*(?:OK\s+)?torch\b.*$",
        "grade": r"^\s*total\s+(\S+)",
        "site": r"(Documentation built in [\d.]+ seconds)",
        "check": r"^=+ (.*\b(?:passed|failed)\b.*) =+$",
    }
    found = re.findall(patterns[step], log, re.M)
    return " ".join(found[-1].split()) if found else ""


def duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def table(runs: list[Run]) -> list[str]:
    """The final table, as printed and as the Setup page shows it."""
    rows = [("Python", "step", "result", "time", "summary")]
    for run in runs:
        rows += [(run.version or run.python, s.step, s.result, duration(s.seconds), s.summary) for s in run.steps]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return [
        (" ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + " " + row[4]).rstrip()
        for row in rows
    ]


class Chroot:
    """A Debian suite in a folder, with /proc, /sys and /dev mounted while in use."""

    def __init__(self, path: Path, suite: str, mirror: str | None):
        self.path, self.suite, self.mirror = path, suite, mirror
        self.mounted: list[Path] = []

    def create(self, packages: list[str]) -> None:
        if (self.path / READY).exists():
            print(f"==> reusing the {self.suite} chroot in {self.path}", flush=True)
            return
        if not shutil.which("debootstrap"):
            raise SetupError("debootstrap was not found: apt-get install debootstrap (Debian, Ubuntu)")
        partial = self.path.with_name(self.path.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        print(f"==> creating a {self.suite} chroot in {self.path} with debootstrap (minutes)", flush=True)
        command = ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", self.suite, str(partial)]
        subprocess.run(command + ([self.mirror] if self.mirror else []), check=True, stdout=subprocess.DEVNULL)
        shutil.rmtree(self.path, ignore_errors=True)
        partial.rename(self.path)
        (self.path / READY).write_text(f"{self.suite}\n")

    def mount(self) -> None:
        for name in MOUNTS:
            target = self.path / name
            if name == "proc":
                subprocess.run(["mount", "-t", "proc", "proc", str(target)], check=True)
            else:  # recursive, so /dev/shm, /dev/pts and the cgroup file systems come too
                subprocess.run(["mount", "--rbind", f"/{name}", str(target)], check=True)
                subprocess.run(["mount", "--make-rslave", str(target)], check=True)
            self.mounted.append(target)
        shutil.copyfile("/etc/resolv.conf", self.path / "etc" / "resolv.conf")

    def unmount(self) -> None:
        for target in reversed(self.mounted):
            if subprocess.run(["umount", "-R", str(target)], stderr=subprocess.DEVNULL).returncode:
                # a process the run left behind still holds it: detach it now, freed when it ends
                subprocess.run(["umount", "-R", "-l", str(target)])
        self.mounted.clear()

    def argv(self, command: str, cwd: str = "/") -> list[str]:
        """``command`` run by bash in the chroot, niced, with a clean environment."""
        env = ["HOME=/root", f"PATH={PATH}", "LANG=C.UTF-8", "TERM=dumb", "DEBIAN_FRONTEND=noninteractive"]
        script = f"cd {shlex.quote(cwd)} && {command}"
        return ["chroot", str(self.path), "/usr/bin/env", "-i", *env, "nice", "-n", "10", "bash", "-c", script]

    def output(self, command: str) -> str:
        return subprocess.run(self.argv(command), check=True, capture_output=True, text=True).stdout.strip()

    def install(self, packages: list[str]) -> None:
        print(f"==> installing {' '.join(packages)} in the chroot", flush=True)
        # A mirror that serves a snapshot of the suite (a snapshot archive, a proxy) serves a Release
        # file past its Valid-Until date: apt would refuse it. Its signature is still checked.
        quiet = "apt-get -qq -o=Dpkg::Use-Pty=0 -o=Acquire::Check-Valid-Until=false"
        self.output(f"{quiet} update && {quiet} install -y --no-install-recommends {' '.join(packages)} >/dev/null")

    def trust_local_certificates(self) -> None:
        """The certificates this machine trusts beyond Debian's own (a company proxy's, say): pip
        in the chroot reaches the package registry as the machine itself does."""
        local = Path("/usr/local/share/ca-certificates")
        if local.is_dir() and any(local.iterdir()):
            shutil.copytree(local, self.path / local.relative_to("/"), dirs_exist_ok=True)
            self.output("update-ca-certificates >/dev/null")

    def has_package(self, name: str) -> bool:
        policy = subprocess.run(self.argv(f"apt-cache policy {name}"), capture_output=True, text=True).stdout
        candidate = re.search(r"Candidate: (\S+)", policy)
        return bool(candidate and candidate.group(1) != "(none)")

    def system(self) -> str:
        """ "Debian testing (forky), Linux 6.18 x86_64": the kernel matters to the sandbox (Landlock)."""
        release = dict(re.findall(r'^(\w+)="?([^"\n]*)"?$', (self.path / "etc" / "os-release").read_text(), re.M))
        codename = f" ({release['VERSION_CODENAME']})" if release.get("VERSION_CODENAME") else ""
        kernel = ".".join(platform.release().split(".")[:2])
        return f"Debian {self.suite}{codename}, Linux {kernel} {platform.machine()}"


def run_step(chroot: Chroot, step: Step, cwd: str, log: Path, verbose: bool, label: str) -> None:
    print(f"==> [{label}] {step.step}: {step.command}  (log: {log})", flush=True)
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(chroot.argv(step.command, cwd), stdout=out, stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None:
                try:
                    proc.wait(timeout=HEARTBEAT_S)
                except subprocess.TimeoutExpired:
                    lines = log.read_text(errors="replace").strip().splitlines()
                    last = lines[-1][:100] if lines else ""
                    print(f"    [{label}] {step.step}: {duration(time.monotonic() - start)}  {last}", flush=True)
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
    step.seconds = round(time.monotonic() - start, 1)
    step.result = "passed" if proc.returncode == 0 else "failed"
    text = log.read_text(errors="replace")
    said = summary(step.step, text)
    step.summary = said if proc.returncode == 0 else ", ".join(filter(None, [said, f"exit status {proc.returncode}"]))
    print(f"    [{label}] {step.step} {step.result} in {duration(step.seconds)}  {step.summary}", flush=True)
    if verbose or proc.returncode:
        print("\n".join("    | " + line for line in text.splitlines()[-40:]), flush=True)


def run_python(chroot: Chroot, minor: str, args: argparse.Namespace, commit: str, logs: Path) -> Run:
    run = Run(python=minor, date=datetime.date.today().isoformat(), commit=commit, system=chroot.system())
    run.version = chroot.output(f"python{minor} -c 'import platform; print(platform.python_version())'")
    clone = chroot.path / WORKDIR.lstrip("/") / minor
    shutil.rmtree(clone, ignore_errors=True)
    clone.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", commit], check=True)
    run.steps = [Step(name, command) for name, command in commands(minor, args.torch_index).items()]
    for step in run.steps:
        if step is not run.steps[0] and run.steps[0].result != "passed":
            break
        run_step(chroot, step, f"{WORKDIR}/{minor}", logs / f"{minor}-{step.step}.log", args.verbose, run.version)
    return run


def record(runs: list[Run], path: Path) -> None:
    """This command's runs and its final table; each run replaces the earlier one of its Python,
    the others are kept (with their own dates), newest Python first."""
    kept = {run["python"]: run for run in (json.loads(path.read_text())["runs"] if path.exists() else [])}
    kept.update({run.python: asdict(run) for run in runs})
    ordered = sorted(kept.values(), key=lambda run: [int(p) for p in run["python"].split(".")], reverse=True)
    results = {"command": "make pythons", "date": runs[-1].date, "output": table(runs), "runs": ordered}
    path.write_text(json.dumps(results, indent=2) + "\n")


def parser() -> argparse.ArgumentParser:
    described = __doc__.split("\n\n")
    p = argparse.ArgumentParser(
        prog="make pythons",
        description="\n\n".join(described[:4]).replace("``", "`"),
        epilog=(
            "Examples: make pythons | make pythons ARGS='--pythons 3.14' | "
            "python -m bench.pythons --suite bookworm --pythons 3.11"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--pythons",
        nargs="+",
        metavar="3.X",
        help="the Pythons to run, in this order (default: every admitted one, newest first; "
        "one the suite does not package is reported and skipped)",
    )
    p.add_argument("--suite", default="testing", help="the Debian suite of the chroot (default: testing)")
    p.add_argument("--mirror", help="the Debian mirror debootstrap installs from (default: debootstrap's)")
    p.add_argument(
        "--chroot",
        type=Path,
        help="the chroot's folder, created when missing (default: the user's cache, bertlab/pythons-SUITE)",
    )
    p.add_argument("--commit", default="HEAD", help="the commit of the course to run (default: HEAD)")
    p.add_argument("--torch-index", help="passed as the Makefile's TORCH_INDEX (default: none, as make start)")
    p.add_argument("--results", type=Path, default=RESULTS, help="where the results go (default: bench/pythons.json)")
    p.add_argument("--no-record", action="store_true", help="print the table only; leave the results file alone")
    p.add_argument("--verbose", action="store_true", help="print the end of every step's output, not only a failure's")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if os.geteuid() != 0:
        print("make pythons needs root (debootstrap, chroot, mount): run it with sudo", file=sys.stderr)
        return 2
    pythons = args.pythons or admitted()[::-1]
    unknown = [p for p in pythons if p not in admitted()]
    if unknown:
        print(f"not admitted by the Makefile's PYTHONS: {' '.join(unknown)}", file=sys.stderr)
        return 2
    path = args.chroot or CACHE / f"pythons-{args.suite}"
    logs = path.with_name(path.name + "-logs")
    logs.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run([*git, "rev-parse", "--short", args.commit], capture_output=True, text=True)
    if commit.returncode:
        print(f"no commit {args.commit} in the course's history", file=sys.stderr)
        return 2
    if subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True).stdout:
        print(f"==> runs the commit {commit.stdout.strip()}: uncommitted changes are not in it", flush=True)

    # SIGTERM and SIGHUP end the run as Ctrl-C does: the running step is stopped, the mounts undone.
    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    chroot = Chroot(path, args.suite, args.mirror)
    runs: list[Run] = []
    try:
        chroot.create(list(BASE_PACKAGES))
        chroot.mount()
        chroot.install(list(BASE_PACKAGES))
        chroot.trust_local_certificates()
        packaged = [p for p in pythons if chroot.has_package(f"python{p}-venv")]
        for minor in pythons:
            if minor not in packaged:
                print(f"==> Python {minor}: Debian {args.suite} has no python{minor}-venv; not run", flush=True)
        if packaged:
            chroot.install([f"python{p}{suffix}" for p in packaged for suffix in ("", "-venv")])
        for minor in packaged:
            runs.append(run_python(chroot, minor, args, commit.stdout.strip(), logs))
            if not args.no_record:
                record(runs, args.results)
    except KeyboardInterrupt:
        print("==> stopped; the steps that finished are below", file=sys.stderr)
    except subprocess.CalledProcessError as err:
        print(f"==> could not prepare the chroot: {shlex.join(map(str, err.cmd))} failed", file=sys.stderr)
        print((err.stderr or "").strip(), file=sys.stderr)
    except SetupError as err:
        print(f"==> {err}", file=sys.stderr)
    finally:
        chroot.unmount()
    print()
    print("\n".join(table(runs)))
    if runs and not args.no_record:
        print(f"\nrecorded in {args.results.relative_to(ROOT) if args.results.is_relative_to(ROOT) else args.results}")
    if not runs:
        return 2
    return 0 if all(s.result == "passed" for run in runs for s in run.steps) else 1


if __name__ == "__main__":
    sys.exit(main())
