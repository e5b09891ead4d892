"""A wall-clock budget for one ingest chain, and calls that give up when it runs out."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from gigaevo.memory.v2.errors import IngestTimeout

T = TypeVar("T")


class Deadline:
    """``seconds`` from construction, on the monotonic clock."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self._end - time.monotonic())


def call_before(deadline: Deadline, fn: Callable[[], T], what: str) -> T:
    """``fn()``, or ``IngestTimeout`` when it has not returned before ``deadline``.

    ``fn`` runs in a daemon thread. Python cannot stop a thread, so a call
    that overruns is abandoned: its eventual answer is ignored and it never
    delays interpreter exit.

    Raises:
        IngestTimeout: the budget was spent before or during the call.
        Exception: whatever ``fn`` raised.
    """
    if deadline.remaining() <= 0:
        raise IngestTimeout(f"{what}: the {deadline.seconds:g}s ingest budget was already spent")
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc

    worker = threading.Thread(target=run, name=f"memory-{what}", daemon=True)
    worker.start()
    worker.join(deadline.remaining())
    if worker.is_alive():
        raise IngestTimeout(f"{what}: no answer within the {deadline.seconds:g}s ingest budget")
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value
