"""The judge's side of the learner's process: start it, talk to it, and stand-ins for its objects.

A ``Remote`` looks enough like the learner's class, module or function for the checks to use it
unchanged: calling it, reading and setting attributes, iterating, ``isinstance`` against torch's
classes. Every such use is a request to the learner's process; what comes back is plain data
(tensors, arrays, numbers) or another ``Remote``. The checks compare that data with the
reference in this process, where no learner code ever runs.
"""

from __future__ import annotations

import builtins
import os
import select
import shutil
import sys
import time
from collections.abc import Callable

from bertlab.checks.harness import Outcome
from bertlab.grading import platforms, scratch, wire
from bertlab.settings import PROCESS_LIMIT


class LearnerGone(Exception):
    """The learner's process stopped answering: it timed out, ran out of memory or exited.

    Attributes:
        status: ``timeout`` or ``error``.
        cause: the limit that stopped it, ``timeout``, ``memory`` or ``processes``
            (``results.CheckResult.cause``), else None.
    """

    def __init__(self, message: str, status: str, cause: str | None = None):
        super().__init__(message)
        self.status, self.cause = status, cause


class Learner:
    """One learner process, with the notebook-wide deadline, memory and process limits the judge
    enforces on it and on every process it starts."""

    def __init__(self, timeout: float, memory_mb: float, env: dict | None = None, cwd: str | None = None):
        self.deadline, self.memory_mb, self.timeout = time.monotonic() + timeout, memory_mb, timeout
        # The learner's process may write only in its working directory (where the platform
        # sandboxes writes: platforms/): give it
        # one of its own unless the caller chose one.
        self.scratch = None if cwd is not None else scratch.mkdtemp("learner")
        cwd = cwd if cwd is not None else self.scratch
        # A learner process started the platform's way (platforms/): its pid, liveness and kill.
        self.process, self.to_learner, self.from_learner = platforms.current().start_learner(cwd, env)
        self.pid = self.process.pid
        self.dead: list[int] = []  # handles the judge no longer holds
        self.proxies: dict[int, int] = {}  # id(proxy) -> handle, for requests that mention them
        self.gone: LearnerGone | None = None
        self.sent = wire.SentTensors()
        self.memory_checked = 0.0
        self.check_every = 0.05  # seconds between readings of the tree while answers come fast
        self.started = False  # the learner process said it is ready (``_started``)

    # -- the channel ------------------------------------------------------------------------

    def request(self, *message, lend: bool = False, expect: Callable[[object], object] | None = None):
        """Send one request and wait for its answer (``("ok", data)`` decoded, or raise).

        ``lend``: the request only reads the large tensors it sends (``wire.dump_request``).
        ``expect(data)``: raises ``wire.MalformedAnswer`` when an ``ok`` answer's data is not what
        the learner's process sends for this request (``learner.Server``).
        """
        status, *rest = self._reply(message, lend, expect)
        if status == "ok":
            return rest[0]
        if status == "missing":
            raise KeyError(rest[0])
        raise _learner_error(*rest)

    def _reply(self, message, lend: bool = False, expect: Callable[[object], object] | None = None) -> tuple:
        """The learner process's reply to ``message``, checked (``wire.load_reply``)."""
        if self.gone is not None:
            raise self.gone
        if self.dead:  # handles the judge dropped go with the request: no round trip of their own
            released, self.dead = self.dead, []
            message = ("release", released, message)
        return self._exchange(message, lend, expect)

    def _exchange(self, message, lend: bool = False, expect: Callable[[object], object] | None = None) -> tuple:
        from bertlab.bert import load as course_model

        pretrained = course_model.load_model() if course_model.is_loaded() else None
        try:
            if not self.started:
                self._started()
            wire.write_frame(self.to_learner, wire.request_parts(message, self.proxies, pretrained, self.sent, lend))
            self._wait()
            reply = wire.load_reply(wire.read_frame(self.from_learner), self._proxy)
            if reply[0] == "ok" and expect is not None:
                expect(reply[1])
            return reply
        except wire.MalformedAnswer as err:
            raise self._unreadable(str(err)) from None
        except (wire.ChannelClosed, BrokenPipeError, OSError, EOFError, RuntimeError, ValueError) as err:
            if self.gone is None:
                self.gone = self._why_gone(err)
            self.kill()
            raise self.gone from None

    def _started(self) -> None:
        """Read the learner process's first word: ``ready`` once it is set up, before any of the
        learner's code ran. Anything else is the grader's own failure, never the learner's."""
        try:
            self._wait()
            hello = bytes(wire.read_frame(self.from_learner)).decode(errors="replace")
        except wire.ChannelClosed:
            if self.gone is not None:  # the deadline or the memory limit
                raise
            hello = f"it ended{self.process.how_ended()}"
        if hello != wire.READY:
            self.gone = LearnerGone(
                f"the grader could not start the notebook's process: {hello} "
                f"(not your code: `bertlab doctor` checks the installation)",
                "error",
            )
            raise wire.ChannelClosed("not started")
        self.started = True

    def _wait(self) -> None:
        """Block until the learner answers; kill it past the deadline, the memory or the process limit."""
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                # No advice on raising the limit: the learner reads this in feedback, and the
                # limit is the instructor's (the commands' own output says how to raise it).
                self.gone = LearnerGone(f"timed out after {self.timeout:g} s", "timeout", "timeout")
                raise wire.ChannelClosed("timeout")
            ready, _, _ = select.select([self.from_learner], [], [], min(left, 0.25))
            # Also after quick answers (memory grows between requests too), but at most every
            # 50 ms: hundreds of answers a notebook come back within a millisecond.
            now = time.monotonic()
            if now - self.memory_checked < self.check_every:
                if ready:
                    return
                continue
            self.memory_checked = now
            # The whole tree: what the learner's code started holds memory it asked for too.
            # Counted first: a fork loop's tree would take long to read the memory of.
            below = self.process.below()
            if len(below) > PROCESS_LIMIT:
                self.gone = LearnerGone(
                    f"stopped: your code started more than {PROCESS_LIMIT} processes", "error", "processes"
                )
                raise wire.ChannelClosed("processes")
            if self.process.memory_mb(below, self.memory_mb) > self.memory_mb:
                self.gone = LearnerGone(
                    f"stopped: your code used more than {self.memory_mb:g} MB of memory", "error", "memory"
                )
                raise wire.ChannelClosed("memory")
            # A reading costs 0.05 ms, but several more per process below once their memory
            # nears the limit (``memory_mb``): the next one waits twenty times what this one
            # took (up to a second), so that watching a tree takes about a twentieth of the
            # judge's time.
            self.check_every = min(1.0, max(0.05, 20 * (time.monotonic() - now)))
            if ready:
                return

    def _unreadable(self, reason: str) -> LearnerGone:
        """Stop a learner process that sent what the grader cannot read: its failure, and why."""
        if self.gone is None:
            # Only a cell that reaches into the process's plumbing sends such an answer: say where to look.
            self.gone = LearnerGone(
                f"the notebook's process sent the grader an answer it cannot read: {reason}. Does a cell "
                "write to a file descriptor it did not open, or change bertlab's code?",
                "error",
            )
        self.kill()
        return self.gone

    def _why_gone(self, err) -> LearnerGone:
        for _ in range(20):
            if not self.process.alive():
                break
            time.sleep(0.1)
        else:
            return LearnerGone(f"the notebook's process sent an unreadable answer ({type(err).__name__})", "error")
        # How it ended is not said: a template's fork is no child of ours, and a verdict's words
        # must not depend on the platform's way of starting processes.
        return LearnerGone(
            "the notebook's process ended: does a cell call os._exit() or crash the interpreter?", "error"
        )

    def kill(self) -> None:
        self.process.kill()
        for fd in (self.to_learner, self.from_learner):
            try:
                os.close(fd)
            except OSError:
                pass
        self.to_learner = self.from_learner = -1
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    # -- what the judge asks ----------------------------------------------------------------

    def run_cell(self, source: str) -> dict:
        """The cell's report, ``{"error": text or None, "where": text}``: the learner's process
        answers every cell with one, the cell's errors included."""
        status, *rest = self._reply(("run_cell", source), expect=_cell_report)
        if status != "ok":  # its server failed or was replaced (learner.Server reports errors in the report)
            raise self._unreadable(f"it answered a cell with {wire.shown((status, *rest))}, not the cell's report")
        return rest[0]

    def lookup(self, name: str):
        return self.request("lookup", name)

    def _proxy(self, description: dict):
        proxy = (RemoteCallable if description["meta"]["callable"] else Remote)(
            self, description["id"], description["meta"]
        )
        self.proxies[id(proxy)] = description["id"]
        return proxy

    def forget(self, proxy) -> None:
        handle = self.proxies.pop(id(proxy), None)
        if handle is not None and self.gone is None:
            self.dead.append(handle)


