"""The ``cards.json`` file format: a header line, then one card per line.

The cards' use trials are kept beside it in ``cards.trials.jsonl`` (``trialjournal``),
and once the file is large the revisions of changed cards are appended to
``cards.records.jsonl`` (``recordjournal``) until the next compaction; ``read_bank``
returns the cards with both applied.

::

    {"format":"gigaevo.cards/1","generation":7,"write_id":"…","written_at":"…","n_cards":2,"cards":[
    {"id":"ins-…","kind":"insight",…},
    {"id":"prg-…","kind":"program",…}
    ]}

The whole file is one JSON document (any JSON reader loads it). Keeping the
header on the first line lets a process learn the bank's ``generation``
(incremented by every write) by reading a few hundred bytes; if the file was
reformatted by hand the header is found by a full parse instead.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gigaevo.memory.v2.bank.cards import Card
from gigaevo.memory.v2.bank.recordjournal import Batch, RecordJournal
from gigaevo.memory.v2.bank.trialjournal import TrialJournal
from gigaevo.memory.v2.errors import CardFormatError, CorruptBankError
from gigaevo.memory.v2.records import from_json, to_json

FORMAT = "gigaevo.cards/1"
_TOP_KEYS = {"format", "generation", "write_id", "written_at", "n_cards", "cards"}
_HEADER_RE = re.compile(
    r'^\{"format":"(?P<format>[^"]+)","generation":(?P<generation>\d+),'
    r'"write_id":"(?P<write_id>[0-9a-f]*)","written_at":"(?P<written_at>[^"]*)",'
    r'"n_cards":(?P<n_cards>\d+),"cards":\['
)
_HEADER_BYTES = 512


@dataclass(frozen=True)
class BankHeader:
    """Identity of one written version of the bank."""

    generation: int
    write_id: str
    written_at: str
    n_cards: int


EMPTY = BankHeader(generation=0, write_id="", written_at="", n_cards=0)


@dataclass(frozen=True)
class FileSignature:
    """``stat`` facts that change whenever the file is atomically replaced."""

    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileSignature:
        return cls(st.st_ino, st.st_size, st.st_mtime_ns)


def signature(path: Path) -> FileSignature | None:
    """The file's signature, or None when it does not exist."""
    try:
        return FileSignature.of(path.stat())
    except FileNotFoundError:
        return None


def render_bank(
    header: BankHeader, cards: Iterable[Card], lines: Mapping[str, tuple[Card, str]] | None = None
) -> tuple[str, dict[str, tuple[Card, str]]]:
    """The file text for ``cards`` under ``header`` (header first, one card per line).

    ``lines`` maps card ids to a (card, line) pair rendered before; the line
    is reused when the card is that very object (cards are immutable), so a
    write re-serialises only the cards it changed. Returns the text and the
    new map.
    """
    head = json.dumps(
        {
            "format": FORMAT,
            "generation": header.generation,
            "write_id": header.write_id,
            "written_at": header.written_at,
            "n_cards": header.n_cards,
        },
        separators=(",", ":"),
    )
    known = lines or {}
    rendered: dict[str, tuple[Card, str]] = {}
    for card in cards:
        cached = known.get(card.id)
        line = cached[1] if cached is not None and cached[0] is card else card_line(card)
        rendered[card.id] = (card, line)
    body = ",\n".join(line for _, line in rendered.values())
    return head[:-1] + ',"cards":[\n' + body + "\n]}\n", rendered


