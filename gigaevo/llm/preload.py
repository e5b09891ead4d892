"""Slow imports done early, in one background thread, while the run is being built.

The pipeline calls ``start_loading`` before it loads the problem and starts
the sandbox workers, with the modules its components need first (the
memory's package), the wires the run's clients will use (litellm's import
takes seconds; the plain HTTP wire needs httpx and the price map, about a
tenth of that) and any further modules. The main thread spends much of that
time waiting for the sandbox workers to start (the GIL is free then), so
the imports overlap it, and the first request waits only for what is left.
One thread does it all, one thing after the other, so that the background
imports never race each other for a shared dependency. It is not a daemon: a
process that ends early waits for it, because a daemon thread frozen at exit
in the middle of an import keeps the import lock, and the next import (a
finaliser's) would wait for ever.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterable, Sequence

from gigaevo.llm.wire import Wire

BACKGROUND_IMPORTS = "BACKGROUND_IMPORTS"  # a module's tuple of what its first use imports

# the longest the deferred imports wait for a first call (a caller that never says the run
# ended would otherwise keep its process from exiting: the thread is not a daemon)
DEFERRED_WAIT_S = 300.0
_go = threading.Event()  # deferred imports may start (a first call) or are dropped (the end)
_dropped = False
_first_done = threading.Event()  # the modules ``first`` (and what they name) are imported
_first_done.set()


def wait_for_first() -> None:
    """Wait until the background thread has imported its modules ``first`` (at once when
    none is loading): the memory thread's first decision then never imports scipy while
    the background thread is importing it too (two threads importing one package's
    circular imports can fail with a deadlock error in one of them)."""
    _first_done.wait()


def call_started() -> None:
    """A model call is about to be sent: imports deferred behind it may start now."""
    if not _go.is_set():
        _go.set()


def stop_loading() -> None:
    """The run is over: imports still deferred are dropped (nothing will need them)."""
    global _dropped
    _dropped = True
    _go.set()


def start_loading(
    wires: Iterable[Wire],
    *then_import: str,
    first: Sequence[str] = (),
    first_use: bool = True,
    after_first_call: bool = False,
) -> threading.Thread:
    """Import the modules ``first``, prepare each of ``wires`` (once each), then import
    the modules ``then_import``.

    A module of ``first`` may name, in its ``BACKGROUND_IMPORTS`` tuple, the slow modules
    its first use imports on its own (memory=v2: scipy for the first decision's head
    fits); with ``first_use`` they are imported right after it, before the wires.

    With ``after_first_call`` the modules ``then_import`` wait for the first model call
    (``call_started``), so that they do not take the interpreter from the work that
    leads to it; ``stop_loading`` drops them when the run ends before any call.
    """
    global _dropped
    if after_first_call:
        _dropped = False
        _go.clear()
    if first:
        _first_done.clear()
    unique = list({id(w): w for w in wires}.values())
    thread = threading.Thread(
        target=_load_quietly,
        args=(tuple(first), first_use, unique, then_import, after_first_call),
        name="gigaevo-import",
    )
    thread.start()
    return thread


def _load_quietly(
    first: tuple[str, ...],
    first_use: bool,
    wires: list[Wire],
    then: tuple[str, ...],
    deferred: bool,
) -> None:
    try:
        try:
            for name in first:
                module = importlib.import_module(name)
                for extra in getattr(module, BACKGROUND_IMPORTS, ()) if first_use else ():
                    importlib.import_module(extra)
        finally:
            _first_done.set()
        for wire in wires:
            wire.prepare()
        if then and deferred:
            _go.wait(DEFERRED_WAIT_S)
            if _dropped:
                return
        for name in then:
            importlib.import_module(name)
    except Exception:  # a broken install: the first use raises it again, where it is reported
        logging.getLogger("gigaevo").debug("background import failed", exc_info=True)
