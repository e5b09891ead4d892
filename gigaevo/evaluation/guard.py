"""Python-level block on process creation, installed in each forked child.

This is the first line of defence against fork bombs and shell-outs: it
replaces every process-creating function reachable from Python code (``os`` and
``posix`` fork, exec, spawn, system, popen; ``_posixsubprocess.fork_exec``,
which ``subprocess`` and ``multiprocessing`` go through) and every reference
to them that already-imported modules hold (``subprocess._fork_exec``). It
cannot stop native code (``ctypes`` calling libc ``fork``, a C extension): the
worker's child-subreaper sweep and process-group kill are the second line.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

BLOCKED_MESSAGE = "process creation (fork, exec, subprocess) is disabled in the sandbox"

_OS_NAMES = (
    "fork",
    "forkpty",
    "system",
    "popen",
    "posix_spawn",
    "posix_spawnp",
    "fexecve",
    "execv",
    "execve",
    "execl",
    "execle",
    "execlp",
    "execlpe",
    "execvp",
    "execvpe",
    "spawnl",
    "spawnle",
    "spawnlp",
    "spawnlpe",
    "spawnv",
    "spawnve",
    "spawnvp",
    "spawnvpe",
)


def _blocked(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise PermissionError(BLOCKED_MESSAGE)


def _originals() -> dict[int, object]:
    import _posixsubprocess
    import posix

    found: dict[int, object] = {}
    for module in (os, posix):
        for name in _OS_NAMES:
            function = getattr(module, name, None)
            if function is not None and function is not _blocked:
                found[id(function)] = function
    found[id(_posixsubprocess.fork_exec)] = _posixsubprocess.fork_exec
    return found


class ProcessCreationGuard:
    """Knows where loaded modules reference process-creating functions; blocks them on demand.

    The worker keeps one guard and calls ``refresh`` before each fork (a scan
    only happens when new modules were imported), so the child's ``block`` is
    a handful of ``setattr`` calls.
    """

    def __init__(self) -> None:
        self._targets: list[tuple[Any, str]] = []
        self._scanned_modules = -1

    def refresh(self) -> None:
        """Rescan ``sys.modules`` if modules were imported since the last scan."""
        if len(sys.modules) == self._scanned_modules:
            return
        originals = _originals()
        targets: list[tuple[Any, str]] = []
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            for name, value in list(namespace.items()):
                if id(value) in originals and originals[id(value)] is value:
                    targets.append((module, name))
        self._targets = targets
        self._scanned_modules = len(sys.modules)

    def block(self) -> None:
        """Replace every known reference with a function raising ``PermissionError``."""
        if self._scanned_modules < 0:
            self.refresh()
        for module, name in self._targets:
            setattr(module, name, _blocked)
