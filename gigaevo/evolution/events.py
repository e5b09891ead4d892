"""The run's event log (``events.jsonl``) and its progress display."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

from gigaevo.util import append_jsonl

log = logging.getLogger("gigaevo")


class EventLog:
    """Append-only JSON-lines log of what the run did, one event per line."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def emit(self, kind: str, **fields: Any) -> None:
        append_jsonl(self.path, {"event": kind, "time": round(time.time(), 3), **fields})


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
