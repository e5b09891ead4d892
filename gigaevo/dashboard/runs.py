"""The runs a dashboard shows: found under the folders it was given, each followed live."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gigaevo.analysis.live import LiveRun
from gigaevo.analysis.sweep import find_jobs, is_run_dir

# seconds between two looks for new jobs under a sweep folder
RESCAN_EVERY_S = 5.0


@dataclass
class Entry:
    """One run: its number in the page, its name and its live view."""

    rid: int
    name: str
    live: LiveRun


class Runs:
    """Every run under ``roots`` (each a run, a sweep folder or a folder of runs).

    A root that holds no run yet is watched: runs that appear in it (the jobs
    of a sweep that is starting) are added, with numbers that never change.
    """

    def __init__(self, roots: list[Path], min_interval_s: float = 0.5) -> None:
        self.roots = [Path(r) for r in roots]
        self.min_interval_s = min_interval_s
        self.entries: list[Entry] = []
        self._known: set[Path] = set()
        self._lock = threading.Lock()
        self._scanned_at = 0.0
        self.scan(force=True)

    def _found(self) -> list[tuple[str, Path]]:
        out = []
        for root in self.roots:
            if is_run_dir(root):
                out.append((root.resolve().name, root))
                continue
            for job in find_jobs(root):
                name = str(job.relative_to(root))
                out.append((name if len(self.roots) == 1 else f"{root.name}/{name}", job))
        return out

    def scan(self, force: bool = False) -> list[Entry]:
        """The runs, after a look for new ones (at most every ``RESCAN_EVERY_S``)."""
        with self._lock:
            now = time.monotonic()
            if force or now - self._scanned_at >= RESCAN_EVERY_S:
                self._scanned_at = now
                for name, path in self._found():
                    key = path.resolve()
                    if key not in self._known:
                        self._known.add(key)
                        live = LiveRun(path, self.min_interval_s)
                        self.entries.append(Entry(len(self.entries), name, live))
            return list(self.entries)

    def get(self, rid: int) -> Entry | None:
        entries = self.scan()
        return entries[rid] if 0 <= rid < len(entries) else None

    def warm_up(self) -> None:
        """Read every run once (its whole store so far): done at start, off the request path."""
        for entry in self.scan():
            entry.live.refresh(force=True)
