"""Kernel-level isolation: non-dumpable trusted processes, capability-free children, namespaces.

Linux only; standard library alone (the worker imports it before anything else).

The engine's credentials live in its initial environment block, which
``/proc/<pid>/environ`` exposes and which no ``del os.environ[...]`` erases.
Three layers keep that block, and the engine itself, out of a child's reach:

* The evaluator's process and every worker are *non-dumpable*
  (``PR_SET_DUMPABLE`` 0): reading their ``/proc/<pid>/environ``, ``mem``,
  ``fd/*``, ``cwd`` or attaching with ``ptrace`` then needs ``CAP_SYS_PTRACE``.
* Every child drops *all* capabilities (effective, permitted, inheritable,
  ambient) and sets ``no_new_privs`` before running the program.
  Even as uid 0 it then lacks ``CAP_SYS_PTRACE``, ``CAP_DAC_OVERRIDE``,
  ``CAP_SYS_RESOURCE`` (cannot raise its rlimits back), ``CAP_SYS_ADMIN`` and
  ``CAP_SYS_RAWIO``; the kernel also refuses it ptrace-mode access (``environ``,
  ``mem``) to any process whose permitted capabilities it does not hold, which
  is every ordinary root process. ``no_new_privs`` keeps an ``exec`` (from
  native code) from giving the capabilities back, even to uid 0, so the
  bounding set is left alone (emptying it costs one credential commit per
  capability, ~0.15 ms per child).
* Each worker runs as init (pid 1) of its own PID, mount, IPC, UTS, cgroup
  and (unless ``network=True``) network namespace. A child can then name,
  signal, ptrace or inspect only its worker and its own descendants: the
  engine, its ancestors, other workers and their children do not exist for
  it (``kill`` gives ``ProcessLookupError``, ``/proc/<pid>`` is absent). As
  namespace init the worker ignores every signal sent from inside the
  namespace for which it has no handler, ``SIGKILL`` included, and when it
  dies the kernel kills everything left in the namespace. The new network
  namespace has one interface, loopback, and it is down: no address, host
  or abstract Unix socket of the machine can be reached.

The first two layers need no privilege. The namespaces need root or
unprivileged user namespaces; ``enter_namespaces`` reports what the kernel
refused, and the evaluator says so once per run.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import sys
from dataclasses import dataclass, replace

from gigaevo.evaluation.limits import reap_zombies

PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REC = 0x4000
MS_PRIVATE = 1 << 18

_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# CDLL(None) resolves libc from the running interpreter; find_library would shell out.
_LIBC = ctypes.CDLL(None, use_errno=True)


class IsolationError(OSError):
    """The kernel refused a step the sandbox cannot run without."""


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


# Built once, before any fork: creating ctypes types in each child costs ~0.1 ms.
_NO_CAPS_HEADER = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
_NO_CAPS_DATA = (_CapData * 2)()  # two 32-bit words per set, all zero
_CAPSET = _LIBC.capset


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    """Call ``prctl``; return 0 on success, else the ``errno``."""
    status = _LIBC.prctl(option, ctypes.c_ulong(arg2), ctypes.c_ulong(arg3), 0, 0)
    return 0 if status == 0 else ctypes.get_errno()


def _raise(error: int, what: str) -> None:
    raise IsolationError(error, f"{what} failed: {os.strerror(error)}")


def set_non_dumpable() -> None:
    """Mark the calling process non-dumpable: no core dumps; its ``/proc`` needs CAP_SYS_PTRACE.

    The flag survives ``fork`` and is reset by ``exec``.

    Raises:
        IsolationError: the kernel refused.
    """
    error = _prctl(PR_SET_DUMPABLE, 0)
    if error:
        _raise(error, "prctl(PR_SET_DUMPABLE, 0)")


def is_dumpable() -> bool:
    """The calling process's dumpable flag (``PR_GET_DUMPABLE``)."""
    return bool(_LIBC.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))


_CAP_CHOWN = 0
_CAP_SETGID = 6
_CAP_SETUID = 7


def can_switch_uid() -> bool:
    """True when this process may give its children another uid.

    That needs ``CAP_SETUID``, ``CAP_SETGID`` and ``CAP_CHOWN``: root with its
    capabilities; root without them (or anyone else) cannot.
    """
    try:
        with open("/proc/self/status") as handle:
            line = next(row for row in handle if row.startswith("CapEff:"))
    except (OSError, StopIteration):
        return False
    effective = int(line.split()[1], 16)
    return all(effective >> bit & 1 for bit in (_CAP_CHOWN, _CAP_SETGID, _CAP_SETUID))


def drop_capabilities() -> None:
    """Set ``no_new_privs`` and empty every capability set of the calling process, for good.

    Effective, permitted and inheritable sets end up empty, and with them the
    ambient set (the kernel keeps it within permitted and inheritable). With
    ``no_new_privs`` no ``exec`` (not even of a setuid binary, not even as
    uid 0) can grant any capability again, so the bounding set is not touched.

    Raises:
        IsolationError: ``no_new_privs`` or ``capset`` was refused.
    """
    error = _prctl(PR_SET_NO_NEW_PRIVS, 1)
    if error:
        _raise(error, "prctl(PR_SET_NO_NEW_PRIVS)")
    if _CAPSET(ctypes.byref(_NO_CAPS_HEADER), _NO_CAPS_DATA) != 0:
        _raise(ctypes.get_errno(), "capset")


