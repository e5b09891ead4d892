"""Derived views of the causal ledger's rows, kept current row by row.

``LedgerViews`` is the read-only half of ``SelectionEvidence``: observations (a decision
with its terminal), the rows each head trains on, the OPE rows, pending decisions, the
cards applied on a program's ancestry, each root's latest lineage row and the evidence
version V. Each new row is fed once to a ``LedgerTally`` (``tally``), which keeps the
views up to date in O(1) per row; the per-decision and per-outcome paths read it
(``observations_since``, ``eligible_since``, ``edges_since``, pending counts, V), and the
whole-ledger tuples (``observations``, ``head_rows``) are built only when asked and
memoised until a terminal arrives. ``SelectionEvidence`` supplies the verified rows
(``_rows``) and single-row lookups.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

from gigaevo.memory.v2.evidence.owner import owner_dead
from gigaevo.memory.v2.evidence.queries import Head, Observation, head_rows, ope_eligible
from gigaevo.memory.v2.evidence.rows import (
    DecisionRow,
    EdgeRow,
    LineageRow,
    TerminalRow,
    decision_key_id,
)
from gigaevo.memory.v2.evidence.tally import LedgerTally


class LedgerViews:
    """Memoised views over the verified rows of ``SelectionEvidence`` (its base class)."""

    owner: str
    _memo: dict[str, tuple[tuple[int, ...], Any]]
    _tally: LedgerTally
    _fed: dict[str, int]  # rows of each table fed to the tally
    _applied: dict[str, frozenset[str]]
    _synced_at: object = None  # ``_stamp()`` before the last sync read the tables

    # -- supplied by SelectionEvidence ------------------------------------------
    def _rows(self, table: str) -> dict[int, tuple[Any, str]]:
        raise NotImplementedError

    def _stamp(self) -> object:
        """A value that moves whenever a row may have been committed since it was taken
        (None: unknown, every sync reads the tables)."""
        return None

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

    def applied_cards(
        self, program_id: str, max_depth: int | None = None, *, open_only: bool = False
    ) -> frozenset[str]:
        """Card ids cited (frozen terminal cited sets) by the mutations that produced
        ``program_id`` and each of its ancestors, walking the mutation edges back to a
        program with no recorded edge (a seed program, or one born before this ledger).

        With ``max_depth`` only the ``max_depth`` most recent mutations of the ancestry are
        read (1: the one that produced ``program_id``; 2: also its parent's; ...). A
        program's edge is recorded after its terminal and both are immutable, so the
        unbounded answer for a program with an edge never changes: it is memoised, and a
        decision walks only the part of its parent's ancestry not seen before.

        With ``open_only`` a mutation whose lineage window has matured (its root has the
        delayed head's row: its delayed credit is final) adds nothing; this answer moves
        as windows mature and is never memoised.
        """
        chain: list[tuple[str, tuple[str, ...]]] = []
        seen: set[str] = set()  # a cycle in corrupt topology ends the walk
        applied: frozenset[str] = frozenset()
        current = program_id
        while current and current not in seen:
            if max_depth is not None and len(chain) >= max_depth:
                break
            seen.add(current)
            memo = max_depth is None and not open_only
            known = self._applied.get(current) if memo else None
            if known is not None:
                applied = known
                break
            edge = self.edge(current)
            if edge is None:
                break
            decision_id = edge.decision_id or decision_key_id(edge.run_id, edge.attempt)
            terminal = self.terminal(decision_id)
            cited = terminal.cited_ids if terminal is not None else ()
            if cited and open_only and self.matured_row(decision_id) is not None:
                cited = ()
            chain.append((current, cited))
            current = edge.parent_id
        for pid, cited in reversed(chain):
            if cited:
                applied = applied | frozenset(cited)
            if max_depth is None and not open_only:
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
        """Decisions still waiting for their terminal (in decision order)."""
        return tuple(self._sync().open.values())

    def observations(self) -> tuple[Observation, ...]:
        """Every decision that has a terminal, with both rows' hashes (in decision order).

        Built from the tally only when a terminal arrived since the last call; the hot
        paths read ``observations_since`` (terminal order) instead.
        """
        tally = self._sync()
        return self._memoised(
            "observations",
            (len(tally.log),),
            lambda: tuple(tally.observed[d] for d in tally.decisions if d in tally.observed),
        )

    def observations_since(self, start: int) -> list[Observation]:
        """Observations from the ``start``-th terminal read on, in terminal order."""
        return self._sync().log[start:]

    def eligible_since(self, start: int) -> list[Observation]:
        """Usefulness-eligible observations from the ``start``-th on, in terminal order."""
        return self._sync().eligible[start:]

    def head_rows(self, head: Head) -> tuple[Observation, ...]:
        """Usefulness-eligible rows of the ``immediate`` or ``invalidity`` head (decision order)."""
        key = (len(self._sync().log),)
        return self._memoised(f"head:{head}", key, lambda: head_rows(self.observations(), head))

    def lineage_head_rows(self) -> tuple[tuple[Observation, LineageRow], ...]:
        """Matured lineage rows of usefulness-eligible valid roots (the delayed head), in
        decision order."""
        tally = self._sync()
        return tuple(tally.matured[d] for d in tally.decisions if d in tally.matured)

    def matured_lineage(self) -> dict[str, tuple[Observation, LineageRow]]:
        """Root decision id -> (observation, latest ``outcome`` row) of the delayed head's rows."""
        return dict(self._sync().matured)

    def matured_changes_since(self, start: int) -> list[str]:
        """Roots whose matured lineage row (``matured_lineage``) changed, from the
        ``start``-th change on; a root may repeat."""
        return [root for root, _ in self._sync().matured_log[start:]]

    def matured_moves_since(
        self, start: int
    ) -> list[tuple[str, tuple[Observation, LineageRow] | None]]:
        """The changes of ``matured_changes_since``, each with the root's matured row right
        after it ((observation, ``outcome`` row), or None when the root left). From 0 they
        replay every state of the matured rows in ledger order, so a reader that resumes
        passes through the states the uninterrupted one saw."""
        return self._sync().matured_log[start:]

    def matured_row(self, root_decision_id: str) -> tuple[Observation, LineageRow] | None:
        """The delayed head's row of a root: (observation, latest ``outcome`` row), or None."""
        return self._sync().matured.get(root_decision_id)

    def latest_lineage(self, root_decision_id: str) -> LineageRow | None:
        """The root's latest lineage row, or None."""
        found = self._sync().latest.get(root_decision_id)
        return None if found is None else found[0]

    def latest_lineages(self, roots: Iterable[str]) -> dict[str, LineageRow | None]:
        """``latest_lineage`` of each of ``roots``, from one read of the new rows."""
        latest = self._sync().latest
        out: dict[str, LineageRow | None] = {}
        for root in roots:
            found = latest.get(root)
            out[root] = None if found is None else found[0]
        return out

    def ope_rows(self) -> tuple[Observation, ...]:
        """All randomised, non-censored rows (both arms, cited or not)."""
        return tuple(o for o in self.observations() if ope_eligible(o))

    def pending_by_proposal(self) -> dict[str, int]:
        """Pending decisions per proposed card id."""
        return dict(self._sync().pending)

    def unmatured_by_proposal(self) -> dict[str, int]:
        """Per proposed id: usefulness-eligible valid roots without a matured lineage row."""
        return dict(self._sync().unmatured)

    def counts(self) -> dict[str, int]:
        """Row counts: decisions, abstained, terminals, censored, edges, lineage rows and the
        roots they cover."""
        tally = self._sync()
        return {
            **{k: tally.counts[k] for k in ("decisions", "abstained", "terminals", "censored")},
            "edges": len(tally.edges),
            "lineage": tally.lineage_count,
            "lineage_roots": len(tally.latest),
        }

    def edges_since(self, start: int) -> list[EdgeRow]:
        """Mutation edges from the ``start``-th read on (in read order, i.e. commit order)."""
        return self._sync().edges[start:]

    def evidence_version(self) -> str:
        """V over usefulness-eligible rows and each root's latest lineage row (kept current
        row by row: ``queries.VersionSum``)."""
        tally = self._sync()
        return self._memoised(
            "version", (tally.version.total, tally.version.count), tally.version.digest
        )

    # ---- internals --------------------------------------------------------------

    def _sync(self) -> LedgerTally:
        """Feed the tally the rows read since the last call (terminals are read before
        decisions: a terminal is committed after its decision, so every terminal read
        has its decision; the decisions are fed first).

        When nothing was committed since the last sync read the tables (``_stamp``, taken
        before that read), the tally is current and no table is read: an outcome and a
        decision each sync several times (four queries each), mostly with nothing new."""
        stamp = self._stamp()
        if stamp is not None and stamp == self._synced_at:
            return self._tally
        fresh = {t: self._new_rows(t) for t in ("lineage", "terminals", "decisions", "edges")}
        self._synced_at = stamp
        tally = self._tally
        for row, sha in fresh["decisions"]:
            tally.add_decision(row, sha)
        for term, tsha in fresh["terminals"]:
            decision, dsha = tally.decisions[term.decision_id]
            tally.add_terminal(Observation(decision, term, dsha, tsha))
        for lin, sha in fresh["lineage"]:
            tally.add_lineage(lin, sha)
        for edge, _ in fresh["edges"]:
            tally.add_edge(edge)
        return tally

    def _new_rows(self, table: str) -> list[tuple[Any, str]]:
        """Rows of ``table`` read since the tally last took them."""
        rows = self._rows(table)
        seen = self._fed[table]
        if len(rows) == seen:
            return []
        self._fed[table] = len(rows)
        # the last len - seen values, taken from the end: O(new rows), where islice from
        # ``seen`` walked every row already fed (O(ledger) per call, 4 calls per sync)
        fresh = list(itertools.islice(reversed(rows.values()), len(rows) - seen))
        fresh.reverse()
        return fresh

    def _memoised(self, name: str, key: tuple[int, ...], build: Callable[[], Any]) -> Any:
        """``build()`` cached while ``key`` (counts of the rows it depends on) holds."""
        memo = self._memo.get(name)
        if memo is not None and memo[0] == key:
            return memo[1]
        value = build()
        self._memo[name] = (key, value)
        return value

    def _lineage_with_sha(self, latest: bool) -> list[tuple[LineageRow, str]]:
        if not latest:
            return list(self._rows("lineage").values())
        return list(self._sync().latest.values())
