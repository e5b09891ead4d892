"""The write ledger (``write_ledger.jsonl`` in ``checkpoint_dir``): one row per write outcome.

Every outcome the librarian ingests ends in exactly one row of item
``insight``; every program-exemplar attempt in one row of item ``program``;
retirements and evictions add rows of item ``card``. So the insight rows of a
run add up to the outcomes ingested. Rows carry the seed's outcome names:

- ``added``: a NEW candidate was admitted as ``card_id``.
- ``updated``: the candidate was EQUIVALENT to ``card_id``; its provenance and
  founding evidence were pooled there (or, for a program family, a better
  same-task representative replaced the old one). ``candidate`` keeps the
  discarded candidate text so equivalence mistakes can be audited.
- ``discarded``: the author answered DROP, or every attempt failed.
- ``rejected_retired``: the candidate's exact payload belongs to a retired card.
- ``rejected_novelty``: refused by a novelty gate (reserved; no gate is built yet).
- ``rejected_capacity``: the task's program-exemplar (or card) budget is full
  and the candidate does not beat the weakest family.
- ``retired``: a card was causally retired (and tombstoned).
- ``evicted``: a program family was removed to make room for a better one.

A bank write and its rows are one unit (``intend`` / ``commit``): the rows
are saved in ``.write_ledger.intent.json`` inside the bank transaction, before
``cards.json`` is replaced, with a witness of the write (the cards it adds,
pools into or removes). ``recover`` (at start-up) appends the rows of a
witnessed write a kill left unwritten and drops the intent of a write that
never reached the bank (its outcome is observed again and redone). So
``cards.json`` never holds a card of this run without its ``added`` row, and
no row is written twice.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from gigaevo.memory.v2.bank.bankfile import utc_now
from gigaevo.memory.v2.records import from_json, to_json
from gigaevo.util import append_jsonl, atomic_write_json

log = logging.getLogger(__name__)

LEDGER_FILE = "write_ledger.jsonl"
INTENT_FILE = ".write_ledger.intent.json"

Outcome = Literal[
    "added",
    "updated",
    "discarded",
    "rejected_retired",
    "rejected_novelty",
    "rejected_capacity",
    "retired",
    "evicted",
]
OUTCOMES: tuple[str, ...] = get_args(Outcome)
Item = Literal["insight", "program", "card"]


@dataclass(frozen=True)
class CandidateText:
    """An authored candidate's treatment text, as the ledger keeps it."""

    description: str
    explanation_summary: str


@dataclass(frozen=True)
class Pooled:
    """A candidate's evidence pooled into a banked card."""

    card_id: str
    candidate_id: str


@dataclass(frozen=True)
class Witness:
    """What ``cards.json`` holds once a bank write landed.

    ``present``: ids of cards the write added; ``absent``: ids it removed;
    ``pooled``: the evidence it pooled into banked cards.
    """

    present: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    pooled: tuple[Pooled, ...] = ()

    def holds(self, card: Callable[[str], Any]) -> bool:
        """True when the bank (``card``: id -> card or None) shows the write."""
        if any(card(i) is None for i in self.present):
            return False
        if any(card(i) is not None for i in self.absent):
            return False
        for p in self.pooled:
            found = card(p.card_id)
            if found is None or all(e.candidate_id != p.candidate_id for e in found.evidence):
                return False
        return True


@dataclass(frozen=True)
class LedgerRow:
    """One write outcome.

    Attributes:
        ts, time: unix seconds and the same instant as ISO-8601 UTC.
        run_id, task_key: the writing run and its task.
        item: ``insight`` (one per ingested outcome), ``program`` (one per
            exemplar attempt) or ``card`` (retirement / eviction side rows).
        outcome, reason: what happened and why, in words.
        attempt, parent_id, child_id, normalised_gain: the mutation outcome, if any.
        card_id, revision: the banked card concerned and its revision afterwards.
        candidate_id, candidate: the authored candidate (kept even when discarded).
        neighbour_ids: the neighbours the equivalence judge was shown.
        judge: the judge's answer, None when it was not asked (no neighbours).
        fail_open: ``retrieval`` or ``judge`` when that step failed and NEW was assumed.
        ingest_attempts: chain attempts spent on this item.
        latency_s: wall time of the successful (or last) attempt.
    """

    ts: float
    time: str
    run_id: str
    task_key: str
    item: Item
    outcome: Outcome
    reason: str
    attempt: int | None = None
    parent_id: str | None = None
    child_id: str | None = None
    normalised_gain: float | None = None
    card_id: str | None = None
    revision: int | None = None
    candidate_id: str | None = None
    candidate: CandidateText | None = None
    neighbour_ids: tuple[str, ...] = ()
    judge: Literal["NEW", "EQUIVALENT"] | None = None
    fail_open: Literal["retrieval", "judge"] | None = None
    ingest_attempts: int = 0
    latency_s: float = 0.0


