"""``LiveRun``: a run followed while it goes, each refresh reading only what was added.

The programs come from the store (rows after the last ordinal seen), the
events, LLM calls and memory logs from ``JsonlTail`` offsets; the summary,
config, card bank and OPE summary are re-read only when their file changed.
Nothing in the run folder is created or written (see ``_sqlite``), so a run
can be watched while it writes, after a kill, across a resume and after it
finished. A store that is replaced (another run started in the folder) or a
log that is truncated starts the view again from nothing and bumps
``generation``.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd

from gigaevo.analysis._files import read_yaml
from gigaevo.analysis._sqlite import has_open_connection
from gigaevo.analysis.evidence import EVIDENCE_FILE, load_evidence
from gigaevo.analysis.feeds import EventFeed, LlmFeed, MemoryFeed
from gigaevo.analysis.ledgers import BANK_FILE, CARD_COLUMNS, load_cards, load_summary
from gigaevo.analysis.live_store import BATCH, STORE_FILE, ProgramTable, read_new_rows
from gigaevo.analysis.memory import OPE_FILE, card_effects, load_ope_summary
from gigaevo.analysis.run import bank_dir, metric_direction, read_overrides
from gigaevo.analysis.tail import FileWatch
from gigaevo.memory.v2.bank.recordjournal import RECORDS_FILE
from gigaevo.memory.v2.bank.trialjournal import JOURNAL_FILE

# seconds without any new data after which a run that did not stop is called idle
IDLE_AFTER_S = 20.0
# the card effects (a full read of the causal ledger) are recomputed at most this often
EFFECTS_EVERY_S = 10.0


class LiveRun:
    """One run directory, followed incrementally (thread-safe: ``refresh`` holds a lock).

    Attributes:
        path: the run directory.
        programs: ``ProgramTable`` of every program committed so far.
        meta: the store's meta values (``state``: counters and archive).
        events, llm, memory: the feeds of ``events.jsonl``, ``llm_calls.jsonl``
            and the memory logs (``gigaevo.analysis.feeds``).
        summary: ``summary.json`` (empty until the run first closes).
        config, overrides: the run's resolved config and command overrides.
        best_steps: (mutant, best fitness) at each improvement of the running best.
        generation: bumped whenever the view restarts from nothing.
        error: the last read failure (None when the last refresh read everything).
    """

    def __init__(self, run_dir: str | Path, min_interval_s: float = 0.5) -> None:
        self.path = Path(run_dir)
        self.min_interval_s = min_interval_s
        self.lock = threading.Lock()
        self.generation = 0
        self.error: str | None = None
        self.config: dict[str, Any] = {}
        self.overrides: dict[str, Any] = {}
        self.summary = pd.Series(dtype=object)
        self.cards = pd.DataFrame(columns=CARD_COLUMNS)
        self.ope: dict[str, Any] = {}
        self._config_watch = FileWatch(self.path / "config.yaml")
        self._summary_watch = FileWatch(self.path / "summary.json")
        self._ope_watch = FileWatch(self.path / OPE_FILE)
        self._cards_watch: list[FileWatch] = []  # cards.json and its two journals
        self._effects_watch = FileWatch(self.path / EVIDENCE_FILE)
        self._effects: pd.DataFrame | None = None
        self._effects_at = -math.inf
        self._refreshed_at = -math.inf
        self._higher: bool | None = None
        self._start()

    def _start(self) -> None:
        self.programs = ProgramTable()
        self.meta: dict[str, Any] = {}
        self.events = EventFeed(self.path)
        self.llm = LlmFeed(self.path)
        self.memory = MemoryFeed(self.path)
        self.best_steps: list[tuple[int, float]] = []

    # -- reading ---------------------------------------------------------------
    def refresh(self, force: bool = False) -> None:
        """Read what was added since the last refresh (at most every ``min_interval_s``)."""
        with self.lock:
            now = time.monotonic()
            if not force and now - self._refreshed_at < self.min_interval_s:
                return
            self._refreshed_at = now
            self._read_files()
            try:
                self._read_store()
                self.error = None
            except sqlite3.DatabaseError as exc:
                self.error = f"{self.path / STORE_FILE}: not readable ({exc})"
            self.events.update()
            self.llm.update()
            self.memory.update()

    def _read_files(self) -> None:
        direction_may_change = False
        if self._config_watch.changed():
            self.config = read_yaml(self.path / "config.yaml") or {}
            self.overrides = read_overrides(self.path)
            bank = bank_dir(self.path, self.config)
            self._cards_watch = [
                FileWatch(bank / n) for n in (BANK_FILE, RECORDS_FILE, JOURNAL_FILE)
            ]
            direction_may_change = True
        if self._summary_watch.changed():
            self.summary = load_summary(self.path)
            direction_may_change = True
        if direction_may_change:
            higher = metric_direction(self.summary.get("higher_is_better"), self.config)
            if higher != self._higher:
                self._higher = higher
                self.best_steps = []
                for row in range(len(self.programs)):
                    self._track_best(row)
        if [w.changed() for w in self._cards_watch].count(True):  # look at every one
            self.cards = load_cards(self._cards_watch[0].path.parent)
        if self._ope_watch.changed():
            ope = load_ope_summary(self.path)
            self.ope = ope.iloc[0].to_dict() if len(ope) else {}

    def _read_store(self) -> None:
        while True:
            t = self.programs
            read = read_new_rows(self.path, t.last_ordinal, t.ids[-1] if t.ids else None)
            if read.replaced:
                self._restart()  # another run's store now sits in the folder
                continue
            if read.meta:
                self.meta = read.meta
            for row in read.rows:
                self.programs.add(row)
                self._track_best(len(self.programs) - 1)
            if len(read.rows) < BATCH:
                return

    def _restart(self) -> None:
        self._start()
        self.generation += 1

    @property
    def higher_is_better(self) -> bool:
        """The primary metric's direction (summary, else the configured problem, else higher)."""
        return self._higher is not False

    def _track_best(self, row: int) -> None:
        t = self.programs
        if not t.valid[row] or math.isnan(t.fitness[row]):
            return
        fit = t.fitness[row]
        best = self.best_steps[-1][1] if self.best_steps else None
        if best is None or (fit > best if self.higher_is_better else fit < best):
            self.best_steps.append((t.mutant[row], fit))

    # -- views -----------------------------------------------------------------
    @property
    def counters(self) -> dict[str, Any]:
        """The engine's counters at the last commit (mutants, valid, best, LLM calls, tokens)."""
        return dict((self.meta.get("state") or {}).get("counters") or {})

    @property
    def descriptors(self) -> list[dict[str, Any]]:
        """The behaviour axes of the archive (name, bins, ...) as the last commit saved them."""
        return list(((self.meta.get("state") or {}).get("islands") or {}).get("descriptors") or [])

    @property
    def islands(self) -> list[dict[str, Any]]:
        """Each island's archive at the last commit: ``capacity`` and ``elites`` (cell, fitness)."""
        return list(((self.meta.get("state") or {}).get("islands") or {}).get("islands") or [])

    @property
    def best_id(self) -> str | None:
        best = self.counters.get("best_id") or self.summary.get("best_program_id")
        return str(best) if best else None

    def status(self) -> dict[str, Any]:
        """The run's ``state``, its stop reason, resumes and latest activity.

        ``state``: ``running`` (a process has the store open, or it wrote in
        the last ``IDLE_AFTER_S`` seconds), ``stopped`` (its last event is a
        stop), ``interrupted`` (no stop, and its WAL is left with nobody holding
        it: killed), ``idle`` (no stop, no news for ``IDLE_AFTER_S``, and no way
        to tell more) or ``waiting`` (nothing written yet).
        """
        stamps = [self.path / n for n in ("events.jsonl", STORE_FILE, STORE_FILE + "-wal")]
        mtimes = [p.stat().st_mtime for p in stamps if p.exists()]
        last = max(mtimes) if mtimes else None
        idle = time.time() - last if last is not None else None
        stop = self.events.stopped
        writer = has_open_connection(self.path / STORE_FILE)
        if not len(self.programs) and not self.events.counts:
            state = "waiting"  # nothing written yet
        elif writer:
            state = "running"
        elif stop is not None:
            state = "stopped"
        elif writer is False:
            state = "interrupted"  # its WAL is still there and nobody holds it: killed
        elif idle is not None and idle > IDLE_AFTER_S:
            state = "idle"
        else:
            state = "running"
        return {
            "state": state,
            "writer": writer,
            "stop_reason": stop.get("reason") if stop else None,
            "finished": bool(self.summary.get("finished", False)) and stop is not None,
            "resumes": self.events.counts.get("resume", 0),
            "idle_s": idle,
            "started": self.events.first_time,
            "bad_lines": self.events.tail.bad_lines,
        }

    def card_effects(self) -> pd.DataFrame:
        """Per card usage and posterior effect (``gigaevo.analysis.card_effects``), cached.

        The causal ledger is read in full, so this is recomputed only when it
        changed and at most every ``EFFECTS_EVERY_S`` seconds.
        """
        now = time.monotonic()
        if self._effects is None or (
            now - self._effects_at >= EFFECTS_EVERY_S and self._effects_watch.changed()
        ):
            self._effects = card_effects(load_evidence(self.path), self.cards)
            self._effects_at = now
        return self._effects
