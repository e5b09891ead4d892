"""OS-level confinement helpers: scrubbed environments, rlimits, prctl, process sweeps.

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
from collections.abc import Mapping

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


class ConfinementError(OSError):
    """A kernel facility the sandbox relies on (prctl, rlimits) is unavailable."""


def is_secret_name(name: str) -> bool:
    """True when an environment variable's name suggests a credential."""
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def scrubbed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """Copy of ``environ`` without credential-like names, with BLAS pinned to one thread."""
    clean = {name: value for name, value in environ.items() if not is_secret_name(name)}
    for name in THREAD_VARIABLES:
        clean[name] = "1"
    return clean


def scrub_os_environ() -> None:
    """Remove credential-like variables from this process's ``os.environ`` in place."""
    for name in [name for name in os.environ if is_secret_name(name)]:
        del os.environ[name]
    for name in THREAD_VARIABLES:
        os.environ[name] = "1"


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


def apply_rlimits(*, memory_mb: int, cpu_seconds: float, max_file_bytes: int) -> None:
    """Cap address space, CPU time and file size of the calling process; no core dumps.

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