def stamp() -> tuple[float, str]:
    """(unix seconds, ISO-8601 UTC) for a row written now."""
    return round(time.time(), 6), utc_now()


class WriteLedger:
    """Appends ``LedgerRow``s to ``path`` and counts them by (item, outcome).

    Args:
        path: the ``write_ledger.jsonl`` file (created on the first row).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.intent_path = self.path.with_name(INTENT_FILE)
        self.counts: Counter[tuple[str, str]] = Counter()

    def append(self, row: LedgerRow) -> None:
        append_jsonl(self.path, to_json(row))
        self.counts[(row.item, row.outcome)] += 1

    # -- one bank write and its rows -------------------------------------------
    def intend(self, rows: Sequence[LedgerRow], witness: Witness) -> None:
        """Save ``rows`` as the rows of the bank write about to happen (call it inside the
        bank transaction, before ``cards.json`` is replaced).

        Atomic, not fsynced (issue 16: two fsyncs per bank write): a kill leaves the old
        or the new file (the kernel holds it), and the bank write that follows is fsynced,
        which on a filesystem ordering data before metadata (ext4's default) also puts the
        renamed intent on disk first. The ledger rows themselves are appended unsynced."""
        atomic_write_json(
            self.intent_path,
            {"rows": [to_json(r) for r in rows], "witness": to_json(witness)},
            durable=False,
            synced=False,
        )

    def commit(self, rows: Sequence[LedgerRow]) -> None:
        """Append ``rows`` (the bank write, if any, has landed) and drop the intent."""
        for row in rows:
            self.append(row)
        self.intent_path.unlink(missing_ok=True)

    def recover(self, card: Callable[[str], Any]) -> list[LedgerRow]:
        """Finish the unit a kill interrupted; the rows appended now.

        ``card`` looks a card up in the newest bank (id -> card or None). The
        intent's rows are appended when the bank shows its write and the
        ledger does not end with them yet (those already there are skipped).

        Raises:
            CardFormatError: the intent file is not an intent (written by hand?).
        """
        try:
            data = json.loads(self.intent_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except ValueError as exc:  # torn: it was being written, so the bank was not
            log.warning("%s: unreadable (%s); dropped", self.intent_path, exc)
            self.intent_path.unlink(missing_ok=True)
            return []
        where = str(self.intent_path)
        rows = [from_json(LedgerRow, r, where) for r in data["rows"]]
        witness = from_json(Witness, data["witness"], where)
        todo: list[LedgerRow] = []
        if rows and witness.holds(card):
            keys = [_key(r) for r in rows]
            tail = [_key(r) for r in read_ledger(self.path)[-len(rows) :]]
            done = next(n for n in range(len(rows), -1, -1) if n == 0 or tail[-n:] == keys[:n])
            todo = rows[done:]
        self.commit(todo)
        return todo

    def outcome_counts(self, item: str) -> dict[str, int]:
        """Rows written by this process for ``item``, by outcome (all outcomes listed)."""
        return {o: self.counts[(item, o)] for o in OUTCOMES}


def _key(row: LedgerRow) -> tuple[Any, ...]:
    """What tells two rows apart (times and latencies aside)."""
    return (row.run_id, row.item, row.outcome, row.attempt, row.card_id, row.candidate_id)


def read_ledger(path: str | Path) -> list[LedgerRow]:
    """Every complete row of a ledger file (none when it does not exist yet).

    A line torn by a killed writer is not JSON and is skipped.

    Raises:
        CardFormatError: a JSON line is not a valid ledger row.
    """
    rows: list[LedgerRow] = []
    if not Path(path).exists():
        return rows  # nothing was written yet
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue  # a line torn by a killed writer (append_jsonl starts a new line after it)
        rows.append(from_json(LedgerRow, data, f"{path}:{number}"))
    return rows
