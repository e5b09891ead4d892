"""The ``NoteWriter`` role: what a component (the memory) may write to a scratchpad."""

from __future__ import annotations

import datetime as dt
from typing import Protocol

from gigaevo.scratchpad.document import ScratchpadState


class NoteWriter(Protocol):
    """Typed upserts by key into the four sections, plus the cached state to consult.

    ``Scratchpad`` writes at once, and ``resolve`` only marks unless asked to
    prune; ``RunScratchpad`` stages the notes, writes them at the run's next
    checkpoint, and prunes resolved and obsolete entries in the same write (a
    run's file is state, not a log). Both raise
    ``MissingProvenanceError`` for Findings or Decisions without a source and
    ``InvalidEntryError`` for a malformed entry.
    """

    @property
    def state(self) -> ScratchpadState: ...

    def add_hypothesis(self, key: str, text: str, *, source: str | None = None) -> object: ...

    def record_finding(
        self,
        key: str,
        text: str,
        *,
        source: str,
        date: dt.date | None = None,
        record_change: bool = True,
    ) -> object: ...

    def record_decision(
        self, key: str, text: str, *, source: str, date: dt.date | None = None
    ) -> object: ...

    def open_question(self, key: str, text: str, *, source: str | None = None) -> object: ...

    def resolve(self, key: str, *, prune: bool = ...) -> object: ...

    def mark_obsolete(self, key: str) -> object: ...
