"""A wall-clock budget for one ingest chain, and calls that give up when it runs out."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from gigaevo.memory.v2.errors import IngestTimeout

T = TypeVar("T")

_IDLE_MAX = 2  # idle workers kept for the next calls (the librarian makes one at a time)


class Deadline:
    """``seconds`` from construction, on the monotonic clock."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self._end - time.monotonic())


class _Job:
    """One call handed to a worker; ``done`` and ``abandoned`` change under ``_lock``."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.finished = threading.Event()
        self.done = False
        self.abandoned = False
        self.value: Any = None
        self.error: BaseException | None = None


class _Worker:
    """A daemon thread running the calls it is handed, one at a time.

    Reused from call to call: starting a thread per call cost about 4 ms on a
    loaded 2-core machine, twice per authored card. A worker whose call was
    abandoned (it overran its deadline) finishes that call and exits.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="memory-agent-call", daemon=True).start()

    def submit(self, job: _Job) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        self._jobs.put(None)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job.value = job.fn()
            except BaseException as exc:  # handed to the caller's thread
                job.error = exc
            with _lock:
                job.done = True
                abandoned = job.abandoned
            job.finished.set()
            if abandoned:
                return


_lock = threading.Lock()
_idle: list[_Worker] = []


def call_before(deadline: Deadline, fn: Callable[[], T], what: str) -> T:
    """``fn()``, or ``IngestTimeout`` when it has not returned before ``deadline``.

    ``fn`` runs in a daemon worker thread (reused across calls). Python cannot
    stop a thread, so a call that overruns is abandoned: its eventual answer is
    ignored, its worker is not reused, and it never delays interpreter exit.

    Raises:
        IngestTimeout: the budget was spent before or during the call.
        Exception: whatever ``fn`` raised.
    """
    if deadline.remaining() <= 0:
        raise IngestTimeout(f"{what}: the {deadline.seconds:g}s ingest budget was already spent")
    with _lock:
        worker = _idle.pop() if _idle else None
    worker = worker or _Worker()
    job = _Job(fn)
    worker.submit(job)
    job.finished.wait(deadline.remaining())
    with _lock:
        if not job.done:
            job.abandoned = True
            raise IngestTimeout(f"{what}: no answer within the {deadline.seconds:g}s ingest budget")
        keep = len(_idle) < _IDLE_MAX
        if keep:
            _idle.append(worker)
    if not keep:
        worker.stop()
    if job.error is not None:
        raise job.error
    value: T = job.value
    return value
