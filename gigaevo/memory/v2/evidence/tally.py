"""The ledger's running tally: every derived view kept up to date row by row.

``LedgerTally`` is fed each verified row once (``LedgerViews._sync`` reads the new rows
of every table, terminals before decisions, then feeds decisions, terminals, lineage
rows and edges in that order), and keeps what the per-decision and per-outcome paths
ask for, at O(1) per new row:

- the observations (a decision with its terminal) in terminal order, the
  usefulness-eligible ones among them, and counts per status;
- the open decisions and the pending outcomes per proposed card id;
- each root's latest lineage row, the matured delayed-lineage rows, and per proposed
  id the usefulness-eligible valid roots whose lineage has not matured;
- the evidence version V as an order-free sum of row digests (``queries.VersionSum``),
  so a row changes it in O(1) instead of rehashing the ledger.

Rows are immutable, so nothing is recomputed: a view is a read of the tally.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from gigaevo.memory.v2.evidence.queries import (
    Observation,
    VersionSum,
    lineage_term,
    observation_term,
    usefulness_eligible,
)
from gigaevo.memory.v2.evidence.rows import DecisionRow, EdgeRow, LineageRow


@dataclass
class LedgerTally:
    """Incremental state of the derived views (see the module docstring)."""

    decisions: dict[str, tuple[DecisionRow, str]] = field(default_factory=dict)
    open: dict[str, DecisionRow] = field(default_factory=dict)  # decision order
    pending: Counter[str] = field(default_factory=Counter)  # proposed id -> open decisions
    observed: dict[str, Observation] = field(default_factory=dict)
    log: list[Observation] = field(default_factory=list)  # terminal order
    eligible: list[Observation] = field(default_factory=list)  # terminal order
    edges: list[EdgeRow] = field(default_factory=list)  # read order
    latest: dict[str, tuple[LineageRow, str]] = field(default_factory=dict)  # root -> row
    lineage_count: int = 0
    matured: dict[str, tuple[Observation, LineageRow]] = field(default_factory=dict)
    unmatured: Counter[str] = field(default_factory=Counter)  # proposed id -> open roots
    # roots whose matured row moved, each with the row it moved to (None: it left), in the
    # order the ledger's rows were read: replayed from the start it passes through every
    # state the live reader saw (``matured_moves_since``)
    matured_log: list[tuple[str, tuple[Observation, LineageRow] | None]] = field(
        default_factory=list
    )
    counts: Counter[str] = field(default_factory=Counter)
    version: VersionSum = field(default_factory=VersionSum)
    _waiting: dict[str, str] = field(default_factory=dict)  # root -> proposed id, unmatured

    def add_decision(self, row: DecisionRow, sha: str) -> None:
        """A decision read before its terminal (the caller's feeding order)."""
        self.decisions[row.decision_id] = (row, sha)
        self.counts["decisions"] += 1
        self.counts["abstained"] += int(row.abstain)
        self.open[row.decision_id] = row
        if row.proposed_id is not None:
            self.pending[row.proposed_id] += 1

    def add_terminal(self, obs: Observation) -> None:
        """A terminal with its (already fed) decision."""
        did = obs.decision.decision_id
        self.observed[did] = obs
        self.log.append(obs)
        self.counts["terminals"] += 1
        self.counts["censored"] += int(obs.terminal.status == "censored")
        if self.open.pop(did, None) is not None and obs.decision.proposed_id is not None:
            _drop(self.pending, obs.decision.proposed_id)
        if usefulness_eligible(obs):
            self.eligible.append(obs)
            self.version.add(observation_term(obs))
            self._root(did)

    def add_lineage(self, row: LineageRow, sha: str) -> None:
        self.lineage_count += 1
        root = row.root_decision_id
        old = self.latest.get(root)
        if old is not None and old[0].version >= row.version:
            return
        self.latest[root] = (row, sha)
        if old is not None:
            self.version.remove(lineage_term(old[0]))
        self.version.add(lineage_term(row))
        self._root(root)

    def add_edge(self, row: EdgeRow) -> None:
        self.edges.append(row)

    def _root(self, root: str) -> None:
        """Re-derive ``matured`` and ``unmatured`` for one root (its observation or its
        latest lineage row changed)."""
        obs = self.observed.get(root)
        row = self.latest.get(root)
        is_root = obs is not None and obs.valid and usefulness_eligible(obs)
        before = self.matured.pop(root, None)
        if is_root and row is not None and row[0].status == "outcome":
            assert obs is not None
            self.matured[root] = (obs, row[0])
        now = self.matured.get(root)
        if (now is None) != (before is None) or (now and before and now[1] is not before[1]):
            self.matured_log.append((root, now))
        pid = obs.decision.proposed_id if obs is not None else None
        waiting = bool(is_root and pid and (row is None or row[0].status == "pending"))
        if waiting and root not in self._waiting:
            assert pid is not None
            self._waiting[root] = pid
            self.unmatured[pid] += 1
        elif not waiting and root in self._waiting:
            _drop(self.unmatured, self._waiting.pop(root))


def _drop(counter: Counter[str], key: str) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]
