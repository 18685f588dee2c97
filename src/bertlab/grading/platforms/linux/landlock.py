"""Confine a learner's process (Linux Landlock): it writes only in its own working directory, and
it cannot read transformers' model code.

The learner's code runs as the same user as the grader, so without this it could rewrite the
grader's own source, the course's notebooks or another run's results, and change a later
verdict; and it could run HF's BertLayer where the task is to write one, hiding the call from
any watch in its own process. Landlock lets an unprivileged process give up rights for itself
and every process it starts:

- writes: nothing may be created, changed, renamed or deleted outside ``folder`` (and ``/dev``,
  for ``/dev/null``);
- reads: no file beneath the ``unreadable`` folders may be opened. Landlock only grants, so the
  rest of the file system is granted by its parts: at each folder on the way from ``/`` down to
  an unreadable one, every entry that is not on that way. Listing folders stays allowed (imports
  list ``site-packages``), so a denied package is seen but cannot be imported.

Where the kernel has them, two more rights are given up (``ruleset_attr``):

- TCP (ABI 4, Linux 6.7): no port may be bound or connected to, so the learner's code cannot
  talk to a Dask scheduler or worker, or to anything else, over TCP;
- signals and abstract Unix sockets (ABI 6, Linux 6.12): no signal reaches a process outside the
  sandbox (the judge, the learner's template, a Dask worker or its nanny, the instructor's
  command). Tracing and reading another process's memory are refused by every Landlock ABI:
  a sandboxed process may trace only processes of its own sandbox.

Kernels without Landlock (before 5.13, or with it disabled) leave the process as it was;
``confine`` then returns False and the honest-grading page's known limits apply.
"""

from __future__ import annotations

import ctypes
import os
import struct
import tempfile
from collections.abc import Iterator

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # syscall numbers, the same on every architecture
_VERSION = 1
_PATH_BENEATH = 1
_NO_NEW_PRIVS = 38
_O_PATH = 0o10000000

READ_FILE = 1 << 2
WRITE_FILE, REMOVE_DIR, REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
MAKE = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2 and 3
_FILE_RIGHTS = READ_FILE | WRITE_FILE | TRUNCATE  # the rights a rule on a file (not a folder) may grant
BIND_TCP, CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4: handled and never granted, so no TCP at all
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi() -> int:
    """The kernel's Landlock ABI version, 0 when it has none."""
    version = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    return max(0, version)


def _write_rights(version: int) -> int:
    rights = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE
    if version >= 2:
        rights |= REFER
    if version >= 3:
        rights |= TRUNCATE
    return rights


def ruleset_attr(version: int, fs_rights: int) -> bytes:
    """``struct landlock_ruleset_attr`` for ``version``: the file rights, and where the kernel has
    them, TCP handled with no port granted (ABI 4) and signals and abstract sockets scoped to the
    learner's own processes (ABI 6): no signal (SIGKILL to its judge, template, Dask worker),
    no connection to the grader's TCP ports or abstract sockets leaves the sandbox."""
    if version >= 6:
        return struct.pack("<QQQ", fs_rights, BIND_TCP | CONNECT_TCP, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    if version >= 4:
        return struct.pack("<QQ", fs_rights, BIND_TCP | CONNECT_TCP)
    return struct.pack("<Q", fs_rights)


def readable_around(unreadable: list[str]) -> Iterator[str]:
    """Paths that together hold every file except those beneath ``unreadable`` (real paths)."""
    denied = {os.path.realpath(p) for p in unreadable if os.path.isdir(p)}
    on_the_way = {os.path.dirname(d) for d in denied}
    for start in list(on_the_way):
        folder = start
        while folder != os.path.dirname(folder):
            folder = os.path.dirname(folder)
            on_the_way.add(folder)
    if not denied:
        yield "/"
        return
    for folder in sorted(on_the_way):
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(folder, entry)
            # A rule holds for the folder a link points to (``.venv/lib64`` -> ``lib``): a link to a
            # folder on the way would grant it whole. Those are covered entry by entry already.
            real = os.path.realpath(path)
            if real not in on_the_way and not any(real == d or real.startswith(d + os.sep) for d in denied):
                yield real


def confine(folder: str, unreadable: list[str]) -> bool:
    """Allow this process (and what it starts) to write only beneath ``folder`` and ``/dev``, and
    to read anything but what lies beneath ``unreadable``. False when the kernel cannot."""
    version = abi()
    if version < 1:
        return False
    libc = _libc()
    writes = _write_rights(version)
    attr = ctypes.create_string_buffer(ruleset_attr(version, writes | READ_FILE))
    ruleset = libc.syscall(_CREATE_RULESET, attr, ctypes.c_size_t(len(attr.raw)), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    rules = [(path, READ_FILE) for path in readable_around(unreadable)]
    rules += [(folder, writes), ("/dev", writes)]  # reads there come from the rules above
    try:
        for path, wanted in rules:
            try:
                fd = os.open(path, _O_PATH | os.O_CLOEXEC)
            except OSError:  # a dangling link, a file gone meanwhile: nothing to read there
                continue
            try:
                rights = wanted if os.path.isdir(f"/proc/self/fd/{fd}") else wanted & _FILE_RIGHTS
                rule = ctypes.create_string_buffer(struct.pack("<Qi", rights, fd))
                added = libc.syscall(
                    _ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_PATH_BENEATH), rule, ctypes.c_uint32(0)
                )
                if added < 0:
                    return False
            finally:
                os.close(fd)
        if libc.prctl(_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        if libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            return False
    finally:
        os.close(ruleset)
    tempfile.tempdir = folder  # tempfile.mkstemp() and friends write where writing is allowed
    os.environ["TMPDIR"] = folder
    return True