def _write_id_maps(uid: int, gid: int) -> None:
    """Map our own uid/gid into a fresh user namespace (identity, one id each).

    A non-dumpable process's ``/proc/self`` belongs to the real root, so the
    flag is lifted for the three writes (single-threaded, nothing else runs).
    """
    dumpable = is_dumpable()
    _prctl(PR_SET_DUMPABLE, 1)
    try:
        with contextlib.suppress(FileNotFoundError), open("/proc/self/setgroups", "w") as handle:
            handle.write("deny")
        with open("/proc/self/uid_map", "w") as handle:
            handle.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as handle:
            handle.write(f"{gid} {gid} 1")
    finally:
        if not dumpable:
            set_non_dumpable()


@dataclass(frozen=True)
class Namespaces:
    """Which namespaces the worker entered, and why the kernel refused the others.

    ``user`` is True when a user namespace was needed (the engine is not
    root): the worker then holds capabilities only over its own namespaces,
    and its children keep the engine's uid. ``network`` is True for a new,
    empty network namespace (only a loopback interface, down).
    """

    pid: bool = False
    mount: bool = False
    network: bool = False
    user: bool = False
    refused: str | None = None


def _attempts(network: bool) -> list[tuple[int, Namespaces]]:
    """Namespace sets to try, strongest first (root without a user namespace before with one)."""
    base = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
    with_net = base | (0 if network else CLONE_NEWNET)
    full = Namespaces(pid=True, mount=True, network=not network)
    no_net = Namespaces(pid=True, mount=True)
    tries: list[tuple[int, Namespaces]] = []
    if os.geteuid() == 0:
        tries += [(with_net, full), (base, no_net)] if not network else [(base, no_net)]
    tries.append((with_net | CLONE_NEWUSER, replace(full, user=True)))
    if not network:
        tries.append((base | CLONE_NEWUSER, replace(no_net, user=True)))
    return tries


def _unshare(network: bool) -> Namespaces:
    """Unshare the strongest namespace set the kernel grants; report the refusals."""
    uid, gid = os.geteuid(), os.getegid()
    refused: str | None = None
    for flags, granted in _attempts(network):
        if _LIBC.unshare(flags) == 0:
            if granted.user:
                try:
                    _write_id_maps(uid, gid)
                except OSError as exc:  # unmapped ids still own our files; only getuid() changes
                    print(f"sandbox: cannot map ids in the user namespace: {exc}", file=sys.stderr)
            return replace(granted, refused=refused)
        code = ctypes.get_errno()
        if refused is None:
            what = "user namespaces" if flags & CLONE_NEWUSER else "namespaces"
            refused = f"unshare({what}): {os.strerror(code)}"
    return Namespaces(refused=refused)


def _wait_and_exit(pid: int, keep_fds: tuple[int, ...]) -> None:
    """The namespace's parent: hold no pipe ends, wait for init, exit with its status."""
    for fd in keep_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def enter_namespaces(*, network: bool, close_in_parent: tuple[int, ...] = ()) -> Namespaces:
    """Continue this process's work as init (pid 1) of new PID, mount, IPC and network namespaces.

    Must be called while single-threaded. Root gets them directly (and its
    children can then switch to a dedicated uid); anyone else inside a new
    user namespace that maps only its own uid. ``network=True`` keeps the
    host's network. Where the kernel refuses, weaker sets are tried (without
    the network namespace, then none) and ``refused`` says why.

    On success the calling process forks: the parent closes
    ``close_in_parent``, waits for the child and exits with its status (it
    never returns); the child, pid 1 of the new namespace, dies with the
    parent, ignores every signal it has no handler for, and returns.
    The caller then builds its filesystem view (``mounts``) or, failing
    that, calls ``mount_private_proc``.
    """
    granted = _unshare(network)
    if not granted.pid:
        return granted
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid != 0:
        _wait_and_exit(pid, close_in_parent)
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    # Python's SIGINT handler would let a child interrupt us; an init ignores SIG_DFL signals.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    return granted


def mount_private_proc() -> None:
    """Give this (new) mount namespace its own ``/proc`` showing only our PID namespace.

    Raises:
        IsolationError: the kernel refused.
    """
    if _LIBC.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) != 0:
        _raise(ctypes.get_errno(), "making / private")
    flags = ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if _LIBC.mount(b"proc", b"/proc", b"proc", flags, None) != 0:
        _raise(ctypes.get_errno(), "mounting /proc")


def kill_namespace_members() -> None:
    """As init of a PID namespace, SIGKILL every other process in it and reap them all.

    Raises:
        IsolationError: the caller is not pid 1 (``kill(-1)`` would reach far
            beyond the sandbox).
    """
    if os.getpid() != 1:
        raise IsolationError(errno.EINVAL, "kill(-1) outside a PID namespace init refused")
    while True:
        try:
            os.kill(-1, signal.SIGKILL)  # everyone in the namespace except init itself
        except ProcessLookupError:
            break
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    reap_zombies()
