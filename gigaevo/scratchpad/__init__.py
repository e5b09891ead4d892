"""The audited scratchpad: persistent notes that survive a reset (``.agent/scratchpad.md``).

A Markdown file with four fixed sections (Hypotheses, Decisions, Findings,
Open) holding only validated conclusions, one entry per stable key, with
provenance ``[src:<source> @ <YYYY-MM-DD>]`` required in Findings and
Decisions. A session reads it once and references the cached state; writes are
typed upserts by key under a file lock, atomic, and touch only the changed
entry. ``RunScratchpad`` is a run's use of it; ``checker`` validates design
reports and scratchpad files against ``assets/contracts``; ``python -m
gigaevo.scratchpad`` is the command line for agents outside the pipeline.
"""

from gigaevo.scratchpad.document import (
    Change,
    Mark,
    Prune,
    Remove,
    ScratchpadState,
    Upsert,
    make_entry,
    render_prompt,
)
from gigaevo.scratchpad.errors import (
    CorruptScratchpadError,
    InvalidEntryError,
    MissingProvenanceError,
    ScratchpadError,
    ScratchpadLockError,
    ScratchpadRereadWarning,
    UnknownKeyError,
)
from gigaevo.scratchpad.format import (
    DECISIONS,
    FINDINGS,
    HYPOTHESES,
    OPEN,
    SECTIONS,
    SKELETON,
    Entry,
)
from gigaevo.scratchpad.notes import NoteWriter
from gigaevo.scratchpad.pad import Scratchpad, WriteResult
from gigaevo.scratchpad.report import design_report
from gigaevo.scratchpad.run_notes import RunScratchpad
from gigaevo.scratchpad.settings import RunOutcome, ScratchpadSettings

__all__ = [
    "DECISIONS",
    "FINDINGS",
    "HYPOTHESES",
    "OPEN",
    "SECTIONS",
    "SKELETON",
    "Change",
    "CorruptScratchpadError",
    "Entry",
    "InvalidEntryError",
    "Mark",
    "MissingProvenanceError",
    "NoteWriter",
    "Prune",
    "Remove",
    "RunOutcome",
    "RunScratchpad",
    "Scratchpad",
    "ScratchpadError",
    "ScratchpadLockError",
    "ScratchpadRereadWarning",
    "ScratchpadSettings",
    "ScratchpadState",
    "UnknownKeyError",
    "Upsert",
    "WriteResult",
    "design_report",
    "make_entry",
    "render_prompt",
]
