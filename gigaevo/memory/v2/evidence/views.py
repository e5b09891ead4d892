"""Derived views of the causal ledger's rows, memoised until new rows arrive.

``LedgerViews`` is the read-only half of ``SelectionEvidence``: observations (a decision
with its terminal), the rows each head trains on, the OPE rows, pending decisions, the
cards applied on a program's ancestry, each root's latest lineage row and the evidence
version V. Every view is keyed by the last sequence numbers it was built from; rows are
immutable, so a view is stale only when rows arrive. ``SelectionEvidence`` supplies the
verified rows (``_rows``) and single-row lookups.
"""

from __future__ import annotations

from typing import Any

from gigaevo.memory.v2.evidence.owner import owner_dead
from gigaevo.memory.v2.evidence.queries import (
    Head,
    Observation,
    evidence_version,
    head_rows,
    lineage_rows,
    ope_eligible,
)
from gigaevo.memory.v2.evidence.rows import (
    DecisionRow,
    EdgeRow,
    LineageRow,
    TerminalRow,
    decision_key_id,
)


class LedgerViews:
    """Memoised views over the verified rows of ``SelectionEvidence`` (its base class)."""

    owner: str
    _memo: dict[str, tuple[tuple[int, ...], Any]]
    _last: dict[str, int]
    _observed: tuple[dict[str, Observation], int]
    _applied: dict[str, frozenset[str]]

    # -- supplied by SelectionEvidence ------------------------------------------
    def _rows(self, table: str) -> dict[int, tuple[Any, str]]:
        raise NotImplementedError

    def decisions(self) -> tuple[DecisionRow, ...]:
        raise NotImplementedError

    def terminals(self) -> tuple[TerminalRow, ...]:
        raise NotImplementedError

    def terminal(self, decision_id: str) -> TerminalRow | None:
        raise NotImplementedError

    def edge(self, edge_id: str) -> EdgeRow | None:
        raise NotImplementedError

    # -- views ------------------------------------------------------------------
    def lineage(self, *, latest: bool = True) -> tuple[LineageRow, ...]:
        """Lineage rows; with ``latest`` only each root's highest version."""
        return tuple(row for row, _ in self._lineage_with_sha(latest))

    def applied_cards(self, program_id: str, max_depth: int | None = None) -> frozenset[str]:
        """Card ids cited (frozen terminal cited sets) by the mutations that produced
        ``program_id`` and each of its ancestors, walking the mutation edges back to a
        program with no recorded edge (a seed program, or one born before this ledger).

        With ``max_depth`` only the ``max_depth`` most recent mutations of the ancestry are
        read (1: the one that produced ``program_id``; 2: also its parent's; ...). A
        program's edge is recorded after its terminal and both are immutable, so the
        unbounded answer for a program with an edge never changes: it is memoised, and a
        decision walks only the part of its parent's ancestry not seen before.
        """
        chain: list[tuple[str, tuple[str, ...]]] = []
        seen: set[str] = set()  # a cycle in corrupt topology ends the walk
        applied: frozenset[str] = frozenset()
        current = program_id
        while current and current not in seen:
            if max_depth is not None and len(chain) >= max_depth:
                break
            seen.add(current)
            known = self._applied.get(current) if max_depth is None else None
            if known is not None:
                applied = known
                break
            edge = self.edge(current)
            if edge is None:
                break
            decision_id = edge.decision_id or decision_key_id(edge.run_id, edge.attempt)
            terminal = self.terminal(decision_id)
            chain.append((current, terminal.cited_ids if terminal is not None else ()))
            current = edge.parent_id
        for pid, cited in reversed(chain):
            if cited:
                applied = applied | frozenset(cited)
            if max_depth is None:
                self._applied[pid] = applied
        return applied

    def resumable(self, run_id: str) -> tuple[DecisionRow, ...]:
        """Open decisions of ``run_id`` left by dead sessions (kept open by ``resume_run``)."""
        return tuple(
            d
            for d in self.open_decisions()
            if d.run_id == run_id and owner_dead(d.owner, self.owner)
        )

    def open_decisions(self) -> tuple[DecisionRow, ...]:
        """Decisions still waiting for their terminal."""
        closed = {t.decision_id for t in self.terminals()}
        return tuple(d for d in self.decisions() if d.decision_id not in closed)

    def observations(self) -> tuple[Observation, ...]:
        """Every decision that has a terminal, with both rows' hashes (in decision order).

        Terminals are read before decisions: a terminal is committed after its decision,
        so every terminal read has its decision, and the set changes only with terminals.
        """
        terminals = self._rows("terminals")
        decisions = self._rows("decisions")
        key = (self._last["terminals"],)
        memo = self._memo.get("observations")
        if memo is not None and memo[0] == key:
            cached: tuple[Observation, ...] = memo[1]
            return cached
        # only the terminals read since the last call make new observations (rows are
        # immutable); the tuple is then laid out in decision order by id lookups
        observed, seen = self._observed
        if len(terminals) > seen:
            by_id = {d.decision_id: (d, dsha) for d, dsha in decisions.values()}
            for term, tsha in list(terminals.values())[seen:]:
                decision, dsha = by_id[term.decision_id]
                observed[term.decision_id] = Observation(decision, term, dsha, tsha)
            self._observed = (observed, len(terminals))
        out = tuple(
            observed[d.decision_id] for d, _ in decisions.values() if d.decision_id in observed
        )
        self._memo["observations"] = (key, out)
        return out

    def head_rows(self, head: Head) -> tuple[Observation, ...]:
        """Usefulness-eligible rows of the ``immediate`` or ``invalidity`` head."""
        observations = self.observations()
        key = (self._last["terminals"],)
        memo = self._memo.get(f"head:{head}")
        if memo is not None and memo[0] == key:
            cached: tuple[Observation, ...] = memo[1]
            return cached
        rows = head_rows(observations, head)
        self._memo[f"head:{head}"] = (key, rows)
        return rows

    def lineage_head_rows(self) -> tuple[tuple[Observation, LineageRow], ...]:
        """Matured lineage rows of usefulness-eligible valid roots (the delayed head)."""
        return lineage_rows(self.observations(), self.lineage())

    def ope_rows(self) -> tuple[Observation, ...]:
        """All randomised, non-censored rows (both arms, cited or not)."""
        return tuple(o for o in self.observations() if ope_eligible(o))

    def pending_by_proposal(self) -> dict[str, int]:
        """Pending decisions per proposed card id."""
        counts: dict[str, int] = {}
        for d in self.open_decisions():
            if d.proposed_id is not None:
                counts[d.proposed_id] = counts.get(d.proposed_id, 0) + 1
        return counts

    def evidence_version(self) -> str:
        """V over usefulness-eligible rows and each root's latest lineage row.

        Recomputed only when a terminal or lineage row arrived since the last call.
        """
        observations = self.observations()
        latest = self.lineage()
        key = (self._last["terminals"], self._last["lineage"])
        memo = self._memo.get("version")
        if memo is not None and memo[0] == key:
            cached: str = memo[1]
            return cached
        version = evidence_version(observations, latest)
        self._memo["version"] = (key, version)
        return version

    # ---- internals --------------------------------------------------------------

    def _lineage_with_sha(self, latest: bool) -> list[tuple[LineageRow, str]]:
        rows = list(self._rows("lineage").values())
        if not latest:
            return rows
        key = (self._last["lineage"],)
        memo = self._memo.get("lineage")
        if memo is not None and memo[0] == key:
            return list(memo[1])
        best: dict[str, tuple[LineageRow, str]] = {}
        for row, sha in rows:
            cur = best.get(row.root_decision_id)
            if cur is None or row.version > cur[0].version:
                best[row.root_decision_id] = (row, sha)
        self._memo["lineage"] = (key, tuple(best.values()))
        return list(best.values())
