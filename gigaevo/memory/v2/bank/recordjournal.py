"""``cards.records.jsonl``: card revisions appended beside ``cards.json`` (issue 16.3).

A bank write does not rewrite ``cards.json`` whole: the records of the cards the write
changed (and the ids it removed) are appended as **one line per transaction** under the
bank lock, fsynced once::

    {"base":"<write_id of cards.json>","generation":9,"write_id":"…","written_at":"…",
     "n_cards":1000,"set":[{card record},…],"removed":["ins-…"]}

A line is a whole transaction: a kill tears at most the last line, which readers skip
and the next writer cuts, so a transaction lands entirely or not at all. The bank is
``cards.json`` (the *base*) with the lines whose ``base`` is its ``write_id`` applied in
order: a set replaces a card in place or appends a new one at the end (the order of
``cards.json`` and of the store's dict), a removal drops it. The last line's header is
the bank's identity (generation, write id); ``n_cards`` lets a reader check the replay.

Compaction (the store's ``_persist``) rewrites ``cards.json`` whole with the current
cards under a new write id, then empties the journal. It happens when the journal would
grow past the size of ``cards.json`` or the store's ``compact_from_bytes``, whichever is
larger (so compaction bytes are at most the journal bytes written since the last one: a
write costs O(what changed), amortised), when a write reorders the cards and when there
is no ``cards.json`` yet. A store's default rewrites a ``cards.json`` smaller than
``JOURNAL_FROM_BYTES`` whole on every write; a run's store (``RUN_JOURNAL_FROM_BYTES``,
``RUN_COMPACT_FROM_BYTES``) journals every write, so a small bank is not rewritten,
fsynced and replaced on every pooled outcome, and compacts when the run stops
(``LocalMemoryStore.compact``), so a run that ended leaves its whole bank in
``cards.json`` for readers of plain JSON. A kill between the two steps of a compaction
leaves lines naming the old base: readers ignore them and the next writer cuts them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gigaevo.memory.v2.bank.cards import Card
from gigaevo.memory.v2.bank.jsonltail import JsonlTail
from gigaevo.memory.v2.errors import CardFormatError
from gigaevo.memory.v2.records import from_json

RECORDS_FILE = "cards.records.jsonl"
# a store's defaults: below this size cards.json is rewritten whole on every write, and a
# journal is compacted once it would outgrow cards.json (COMPACT_FROM_BYTES = 0)
JOURNAL_FROM_BYTES = 64 * 1024
COMPACT_FROM_BYTES = 0
# a run's store (the provider's): every write is journaled, and the journal may grow to
# 256 KiB before a compaction even when cards.json is smaller; compacted at close
RUN_JOURNAL_FROM_BYTES = 0
RUN_COMPACT_FROM_BYTES = 256 * 1024
_BATCH_KEYS = {"base", "generation", "write_id", "written_at", "n_cards", "set", "removed"}


@dataclass(frozen=True)
class Batch:
    """One journal line: the cards one transaction set (with their lines) and removed."""

    generation: int
    write_id: str
    written_at: str
    n_cards: int
    set: list[tuple[Card, str]]
    removed: list[str]


def batch_line(base: str, header: Any, set_lines: Iterable[str], removed: Iterable[str]) -> str:
    """The journal line of one transaction on ``base`` giving the bank ``header`` (a
    ``bankfile.BankHeader``); ``set_lines`` are ``bankfile.card_line`` texts."""
    head = json.dumps(
        {
            "base": base,
            "generation": header.generation,
            "write_id": header.write_id,
            "written_at": header.written_at,
            "n_cards": header.n_cards,
        },
        separators=(",", ":"),
    )
    removed_text = json.dumps(list(removed), separators=(",", ":"))
    return f'{head[:-1]},"set":[{",".join(set_lines)}],"removed":{removed_text}}}\n'


class RecordJournal:
    """The journal of one bank, read incrementally and appended under the bank lock.

    Reset rule: a journal replaced, shrunk, or holding a line on another base since the
    last read makes ``read`` return None (the caller reloads from ``cards.json``).

    Args:
        bank_dir: the directory of ``cards.json``.
    """

    def __init__(self, bank_dir: Path) -> None:
        self.path = Path(bank_dir) / RECORDS_FILE
        self._tail = JsonlTail(self.path, "card revision")
        self._size = 0  # bytes of lines that apply to the base (what compaction weighs)

    @property
    def size(self) -> int:
        """Bytes of journal lines on the current base (0 when there is no journal)."""
        return self._size

    def changed(self) -> bool:
        """Whether the file differs from what was read (one ``stat``)."""
        t = self._tail
        return t.changed(gone=t.inode is not None and t.offset > 0)

    def read(
        self, base: str, known: Mapping[str, tuple[Card, str]], *, restart: bool
    ) -> list[Batch] | None:
        """The complete lines on ``base`` appended since the last read (from the start when
        ``restart``). None when the file was replaced or truncated, or holds a line on
        another base, since the last read: the caller must reload from ``cards.json``.

        ``known`` maps card ids to (card, line) pairs: a record whose line is known is
        not decoded again.

        Raises:
            CorruptBankError: a complete line on ``base`` does not parse.
        """
        t = self._tail
        if restart:
            t.reset()
            self._size = 0

        def moved(st: os.stat_result) -> bool:
            replaced = st.st_ino != t.inode and not (t.inode is None and t.offset == 0)
            return not restart and (replaced or st.st_size < t.offset)

        found = t.read(moved)
        if found is None:
            return [] if restart or t.offset == 0 else None
        if found[0]:
            return None
        lines = found[1]
        by_line = {line: card for card, line in known.values()}
        batches: list[Batch] = []
        for raw in lines:
            t.lines += 1
            where = f"{self.path} line {t.lines}"
            try:
                data = json.loads(raw)
                if not isinstance(data, dict) or set(data) != _BATCH_KEYS:
                    raise CardFormatError(f"expected keys {sorted(_BATCH_KEYS)}")
                if data["base"] != base:
                    if restart:
                        continue  # left by a compaction killed before it emptied the journal
                    return None
                batches.append(_batch(data, by_line, where))
            except (ValueError, CardFormatError) as exc:
                raise t.corrupt(exc) from exc
            self._size += len(raw) + 1
        t.advance(lines)
        return batches

    def append(self, line: str) -> None:
        """Append one transaction's line durably (the caller holds the bank lock and has
        read the journal to its end). Lines on another base (a compaction killed before it
        emptied the journal) and a line torn by a killed writer are cut first."""
        t = self._tail

        def keep(st: os.stat_result) -> int:
            if st.st_ino != t.inode or self._size == 0:
                return 0  # a new file, or nothing read applies to the base: stale lines go
            return t.offset

        data = line.encode("utf-8")
        t.append(data, keep)
        self._size += len(data)
        t.lines += 1

    def clear(self) -> None:
        """Empty the journal after a compaction (the caller holds the bank lock)."""
        self._tail.clear()
        self._size = 0


def _batch(data: dict[str, Any], by_line: Mapping[str, Card], where: str) -> Batch:
    generation, n_cards = data["generation"], data["n_cards"]
    if not _count(generation) or not _count(n_cards):
        raise CardFormatError("generation and n_cards must be non-negative integers")
    if not isinstance(data["write_id"], str) or not isinstance(data["written_at"], str):
        raise CardFormatError("write_id and written_at must be strings")
    entries, removed = data["set"], data["removed"]
    if not isinstance(entries, list) or not isinstance(removed, list):
        raise CardFormatError("set and removed must be lists")
    if not all(isinstance(r, str) for r in removed):
        raise CardFormatError("removed must list card ids")
    pairs: list[tuple[Card, str]] = []
    for i, entry in enumerate(entries):
        line = json.dumps(entry, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        card = by_line.get(line)
        if card is None:
            card = from_json(Card, entry, f"{where}: set[{i}]")
        pairs.append((card, line))
    return Batch(generation, data["write_id"], data["written_at"], n_cards, pairs, removed)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def replay_dicts(
    bank_dir: str | Path, header: dict[str, Any], cards: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``cards.json``'s header and card dicts with the journal's lines on its base applied
    (for readers of plain JSON, such as ``gigaevo.analysis``; lines that do not parse are
    skipped, a torn last line too)."""
    path = Path(bank_dir) / RECORDS_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return header, cards
    base = header.get("write_id")
    by_id = {c.get("id"): c for c in cards}
    header = dict(header)
    for line in raw[: raw.rfind(b"\n") + 1].split(b"\n")[:-1]:
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict) or data.get("base") != base:
            continue
        for card in data.get("set") or []:
            if isinstance(card, dict):
                by_id[card.get("id")] = card
        for cid in data.get("removed") or []:
            by_id.pop(cid, None)
        header.update({k: data[k] for k in ("generation", "write_id", "written_at", "n_cards")})
    return header, list(by_id.values())
