"""``OutcomeRecorder``: the outcome side of the causal reader (MODEL sections 1, 4.1 and 7).

On every committed mutation (``observe``, in commit order):

- the terminal of its decision (valid / invalid / censored, grounded cited set);
- the mutation edge (every mutation; per-island ordinal assigned by the ledger);
- delayed-lineage maturation: ``lineage_outcomes`` over the eligible roots and
  every edge; a root whose outcome changed gets a new ``LineageRow`` version;
- the lease of the attempt is released and an ``outcome`` event emitted;
- every ``ope_every`` outcomes (and at close) ``ope_summary.json`` is written
  (ITT DR / IPS over the randomised rows; ``insufficient_data`` when one arm
  is empty).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Any

from gigaevo.memory.base import MutationResult
from gigaevo.memory.v2.causal import (
    LineageEdge,
    LineageOutcome,
    LineageRoot,
    archive_disposition,
    itt_summary,
    lineage_outcomes,
)
from gigaevo.memory.v2.causal.lineage import raw_feasible_interval
from gigaevo.memory.v2.evidence import (
    DuplicateRowError,
    LineageRow,
    RowRejectedError,
    censored_terminal,
    decision_key_id,
    edge_from_result,
    terminal_from_result,
    usefulness_eligible,
)
from gigaevo.memory.v2.reader import CausalReader
from gigaevo.util import atomic_write_json

log = logging.getLogger(__name__)

OPE_FILE = "ope_summary.json"
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
        self.rejected = 0

    def observe(self, result: MutationResult) -> None:
        r = self.reader
        decision_id = decision_key_id(r.run_id, result.attempt)
        decision = self.evidence.decision(decision_id)
        try:
            if decision is not None and self.evidence.terminal(decision_id) is None:
                self._terminal(decision, result)
            self.evidence.record_edge(
                edge_from_result(
                    result,
                    run_id=r.run_id,
                    decision_id=None if decision is None else decision_id,
                    metrics=r.runtime.metrics,
                )
            )
        except DuplicateRowError as exc:  # a resumed attempt already recorded
            log.info("memory v2: %s", exc)
        finally:
            r.release(result.attempt)
        self._mature()
        self.outcomes += 1
        if self.outcomes % r.settings.ope_every == 0:
            self.write_ope()

    def _terminal(self, decision: Any, result: MutationResult) -> None:
        try:
            row = terminal_from_result(decision, result)
            self.evidence.append_terminal(row)
        except (RowRejectedError, ValueError) as exc:
            self.rejected += 1
            log.warning("memory v2 terminal rejected, censoring: %s", exc)
            row = censored_terminal(decision, f"rejected: {exc}"[:200])
            self.evidence.append_terminal(row)
        self.reader.events.outcome(row, attempt=result.attempt)

    # -- lineage ---------------------------------------------------------------
    def _mature(self) -> None:
        r = self.reader
        edges = self.evidence.edges()
        by_child = {e.child_id: e for e in edges if e.child_id}
        roots = []
        for obs in self.evidence.observations():
            if not (usefulness_eligible(obs) and obs.valid):
                continue
            edge = by_child.get(obs.terminal.child_id)
            if edge is None or obs.terminal.gain is None:
                continue
            feasible = raw_feasible_interval(r.causal_reward, obs.decision.context.parent_fitness)
            try:
                roots.append(
                    LineageRoot(
                        obs.decision.decision_id,
                        edge.child_id,
                        edge.island,
                        edge.ordinal,
                        obs.terminal.gain,
                        feasible,
                    )
                )
            except ValueError:
                continue
        if not roots:
            return
        lineage_edges = [
            LineageEdge(
                parent_id=e.parent_id,
                child_id=e.edge_id,
                island=e.island,
                ordinal=e.ordinal,
                status=e.status,
                gain=e.gain,
                disposition=archive_disposition(e.disposition) if e.status == "valid" else "none",
            )
            for e in edges
        ]
        outcomes = lineage_outcomes(
            roots, lineage_edges, depth=r.reward.depth, budget=r.reward.budget
        )
        latest = {row.root_decision_id: row for row in self.evidence.lineage()}
        for out in outcomes:
            self._append_if_changed(out, latest.get(out.decision_id))

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
        """ITT summary over the randomised, non-censored rows (both arms, cited or not)."""
        r = self.reader
        z, y, q1, q0, e = [], [], [], [], []
        for obs in self.evidence.ope_rows():
            d, t = obs.decision, obs.terminal
            lo, _ = raw_feasible_interval(r.causal_reward, d.context.parent_fitness)
            z.append(float(d.z or 0))
            y.append(float(t.gain) if t.gain is not None else lo)
            q1.append(float(d.q1 or 0.0))
            q0.append(float(d.q0 or 0.0))
            e.append(float(d.offer or r.settings.policy.offer_probability))
        summary = dataclasses.asdict(itt_summary(z, y, q1, q0, e))
        decisions = self.evidence.decisions()
        return {
            "estimand": "ITT (probe): offer vs withhold of the proposed card",
            "units": "raw oriented gain",
            **{k: _finite(v) for k, v in summary.items()},
            "decisions": len(decisions),
            "terminals": len(self.evidence.terminals()),
            "abstained": sum(1 for d in decisions if d.abstain),
            "cited": sum(1 for o in self.evidence.ope_rows() if o.cited),
            "lineage_roots": len(self.evidence.lineage()),
            "evidence_version": self.evidence.evidence_version(),
        }

    def write_ope(self) -> Path:
        path = Path(self.reader.runtime.checkpoint_dir) / OPE_FILE
        atomic_write_json(path, self.ope_summary())
        return path

    def stats(self) -> dict[str, Any]:
        return {
            "outcomes": self.outcomes,
            "lineage_versions": self.lineage_versions,
            "terminals_rejected": self.rejected,
        }


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
