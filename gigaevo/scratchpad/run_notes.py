"""``RunScratchpad``: a run's scratchpad, read once at start and written at checkpoints.

What a run records (only validated conclusions):

- Decisions ``config.*``: the configuration choices, once per session
  (unchanged choices keep their bytes and first date);
- Findings ``best``: the best program so far (source: its program id), and
  ``run.outcome`` when the run finishes;
- Open ``attempt.<n>`` / ``run.interrupted``: outcomes still awaited when a
  session stops with attempts in flight; resolved and pruned as they commit;
- whatever the memory stages through the ``NoteWriter`` methods (cards
  established as Findings, retirements as Decisions, new cards as Hypotheses).

When: notes are staged in memory and written together every
``record_every`` committed mutants (counted, not timed), when a run finishes,
and when a resumed session starts on such a checkpoint. Counting keeps the
write rate bounded whatever the throughput and, because checkpoints fall at
the same commits in every run, the prompt prefix each attempt sees is the
same in a killed-and-resumed run as in an uninterrupted one. An interrupted
session writes only Open items, for the same reason.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gigaevo.scratchpad.document import (
    PROMPT_SECTIONS,
    Change,
    Mark,
    Prune,
    ScratchpadState,
    Upsert,
    make_entry,
    render_prompt,
)
from gigaevo.scratchpad.errors import UnknownKeyError
from gigaevo.scratchpad.format import DECISIONS, FINDINGS, HYPOTHESES, OBSOLETE, OPEN, RESOLVED
from gigaevo.scratchpad.pad import Scratchpad, utc_today
from gigaevo.scratchpad.prefix_log import MetaStore, PromptPrefixLog
from gigaevo.scratchpad.report import design_report
from gigaevo.scratchpad.settings import RunOutcome, ScratchpadSettings
from gigaevo.util import atomic_write_bytes

log = logging.getLogger("gigaevo.scratchpad")
REPORT_NAME = "design_report.json"


class RunScratchpad:
    """The run's notes (see the module docstring). Used from the engine's main thread.

    Args:
        pad: the scratchpad of ``checkpoint_dir``.
        root: ``checkpoint_dir`` (paths in the report are relative to it).
        metric: name of the primary metric (for the best-program finding).
        record_every: checkpoint cadence in committed mutants.
        in_prompt: whether ``prompt_prefix`` shows the notes.
    """

    def __init__(
        self, pad: Scratchpad, *, root: Path, metric: str, record_every: int, in_prompt: bool
    ) -> None:
        self.pad = pad
        self.root = Path(root)
        self.metric = metric
        self.record_every = record_every
        self.in_prompt = in_prompt
        self.writes = 0
        self.resumed = False
        self._staged: list[Change] = []
        self._awaited: set[int] = set()
        self._prefix_log: PromptPrefixLog | None = None
        self._prefix = ""
        self._loaded = pad.state  # may only be read now: the session's one read
        self._session: dict[str, Any] = {
            "created": pad.created,
            "loaded_sha256": self._loaded.sha256,
            "entries_at_load": len(self._loaded),
        }
        self._refresh_prefix()

    @classmethod
    def open(
        cls,
        checkpoint_dir: str | Path,
        settings: ScratchpadSettings,
        *,
        metric: str,
        today: Callable[[], dt.date] = utc_today,
    ) -> RunScratchpad:
        """Read (or create) ``checkpoint_dir/<settings.path>`` once.

        Raises:
            ValueError: a bad setting (names the key).
            CorruptScratchpadError: the file does not parse; it is left untouched.
        """
        settings.validate()
        root = Path(checkpoint_dir)
        pad = Scratchpad(root / settings.path, today=today)
        pad.load()
        return cls(
            pad,
            root=root,
            metric=metric,
            record_every=settings.record_every,
            in_prompt=settings.in_prompt,
        )

    # -- reading ----------------------------------------------------------------------
    @property
    def state(self) -> ScratchpadState:
        """The cached notes (never re-read from the file)."""
        return self.pad.state

    def prompt_prefix(self) -> str:
        """Active Hypotheses, Decisions and Findings for the prompt ("" when off or empty)."""
        return self._prefix

    def attach_prefix_log(self, store: MetaStore) -> None:
        """Persist the prefix seen by each dispatch in ``store`` (the program store)."""
        if self.in_prompt:
            self._prefix_log = PromptPrefixLog(store)

    def prefix_for_dispatch(self, attempt: int, oldest_uncommitted: int) -> str:
        """The prefix for a new dispatch, recorded before the dispatch is stored."""
        if self._prefix_log is not None:
            self._prefix_log.record(attempt, self._prefix, oldest_uncommitted)
        return self._prefix

    def prefix_for_attempt(self, attempt: int) -> str:
        """The prefix ``attempt`` was dispatched with (replays see the same text)."""
        if self._prefix_log is not None:
            recorded = self._prefix_log.text_for(attempt)
            if recorded is not None:
                return recorded
        return self._prefix

    # -- NoteWriter: staged until the next checkpoint --------------------------------
    def add_hypothesis(self, key: str, text: str, *, source: str | None = None) -> None:
        """Stage a claim not yet validated. Raises InvalidEntryError on a bad entry."""
        self._stage_entry(HYPOTHESES, key, text, source=source)

    def record_finding(
        self,
        key: str,
        text: str,
        *,
        source: str,
        date: dt.date | None = None,
        record_change: bool = True,
    ) -> None:
        """Stage a validated conclusion. Raises MissingProvenanceError, InvalidEntryError."""
        self._stage_entry(FINDINGS, key, text, source=source, date=date, record=record_change)

    def record_decision(
        self, key: str, text: str, *, source: str, date: dt.date | None = None
    ) -> None:
        """Stage a decision (a retirement, a choice). Raises as ``record_finding``."""
        self._stage_entry(DECISIONS, key, text, source=source, date=date)

    def open_question(self, key: str, text: str, *, source: str | None = None) -> None:
        """Stage a pending question. Raises InvalidEntryError on a bad entry."""
        self._stage_entry(OPEN, key, text, source=source)

    def resolve(self, key: str, *, prune: bool = True) -> None:
        """Stage resolving (and by default pruning) an Open item. Raises UnknownKeyError."""
        self._stage_mark(key, RESOLVED, prune)

    def mark_obsolete(self, key: str) -> None:
        """Stage marking a Finding or Hypothesis obsolete and pruning it. Raises UnknownKeyError."""
        self._stage_mark(key, OBSOLETE, True)

    def _stage_entry(
        self,
        section: str,
        key: str,
        text: str,
        *,
        source: str | None,
        date: dt.date | None = None,
        record: bool = True,
    ) -> None:
        entry = make_entry(section, key, text, source=source, date=date, today=self.pad.today())
        self._staged.append(Upsert(entry, record_change=record))

    def _stage_mark(self, key: str, status: str, prune: bool) -> None:
        staged = any(isinstance(c, Upsert) and c.entry.key == key for c in self._staged)
        if key not in self.state and not staged:
            raise UnknownKeyError(f"no entry '{key}' in {self.pad.path}")
        self._staged.append(Mark(key, status))
        if prune:
            self._staged.append(Prune((key,)))

    # -- engine hooks -----------------------------------------------------------------
    def record_config(self, choices: Mapping[str, str]) -> None:
        """Write the configuration choices as Decisions ``config.<name>`` (one write).

        Not fsynced to the directory: every session records them again at its start, so
        a power loss that undoes this write is repaired by the next start.
        """
        today = self.pad.today()
        self._write(
            [
                Upsert(make_entry(DECISIONS, f"config.{k}", v, source="config", today=today))
                for k, v in choices.items()
            ],
            durable=False,
        )

    def start_session(
        self,
        *,
        resumed: bool,
        n_mutants: int,
        best_id: str,
        best_fitness: float,
        pending: Mapping[int, str],
    ) -> None:
        """Reconcile Open items with the attempts in flight; record the best on a checkpoint.

        ``pending`` maps each dispatched, uncommitted attempt to its parent id.
        """
        changes: list[Change] = []
        self.resumed = resumed
        if "run.interrupted" in self.state:
            changes += [Mark("run.interrupted", RESOLVED), Prune(("run.interrupted",))]
        for e in self.state.section(OPEN):
            if _attempt_of(e.key) is not None and _attempt_of(e.key) not in pending:
                changes += [Mark(e.key, RESOLVED), Prune((e.key,))]
        changes += self._awaiting(pending, "dispatched before a reset")
        staged: list[Change] = []
        if n_mutants % self.record_every == 0:
            self._stage_best(best_id, best_fitness)
            staged = self._take_staged()
        # what this write holds is derived at every start from the program store (the
        # attempts in flight, the best), so it needs no directory fsync; notes the memory
        # staged exist nowhere else and keep it
        self._write(changes + staged, durable=not _derived(staged))

    def after_commit(self, attempt: int, n_mutants: int, best_id: str, best_fitness: float) -> None:
        """Resolve ``attempt`` if awaited; on a checkpoint write the staged notes and the best."""
        if attempt in self._awaited:
            self._awaited.discard(attempt)
            key = f"attempt.{attempt}"
            self._write([Mark(key, RESOLVED), Prune((key,))])
        if n_mutants % self.record_every == 0:
            self._stage_best(best_id, best_fitness)
            self._write(self._take_staged())

    def finish(self, outcome: RunOutcome, best_id: str, best_fitness: float) -> None:
        """A finished run: write the best, the outcome and everything staged."""
        self._stage_best(best_id, best_fitness)
        text = (
            f"{outcome.n_mutants} mutants committed ({outcome.n_valid} valid, "
            f"{outcome.n_invalid} invalid, {outcome.n_duplicate} duplicate); "
            f"stopped by {outcome.stop_reason}"
        )
        self.record_finding("run.outcome", text, source="summary.json", record_change=False)
        staged = self._take_staged()
        # the best and the outcome come from the store's counters, which a resume after a
        # power loss finishes again (summary.json is not fsynced either): only notes the
        # memory staged need the directory fsync
        self._write(staged, durable=not _derived(staged))

    def interrupted(self, n_mutants: int, pending: Mapping[int, str]) -> None:
        """An interrupted session: Open items for the outcomes still awaited (nothing else)."""
        today = self.pad.today()
        note = f"run interrupted after {n_mutants} mutants; continue it with resume=true"
        changes: list[Change] = [Upsert(make_entry(OPEN, "run.interrupted", note, today=today))]
        self._write(changes + self._awaiting(pending, "in flight when the run was interrupted"))

    def write_report(self) -> Path:
        """Write the design report (``design_report.json`` beside the scratchpad); its path."""
        path = self.pad.path.with_name(REPORT_NAME)
        data = json.dumps(self.report(), indent=2, sort_keys=True) + "\n"
        # a report of this session, rewritten at its start and its end and read by nothing
        # of the run: atomic (never torn by a kill) but not fsynced; after a power loss it
        # may be old or blank until the next session writes it
        atomic_write_bytes(path, data.encode("utf-8"), durable=False, synced=False)
        return path

    def report(self) -> dict[str, Any]:
        """The design report of this session (see ``gigaevo.scratchpad.report``)."""
        return design_report(
            path=self.pad.path.relative_to(self.root).as_posix(),
            lock_file=self.pad.lock_path.relative_to(self.root).as_posix(),
            observed_reads=self.pad.reads,
            name="gigaevo run scratchpad",
            run={
                "checkpoint_dir": str(self.root),
                "record_every": self.record_every,
                "in_prompt": self.in_prompt,
                "prompt_sections": list(PROMPT_SECTIONS) if self.in_prompt else [],
                "resumed": self.resumed,
                "writes": self.writes,
                "session": dict(self._session),
            },
        )

    # -- helpers ----------------------------------------------------------------------
    def _awaiting(self, pending: Mapping[int, str], why: str) -> list[Change]:
        today = self.pad.today()
        changes: list[Change] = []
        for attempt, parent in sorted(pending.items()):
            self._awaited.add(attempt)
            key = f"attempt.{attempt}"
            if key in self.state:
                continue
            text = f"outcome of attempt {attempt} (parent {parent}) awaited: {why}"
            changes.append(Upsert(make_entry(OPEN, key, text, today=today)))
        return changes

    def _stage_best(self, best_id: str, best_fitness: float) -> None:
        if not best_id:
            return
        text = f"best {self.metric} so far: {best_fitness:.10g}, program {best_id}"
        self.record_finding("best", text, source=best_id, record_change=False)

    def _take_staged(self) -> list[Change]:
        staged, self._staged = self._staged, []
        return staged

    def _write(self, changes: list[Change], *, durable: bool = True) -> None:
        if all(self._unchanged(c) for c in changes):
            return  # nothing would change: skip the lock and the write
        result = self.pad.apply(changes, durable=durable)
        if result.changed:
            self.writes += 1
            self._refresh_prefix()

    def _unchanged(self, change: Change) -> bool:
        if not isinstance(change, Upsert):
            return False
        old = self.state.get(change.entry.key)
        return old is not None and old.same_claim(change.entry)

    def _refresh_prefix(self) -> None:
        self._prefix = render_prompt(self.state) if self.in_prompt else ""


_DERIVED_KEYS = frozenset({"best", "run.outcome"})


def _derived(changes: list[Change]) -> bool:
    """Whether ``changes`` only upsert notes rebuilt from the program store (the best, the
    outcome), none the memory staged."""
    return all(isinstance(c, Upsert) and c.entry.key in _DERIVED_KEYS for c in changes)


def _attempt_of(key: str) -> int | None:
    prefix = "attempt."
    if key.startswith(prefix) and key[len(prefix) :].isdigit():
        return int(key[len(prefix) :])
    return None
