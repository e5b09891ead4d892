"""Which ledger rows train which head (memory-model.md "Rows and eligibility") and the evidence
version V.

Usefulness eligibility is E = 1{Z = 0 or U = 1} on randomised, non-censored
rows: withheld controls and delivered cards that were cited. A delivered but
uncited row (Z = 1, U = 0) is an offer/uptake observation only: it enters OPE
and nothing else, and it never moves V.

V digests the content of the rows that train the heads and judge retirement
(row ids, contexts, arms, the proposed card's revision, outcomes and
measurements, lineage values), never wall-clock times or the writing session's
identity: a seeded offline run reproduces V, hence its retirement draws, exactly.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gigaevo.memory.v2.evidence.rows import (
    DecisionRow,
    LineageRow,
    TerminalRow,
    canonical_json,
    sha256_hex,
)

Head = Literal["immediate", "invalidity", "lineage"]
HEADS: tuple[str, ...] = ("immediate", "invalidity", "lineage")


@dataclass(frozen=True, slots=True)
class Observation:
    """A decision with its terminal, and the content hashes of both rows."""

    decision: DecisionRow
    terminal: TerminalRow
    decision_sha: str
    terminal_sha: str

    @property
    def z(self) -> int | None:
        return self.decision.z

    @property
    def cited(self) -> bool:
        """U: the proposed id is in the frozen cited set (always False when Z = 0)."""
        pid = self.decision.proposed_id
        return self.decision.z == 1 and pid is not None and pid in self.terminal.cited_ids

    @property
    def valid(self) -> bool:
        return self.terminal.status == "valid"

    @property
    def invalid(self) -> bool:
        return self.terminal.status == "invalid"

    @property
    def content_digest(self) -> str:
        """SHA-256 of what this observation says to the heads (see ``observation_content``);
        computed on each call (the tally asks once per row; a cached copy would be kept for
        every observation of the run)."""
        return sha256_hex(canonical_json(observation_content(self.decision, self.terminal)))


def observation_content(decision: DecisionRow, terminal: TerminalRow) -> list[Any]:
    """The fields of a (decision, terminal) pair that a head fit or a retirement sweep reads.

    The decision's identity (id, run, attempt), frozen context and reward definition, its
    arm (Z, e and the proposed card with its exact revision: absorbed ids, kind, text
    digest, RAG label) and the whole terminal but its wall-clock time. Left out: times,
    the writing session (``owner``), fit diagnostics and the rest of the universe, which
    no head reads.
    """
    pid = decision.proposed_id
    snap = decision.snapshot(pid) if pid is not None else None
    cand = decision.candidate(pid) if pid is not None else None
    card = None
    if snap is not None:
        card = [snap.card_id, list(snap.absorbed_ids), snap.kind, snap.text_digest]
    return [
        decision.decision_id,
        decision.run_id,
        decision.attempt,
        dataclasses.asdict(decision.context),
        dataclasses.asdict(decision.reward),
        [decision.z, decision.offer, pid, card, None if cand is None else cand.rag],
        _without_time(terminal),
    ]


def lineage_content_digest(row: LineageRow) -> str:
    """SHA-256 of a lineage row but its wall-clock time."""
    return sha256_hex(canonical_json(_without_time(row)))


def _without_time(row: TerminalRow | LineageRow) -> dict[str, Any]:
    data = dataclasses.asdict(row)
    data.pop("created_at")
    return data


def ope_eligible(obs: Observation) -> bool:
    """Randomised and not censored (both arms, cited or not)."""
    return obs.decision.randomised and obs.terminal.status != "censored"


def usefulness_eligible(obs: Observation) -> bool:
    """E = 1: OPE-eligible and (Z = 0 or U = 1)."""
    return ope_eligible(obs) and (obs.z == 0 or obs.cited)


def head_rows(observations: Iterable[Observation], head: Head) -> tuple[Observation, ...]:
    """Rows of the immediate (valid) or invalidity (valid + invalid) head.

    Raises:
        ValueError: ``head`` is ``lineage`` (use ``lineage_rows``) or unknown.
    """
    if head == "immediate":
        return tuple(o for o in observations if usefulness_eligible(o) and o.valid)
    if head == "invalidity":
        return tuple(o for o in observations if usefulness_eligible(o))
    raise ValueError(f"head_rows serves 'immediate' and 'invalidity', not {head!r}")


def lineage_rows(
    observations: Iterable[Observation], latest: Sequence[LineageRow]
) -> tuple[tuple[Observation, LineageRow], ...]:
    """Matured (status ``outcome``) lineage rows of usefulness-eligible valid roots."""
    by_root = {r.root_decision_id: r for r in latest}
    out = []
    for obs in observations:
        row = by_root.get(obs.decision.decision_id)
        if row is not None and row.status == "outcome" and usefulness_eligible(obs) and obs.valid:
            out.append((obs, row))
    return tuple(out)


def observation_term(obs: Observation) -> int:
    """The term an eligible (decision, terminal) pair adds to V (its content digest)."""
    return _term(f"E {obs.decision.decision_id} {obs.content_digest}")


def lineage_term(row: LineageRow) -> int:
    """The term a root's latest lineage row adds to V (its content digest)."""
    return _term(f"L {row.root_decision_id} {row.version} {lineage_content_digest(row)}")


def _term(line: str) -> int:
    return int.from_bytes(hashlib.sha256(line.encode()).digest(), "big")


_MODULUS = 1 << 256


@dataclass
class VersionSum:
    """V as an order-free multiset digest: the count and the sum mod 2^256 of row terms.

    Adding or removing a row is O(1), so the ledger keeps V current row by row
    instead of rehashing every eligible row on each terminal. The same rows in any
    order give the same V.
    """

    total: int = 0
    count: int = 0

    def add(self, term: int) -> None:
        self.total = (self.total + term) % _MODULUS
        self.count += 1

    def remove(self, term: int) -> None:
        self.total = (self.total - term) % _MODULUS
        self.count -= 1

    def digest(self) -> str:
        h = hashlib.sha256(b"gigaevo.memory.v2.evidence-version.2\n")
        h.update(f"{self.count} {self.total:064x}\n".encode())
        return h.hexdigest()


def evidence_version(
    observations: Iterable[Observation], latest_lineage: Iterable[LineageRow]
) -> str:
    """V: the order-free digest (``VersionSum``) of the content of the usefulness-eligible
    observations and of each root's latest lineage row (memory-model.md "Rows and
    eligibility"): no times, no writing session.

    Args:
        observations: every decision with a terminal; ineligible ones are skipped.
        latest_lineage: each root's latest lineage row.
    """
    acc = VersionSum()
    for o in observations:
        if usefulness_eligible(o):
            acc.add(observation_term(o))
    for row in latest_lineage:
        acc.add(lineage_term(row))
    return acc.digest()