def card_line(card: Card) -> str:
    """One card as its line of ``cards.json`` (compact JSON)."""
    return json.dumps(to_json(card), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def read_header(path: Path) -> BankHeader:
    """The header of the bank at ``path`` (``EMPTY`` when there is no file).

    Reads only the first line when the file has the canonical layout.

    Raises:
        CorruptBankError: the file exists but is not a card bank.
    """
    try:
        with open(path, "rb") as f:
            first = f.read(_HEADER_BYTES).split(b"\n", 1)[0].decode("utf-8", "replace")
    except FileNotFoundError:
        return EMPTY
    match = _HEADER_RE.match(first)
    if match and match.group("format") == FORMAT:
        return BankHeader(
            int(match.group("generation")),
            match.group("write_id"),
            match.group("written_at"),
            int(match.group("n_cards")),
        )
    return read_bank(path).header


@dataclass(frozen=True)
class LoadedBank:
    """One read of the bank: header (after the record journal), cards in bank order (with
    their journal trials), their records and lines, ``cards.json``'s signature and header."""

    header: BankHeader
    cards: list[Card]
    lines: dict[str, tuple[Card, str]]
    signature: FileSignature | None
    base: BankHeader = EMPTY


def read_bank(
    path: Path,
    known: Mapping[str, tuple[Card, str]] | None = None,
    journal: TrialJournal | None = None,
    records: RecordJournal | None = None,
) -> LoadedBank:
    """Parse the whole bank: ``cards.json``, the revisions of ``cards.records.jsonl`` on it
    and the trials of ``cards.trials.jsonl``.

    With the canonical layout, a card line identical to one in ``known``
    (the lines of the previous read or write) reuses that card without
    decoding it again, so re-reading a large bank after a small change costs
    little more than reading its bytes. Any other layout is parsed in full.
    The cards come back merged with their journal trials (``trialjournal``);
    ``journal`` and ``records`` (the caller's, read incrementally) default to fresh reads.

    Raises:
        CorruptBankError: the file exists but does not parse as a card bank, or a
            complete line of a journal does not parse.
    """
    journal = journal if journal is not None else TrialJournal(path.parent)
    records = records if records is not None else RecordJournal(path.parent)
    journal.refresh()
    try:
        with open(path, "rb") as f:
            sig = FileSignature.of(os.fstat(f.fileno()))
            raw = f.read()
    except FileNotFoundError:
        records.read("", {}, restart=True)  # lines without a base are stale
        return LoadedBank(EMPTY, [], {}, None)
    try:
        text = raw.decode("utf-8")
        fast = _parse_canonical(text, known or {})
        if fast is not None:
            header, pairs = fast
        else:
            header, cards = _parse(json.loads(text))
            pairs = [(c, card_line(c)) for c in cards]
        _check_ids([c for c, _ in pairs])
    except (ValueError, CardFormatError) as exc:  # JSONDecodeError and UnicodeError are ValueErrors
        reason = " ".join(str(exc).split())[:300]
        raise CorruptBankError(
            f"{path} is not a readable card bank ({reason}); it is left untouched: "
            "repair it or move it away"
        ) from exc
    lines = {c.id: (c, ln) for c, ln in pairs}
    batches = records.read(header.write_id, known or {}, restart=True)
    assert batches is not None  # a restarted read never asks for a reload
    base, header = header, apply_batches(header, lines, batches, path)
    cards = [journal.merge(c) for c, _ in lines.values()]
    return LoadedBank(header, cards, lines, sig, base)


def apply_batches(
    header: BankHeader, lines: dict[str, tuple[Card, str]], batches: list[Batch], path: Path
) -> BankHeader:
    """Apply journal ``batches`` to ``lines`` (id -> (record, line), in bank order) in place;
    the bank's header after them.

    Raises:
        CorruptBankError: a batch's card count disagrees with the replay.
    """
    for b in batches:
        for card, line in b.set:
            lines[card.id] = (card, line)
        for cid in b.removed:
            lines.pop(cid, None)
        if b.n_cards != len(lines):
            raise CorruptBankError(
                f"{path.parent / 'cards.records.jsonl'} generation {b.generation} names "
                f"{b.n_cards} cards, the replay has {len(lines)}; it is left untouched: "
                "repair it or move it away"
            )
        header = BankHeader(b.generation, b.write_id, b.written_at, b.n_cards)
    return header


def _parse_canonical(
    text: str, known: Mapping[str, tuple[Card, str]]
) -> tuple[BankHeader, list[tuple[Card, str]]] | None:
    """Header and (card, line) pairs of a canonically laid out bank, or None for another layout.

    Raises:
        CardFormatError: a card line of the canonical layout is not a valid card.
    """
    lines = text.split("\n")
    match = _HEADER_RE.match(lines[0])
    if (
        match is None
        or match.end() != len(lines[0])
        or match.group("format") != FORMAT
        or len(lines) < 4
        or lines[-2:] != ["]}", ""]
    ):
        return None
    body = lines[1:-2]
    n_cards = int(match.group("n_cards"))
    if n_cards == 0:
        body = [] if body == [""] else body
    if len(body) != n_cards or any(not ln.endswith(",") for ln in body[:-1]):
        return None
    by_line = {line: card for card, line in known.values()}
    pairs: list[tuple[Card, str]] = []
    for i, line in enumerate(body):
        line = line[:-1] if i < len(body) - 1 else line
        card = by_line.get(line)
        if card is None:
            card = from_json(Card, json.loads(line), f"cards[{i}]")
        pairs.append((card, line))
    header = BankHeader(
        int(match.group("generation")),
        match.group("write_id"),
        match.group("written_at"),
        n_cards,
    )
    return header, pairs


def _check_ids(cards: list[Card]) -> None:
    ids = [c.id for c in cards]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise CardFormatError(f"card id {dup!r} appears twice")


def _parse(data: object) -> tuple[BankHeader, list[Card]]:
    if not isinstance(data, dict):
        raise CardFormatError("the top level must be an object")
    if set(data) != _TOP_KEYS:
        raise CardFormatError(f"top-level keys must be {sorted(_TOP_KEYS)}, got {sorted(data)}")
    if data["format"] != FORMAT:
        raise CardFormatError(f"format {data['format']!r} is not {FORMAT!r}")
    generation, n_cards = data["generation"], data["n_cards"]
    if not _is_count(generation) or not _is_count(n_cards):
        raise CardFormatError("generation and n_cards must be non-negative integers")
    if not isinstance(data["write_id"], str) or not isinstance(data["written_at"], str):
        raise CardFormatError("write_id and written_at must be strings")
    entries = data["cards"]
    if not isinstance(entries, list) or len(entries) != n_cards:
        raise CardFormatError(f"cards must be a list of n_cards={n_cards} entries")
    cards = [from_json(Card, entry, f"cards[{i}]") for i, entry in enumerate(entries)]
    header = BankHeader(generation, data["write_id"], data["written_at"], n_cards)
    return header, cards


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def utc_now() -> str:
    """The current time as an ISO-8601 UTC string with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
