"""Confine a learner's process (Linux Landlock): it writes only in its own working directory, and
reads only what running a notebook needs.

The learner's code runs as the same user as the grader. Without this it could rewrite the
grader's source, the course's notebooks or another run's results, and change a later verdict;
read the hidden tests and reference solutions, a classmate's submission or the gradebook, and
raise them into its own feedback; read the grader's environment (tokens, passwords) in ``/proc``;
or run HF's BertLayer where the task is to write one. Landlock lets an unprivileged process give
up rights for itself and every process it starts, and only grants:

- writes: nothing may be created, changed, renamed or deleted outside ``folder`` (and the
  ``DEVICES``: ``/dev/null`` and the like, never a disk);
- reads, listing folders included: only ``folder`` and the ``readable`` paths (Python and its
  packages, the course's package code, the system's libraries: ``platforms/linux/reach.py``
  lists them), less whatever lies beneath an ``unreadable`` folder (transformers, the course's
  own folder when the package is installed from it). A readable folder that holds an unreadable
  one is granted by its parts: every entry that does not lead to it. Walking a path to a file
  (``cd``, ``stat``) is not a read: a process may still learn that a name exists, not what it holds.

Where the kernel has them, two more rights are given up (``ruleset_attr``):

- TCP (ABI 4, Linux 6.7): no port may be bound or connected to, except ``ports`` (a Jupyter
  kernel's own), so the learner's code cannot talk to a Dask scheduler or worker, or to anything
  else, over TCP;
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
_PATH_BENEATH, _NET_PORT = 1, 2  # rule types
_NO_NEW_PRIVS = 38
_O_PATH = 0o10000000

READ_FILE, READ_DIR = 1 << 2, 1 << 3
READ = READ_FILE | READ_DIR
WRITE_FILE, REMOVE_DIR, REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
MAKE = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2 and 3
_FILE_RIGHTS = READ_FILE | WRITE_FILE | TRUNCATE  # the rights a rule on a file (not a folder) may grant
BIND_TCP, CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4: handled, and granted only for ``ports``
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6


# The devices a notebook's code may open: not ``/dev`` whole, where a disk (``/dev/vda``) would
# give a process running as root every file's bytes, the unreadable ones included. ``/dev/shm``
# holds the shared memory of torch's and Python's multiprocessing.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/shm")


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


def _beneath(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def granted(readable: list[str], unreadable: list[str]) -> Iterator[tuple[str, int]]:
    """(real path, rights) that together let a process read everything beneath ``readable`` except
    what lies beneath ``unreadable``. A readable path that lies beneath an unreadable folder is
    granted all the same (the course's virtual environment inside the course's folder): naming it
    is the exception."""
    denied = {os.path.realpath(p) for p in unreadable if os.path.isdir(p)}
    seen: set[str] = set()
    for path in readable:
        real = os.path.realpath(path)
        if os.path.lexists(path) and real not in denied:  # a readable path is never an unreadable one itself
            yield from _carved(real, denied, seen)


def _carved(path: str, denied: set[str], seen: set[str]) -> Iterator[tuple[str, int]]:
    """``path`` whole, or where an unreadable folder lies strictly beneath it, its entries one by
    one. An entry is taken by its real path: a rule on a link holds for what it points to, so a
    link to a folder that holds an unreadable one (``.venv/lib64 -> lib``) is carved like it.

    A carved folder can still be listed, and so can what lies beneath it, the unreadable folder
    included (names, never contents): Python's imports list ``site-packages`` to find a package
    again after it changed, and a listing is granted only with everything beneath it."""
    if path in seen:
        return
    seen.add(path)
    inside = [d for d in denied if d != path and _beneath(d, path)]
    if not inside:
        yield path, READ
        return
    yield path, READ_DIR
    try:
        entries = os.listdir(path)
    except OSError:
        return
    for entry in entries:
        real = os.path.realpath(os.path.join(path, entry))
        # Inside ``path``, skip what an unreadable folder beneath it holds; a link out of ``path``
        # is granted only if its target would be readable by itself: not inside any unreadable
        # folder that holds ``path`` too (the course's folder holds its venv).
        holders = inside if _beneath(real, path) else denied
        if not any(_beneath(real, d) for d in holders):
            yield from _carved(real, denied, seen)


def confine(folder: str, readable: list[str], unreadable: list[str], ports: tuple[int, ...] = ()) -> bool:
    """Allow this process (and what it starts) to write only beneath ``folder`` and ``DEVICES``, to
    read only there and beneath ``readable`` less ``unreadable`` (``granted``), and to bind only
    TCP ``ports``. False when the kernel cannot."""
    version = abi()
    if version < 1:
        return False
    libc = _libc()
    writes = _write_rights(version)
    attr = ctypes.create_string_buffer(ruleset_attr(version, writes | READ))
    ruleset = libc.syscall(_CREATE_RULESET, attr, ctypes.c_size_t(len(attr.raw)), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    rules = list(granted(readable, unreadable))
    rules += [(folder, writes | READ)] + [(device, writes | READ) for device in DEVICES]
    try:
        for path, wanted in rules:
            if not _add_path_rule(libc, ruleset, path, wanted):
                return False
        for port in ports if version >= 4 else ():
            rule = ctypes.create_string_buffer(struct.pack("<QQ", BIND_TCP, port))
            if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_NET_PORT), rule, ctypes.c_uint32(0)) < 0:
                return False
        if libc.prctl(_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        if libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            return False
    finally:
        os.close(ruleset)
    tempfile.tempdir = folder  # tempfile.mkstemp() and friends write where writing is allowed
    os.environ["TMPDIR"] = folder
    return True


def _add_path_rule(libc, ruleset: int, path: str, wanted: int) -> bool:
    try:
        fd = os.open(path, _O_PATH | os.O_CLOEXEC)
    except OSError:  # a dangling link, a file gone meanwhile: nothing to read there
        return True
    try:
        rights = wanted if os.path.isdir(f"/proc/self/fd/{fd}") else wanted & _FILE_RIGHTS
        rule = ctypes.create_string_buffer(struct.pack("<Qi", rights, fd))
        added = libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_PATH_BENEATH), rule, ctypes.c_uint32(0))
        return added >= 0
    finally:
        os.close(fd)
