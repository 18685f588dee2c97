"""Submissions judged on a Dask cluster (``bertlab autograde --scheduler ADDRESS``).

Each submission becomes one Dask task (``bertlab.grading.cluster.judge_submission``) carrying its
notebooks and its assignment's source notebooks as bytes; the verdict comes back as data, and the
instructor's process records it in the gradebook as on the local path. What Dask does for us:

- a worker that dies mid-submission (killed, out of memory) costs nothing: the scheduler gives
  the task to another worker, up to its ``distributed.scheduler.allowed-failures`` (3 by default)
  deaths; a submission that kills every worker it reaches then ends as ``KilledWorker``, recorded
  as 0 on every grade cell with that reason, not retried forever;
- a task that raises (the worker's disk full, say) is run again ``RETRIES`` times;
- cancelling the futures (Ctrl-C) removes the class's tasks from the cluster.

The submissions are sent a few at a time, as the workers have threads (see ``judged``).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from importlib import metadata

from bertlab.instructor.course import CourseError

RETRIES = 1  # runs again of a task that raised; deaths of its worker are the scheduler's to count
WAIT_FOR_WORKERS = 60.0  # seconds for the scheduler to answer, and for a first worker to join it


class ClusterError(CourseError):
    """The cluster cannot grade this class; the message says why and what to run."""


ADDRESS_TIMEOUT = 2.0  # seconds for the scheduler's port to accept a connection


def check_address(address: str) -> None:
    """Fail at once, saying which part is wrong, unless a Dask scheduler answers at ``address``:
    its form (``tcp://HOST:PORT`` or ``tls://HOST:PORT``; no scheme means tcp), its host's name,
    its port, each in a second or two (Dask's own client would wait a minute, then blame the
    scheduler), then what answers there, in a few seconds (Dask's client would wait for ever on
    an HTTP server or a silent port)."""
    import socket

    from distributed.comm import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme not in ("tcp", "tls"):
        raise ClusterError(f"{address}: a Dask scheduler's address starts with tcp:// or tls://, not {scheme}://")
    try:
        host, port = parse_host_port(location)
    except ValueError as err:
        raise ClusterError(f"{address} has no port: write it as tcp://HOST:PORT (8786 is Dask's usual one)") from err
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise ClusterError(
            f"the host {host!r} of {address} is not known here ({err.strerror}): check its name"
        ) from err
    try:
        socket.create_connection((host, port), timeout=ADDRESS_TIMEOUT).close()
    except ConnectionRefusedError as err:
        raise ClusterError(
            f"nothing listens on port {port} of {host}: check the port in {address}, or start the scheduler "
            f"there (`dask scheduler --port {port}`)"
        ) from err
    except OSError as err:  # a timeout, an unreachable network
        raise ClusterError(
            f"{host}:{port} did not answer within {ADDRESS_TIMEOUT:g} s ({err.strerror or type(err).__name__}): "
            "check the host in the address, and that no firewall stands between"
        ) from err
    from bertlab.instructor.scheduler_answer import not_a_scheduler

    found = not_a_scheduler(address, host, port)
    if found:
        raise ClusterError(found)


class ClusterJudges:
    """The judges of a Dask cluster's workers; ``judged`` yields each verdict as it finishes."""

    def __init__(self, address: str, say=lambda line: print(line, file=sys.stderr, flush=True)):
        from distributed import Client

        check_address(address)
        self.address, self.say = address, say
        self.sent: dict = {}  # a Dask future -> the submission it judges
        self.refused: dict[str, str] = {}  # worker address -> its bertlab version, not this one's
        try:
            # Security (TLS certificates) comes from Dask's own configuration, as for `dask worker`.
            self.client = Client(address, timeout=WAIT_FOR_WORKERS, set_as_default=False)
        except OSError as err:
            raise ClusterError(
                f"something listens at {address}, but no Dask scheduler answers there ({err}): check the "
                "port, and tls:// with Dask's TLS settings when the scheduler uses TLS"
            ) from err
        try:
            self._check_workers()
            from bertlab.grading.cluster import JudgesOnDaskWorker

            self.client.register_plugin(JudgesOnDaskWorker())  # every worker starts its judges now, and each new one
        except BaseException:
            self.client.close()
            raise

    def _check_workers(self) -> None:
        """Refuse a cluster without workers, or with a worker whose bertlab is not this one's version."""
        try:
            self.client.wait_for_workers(1, timeout=WAIT_FOR_WORKERS)
        except TimeoutError as err:
            raise ClusterError(
                f"no Dask worker joined the scheduler at {self.address} within {WAIT_FOR_WORKERS:g} s; "
                f"start some with `dask worker {self.address}`"
            ) from err
        wrong = self._other_versions()
        if wrong:
            raise ClusterError(f"{self._named(wrong)}: install bertlab {self._ours()} on every worker")

    @staticmethod
    def _ours() -> str:
        from bertlab.grading.cluster import installed_version

        return installed_version()

    def _other_versions(self) -> dict[str, str]:
        """Worker address -> its bertlab version, for every worker whose version is not this command's."""
        try:
            # The standard library's own function: it answers on a worker with any version of bertlab.
            theirs = self.client.run(metadata.version, "bertlab")
        except metadata.PackageNotFoundError as err:
            raise ClusterError(
                f"a Dask worker of {self.address} has no bertlab installed; install the course's "
                f"package, version {self._ours()}, on every worker"
            ) from err
        return {worker: version for worker, version in theirs.items() if version != self._ours()}

    def _named(self, wrong: dict[str, str]) -> str:
        named = "; ".join(f"the worker at {worker} has bertlab {version}" for worker, version in sorted(wrong.items()))
        return f"{named}, this command bertlab {self._ours()} (verdicts of another version could differ)"

    def _refuse_stale(self, future) -> bool:
        """Whether ``future`` ended on a worker of another version (one that joined after the start):
        that worker is named and gets none of this class's submissions from now on."""
        from bertlab.grading.cluster import VersionMismatch

        if future.status != "error" or not isinstance(future.exception(), VersionMismatch):
            return False
        new = {w: v for w, v in self._other_versions().items() if w not in self.refused}
        self.refused.update(new)
        if new:
            self.say(f"{self._named(new)}: its submissions go to the other workers")
        if not self._allowed():
            raise ClusterError(f"{self._named(self.refused)}, and no other worker is left to grade")
        return True

    def _allowed(self) -> list[str]:
        return [w for w in self.client.nthreads() if w not in self.refused]

    def describe(self) -> str:
        info = self.client.scheduler_info()
        threads = sum(w.get("nthreads", 0) for w in info["workers"].values())
        dashboard = f"; dashboard {self.client.dashboard_link}" if "dashboard" in info.get("services", {}) else ""
        return f"on the Dask cluster at {self.address} ({len(info['workers'])} workers, {threads} threads{dashboard})"

    def judged(self, todo: list, limits) -> Iterator[tuple[object, object]]:
        """(submission, TaskResult) pairs, in the order they finish.

        As many submissions are on the cluster at a time as its workers have threads (counted
        again as workers come and go), the next sent as one finishes: a worker that dies holds
        only the submissions it was grading, so only those count the death against them (a
        worker holding a queue would have every submission in it blamed and sent elsewhere).
        """
        from distributed import as_completed

        from bertlab.grading import notebooks
        from bertlab.grading.cluster import installed_version, judge_submission

        version, run, sources = installed_version(), uuid.uuid4().hex[:8], {}
        waiting = list(reversed(todo))  # popped from the end: in the order given, the longest first
        finished = as_completed(loop=self.client.loop)

        def send_more() -> None:
            while waiting and len(self.sent) < self._threads():
                sub = waiting.pop()
                if sub.assignment not in sources:
                    sources[sub.assignment] = {p.name: p.read_bytes() for p in notebooks.source_notebooks(sub.folder)}
                # One key prefix for the whole class: one task group on the dashboard.
                future = self.client.submit(
                    judge_submission,
                    sub.assignment,
                    {p.name: p.read_bytes() for p in sub.notebooks()},
                    sources[sub.assignment],
                    limits,
                    version,
                    key=("bertlab-autograde", run, sub.key, attempt),
                    pure=False,
                    retries=RETRIES,
                    workers=self._allowed() if self.refused else None,
                    allow_other_workers=False,
                )
                self.sent[future] = sub
                finished.add(future)

        attempt = 0
        send_more()
        for future in finished:
            sub = self.sent.pop(future)
            refused = self._refuse_stale(future)
            if refused:
                attempt += 1  # a key of its own: the refused one may still be known to the scheduler
                waiting.append(sub)  # sent again, first, to a worker of this version
            send_more()  # before recording this one: no worker waits for the gradebook
            if not refused:
                yield sub, self._verdict(future, sub, sources[sub.assignment])

    def _threads(self) -> int:
        return max(1, sum(n for w, n in self.client.nthreads().items() if w not in self.refused))

    def _verdict(self, future, sub, sources: dict[str, bytes]):
        from distributed import KilledWorker

        from bertlab.grading.cluster import lost

        try:
            return future.result()
        except KilledWorker as err:
            return lost(
                sub.assignment,
                sources,
                f"the worker grading this submission died {err.allowed_failures + 1} times while it ran "
                f"(this submission's code killed it, or it ran out of memory); it was not tried again",
            )
        except Exception as err:  # the task raised after its retries: nothing recorded, graded again next run
            raise ClusterError(
                f"{sub.key} could not be judged on the cluster ({type(err).__name__}: {err}); "
                f"the submissions recorded so far are kept, run the command again"
            ) from err

    def close(self) -> None:
        """Cancel the class's tasks still on the cluster (Ctrl-C, an error), and disconnect."""
        unfinished = [f for f in self.sent if not f.done()]
        if unfinished:
            self.client.cancel(unfinished)
            self.say(f"cancelled {len(unfinished)} submission(s) on the cluster")
        self.client.close()
