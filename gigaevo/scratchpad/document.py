"""Parsed scratchpad state and the edits on its text (pure functions, no I/O).

Every edit splices one entry's line into the text: the bytes before that line
are never touched, so a prompt prefix cached from them stays valid.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gigaevo.scratchpad.errors import (
    CorruptScratchpadError,
    InvalidEntryError,
    MissingProvenanceError,
    UnknownKeyError,
)
from gigaevo.scratchpad.format import (
    DECISIONS,
    EVIDENCED,
    FINDINGS,
    HYPOTHESES,
    OBSOLETE,
    RESOLVED,
    SECTIONS,
    STATUSES,
    Entry,
    Layout,
    check_source,
    check_text,
    scan,
    validate_key,
)

PROMPT_SECTIONS: tuple[str, ...] = (HYPOTHESES, DECISIONS, FINDINGS)
# config.*: run plumbing; card.*: memory cards reach the mutator only through
# the memory's randomised offer, never through the notes
PROMPT_EXCLUDED_KEYS: tuple[str, ...] = ("config.", "card.")
_QUOTE = 120  # characters of each claim quoted in a revision record


@dataclass(frozen=True)
class ScratchpadState:
    """An immutable snapshot of a scratchpad: its exact text and its entries in file order."""

    text: str
    entries: tuple[Entry, ...]
    _by_key: dict[str, Entry] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_key", {e.key: e for e in self.entries})

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: str) -> Entry | None:
        return self._by_key.get(key)

    def section(self, name: str) -> tuple[Entry, ...]:
        """The entries of one section, in file order."""
        return tuple(e for e in self.entries if e.section == name)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: section -> list of entries (key, text, source, date, status)."""
        return {
            name: [
                {
                    "key": e.key,
                    "text": e.text,
                    "source": e.source,
                    "date": e.date.isoformat() if e.date else None,
                    "status": e.status,
                }
                for e in self.section(name)
            ]
            for name in SECTIONS
        }


def parse(text: str, path: str | Path) -> tuple[ScratchpadState, Layout]:
    """Parse a scratchpad text.

    Raises:
        CorruptScratchpadError: naming ``path`` and the line of the first problem.
    """
    layout, issues = scan(text)
    if issues:
        raise CorruptScratchpadError(path, issues[0].line, issues[0].message)
    return ScratchpadState(text, tuple(layout.entries)), layout


def section_name(name: str) -> str:
    """The canonical section name (case-insensitive).

    Raises:
        InvalidEntryError: not one of the four sections.
    """
    for s in SECTIONS:
        if s.lower() == name.strip().lower():
            return s
    raise InvalidEntryError(f"unknown section {name!r}; choose one of {', '.join(SECTIONS)}")


def make_entry(
    section: str,
    key: str,
    text: str,
    *,
    source: str | None = None,
    date: dt.date | None = None,
    status: str | None = None,
    today: dt.date,
) -> Entry:
    """A validated new entry; a source without a date is dated ``today``.

    Raises:
        MissingProvenanceError: Findings or Decisions without a source.
        InvalidEntryError: bad section, key, text, source, date or status.
    """
    section = section_name(section)
    validate_key(key)
    problem = check_text(text)
    if problem is None and source is not None:
        problem = check_source(source)
    if problem is not None:
        raise InvalidEntryError(f"{section} entry '{key}': {problem}")
    if source is None and date is not None:
        raise InvalidEntryError(f"{section} entry '{key}': a date needs a source")
    if section in EVIDENCED and source is None:
        raise MissingProvenanceError(section, key)
    if status is not None and status not in STATUSES.get(section, ()):
        raise InvalidEntryError(f"{section} entry '{key}': status {status!r} is not allowed here")
    if source is not None and date is None:
        date = today
    return Entry(section, key, text, source, date, status)


# -- changes ------------------------------------------------------------------------
@dataclass(frozen=True)
class Upsert:
    """Add or replace the entry with this key (moving it when the section differs).

    ``record_change``: when an active Finding's claim is replaced, record the
    revision in Decisions (key ``rev:<key>``). Pass False for a running value
    that is superseded rather than contradicted (the best program so far).
    """

    entry: Entry
    record_change: bool = True


@dataclass(frozen=True)
class Remove:
    """Delete the entry with this key (nothing happens when there is none)."""

    key: str


@dataclass(frozen=True)
class Mark:
    """Set an entry's status: ``resolved`` (Open) or ``obsolete`` (Findings, Hypotheses)."""

    key: str
    status: str


@dataclass(frozen=True)
class Prune:
    """Remove resolved Open items and obsolete Findings/Hypotheses (all, or only ``keys``)."""

    keys: tuple[str, ...] | None = None


Change = Upsert | Remove | Mark | Prune


