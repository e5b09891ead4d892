"""``memory_events.jsonl`` in ``checkpoint_dir``: structured runtime events of the read side.

One JSON line per event, appended with ``gigaevo.util.append_jsonl`` (a line
torn by a kill is fenced off by the next append; ``read_events`` skips it).
Kinds:

- ``assignment``: a decision was committed (proposal, Z, propensities).
- ``outcome``: its terminal was committed (status, cited, gain).
- ``retired``: a retirement sweep and its admission gate ran; ``retired_card_ids``
  is the exact list of cards deleted (empty when every verdict was rescued).
- ``applicability``: the memory LLM labelled candidate cards (labels only;
  they never remove a card).

Exactly once across kills and resumes (issue 16). An event about a decision
(``assignment``, ``outcome``, ``applicability``) is keyed by (kind, decision id): ``emit``
never appends a key the file already holds (a resumed attempt that emits again writes
nothing). The ledger commits a row before its event is appended, so a kill can only lose
the events of the last commit: ``recover`` (at start-up, from the ledger) appends the
``assignment`` of every committed decision of the run and the ``outcome`` of every
committed terminal that the file lacks, oldest first, so the file ends as an
uninterrupted run's would (times aside). ``applicability`` labels and ``retired`` sweeps
are not in the ledger: a kill in the instant between their commit and their line loses
that line (never duplicates it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from gigaevo.memory.v2.bank.bankfile import utc_now
from gigaevo.memory.v2.evidence.rows import DecisionRow, TerminalRow
from gigaevo.util import append_jsonl

if TYPE_CHECKING:
    from gigaevo.memory.v2.evidence.ledger import SelectionEvidence

EVENTS_FILE = "memory_events.jsonl"
EventKind = Literal["assignment", "outcome", "applicability", "retired"]
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)


class MemoryEvents:
    """Appends events of one run to ``checkpoint_dir/memory_events.jsonl``."""

    def __init__(self, checkpoint_dir: str | Path, *, run_id: str) -> None:
        self.path = Path(checkpoint_dir) / EVENTS_FILE
        self.run_id = run_id
        self._keys: set[tuple[str, str]] | None = None  # (kind, decision id) in the file
        self.recovered = 0  # events ``recover`` appended

    def keys(self) -> set[tuple[str, str]]:
        """The (kind, decision id) of every whole event line (read once, then kept)."""
        if self._keys is None:
            self._keys = {k for k in map(event_key, read_events(self.path)) if k is not None}
        return self._keys

    def recover(self, evidence: SelectionEvidence) -> int:
        """Append the ``assignment`` and ``outcome`` events of this run's committed ledger
        rows that the file lacks (lost to a kill between a commit and its line); returns
        how many. Oldest first (decision before its outcome)."""
        keys = self.keys()
        decisions = {d.decision_id: d for d in evidence.decisions() if d.run_id == self.run_id}
        missing: list[tuple[float, int, str, partial[dict[str, Any]]]] = []
        for d in decisions.values():
            if ("assignment", d.decision_id) not in keys:
                missing.append((d.created_at, 0, d.decision_id, partial(self.assignment, d)))
        for t in evidence.terminals():
            decided = decisions.get(t.decision_id)
            if decided is not None and ("outcome", t.decision_id) not in keys:
                emit = partial(self.outcome, t, attempt=decided.attempt)
                missing.append((t.created_at, 1, t.decision_id, emit))
        for *_, emit in sorted(missing, key=lambda m: m[:3]):
            emit()
        self.recovered += len(missing)
        return len(missing)

    def emit(self, kind: EventKind, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Append one event and return it.

        Raises:
            ValueError: unknown ``kind``, or ``fields`` reuses a reserved key
                (``event``, ``ts``, ``time``, ``run_id``).
        """
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown memory event {kind!r} (known: {list(EVENT_KINDS)})")
        reserved = {"event", "ts", "time", "run_id"} & set(fields)
        if reserved:
            raise ValueError(f"event fields reuse reserved key(s) {sorted(reserved)}")
        record = {"event": kind, "ts": time.time(), "time": utc_now(), "run_id": self.run_id}
        record.update(fields)
        key = event_key(record)
        if key is not None and key in self.keys():
            return record  # already in the file (a resumed attempt): exactly once
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_jsonl(self.path, record)
        if key is not None:
            self.keys().add(key)
        return record

    def assignment(self, decision: DecisionRow) -> dict[str, Any]:
        """Event for a committed decision (abstentions included)."""
        return self.emit(
            "assignment",
            {
                "decision_id": decision.decision_id,
                "attempt": decision.attempt,
                "abstain": decision.abstain,
                "proposed_id": decision.proposed_id,
                "z": decision.z,
                "offer": decision.offer,
                "rho": decision.rho,
                "rho0": decision.rho0,
                "joint": decision.joint,
                "candidates": len(decision.candidates),
                "evidence_version": decision.evidence_version,
            },
        )

    def outcome(self, terminal: TerminalRow, *, attempt: int | None = None) -> dict[str, Any]:
        """Event for a committed terminal."""
        return self.emit(
            "outcome",
            {
                "decision_id": terminal.decision_id,
                "attempt": attempt,
                "status": terminal.status,
                "child_id": terminal.child_id,
                "cited_ids": list(terminal.cited_ids),
                "gain": terminal.gain,
                "censor_reason": terminal.censor_reason,
            },
        )

    def applicability(
        self,
        attempt: int,
        labels: Mapping[str, str],
        *,
        decision_id: str | None = None,
        candidates: int | None = None,
        asked: int = 0,
        cache_hits: int = 0,
        calls: int = 0,
        failures: int = 0,
        error: str = "",
    ) -> dict[str, Any]:
        """Event for the applicability labels (card id -> label) of one assessed decision.

        ``counts`` tallies the labels; with ``candidates`` (eligible cards) the
        cards left without a label are counted as ``unassessed``. ``asked`` cards
        went to the memory LLM in ``calls`` calls (``failures`` failed, ``error``
        says why), ``cache_hits`` labels came from the cache.
        """
        counts: dict[str, int] = {}
        for label in labels.values():
            counts[label] = counts.get(label, 0) + 1
        if candidates is not None:
            counts["unassessed"] = counts.get("unassessed", 0) + candidates - len(labels)
        fields: dict[str, Any] = {
            "attempt": attempt,
            "decision_id": decision_id,
            "labels": dict(sorted(labels.items())),
            "counts": dict(sorted(counts.items())),
            "candidates": candidates,
            "asked": asked,
            "cache_hits": cache_hits,
            "calls": calls,
            "failures": failures,
            "error": error,
        }
        return self.emit("applicability", fields)


def retired_event(
    events: MemoryEvents,
    retired_card_ids: list[str],
    *,
    evidence_version: str,
    verdicts: int,
    kept: Mapping[str, int],
) -> dict[str, Any]:
    """Event for one retirement: the exact deleted ids and why the other verdicts were kept."""
    return events.emit(
        "retired",
        {
            "retired_card_ids": list(retired_card_ids),
            "evidence_version": evidence_version,
            "verdicts": verdicts,
            "kept": dict(sorted(kept.items())),
        },
    )


def event_key(record: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, decision id) of an event about one decision, else None."""
    decision_id = record.get("decision_id")
    if record.get("event") in ("assignment", "outcome", "applicability") and isinstance(
        decision_id, str
    ):
        return str(record["event"]), decision_id
    return None


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """Every whole event line of ``path`` (torn or non-object lines are skipped)."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out
