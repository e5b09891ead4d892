"""The filesystem a child sees: a read-only root of chosen paths and one tmpfs scratch.

Runs in the worker, as the (namespace) root of its own mount namespace;
standard library alone. ``enter_readonly_root`` is called once, at start-up:
it builds a new root on a small tmpfs from read-only bind mounts of the
system directories (``/usr``, the ``/lib`` family, an allow-list of ``/etc``
and the CPU part of ``/sys``), the
Python installation and the paths the worker imports from, the problem
directory, a few device nodes and a private ``/proc``, then pivots into it.
Everything else (the checkpoint directory, the card bank, home
directories, ``/root``, ``/var``, ``/run``, ``/mnt``, the rest of the project)
does not exist for the worker or its children. ``mount``/``umount`` serve
``scratch``, which puts a fresh size-limited tmpfs on ``/tmp`` per child.

A visible path under ``/tmp`` (a virtual environment made with ``mktemp -d``,
say) would be hidden by that scratch, so the root also binds each such path
at ``UNDER_SCRATCH/<n>``; ``enter_readonly_root`` returns these pairs and the
scratch binds them back, read-only, at their own paths inside every child's
``/tmp``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MNT_DETACH = 2

_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
_NR_MOUNT_SETATTR = 442  # the same number on every architecture
_NR_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine(), 155)
# statvfs f_flag bits that a read-only remount must keep (the kernel locks them).
_KEPT_FLAGS = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Only what programs and libraries read from /etc and /sys: world-readable files
# there sometimes carry secrets (/etc/environment, pip or git configuration), and
# a child could print them into the output the engine keeps and shows the model.
SYSTEM_ENTRIES = (
    *(
        f"/etc/{name}"
        for name in (
            "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone",
            "passwd", "group", "nsswitch.conf", "host.conf", "hosts", "gai.conf", "protocols",
            "services", "mime.types", "locale.alias", "os-release", "ssl", "ca-certificates",
            "fonts", "matplotlibrc",
        )
    ),
    "/sys/devices/system/cpu",  # CPU counts and topology (os.cpu_count, BLAS)
)  # fmt: skip
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
    "shm": "/tmp",  # POSIX shared memory lands in the child's size-limited scratch
}
SCRATCH = "/tmp"
# The problem directory is also bound here: its own path may lie under /tmp,
# which each child's scratch covers.
PROBLEM_MOUNT = "/problem"
# Second mount points, outside the scratch, of the visible paths that lie under it.
UNDER_SCRATCH = "/.under-tmp"

_LIBC = ctypes.CDLL(None, use_errno=True)


class MountError(OSError):
    """A mount step failed; the message names the step and the path."""


class RootNotSealedError(RuntimeError):
    """The new root is in place but could not be made read-only: no child may run in it."""


def _check(status: int, what: str) -> None:
    if status != 0:
        code = ctypes.get_errno()
        raise MountError(code, f"{what}: {os.strerror(code)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _LIBC.mount(
            None if source is None else source.encode(),
            target.encode(),
            None if fstype is None else fstype.encode(),
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def umount(target: str) -> None:
    _check(_LIBC.umount2(target.encode(), MNT_DETACH), f"umount {target}")


@dataclass(frozen=True)
class RootPlan:
    """What the new root holds: read-only binds (source, target) and symlinks (target, value)."""

    binds: tuple[tuple[str, str], ...]
    links: tuple[tuple[str, str], ...]


def _covered(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def plan_root(paths: Iterable[str]) -> RootPlan:
    """The binds and links that make ``SYSTEM_PATHS`` and ``paths`` visible, read-only.

    Top-level symlinks (``/bin -> usr/bin`` on merged-/usr systems) are copied
    as symlinks. A path is bound at its real location, and also at the path
    it was named by when a symlink leads there; paths inside one already bound
    are skipped. Missing paths are ignored.
    """
    links: list[tuple[str, str]] = []
    wanted: list[tuple[str, str]] = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        elif os.path.exists(path):
            wanted.append((path, path))
    for path in [*SYSTEM_ENTRIES, *paths]:
        named = os.path.abspath(path)
        real = os.path.realpath(named)
        if not os.path.exists(real):
            continue
        wanted.append((real, real))
        if named != real:
            wanted.append((real, named))
    binds: list[tuple[str, str]] = []
    via_links = [target for target, _ in links]
    for source, target in sorted(set(wanted), key=lambda pair: (len(pair[1]), pair[1])):
        if _covered(target, [t for _, t in binds]) or _covered(target, via_links):
            continue
        binds.append((source, target))
    return RootPlan(tuple(binds), tuple(links))


def make_mountpoint(root: str, source: str, target: str) -> str:
    """Create ``root + target`` as a directory or an empty file, like ``source``; return it."""
    inside = root + target
    if os.path.isdir(source):
        os.makedirs(inside, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(inside), exist_ok=True)
        with open(inside, "a"):
            pass
    return inside


def under_scratch(plan: RootPlan) -> tuple[tuple[str, str], ...]:
    """(second mount point, path) for each bind of ``plan`` that the scratch on ``/tmp`` covers."""
    covered = [target for _, target in plan.binds if _covered(target, [SCRATCH])]
    return tuple((f"{UNDER_SCRATCH}/{n}", target) for n, target in enumerate(covered))


def _populate(root: str, plan: RootPlan, aliases: Mapping[str, str]) -> None:
    for target, value in plan.links:
        os.symlink(value, root + target)
    for source, target in plan.binds:
        mount(source, make_mountpoint(root, source, target), None, MS_BIND | MS_REC)
    sources = dict((target, source) for source, target in plan.binds)
    for stash, target in under_scratch(plan):
        source = sources[target]
        mount(source, make_mountpoint(root, source, stash), None, MS_BIND | MS_REC)
    for target, source in aliases.items():
        real = os.path.realpath(source)
        mount(real, make_mountpoint(root, real, target), None, MS_BIND | MS_REC)
    os.makedirs(root + "/dev", exist_ok=True)
    for name in DEVICES:
        device = f"/dev/{name}"
        if os.path.exists(device):
            mount(device, make_mountpoint(root, device, device), None, MS_BIND)
    for name, value in DEV_LINKS.items():
        os.symlink(value, f"{root}/dev/{name}")
    os.makedirs(root + SCRATCH, exist_ok=True)
    os.chmod(root + SCRATCH, 0o755)
    os.makedirs(root + "/proc", exist_ok=True)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def _pivot(root: str) -> None:
    """Make ``root`` the root directory of this mount namespace and drop the old one."""
    os.chdir(root)
    if _LIBC.syscall(ctypes.c_long(_NR_PIVOT_ROOT), b".", b".") == 0:
        umount(".")  # the old root, stacked under the new one
    else:  # e.g. an initramfs root: a chroot the capability-free children cannot leave
        os.chroot(".")
    os.chdir("/")


def _mount_points() -> list[str]:
    """Mount points of this namespace, parents before children (from ``/proc/self/mountinfo``)."""
    points = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            field = line.split()[4]
            points.append(field.encode().decode("unicode_escape"))
    return sorted(set(points), key=len)


def make_tree_readonly(legacy: bool = False, top: str = "/") -> None:
    """Remount every mount under ``top`` read-only and nosuid.

    One ``mount_setattr(AT_RECURSIVE)`` call (Linux 5.12+); older kernels, or
    ``legacy=True``, get one bind remount per mount point that keeps the
    flags the kernel has locked.

    Raises:
        MountError: a remount was refused.
    """
    if not legacy:
        attr = (ctypes.c_uint64 * 4)(_MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID, 0, 0, 0)
        status = _LIBC.syscall(
            ctypes.c_long(_NR_MOUNT_SETATTR),
            ctypes.c_int(-100),  # AT_FDCWD
            top.encode(),
            ctypes.c_uint(_AT_RECURSIVE),
            attr,
            ctypes.c_size_t(32),
        )
        if status == 0:
            return
    for point in _mount_points():
        if not _covered(point, [top]):
            continue
        kept = 0
        with contextlib.suppress(OSError):
            flags = os.statvfs(point).f_flag
            kept = sum(bit for flag, bit in _KEPT_FLAGS if flags & flag)
        mount(None, point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | kept)


def enter_readonly_root(
    base: str,
    paths: Sequence[str],
    *,
    legacy_remount: bool = False,
    aliases: Mapping[str, str] | None = None,
) -> tuple[tuple[str, str], ...]:
    """Replace this mount namespace's root with a read-only one holding only ``paths``.

    ``base`` is an empty directory to build the root on. ``aliases`` maps
    extra mount points (outside every path) to directories bound there too. The caller must be
    root of its mount namespace, in a PID namespace (the new ``/proc`` shows
    that namespace), and single-threaded. Afterwards the working directory is
    ``/`` and every mount is read-only; ``scratch`` adds the writable part.

    Returns:
        The (second mount point, path) pairs of the visible paths under
        ``/tmp``, which the scratch must bind back (``under_scratch``).

    Raises:
        MountError, OSError: a step before the pivot failed; the old root is
            still in place, and the caller may fall back to it (and say so).
        RootNotSealedError: the pivot happened but the read-only remount
            failed; the namespace is unusable.
    """
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,nr_inodes=4096,mode=0755")
    plan = plan_root(paths)
    _populate(base, plan, aliases or {})
    _pivot(base)
    try:
        make_tree_readonly(legacy=legacy_remount)
    except OSError as exc:
        raise RootNotSealedError(f"the sandbox root could not be made read-only: {exc}") from exc
    return under_scratch(plan)
