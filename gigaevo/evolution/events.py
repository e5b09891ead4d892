"""The run's event log (``events.jsonl``) and its progress display."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gigaevo.util import append_jsonl_many

log = logging.getLogger("gigaevo")


def event(kind: str, **fields: Any) -> dict[str, Any]:
    """One event record, stamped now."""
    return {"event": kind, "time": round(time.time(), 3), **fields}


class EventLog:
    """Append-only JSON-lines log of what the run did, one event per line.

    The events of one commit are written together (``emit_all``, one write):
    after a kill they are all in the file or none is.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._batch: list[dict[str, Any]] | None = None

    def emit(self, kind: str, **fields: Any) -> None:
        """Write one event now, or add it to the batch being collected."""
        if self._batch is not None:
            self._batch.append(event(kind, **fields))
        else:
            self.emit_all([event(kind, **fields)])

    @contextmanager
    def collecting(self) -> Iterator[list[dict[str, Any]]]:
        """Collect the events emitted inside the block instead of writing them (one commit's
        events, written later with ``emit_all``)."""
        batch: list[dict[str, Any]] = []
        self._batch = batch
        try:
            yield batch
        finally:
            self._batch = None

    def emit_all(self, records: list[dict[str, Any]]) -> None:
        if records:
            append_jsonl_many(self.path, records)

    def size(self) -> int:
        """Bytes in the log now (0 before the first event)."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def holds(self, marker: dict[str, Any], since: int) -> bool:
        """True when an event with every field of ``marker`` was written at or after byte
        ``since`` (e.g. ``{"event": "mutant", "attempt": 7}``)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(since)
                tail = f.read()
        except FileNotFoundError:
            return False
        for line in tail.split(b"\n"):
            try:
                record = json.loads(line)
            except ValueError:
                continue  # empty, or torn by a kill
            if isinstance(record, dict) and all(record.get(k) == v for k, v in marker.items()):
                return True
        return False


class Progress:
    """A tqdm bar on a TTY, plain log lines otherwise.

    Shows mutants done out of the budget, the best fitness and the valid share.
    """

    def __init__(self, total: int, initial: int = 0, *, enabled: bool = True) -> None:
        self.total = total
        self.done = initial
        self._bar: Any = None
        self._every = max(1, total // 20)
        self._enabled = enabled
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, unit="mutant", dynamic_ncols=True)

    def update(self, best: float, valid_share: float) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.set_postfix(best=f"{best:.6g}", valid=f"{valid_share:.0%}", refresh=False)
            self._bar.update(1)
        elif self._enabled and (self.done % self._every == 0 or self.done == self.total):
            log.info(
                "mutants %d/%d  best %.6g  valid %.0f%%",
                self.done,
                self.total,
                best,
                100 * valid_share,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