def _learner_error(name: str, text: str) -> Exception:
    """The error a ``raise`` reply names, rebuilt here: a builtin exception, else RuntimeError."""
    error = getattr(builtins, name, None)
    if isinstance(error, type) and issubclass(error, Exception):
        try:
            return error(text)
        except TypeError:  # one that takes more than a message (UnicodeDecodeError, ExceptionGroup)
            pass
    return RuntimeError(f"{name}: {text}")


# What the learner's process reports (``learner.Server``), by request: each answer is checked
# before it is used, since that process runs the learner's code and may send anything.
_CELL_REPORT: dict[str, type | tuple[type, ...]] = {"error": (str, type(None)), "where": str}
_OUTCOME: dict[str, type | tuple[type, ...]] = {  # harness.Outcome's fields
    "kind": str,
    "value": object,
    "error": str,
    "where": str,
    "changed": list,
    "shortcut": str,
}
_LOAD_REPORT: dict[str, type | tuple[type, ...]] = {"error": (str, type(None)), "written": list}


def _cell_report(value) -> None:
    wire.record(value, _CELL_REPORT, "its report of a cell")


def _outcome(value) -> None:
    wire.record(value, _OUTCOME, "its report of a call")


def _load_report(value) -> None:
    written = wire.record(value, _LOAD_REPORT, "its report of a load")["written"]
    # The keys of the tensors the judge sent (wire.SentTensors), as the learner's process holds them
    if not all(isinstance(key, tuple) and wire.hashable(key) for key in written):
        raise wire.MalformedAnswer(f"its report of a load names the tensors {wire.shown(written)}, not by their keys")


