"""``cards.trials.jsonl``: the use trials stamped onto cards, kept beside ``cards.json``.

A use trial (memory-model.md "Multitask transfer") is stamped on every
usefulness-eligible terminal, so trials grow with the run while the cards do not. They
live in this append-only journal instead of the card records: ``cards.json`` stays the
size of its cards, and a stamp appends one line instead of rewriting the whole bank.
One line per stamp::

    {"card":"ins-…","revision":4,"trial":{"decision_id":"…",…},"updated_at":1.7e9}

``revision`` is the card's after that stamp (a stamp makes a new card revision, as
before, and stamps are applied before the other changes of their write, so a line never
carries the revision of a record change that a kill may keep from landing); ``updated_at``
is the card's after the write that carried it. A card as the rest of the code sees it is its
``cards.json`` record merged with its journal lines (``merge``): its trials in stamp
order (the newest ``MAX_USE_TRIALS``), its revision the larger of the two.

Writers append under the bank lock (``cards.json.lock``), fsync, and cut a line torn
by a killed writer before appending; readers take complete lines only. A complete
line that does not parse makes the bank corrupt (``CorruptBankError``), as a bad
``cards.json`` does. ``rewrite`` replaces the whole journal atomically (used when a
transaction removes trials, and to migrate a bank whose ``cards.json`` still holds
trials inline).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from pathlib import Path

from gigaevo.memory.v2.bank.cards import MAX_USE_TRIALS, Card, UseTrial
from gigaevo.memory.v2.bank.jsonltail import JsonlTail
from gigaevo.memory.v2.errors import CardFormatError, CorruptBankError
from gigaevo.memory.v2.records import from_json, to_json
from gigaevo.util import atomic_write_text

JOURNAL_FILE = "cards.trials.jsonl"


@dataclass(frozen=True)
class TrialEntry:
    """One journal line: a trial stamped onto ``card`` and the card's revision after it."""

    card: str
    revision: int
    updated_at: float
    trial: UseTrial

    def line(self) -> str:
        data = {
            "card": self.card,
            "revision": self.revision,
            "trial": to_json(self.trial),
            "updated_at": self.updated_at,
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"

    @classmethod
    def parse(cls, line: str, where: str) -> TrialEntry:
        data = json.loads(line)
        if not isinstance(data, dict) or set(data) != {"card", "revision", "trial", "updated_at"}:
            raise CardFormatError(f"{where}: expected keys card, revision, trial, updated_at")
        card, revision, updated_at = data["card"], data["revision"], data["updated_at"]
        if not isinstance(card, str) or not isinstance(revision, int) or revision < 1:
            raise CardFormatError(f"{where}: bad card id or revision")
        if not isinstance(updated_at, int | float) or isinstance(updated_at, bool):
            raise CardFormatError(f"{where}: bad updated_at")
        return cls(card, revision, float(updated_at), from_json(UseTrial, data["trial"], where))


class TrialJournal:
    """The parsed journal of one bank, read incrementally (see the module docstring).

    Reset rule: a journal replaced or shrunk since the last read is read again from its
    start (``refresh_cards`` then returns None: every card must be merged again).

    Args:
        bank_dir: the directory of ``cards.json``.
    """

    def __init__(self, bank_dir: Path) -> None:
        self.path = Path(bank_dir) / JOURNAL_FILE
        self.by_card: dict[str, list[TrialEntry]] = {}  # the newest MAX_USE_TRIALS per card
        self._tail = JsonlTail(self.path, "trial")

    @property
    def signature(self) -> tuple[int | None, int]:
        """(inode, bytes of complete lines read): what a reader has seen."""
        return self._tail.inode, self._tail.offset

    def changed(self) -> bool:
        """Whether the file differs from what was read (one ``stat``)."""
        return self._tail.changed(gone=self._tail.inode is not None)

    def refresh(self) -> bool:
        """Read the complete lines appended since the last read (all of them when the file
        was replaced); True when anything was read or reset.

        Raises:
            CorruptBankError: a complete line does not parse.
        """
        touched = self.refresh_cards()
        return touched is None or bool(touched)

    def refresh_cards(self) -> set[str] | None:
        """``refresh``; the ids of the cards with new lines, or None when the journal was
        replaced (every card must be merged again)."""
        t = self._tail
        replaced: list[bool] = []

        def moved(st: os.stat_result) -> bool:
            if st.st_ino != t.inode or st.st_size < t.offset:
                self._reset(st.st_ino)  # read the new file from its start
                replaced.append(True)
            return False

        found = t.read(moved)
        if found is None:
            if t.inode is None:
                return set()
            self._reset(None)
            return None
        lines = found[1]
        touched: set[str] = set()
        for raw in lines:
            t.lines += 1
            try:
                entry = TrialEntry.parse(raw.decode("utf-8", "replace"), f"{self.path}:{t.lines}")
            except (ValueError, CardFormatError) as exc:
                raise t.corrupt(exc) from exc
            self._take(entry)
            touched.add(entry.card)
        t.advance(lines)
        return None if replaced else touched

    def append(self, entries: Iterable[TrialEntry]) -> None:
        """Append ``entries`` durably (the caller holds the bank lock and has refreshed)."""
        data = "".join(e.line() for e in entries).encode("utf-8")
        if not data:
            return
        t = self._tail

        def keep(st: os.stat_result) -> int:
            if st.st_ino != t.inode:  # created now, or replaced under us: read it all
                self._reset(st.st_ino)
                if st.st_size:
                    raise CorruptBankError(f"{self.path} changed under the bank lock")
            return t.offset  # a line torn by a killed writer beyond it is cut

        t.append(data, keep)
        for raw in data.decode("utf-8").splitlines():
            t.lines += 1
            self._take(TrialEntry.parse(raw, f"{self.path}:{t.lines}"))

    def rewrite(self, entries: Iterable[TrialEntry]) -> None:
        """Replace the journal with ``entries`` atomically (the caller holds the bank lock)."""
        entries = list(entries)
        atomic_write_text(self.path, "".join(e.line() for e in entries))
        st = os.stat(self.path)
        self._reset(st.st_ino)
        for e in entries:
            self._take(e)
        self._tail.lines = len(entries)
        self._tail.offset = st.st_size

    def merge(self, card: Card) -> Card:
        """``card`` (a ``cards.json`` record) with its journal trials and revision."""
        entries = self.by_card.get(card.id)
        if not entries:
            return card
        return merged(card, entries)

    def _take(self, entry: TrialEntry) -> None:
        kept = self.by_card.setdefault(entry.card, [])
        kept.append(entry)
        if len(kept) > 2 * MAX_USE_TRIALS:  # amortised trim to the newest
            del kept[: len(kept) - MAX_USE_TRIALS]

    def _reset(self, inode: int | None) -> None:
        self.by_card = {}
        self._tail.reset(inode)


def merged(card: Card, entries: list[TrialEntry]) -> Card:
    """``card`` with ``entries`` appended to its trials (by decision id, once each)."""
    seen = {t.decision_id for t in card.use_trials}
    trials = list(card.use_trials)
    for e in entries:
        if e.trial.decision_id not in seen:
            seen.add(e.trial.decision_id)
            trials.append(e.trial)
    last = max(entries, key=lambda e: e.revision)
    revision, updated = card.revision, card.updated_at
    if last.revision > revision:
        revision, updated = last.revision, last.updated_at
    return replace(
        card, use_trials=tuple(trials[-MAX_USE_TRIALS:]), revision=revision, updated_at=updated
    )


def stamped(old: Card, new: Card, ids: AbstractSet[str] | None = None) -> list[UseTrial] | None:
    """The trials ``new`` adds to ``old`` when that is all that changed (besides revision
    and time), else None (a change ``cards.json`` must record, or trials removed).

    ``ids``: the decision ids of ``old``'s trials when the caller keeps them
    (``TrialIdSets``); then a stamp costs O(trials added), not O(trials held).
    """
    if replace(old, use_trials=(), revision=1, updated_at=0.0) != replace(
        new, use_trials=(), revision=1, updated_at=0.0
    ):
        return None
    added = appended(old.use_trials, new.use_trials, ids)
    if added is None:
        return None  # trials removed or reordered
    if not added and (new.revision, new.updated_at) != (old.revision, old.updated_at):
        return None  # a revision or time change with no line to carry it: a record change
    return added


def appended(
    old: tuple[UseTrial, ...], new: tuple[UseTrial, ...], ids: AbstractSet[str] | None = None
) -> list[UseTrial] | None:
    """The trials of ``new`` whose decision ids ``old`` lacks, when ``new`` is ``old`` with
    them appended (the oldest dropped past ``MAX_USE_TRIALS``); else None.

    Such trials are a suffix of ``new``: the longest suffix of ids ``old`` lacks (the trial
    before it, if any, is one of ``old``'s), so only that suffix is looked up in ``ids`` (the
    decision ids of ``old``; built here when None) and the rest is one tuple comparison.
    This is the filter of every trial of ``new`` by ``ids`` whenever the comparison holds.
    """
    known = {t.decision_id for t in old} if ids is None else ids
    n = len(new)
    start = n
    while start > 0 and new[start - 1].decision_id not in known:
        start -= 1
    added = list(new[start:])
    if new != (*old, *added)[-MAX_USE_TRIALS:]:
        return None
    return added


class TrialIdSets:
    """Per card id: the decision ids of its trials, kept with the very tuple they were read
    from (so they never answer for trials they have not seen: another tuple, e.g. a reload
    or another process's stamps, builds them again). ``advance`` moves them to a card's
    next trials in O(trials added and dropped) when those only append to them."""

    def __init__(self) -> None:
        self._by_card: dict[str, tuple[tuple[UseTrial, ...], set[str]]] = {}

    def of(self, card_id: str, trials: tuple[UseTrial, ...]) -> set[str]:
        """The decision ids of ``trials`` (the trials of card ``card_id``); do not change it."""
        known = self._by_card.get(card_id)
        if known is None or known[0] is not trials:
            known = (trials, {t.decision_id for t in trials})
            self._by_card[card_id] = known
        return known[1]

    def advance(
        self,
        card_id: str,
        old: tuple[UseTrial, ...],
        new: tuple[UseTrial, ...],
        added: list[UseTrial],
    ) -> None:
        """``new`` is ``old`` with ``added`` appended (``appended``); the kept ids of ``old``
        become those of ``new``. Exact when ``old``'s ids are distinct (each dropped trial's
        id leaves the set); otherwise the entry is dropped and built again when asked."""
        known = self._by_card.get(card_id)
        if known is None or known[0] is not old or len(known[1]) != len(old):
            self._by_card.pop(card_id, None)
            return
        ids = known[1]
        for gone in old[: len(old) + len(added) - len(new)]:
            ids.discard(gone.decision_id)
        ids.update(t.decision_id for t in added)
        self._by_card[card_id] = (new, ids)

    def forget(self, card_id: str) -> None:
        self._by_card.pop(card_id, None)


def journal_entries(
    cards: Mapping[str, Card], capped: Mapping[str, int] | None = None
) -> list[TrialEntry]:
    """Every trial of ``cards`` as journal lines, for ``rewrite``: each at its card's
    revision, or at most ``capped[card]`` for the cards whose record the same write changes
    (their lines must not carry a revision that only the record, not yet written, holds)."""
    caps = capped or {}
    return [
        TrialEntry(c.id, min(c.revision, caps.get(c.id, c.revision)), c.updated_at, t)
        for c in cards.values()
        for t in c.use_trials
    ]
