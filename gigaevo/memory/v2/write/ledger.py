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
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from gigaevo.memory.v2.bank.bankfile import utc_now
from gigaevo.memory.v2.records import from_json, to_json
from gigaevo.util import append_jsonl

LEDGER_FILE = "write_ledger.jsonl"

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
        self.counts: Counter[tuple[str, str]] = Counter()

    def append(self, row: LedgerRow) -> None:
        append_jsonl(self.path, to_json(row))
        self.counts[(row.item, row.outcome)] += 1

    def outcome_counts(self, item: str) -> dict[str, int]:
        """Rows written by this process for ``item``, by outcome (all outcomes listed)."""
        return {o: self.counts[(item, o)] for o in OUTCOMES}


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