def _names_to(value, of: type, what: str) -> None:
    """Checks that ``value`` is a dict of names to values of type ``of``."""
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, of) for k, v in value.items()):
        raise wire.MalformedAnswer(f"{what} is {wire.shown(value)}, not a dict of names to {of.__name__}s")


def _state_shapes(value) -> None:
    _names_to(value, tuple, "its shapes of a module's state")
    if not all(type(n) is int for shape in value.values() for n in shape):
        raise wire.MalformedAnswer(f"its shapes of a module's state are {wire.shown(value)}, not sizes")


def _state_digest(value) -> None:
    _names_to(value, str, "its digest of a module's state")


def _length(value) -> None:
    if type(value) is not int or not 0 <= value <= sys.maxsize:  # what len() may return
        raise wire.MalformedAnswer(f"its length of an object is {wire.shown(value)}")


def _items(value) -> None:
    if not isinstance(value, list):
        raise wire.MalformedAnswer(f"its items of an object are {wire.shown(value)}, not a list")


_OWN = ("_learner", "_handle", "_meta", "__weakref__")
_CLASSES: dict[tuple[str, type], type] = {}


def _posing_class(meta: dict) -> type:
    """The class a proxy shows to ``isinstance``: ``type`` for classes, torch's base for modules."""
    import torch.nn as nn

    if meta["is_class"]:
        return type
    base_name = meta.get("torch_base")
    if not base_name:
        return Remote
    module_name, _, qualname = base_name.rpartition(".")
    base = sys.modules.get(module_name)
    base = getattr(base, qualname, None) if base else None
    if not (isinstance(base, type) and issubclass(base, nn.Module)):
        base = nn.Module
    if base.__module__ + "." + base.__qualname__ == meta["type"]:
        return base  # exactly torch's class (nn.Dropout, nn.LayerNorm): pose as it
    key = (meta["type"], base)
    if key not in _CLASSES:
        # The learner's process names the type: type() refuses some names (a NUL, a lone surrogate)
        name = meta["type"].rpartition(".")[2]
        _CLASSES[key] = type(name if name.isidentifier() else "LearnerModule", (base,), {"__module__": "learner"})
    return _CLASSES[key]


