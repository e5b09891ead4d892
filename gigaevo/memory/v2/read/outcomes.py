"""``OutcomeRecorder``: the outcome side of the causal reader (memory-model.md "Rows and
eligibility" and "Delayed-lineage head" and "Off-policy evaluation").

On every committed mutation (``observe``, in commit order):

- the terminal of its decision (valid / invalid / censored, grounded cited set);
- the mutation edge (every mutation; per-island ordinal assigned by the ledger);
- delayed-lineage maturation: the lineage outcome of every eligible root over
  the edges (incremental: settled roots are not rescanned); a root whose
  outcome changed gets a new ``LineageRow`` version;
- the lease of the attempt is released and an ``outcome`` event emitted;
- every ``ope_every`` outcomes (and at close) ``ope_summary.json`` is written:
  ITT DR / IPS over the randomised rows, the conditional-offer AIPW of the
  gates pi = 1, 0 and e (``causal.offer_gate_report``), flags, counts per arm,
  and the outcome count at which it was written; ``insufficient_data`` when
  one arm is empty. ``memory_stats.json`` points to it.

The terminal and the edge of an attempt are one ledger transaction. On a
resume (a new session on the checkpoint of a killed one) this run's open
decisions stay open and are leased again: a re-dispatched attempt keeps its
committed decision and terminates once; one committed before the kill but
never observed is censored (``LOST_OUTCOME``) when a later attempt arrives;
maturation catches up at startup. The resumed ledger then equals an
uninterrupted run's (``tests/memory/test_reader_crash_resume.py``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gigaevo.memory.base import MutationResult
from gigaevo.memory.v2.causal import (
    LineageEdge,
    LineageOutcome,
    LineageRoot,
    archive_disposition,
    assign_credit,
    offer_gate_report,
    root_outcome,
)
from gigaevo.memory.v2.causal.lineage import IslandEdges, extend_index, raw_feasible_interval
from gigaevo.memory.v2.evidence import (
    DecisionRow,
    DuplicateRowError,
    EdgeRow,
    LineageRow,
    Observation,
    RowRejectedError,
    TerminalRow,
    censored_terminal,
    decision_key_id,
    edge_from_result,
    terminal_from_result,
    usefulness_eligible,
)
from gigaevo.memory.v2.evidence.errors import LeaseFileCorruptError, LeaseLockTimeoutError
from gigaevo.memory.v2.evidence.validate import check_terminal
from gigaevo.memory.v2.read.reader import CausalReader
from gigaevo.util import atomic_write_json

log = logging.getLogger(__name__)

OPE_FILE = "ope_summary.json"
LOST_OUTCOME = "lost outcome: committed before a crash, never observed"
_COMPARED = (
    "status",
    "maturity_ordinal",
    "best_descendant_id",
    "best_depth",
    "best_gain",
    "residual",
    "credit_owner",
)


class OutcomeRecorder:
    """Terminals, edges, lineage rows, lease release and the OPE summary of one run."""

    def __init__(self, reader: CausalReader) -> None:
        self.reader = reader
        self.evidence = reader.evidence
        self.outcomes = 0
        self.lineage_versions = 0
        # incremental maturation state (see _mature)
        self._edges_seen = 0
        self._by_child: dict[str, EdgeRow] = {}
        self._islands: dict[int, IslandEdges] = {}
        self._roots: dict[str, LineageRoot | None] = {}
        self._settled: dict[str, LineageOutcome] = {}
        self.rejected = 0
        self.ope_written_at: int | None = None
        self.resumed: dict[int, str] = {}  # attempt -> decision id, orphans kept open
        self.lost = 0
        self.resumed_count = 0
        self._resume_orphans()

    # -- resume ----------------------------------------------------------------
    def _resume_orphans(self) -> None:
        """Keep this run's orphans open: their attempts are replayed and terminate once.

        A decision of this run left open by a dead session (a kill) is either an
        attempt the engine re-dispatches (its committed decision stands and its
        terminal arrives on ``observe``) or one committed before the kill whose
        observation was lost; ``_censor_lost`` closes the latter. The lease each
        held is taken again, so pending counts equal an uninterrupted run's.
        """
        for d in self.evidence.resumable(self.reader.run_id):
            self.resumed[d.attempt] = d.decision_id
            if d.proposed_id is not None:
                self.reader._lease(d, d.attempt)
        self.resumed_count = len(self.resumed)
        if self.resumed:
            log.info("memory v2: resuming %d open decision(s)", len(self.resumed))
        if self.evidence.edges():  # a kill between an edge and its maturation: catch up now
            self._mature()

    def _censor_lost(self, attempt: int) -> None:
        """Censor resumed decisions of attempts before ``attempt`` still without a terminal.

        The engine commits attempts in order and observes each right after its
        commit, so such an attempt was committed before the kill and will never
        be observed again.
        """
        for earlier in sorted(a for a in self.resumed if a < attempt):
            decision = self.evidence.decision(self.resumed.pop(earlier))
            if decision is None or self.evidence.terminal(decision.decision_id) is not None:
                continue
            row = censored_terminal(decision, LOST_OUTCOME)
            try:
                self.evidence.append_terminal(row)
            except DuplicateRowError:
                continue
            self.lost += 1
            self.reader.release(earlier)
            self.reader.events.outcome(row, attempt=earlier)

    def observe(self, result: MutationResult) -> None:
        r = self.reader
        self.resumed.pop(result.attempt, None)
        if self.resumed:
            self._censor_lost(result.attempt)
        decision_id = decision_key_id(r.run_id, result.attempt)
        decision = self.evidence.decision(decision_id)
        terminal = None
        if decision is not None and self.evidence.terminal(decision_id) is None:
            terminal = self._terminal_row(decision, result)
        edge = edge_from_result(
            result,
            run_id=r.run_id,
            decision_id=None if decision is None else decision_id,
            metrics=r.runtime.metrics,
        )
        try:  # terminal and edge in one transaction: a crash never splits them
            stored, _ = self.evidence.record_outcome(terminal, edge)
            if stored is not None:
                r.events.outcome(stored, attempt=result.attempt)
        except DuplicateRowError as exc:  # a resumed attempt already recorded
            log.info("memory v2: %s", exc)
        finally:
            if decision is not None and decision.proposed_id and result.attempt not in r.held:
                self._release_unheld(result.attempt)
            r.release(result.attempt)
        self._mature()
        self.outcomes += 1
        if self.outcomes % r.settings.ope_every == 0:
            self.write_ope()

    def _release_unheld(self, attempt: int) -> None:
        """Drop a lease this process took for ``attempt`` in a session abandoned without close."""
        try:
            self.reader.leases.release_attempt(attempt)
        except (LeaseFileCorruptError, LeaseLockTimeoutError) as exc:
            log.warning("memory v2 lease of attempt %d not released: %s", attempt, exc)

    def _terminal_row(self, decision: DecisionRow, result: MutationResult) -> TerminalRow:
        """The terminal of ``result``, or a censored one when it contradicts the decision."""
        try:
            row = terminal_from_result(decision, result)
            check_terminal(decision, row)
            return row
        except (RowRejectedError, ValueError) as exc:
            self.rejected += 1
            log.warning("memory v2 terminal rejected, censoring: %s", exc)
            return censored_terminal(decision, f"rejected: {exc}"[:200])

    # -- lineage ---------------------------------------------------------------
    def _mature(self) -> None:
        """New lineage row versions for the roots whose outcome changed.

        Incremental: new edges extend the per-island index, a root is built once, and a
        root whose outcome is final (outcome / invalid / censored: its matured window and
        edges never change) is not scanned again; exclusive credit is re-decided over all
        roots on every call, as before.
        """
        r = self.reader
        edges = self.evidence.edges()
        new_edges = edges[self._edges_seen :]
        self._edges_seen = len(edges)
        for e in new_edges:
            if e.child_id:
                self._by_child[e.child_id] = e
        rebuilt = extend_index(
            self._islands,
            (
                LineageEdge(
                    parent_id=e.parent_id,
                    child_id=e.edge_id,
                    island=e.island,
                    ordinal=e.ordinal,
                    status=e.status,
                    gain=e.gain,
                    disposition=(
                        archive_disposition(e.disposition) if e.status == "valid" else "none"
                    ),
                )
                for e in new_edges
            ),
        )
        if rebuilt:  # an edge arrived out of ordinal order: rescan those islands' roots
            self._settled = {
                k: v for k, v in self._settled.items()
                if (root := self._roots.get(k)) is None or root.island not in rebuilt
            }  # fmt: skip
        roots = [root for obs in self.evidence.observations() if (root := self._root(obs))]
        if not roots:
            return
        empty = IslandEdges(())
        outcomes = []
        for root in roots:
            out = self._settled.get(root.decision_id)
            if out is None:
                island = self._islands.get(root.island, empty)
                out = root_outcome(root, island, depth=r.reward.depth, budget=r.reward.budget)
                if out.status != "pending":
                    self._settled[root.decision_id] = out
            outcomes.append(out)
        latest = {row.root_decision_id: row for row in self.evidence.lineage()}
        for out in assign_credit(roots, outcomes):
            self._append_if_changed(out, latest.get(out.decision_id))

    def _root(self, obs: Observation) -> LineageRoot | None:
        """The lineage root of an observation (built once), or None when it is not one."""
        decision_id = obs.decision.decision_id
        if decision_id in self._roots:
            return self._roots[decision_id]
        if not (usefulness_eligible(obs) and obs.valid) or obs.terminal.gain is None:
            return None  # an observation's rows never change: this stays None
        edge = self._by_child.get(obs.terminal.child_id)
        if edge is None:
            return None  # its edge has not arrived yet: try again next time
        feasible = raw_feasible_interval(
            self.reader.causal_reward, obs.decision.context.parent_fitness
        )
        try:
            root: LineageRoot | None = LineageRoot(
                decision_id, edge.child_id, edge.island, edge.ordinal, obs.terminal.gain, feasible
            )
        except ValueError:
            root = None
        self._roots[decision_id] = root
        return root

    def _append_if_changed(self, out: LineageOutcome, last: LineageRow | None) -> None:
        if last is None and out.status == "pending":
            return
        if last is not None and all(getattr(out, k) == getattr(last, k) for k in _COMPARED):
            return
        row = LineageRow(
            root_decision_id=out.decision_id,
            version=1 if last is None else last.version + 1,
            status=out.status,
            depth=out.depth,
            budget=out.budget,
            maturity_ordinal=out.maturity_ordinal,
            best_descendant_id=out.best_descendant_id,
            best_depth=out.best_depth,
            best_gain=out.best_gain,
            residual=out.residual,
            credit_owner=out.credit_owner,
        )
        try:
            self.evidence.append_lineage(row)
            self.lineage_versions += 1
        except (RowRejectedError, ValueError) as exc:
            log.warning("memory v2 lineage row rejected: %s", exc)

    # -- OPE -------------------------------------------------------------------
    def ope_summary(self) -> dict[str, Any]:
        """memory-model.md "Off-policy evaluation" over the randomised, non-censored rows (both
        arms, cited or not).

        ITT DR / IPS (flat, as before), the conditional-offer AIPW of the gates
        pi = 1, pi = 0 and pi = e with their ESS, max weight and overlap, the
        flags, counts per arm and the outcome count at which it was written.
        """
        r = self.reader
        rows = self.evidence.ope_rows()
        z, y, q1, q0, e, runs = [], [], [], [], [], []
        for obs in rows:
            d, t = obs.decision, obs.terminal
            lo, _ = raw_feasible_interval(r.causal_reward, d.context.parent_fitness)
            z.append(float(d.z or 0))
            y.append(float(t.gain) if t.gain is not None else lo)
            q1.append(float(d.q1 or 0.0))
            q0.append(float(d.q0 or 0.0))
            e.append(float(d.offer or r.settings.policy.offer_probability))
            runs.append(d.run_id)
        report = offer_gate_report(z, y, q1, q0, e, runs)
        decisions = self.evidence.decisions()
        terminals = self.evidence.terminals()
        return {
            "estimand": "ITT (probe): offer vs withhold of the proposed card",
            "units": "raw oriented gain (invalid rows: R * G-)",
            "written_at_outcome": len(self.evidence.edges()),  # the run's, across resumes
            "session_outcomes": self.outcomes,
            **_json_ready(report),
            "arms": _arm_counts(rows),
            "decisions": len(decisions),
            "terminals": len(terminals),
            "censored": sum(1 for t in terminals if t.status == "censored"),
            "abstained": sum(1 for d in decisions if d.abstain),
            "cited": sum(1 for o in rows if o.cited),
            "runs": sorted(set(runs)),
            "lineage_roots": len(self.evidence.lineage()),
            "evidence_version": self.evidence.evidence_version(),
        }

    def write_ope(self) -> Path:
        path = self.ope_path
        summary = self.ope_summary()
        atomic_write_json(path, summary)
        self.ope_written_at = int(summary["written_at_outcome"])
        return path

    @property
    def ope_path(self) -> Path:
        return Path(self.reader.runtime.checkpoint_dir) / OPE_FILE

    def stats(self) -> dict[str, Any]:
        return {
            "outcomes": self.outcomes,
            "lineage_versions": self.lineage_versions,
            "terminals_rejected": self.rejected,
            "resumed_decisions": self.resumed_count,
            "lost_outcomes": self.lost,
            "ope_summary": OPE_FILE if self.ope_written_at is not None else None,
            "ope_written_at_outcome": self.ope_written_at,
        }


def _arm_counts(rows: Sequence[Observation]) -> dict[str, dict[str, int]]:
    """Valid / invalid rows per arm, and cited / uncited deliveries."""
    arms = {"treated": [o for o in rows if o.z == 1], "control": [o for o in rows if o.z == 0]}
    out = {
        name: {
            "n": len(obs),
            "valid": sum(1 for o in obs if o.valid),
            "invalid": sum(1 for o in obs if o.invalid),
        }
        for name, obs in arms.items()
    }
    out["treated"]["cited"] = sum(1 for o in arms["treated"] if o.cited)
    out["treated"]["uncited"] = out["treated"]["n"] - out["treated"]["cited"]
    return out


def _json_ready(v: Any) -> Any:
    """Non-finite floats become None (JSON has no NaN), recursively."""
    if isinstance(v, dict):
        return {k: _json_ready(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_ready(x) for x in v]
    return _finite(v)


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
