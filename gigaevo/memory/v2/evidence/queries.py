"""Which ledger rows train which head (memory-model.md "Rows and eligibility") and the evidence
version V.

Usefulness eligibility is E = 1{Z = 0 or U = 1} on randomised, non-censored
rows: withheld controls and delivered cards that were cited. A delivered but
uncited row (Z = 1, U = 0) is an offer/uptake observation only: it enters OPE
and nothing else, and it never moves V.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from gigaevo.memory.v2.evidence.rows import DecisionRow, LineageRow, TerminalRow

Head = Literal["immediate", "invalidity", "lineage"]
HEADS: tuple[str, ...] = ("immediate", "invalidity", "lineage")


@dataclass(frozen=True)
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


def evidence_version(
    observations: Iterable[Observation], latest_lineage: Iterable[tuple[str, str]]
) -> str:
    """V: SHA-256 over usefulness-eligible (decision, terminal) hashes and lineage hashes.

    Args:
        observations: every decision with a terminal; ineligible ones are skipped.
        latest_lineage: (root decision id, row hash) of each root's latest lineage row.
    """
    h = hashlib.sha256(b"gigaevo.memory.v2.evidence-version.1\n")
    eligible = sorted(
        (o.decision.decision_id, o.decision_sha, o.terminal_sha)
        for o in observations
        if usefulness_eligible(o)
    )
    for did, dsha, tsha in eligible:
        h.update(f"E {did} {dsha} {tsha}\n".encode())
    for root, sha in sorted(latest_lineage):
        h.update(f"L {root} {sha}\n".encode())
    return h.hexdigest()
