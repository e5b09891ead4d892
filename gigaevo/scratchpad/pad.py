"""``Scratchpad``: one session's handle on a scratchpad file (read once, upsert by key).

Reading: ``load`` reads the file once per session and caches the parsed state;
later calls return the cached state but count and warn, because a second read
means some code is not referencing the cache. Writing: every change takes the
file lock, re-reads the current bytes (so concurrent writers lose nothing and
the last upsert per key wins, never a blind text merge), splices the changed
entries, and replaces the file atomically (temp file, fsync, ``os.replace``,
directory fsync; without the directory fsync for writes remade at every start).
An unchanged result is not written at all. The cached state is refreshed from
what was written; that re-read belongs to the write protocol and is not a
session read.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import filelock

from gigaevo.scratchpad.document import (
    Change,
    Mark,
    Prune,
    Remove,
    ScratchpadState,
    Upsert,
    apply_changes,
    make_entry,
    parse,
)
from gigaevo.scratchpad.errors import (
    CorruptScratchpadError,
    ScratchpadLockError,
    ScratchpadRereadWarning,
)
from gigaevo.scratchpad.format import (
    DECISIONS,
    FINDINGS,
    HYPOTHESES,
    OBSOLETE,
    OPEN,
    RESOLVED,
    SKELETON,
)
from gigaevo.util import atomic_write_bytes

log = logging.getLogger("gigaevo.scratchpad")
DEFAULT_PATH = Path(".agent/scratchpad.md")


def utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


@dataclass(frozen=True)
class WriteResult:
    """Outcome of one locked write: whether the file changed, the new state, what was done."""

    changed: bool
    state: ScratchpadState
    notes: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


def read_text(path: Path) -> str | None:
    """The file's text, or None when it is missing.

    A zero-byte file is corrupt, not missing: every scratchpad has its section
    headings, so an empty one lost its notes (a truncating editor, a full disk)
    and must not be silently replaced by the skeleton.

    Raises:
        CorruptScratchpadError: the file is empty, unreadable (a directory, no
            permission, an I/O error) or not UTF-8 (names the line).
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptScratchpadError(path, 0, f"unreadable ({exc.strerror or exc})") from exc
    if not data:
        raise CorruptScratchpadError(
            path, 0, "empty (zero bytes; a scratchpad always has its section headings)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise CorruptScratchpadError(path, line, "not UTF-8 text") from exc


class Scratchpad:
    """A session's handle on one scratchpad file (see the module docstring).

    Args:
        path: the scratchpad file; its directory is created when needed.
        lock_timeout: seconds to wait for the lock file ``<path>.lock``.
        today: the date given to provenance that comes without one.

    Attributes:
        reads: session reads so far (``load`` calls); more than 1 is a bug.
        created: this session created the file from the skeleton.
    """

    def __init__(
        self,
        path: str | Path = DEFAULT_PATH,
        *,
        lock_timeout: float = 30.0,
        today: Callable[[], dt.date] = utc_today,
    ) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.lock_timeout = lock_timeout
        self.today = today
        self.reads = 0
        self.created = False
        self._state: ScratchpadState | None = None
        self._mutex = threading.Lock()

    # -- reading ----------------------------------------------------------------------
    def load(self) -> ScratchpadState:
        """Read the file once and cache its state; a missing file gets the skeleton.

        A second call returns the cached state, counts the read and issues a
        ``ScratchpadRereadWarning``.

        Raises:
            CorruptScratchpadError: the file does not parse; it is not modified.
            ScratchpadLockError: creating a missing file timed out on the lock.
        """
        self.reads += 1
        if self.reads > 1 and self._state is not None:
            message = (
                f"{self.path}: scratchpad read {self.reads} times in one session; "
                "reference the cached state instead of re-reading"
            )
            warnings.warn(ScratchpadRereadWarning(message), stacklevel=2)
            log.warning(message)
            return self._state
        if self._state is not None:  # a write this session already cached the file
            return self._state
        text = read_text(self.path)
        if text is None:
            # the skeleton: a power loss that undoes its creation leaves no file, which
            # the next load creates again (no directory fsync needed)
            return self.apply((), durable=False).state
        self._state = parse(text, self.path)[0]
        return self._state

    @property
    def state(self) -> ScratchpadState:
        """The cached state (loads it on first use; never re-reads the file)."""
        if self._state is None:
            return self.load()
        return self._state

    # -- writing ----------------------------------------------------------------------
    def apply(self, changes: Sequence[Change], *, durable: bool = True) -> WriteResult:
        """Apply ``changes`` in one locked, atomic write (none when nothing changes).

        ``durable=False`` skips the directory fsync (the file's own fsync stays, so the
        file is never torn or blank): a kill still loses nothing, but a power loss may
        bring back the previous version. For changes the caller makes again from
        other stored state at every start (the run's configuration, its reconciliation
        with the program store).

        Raises:
            CorruptScratchpadError: the file on disk does not parse; it is not modified.
            ScratchpadLockError: the lock was not obtained within ``lock_timeout``.
            UnknownKeyError, InvalidEntryError: a change cannot be applied; nothing is written.
        """
        with self._mutex, self._locked():
            current = read_text(self.path)
            text = SKELETON if current is None else current
            new_text, state, edits = apply_changes(text, changes, self.path, self.today())
            changed = new_text != current
            if changed:
                atomic_write_bytes(self.path, new_text.encode("utf-8"), durable=durable)
                if current is None:
                    self.created = True
                    log.info("created scratchpad %s", self.path)
            self._state = state
        return WriteResult(changed, state, tuple(edits.notes), tuple(edits.removed))

    def upsert(
        self,
        section: str,
        key: str,
        text: str,
        *,
        source: str | None = None,
        date: dt.date | None = None,
        record_change: bool = True,
    ) -> WriteResult:
        """Add or replace the entry ``key`` in ``section``; the last upsert per key wins.

        An unchanged claim (same section, text, source) leaves the file as it
        is, so the same upsert twice gives identical bytes. Replacing an active
        Finding with a different claim records the revision in Decisions
        unless ``record_change`` is False.

        Raises:
            MissingProvenanceError: Findings or Decisions without ``source``.
            InvalidEntryError: bad section, key, text, source or date.
            CorruptScratchpadError, ScratchpadLockError: as for ``apply``.
        """
        entry = make_entry(section, key, text, source=source, date=date, today=self.today())
        return self.apply([Upsert(entry, record_change=record_change)])

    def add_hypothesis(self, key: str, text: str, *, source: str | None = None) -> WriteResult:
        """A claim not yet validated (provenance optional). Raises as ``upsert``."""
        return self.upsert(HYPOTHESES, key, text, source=source)

    def record_decision(
        self, key: str, text: str, *, source: str, date: dt.date | None = None
    ) -> WriteResult:
        """A choice made, with its provenance. Raises as ``upsert``."""
        return self.upsert(DECISIONS, key, text, source=source, date=date)

    def record_finding(
        self,
        key: str,
        text: str,
        *,
        source: str,
        date: dt.date | None = None,
        record_change: bool = True,
    ) -> WriteResult:
        """A validated conclusion with its provenance. Raises as ``upsert``."""
        return self.upsert(
            FINDINGS, key, text, source=source, date=date, record_change=record_change
        )

    def open_question(self, key: str, text: str, *, source: str | None = None) -> WriteResult:
        """A pending question (an outcome still awaited). Raises as ``upsert``."""
        return self.upsert(OPEN, key, text, source=source)

    def resolve(self, key: str, *, prune: bool = False) -> WriteResult:
        """Mark the Open item ``key`` resolved; with ``prune`` remove it in the same write.

        Raises:
            UnknownKeyError: no entry ``key``.
            InvalidEntryError: the entry is not in Open.
        """
        changes: list[Change] = [Mark(key, RESOLVED)]
        if prune:
            changes.append(Prune((key,)))
        return self.apply(changes)

    def mark_obsolete(self, key: str) -> WriteResult:
        """Mark a Finding or Hypothesis obsolete (``prune`` removes it).

        Raises:
            UnknownKeyError: no entry ``key``.
            InvalidEntryError: the entry is in Decisions or Open.
        """
        return self.apply([Mark(key, OBSOLETE)])

    def remove(self, key: str) -> WriteResult:
        """Delete the entry ``key`` (no write when there is none)."""
        return self.apply([Remove(key)])

    def prune(self, keys: Sequence[str] | None = None) -> WriteResult:
        """Remove resolved Open items and obsolete Findings/Hypotheses (or only ``keys``)."""
        return self.apply([Prune(None if keys is None else tuple(keys))])

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(self.lock_path), timeout=self.lock_timeout)
        try:
            lock.acquire()
        except filelock.Timeout as exc:
            raise ScratchpadLockError(
                f"{self.lock_path}: lock not obtained within {self.lock_timeout:g} s"
            ) from exc
        try:
            yield
        finally:
            lock.release()
