"""OS-level confinement helpers: the allow-listed environment, rlimits, prctl, process sweeps.

Linux only. Imported by the worker process, so it depends on the standard
library alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import resource
import signal

THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "BLIS_NUM_THREADS",
)
CHILD_PATH = "/usr/local/bin:/usr/bin:/bin"
LOCALE = "C.UTF-8"

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


class ConfinementError(OSError):
    """A kernel facility the sandbox relies on (prctl, rlimits) is unavailable."""


def sandbox_environment(home: str) -> dict[str, str]:
    """The whole environment of workers and children, built from an allow-list.

    ``PATH``, ``HOME`` and ``TMPDIR`` (the child's scratch), a UTF-8 locale and
    every BLAS/OpenMP thread count pinned to one. Nothing of the engine's own
    environment is copied: no credential can reach a child, whatever its name.
    """
    env = {"PATH": CHILD_PATH, "HOME": home, "TMPDIR": home, "LANG": LOCALE, "LC_ALL": LOCALE}
    for name in THREAD_VARIABLES:
        env[name] = "1"
    return env


def point_home_at(directory: str) -> None:
    """Set ``HOME`` and ``TMPDIR`` of this process (a child) to its scratch directory."""
    os.environ["HOME"] = directory
    os.environ["TMPDIR"] = directory


# CDLL(None) resolves libc from the running interpreter; find_library would shell out.
_LIBC = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    if _LIBC.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise ConfinementError(errno, f"prctl({option}) failed: {os.strerror(errno)}")


def become_child_subreaper() -> None:
    """Make orphaned descendants of this process re-parent to it instead of init.

    Raises:
        ConfinementError: the kernel refused (not Linux >= 3.4).
    """
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent (thread) exits.

    Raises:
        ConfinementError: the kernel refused.
    """
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def cpu_limit_seconds(cpu_seconds: float) -> int:
    """Whole seconds for ``RLIMIT_CPU`` (rounded up, at least one)."""
    return max(1, math.ceil(cpu_seconds))


def apply_rlimits(
    *, memory_mb: int, cpu_seconds: float, max_file_bytes: int, max_tasks: int, max_files: int
) -> None:
    """Cap the calling process: address space, CPU time, file size, tasks, open files; no cores.

    ``max_tasks`` (``RLIMIT_NPROC``) counts every thread and process of the
    caller's user (in its user namespace); under a dedicated uid that is the
    child alone.

    Raises:
        ValueError: a limit is above the current hard limit.
        OSError: the kernel refused a limit.
    """
    memory = int(memory_mb) * 1024 * 1024
    cpu = cpu_limit_seconds(cpu_seconds)
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (max_tasks, max_tasks))
    _lower(resource.RLIMIT_NOFILE, max_files)


def _lower(limit: int, value: int) -> None:
    """Set soft and hard ``limit`` to at most ``value`` (never raising either)."""
    soft, hard = resource.getrlimit(limit)
    capped = [value if v == resource.RLIM_INFINITY else min(v, value) for v in (soft, hard)]
    resource.setrlimit(limit, (capped[0], capped[1]))


def kill_group(pgid: int) -> None:
    """SIGKILL every process in group ``pgid``; a vanished group is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (all threads), read from ``/proc``."""
    found: list[int] = []
    task_dir = f"/proc/{pid}/task"
    try:
        tids = os.listdir(task_dir)
    except FileNotFoundError:
        return found
    for tid in tids:
        try:
            with open(f"{task_dir}/{tid}/children") as handle:
                found.extend(int(token) for token in handle.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def reap_zombies() -> None:
    """Collect every already-exited child of this process without blocking."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_all_descendants(max_rounds: int = 1000) -> int:
    """SIGKILL and reap every child of this (subreaper) process until none is left.

    Descendants that escaped into other sessions are re-parented to this
    process once their own parent dies, so repeating kill-and-reap catches the
    whole tree.

    Returns:
        The number of processes killed.
    """
    me = os.getpid()
    killed = 0
    for _ in range(max_rounds):
        reap_zombies()
        children = child_pids(me)
        if not children:
            return killed
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                continue
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                continue
    return killed