@dataclass
class EditLog:
    """What a batch of changes did, for the caller and the CLI."""

    notes: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def apply_changes(
    text: str, changes: Sequence[Change], path: str | Path, today: dt.date
) -> tuple[str, ScratchpadState, EditLog]:
    """Apply ``changes`` in order to ``text``; returns the new text, its state and a log.

    Raises:
        CorruptScratchpadError: ``text`` does not parse.
        UnknownKeyError: a Mark names no entry.
        InvalidEntryError: a Mark sets a status its section does not allow.
    """
    state, layout = parse(text, path)
    log = EditLog()
    for change in changes:
        new_text = _apply_one(text, state, layout, change, today, log)
        if new_text != text:
            text = new_text
            state, layout = parse(text, path)
    return text, state, log


def _apply_one(
    text: str, state: ScratchpadState, layout: Layout, change: Change, today: dt.date, log: EditLog
) -> str:
    if isinstance(change, Upsert):
        return _upsert(text, state, layout, change, today, log)
    if isinstance(change, Remove):
        if change.key not in state:
            return text
        log.removed.append(change.key)
        return _delete(text, layout.spans[change.key])
    if isinstance(change, Mark):
        old = state.get(change.key)
        if old is None:
            raise UnknownKeyError(f"no entry '{change.key}'")
        if change.status not in STATUSES.get(old.section, ()):
            raise InvalidEntryError(
                f"{old.section} entry '{change.key}' cannot be marked {change.status!r}"
            )
        if old.status == change.status:
            return text
        log.notes.append(f"marked {change.key} {change.status}")
        return _replace(text, layout.spans[change.key], replace(old, status=change.status).render())
    prunable = [
        e
        for e in state.entries
        if e.status in (RESOLVED, OBSOLETE) and (change.keys is None or e.key in change.keys)
    ]
    for e in reversed(prunable):  # back to front: earlier spans stay valid
        text = _delete(text, layout.spans[e.key])
    log.removed.extend(e.key for e in prunable)
    return text


def _upsert(
    text: str, state: ScratchpadState, layout: Layout, change: Upsert, today: dt.date, log: EditLog
) -> str:
    new, old = change.entry, state.get(change.entry.key)
    if old is not None and old.same_claim(new):
        return text  # idempotent: an unchanged claim keeps its bytes and first date
    line = new.render()
    if old is None:
        log.notes.append(f"added {new.key} to {new.section}")
        return _insert(text, layout.inserts[new.section], line)
    if old.section == new.section:
        log.notes.append(f"replaced {new.key} in {new.section}")
        text = _replace(text, layout.spans[new.key], line)
    else:
        log.notes.append(f"moved {new.key} from {old.section} to {new.section}")
        text = _delete(text, layout.spans[new.key])
        state, layout = parse(text, "<edit>")
        text = _insert(text, layout.inserts[new.section], line)
    if change.record_change and old.section == FINDINGS and old.active and old.text != new.text:
        text = _record_revision(text, old, new, today, log)
    return text


def _record_revision(text: str, old: Entry, new: Entry, today: dt.date, log: EditLog) -> str:
    where = "" if new.section == FINDINGS else f" (now in {new.section})"
    claim = f'finding {old.key} revised{where}: was "{_quote(old.text)}"; now "{_quote(new.text)}"'
    record = Entry(
        DECISIONS, f"rev:{old.key}", claim, new.source or "scratchpad", new.date or today
    )
    state, layout = parse(text, "<edit>")
    return _upsert(text, state, layout, Upsert(record, record_change=False), today, log)


def _quote(claim: str) -> str:
    return claim if len(claim) <= _QUOTE else claim[: _QUOTE - 3] + "..."


def _insert(text: str, offset: int, line: str) -> str:
    if offset >= len(text):
        return text + ("" if not text or text.endswith("\n") else "\n") + line + "\n"
    return text[:offset] + line + "\n" + text[offset:]


def _replace(text: str, span: tuple[int, int], line: str) -> str:
    return text[: span[0]] + line + text[span[1] :]


def _delete(text: str, span: tuple[int, int]) -> str:
    end = span[1] + 1 if text[span[1] : span[1] + 1] == "\n" else span[1]
    return text[: span[0]] + text[end:]


def render_prompt(
    state: ScratchpadState,
    sections: tuple[str, ...] = PROMPT_SECTIONS,
    exclude_keys: tuple[str, ...] = PROMPT_EXCLUDED_KEYS,
) -> str:
    """The active entries of ``sections`` as prompt text ("" when there are none).

    Dates are left out so that the same notes give the same prompt on any day
    (a seeded offline run stays reproducible); the sources stay. Entries whose
    key starts with one of ``exclude_keys`` stay in the file but not in the
    prompt: configuration choices (``config.*``) are run plumbing, and showing
    them would make the arms of an ablation (say memory=none against
    memory=v2) see different prompts for reasons other than the arm itself.
    """
    parts = []
    for name in sections:
        lines = [
            f"- [{e.key}] {e.text}" + (f" [src:{e.source}]" if e.source else "")
            for e in state.section(name)
            if e.active and not e.key.startswith(exclude_keys)
        ]
        if lines:
            label = f"### {name}" + (" (not yet validated)" if name == HYPOTHESES else "")
            parts.append(label + "\n" + "\n".join(lines))
    return "\n\n".join(parts)
