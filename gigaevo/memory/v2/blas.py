"""One BLAS thread while the memory works, held for the process and counted.

The heads' matrices are small (tens to a few thousand columns), where OpenBLAS
threads cost more in start-up and contention with the sandbox workers than they
save: a memory=v2 rastrigin run used 14 s of CPU instead of 29 s, and fits in the
card-world bench ran about 18x faster under load. One thread also fixes the bits:
multithreaded OpenBLAS sums in another order, so a seeded run with the memory on
two BLAS threads differed in the last bits of q0 / q1 in 138 of 1,200 decisions,
and with scipy's OpenBLAS alone on two threads in 2 of them.

A BLAS library's thread count is one number for the whole process. threadpoolctl's
``limit`` context saves it on entry and restores it on exit, so two threads inside
it at once could interleave (A saves 2 and sets 1, B saves 1, A restores 2: B's
memory work then runs on two threads); and a ``ThreadpoolController`` lists only the
libraries loaded when it is made, so one made before scipy's OpenBLAS was loaded never
limited it. Here the limit is counted instead: the first ``hold`` sets every BLAS
library loaded in the process to one thread (saving its count), a ``hold`` that finds
modules imported since the last look limits the libraries they loaded too, and the
last ``release`` restores the saved counts. ``CardBankMemory`` holds it from
construction to ``close`` (or ``suspend``), and each of its calls holds it again
(``one_blas_thread``): while a provider is open a call costs a lock and a length
check, not four ctypes calls, and any other BLAS work of the process (the engine's
threads, a notebook's) also runs on one thread. A BLAS library first loaded inside a
call is limited from the next call on; a thread count changed by other code while
the limit is held is not noticed. A library whose count belongs to each thread
(OpenBLAS built on OpenMP, as faiss ships it) is limited once in every thread that
holds; the thread whose release is the last gets its count back, the others (the
memory lane) keep one thread for it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

from threadpoolctl import ThreadpoolController

_lock = threading.Lock()
_holders = 0
_saved: dict[str, tuple[Any, int]] = {}  # library path -> (its controller, threads before)
_looked_at = -1  # len(sys.modules) when the limited libraries were last listed
_libs: list[Any] = []  # the process-wide BLAS libraries listed then (a listing: ~1.7 ms)
_per_thread: list[Any] = []  # the libraries whose count is per thread (OpenMP layer)
_listed_at = -1  # len(sys.modules) at that listing
_local = threading.local()  # .saved: this thread's per-thread libraries limited (path -> ...)


def hold() -> None:
    """One BLAS thread in the whole process until the matching ``release``."""
    global _holders
    with _lock:
        _holders += 1
        if _holders == 1 or len(sys.modules) != _looked_at:
            _limit_loaded()
        per_thread = _per_thread
    mine = _mine()
    for lib in per_thread:
        if lib.filepath not in mine:
            mine[lib.filepath] = (lib, lib.num_threads)
            _set_threads(lib, 1)


def release() -> None:
    """End one ``hold``; the last one restores each library's thread count."""
    global _holders, _looked_at
    with _lock:
        if _holders <= 0:
            raise RuntimeError("blas.release without a hold")
        _holders -= 1
        if _holders:
            return
        for lib, threads in (*_saved.values(), *_mine().values()):
            _set_threads(lib, threads)
        _saved.clear()
        _mine().clear()
        _looked_at = -1


def holders() -> int:
    """Holds not yet released (0: BLAS runs as the process left it)."""
    return _holders


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS limited to one thread for the block (a ``hold`` and its ``release``)."""
    hold()
    try:
        yield
    finally:
        release()


def _mine() -> dict[str, tuple[Any, int]]:
    """The per-thread libraries this thread limited, with their counts before."""
    saved: dict[str, tuple[Any, int]] | None = getattr(_local, "saved", None)
    if saved is None:
        saved = _local.saved = {}
    return saved


def _limit_loaded() -> None:
    """Set every process-wide BLAS library not yet limited to one thread, saving its count
    (under _lock)."""
    global _looked_at, _libs, _per_thread, _listed_at
    modules = len(sys.modules)
    if modules != _listed_at:  # a new import may have loaded a library
        listed = ThreadpoolController().select(user_api="blas").lib_controllers
        _per_thread = [lib for lib in listed if getattr(lib, "threading_layer", "") == "openmp"]
        _libs = [lib for lib in listed if lib not in _per_thread]
        _listed_at = modules
    for lib in _libs:
        if lib.filepath not in _saved:
            _saved[lib.filepath] = (lib, lib.num_threads)
            _set_threads(lib, 1)
    _looked_at = modules


def _set_threads(lib: Any, threads: int) -> None:
    """Set ``lib``'s thread count from whichever thread holds the memory's limit.

    threadpoolctl lets only one "controlling thread" set OpenBLAS's count (the first to
    set it, until its ``limit`` block ends) and silently ignores the others; a provider
    holds from the main thread and calls from the memory lane, so each set here takes the
    control and gives it back.
    """
    clear = getattr(type(lib), "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)
    lib.set_num_threads(threads)
    if clear is not None:
        clear(force=True)


def _reset_in_child() -> None:
    """A forked child keeps the limit it inherited; its lock starts free (the parent may have
    held it at the fork)."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_in_child)