class Remote:
    """An object of the learner's process."""

    __slots__ = _OWN

    def __init__(self, learner: Learner, handle: int, meta: dict):
        object.__setattr__(self, "_learner", learner)
        object.__setattr__(self, "_handle", handle)
        object.__setattr__(self, "_meta", meta)

    # Read-only on purpose: the proxy poses as the learner's class for isinstance, and assigning
    # it goes through __setattr__ to the learner's object. typeshed's object.__class__ is
    # read-write, so mypy calls the override unsafe.
    @property  # type: ignore[misc]
    def __class__(self):
        return _posing_class(self._meta)

    def __getattr__(self, name: str):
        if (
            name.startswith("__")
            and name.endswith("__")
            and name not in ("__name__", "__qualname__", "__mro__", "__bases__", "__module__")
        ):
            raise AttributeError(name)
        return self._learner.request("getattr", self, name)

    def __setattr__(self, name: str, value) -> None:
        self._learner.request("setattr", self, name, value)

    def __iter__(self):
        return iter(self._learner.request("list", self, expect=_items))

    def __len__(self) -> int:
        return self._learner.request("len", self, expect=_length)

    def __getitem__(self, key):
        return self._learner.request("getitem", self, key)

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return self._meta["repr"]

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other._learner is self._learner and other._handle == self._handle

    def __hash__(self) -> int:
        return hash((id(self._learner), self._handle))

    def __del__(self):
        try:
            self._learner.forget(self)
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass

    def _remote_invoke(self, args: tuple, kwargs: dict, **options) -> Outcome:
        """``harness.invoke(self, args, kwargs)`` in the learner's process."""
        answer = self._learner.request("invoke", self, args, kwargs, options, expect=_outcome)
        return Outcome(**answer)

    def _remote_invoke_beside(self, fn, args: tuple) -> Outcome:
        """``harness.invoke(fn, args)`` in the learner's process: ``fn`` is a grader's function,
        loaded there by name, and ``args`` may hold this object."""
        return Outcome(**self._learner.request("invoke", fn, args, {}, {}, expect=_outcome))

    def _remote_state_shapes(self) -> dict:
        """``harness.state_shapes(self)`` in the learner's process: names and shapes, no weights."""
        return self._learner.request("state_shapes", self, expect=_state_shapes)

    def _remote_state_digest(self) -> dict:
        """``harness.state_digest(self)`` in the learner's process: fingerprints, no weights."""
        return self._learner.request("state_digest", self, expect=_state_digest)

    def _remote_load_weights(self, state: dict) -> None:
        """``harness.load_weights(self, state)`` in the learner's process, on the held tensors
        themselves: loading copies them into the module's own parameters and only reads them.
        Tensors a learner's loading writes to anyway are sent again to later requests, and the
        load fails, as a call that changes its inputs does."""
        answer = self._learner.request("load_weights", self, state, lend=True, expect=_load_report)
        self._learner.sent.forget(answer["written"])
        if answer["error"] is not None:
            raise RuntimeError(answer["error"])
        if answer["written"]:
            raise RuntimeError("your module's loading changed the weights it was given, in place")

    def _remote_gradients(self, *args, **options) -> Outcome:
        """``harness.gradients(self, ...)`` in the learner's process."""
        answer = self._learner.request("gradients", self, args, options, expect=_outcome)
        return Outcome(**answer)


class RemoteCallable(Remote):
    """A class, function or module of the learner's process."""

    __slots__ = ()

    def __call__(self, *args, **kwargs):
        outcome = self._remote_invoke(args, kwargs, grad=True)
        if outcome.kind == "ok":
            return outcome.value
        if outcome.kind == "not_implemented":
            raise NotImplementedError()
        raise RuntimeError(outcome.error or outcome.kind)
