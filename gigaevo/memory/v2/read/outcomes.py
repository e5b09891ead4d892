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
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

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
from gigaevo.memory.v2.causal.ope import ClusterCodes
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
    ope_eligible,
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
        self._seen = 0  # observations read (terminal order)
        self._by_child: dict[str, EdgeRow] = {}
        self._islands: dict[int, IslandEdges] = {}
        self._rootless: dict[str, Observation] = {}  # eligible valid, waiting for the edge
        self._roots: dict[str, LineageRoot] = {}
        self._order: dict[str, int] = {}  # root -> when it became one (processing order)
        self._on_island: dict[int, list[str]] = {}
        self._open: dict[int, dict[str, None]] = {}  # island -> unsettled roots
        self._outcomes: dict[str, LineageOutcome] = {}  # each root's outcome before credit
        self._claims: dict[str, set[str]] = {}  # best descendant -> roots claiming it
        self._waits: set[str] = set()  # roots found in their plain wait
        self.rejected = 0
        self.ope_written_at: int | None = None
        self._ope = OpeColumns()
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
        if self.evidence.counts()["edges"]:  # a kill between an edge and its maturation
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

        Incremental, O(new rows + roots touched): new edges extend the per-island index;
        a new eligible valid observation becomes a root once its edge is known; only the
        unsettled roots of islands that received edges are evaluated again (a settled
        root's matured window and edges never change), and exclusive credit is decided
        again only among the roots naming the same best descendant as a changed one
        (``assign_credit`` per claim group, which is how it decides over all roots).
        """
        new_edges = self.evidence.edges_since(self._edges_seen)
        self._edges_seen += len(new_edges)
        for e in new_edges:
            if e.child_id:
                self._by_child[e.child_id] = e
        rebuilt = extend_index(self._islands, (_lineage_edge(e) for e in new_edges))
        for obs in self.evidence.observations_since(self._seen):
            self._seen += 1
            if usefulness_eligible(obs) and obs.valid and obs.terminal.gain is not None:
                self._rootless[obs.decision.decision_id] = obs
        dirty = self._new_roots()
        for isl in rebuilt:  # an edge arrived out of ordinal order: rescan its roots
            for did in self._on_island.get(isl, ()):
                self._open.setdefault(isl, {})[did] = None
        for isl in {e.island for e in new_edges} | rebuilt:
            dirty.update(self._open.get(isl, {}))
        groups, waiting = self._evaluate(dirty, rebuilt)
        todo = set(dirty)
        for best in groups:
            todo.update(self._claims.get(best, ()))
        order = sorted(todo, key=self._order.__getitem__)
        # one read of the ledger for all of them (a root's rows are appended only here)
        last = self.evidence.latest_lineages(order)
        for did in order:
            if did in waiting and last[did] is None:
                continue  # a pending outcome and no row: _append_if_changed writes nothing
            self._append_if_changed(self._credited(did), last[did])

    def _evaluate(self, dirty: set[str], rebuilt: set[int]) -> tuple[set[str], set[str]]:
        """``root_outcome`` of the ``dirty`` roots (in root order): the claim groups whose
        credit may have moved, and the roots found still waiting (not evaluated again).

        A root waits (outcome pending, no maturity ordinal: exactly ``root_outcome``'s
        plain wait, ``_waits``) until ``budget`` edges completed after its own on its
        island. Most open roots of an island that receives an edge are still waiting
        (late in a run ~20 per outcome): for them ``root_outcome`` would return an equal
        outcome, which claims nothing, so only ``maturity`` is asked. That holds on an
        island indexed by appends since the wait was computed (a rebuilt one is evaluated
        in full): the root's edge (``first``) and its place among the ordinals stand.
        """
        r = self.reader
        depth, budget = r.reward.depth, r.reward.budget
        groups: set[str] = set()
        waiting: set[str] = set()
        empty = IslandEdges(())
        for did in sorted(dirty, key=self._order.__getitem__):
            root = self._roots[did]
            island = self._islands.get(root.island, empty)
            if (
                did in self._waits
                and root.island not in rebuilt
                and island.maturity(root.ordinal, budget) is None
            ):
                waiting.add(did)
                continue
            out = root_outcome(root, island, depth=depth, budget=budget)
            if out == LineageOutcome(did, "pending", depth, budget):
                self._waits.add(did)
            else:
                self._waits.discard(did)
            if out.status != "pending":
                self._open.get(root.island, {}).pop(did, None)
            groups |= self._claim(did, out)
        return groups, waiting

    def _new_roots(self) -> set[str]:
        """Roots made from eligible valid observations whose edge has arrived (dirty)."""
        made = set()
        for did, obs in list(self._rootless.items()):
            edge = self._by_child.get(obs.terminal.child_id)
            if edge is None:
                continue  # its edge has not arrived yet: try again next time
            del self._rootless[did]
            feasible = raw_feasible_interval(
                self.reader.causal_reward, obs.decision.context.parent_fitness
            )
            assert obs.terminal.gain is not None
            try:
                root = LineageRoot(
                    did, edge.child_id, edge.island, edge.ordinal, obs.terminal.gain, feasible
                )
            except ValueError:
                continue  # an observation's rows never change: never a root
            self._roots[did] = root
            self._order[did] = len(self._order)
            self._on_island.setdefault(root.island, []).append(did)
            self._open.setdefault(root.island, {})[did] = None
            made.add(did)
        return made

    def _claim(self, did: str, out: LineageOutcome) -> set[str]:
        """Record ``did``'s outcome and its claim on a best descendant; the claim groups
        (best descendant ids) whose credit may have moved."""
        before = _claimed(self._outcomes.get(did))
        after = _claimed(out)
        self._outcomes[did] = out
        if before is not None and before != after:
            self._claims[before].discard(did)
        if after is not None:
            self._claims.setdefault(after, set()).add(did)
        return {g for g in (before, after) if g is not None}

    def _credited(self, did: str) -> LineageOutcome:
        """``did``'s outcome after exclusive credit within its claim group."""
        out = self._outcomes[did]
        best = _claimed(out)
        if best is None:
            return out
        members = sorted(self._claims[best], key=self._order.__getitem__)
        roots = [self._roots[m] for m in members]
        credited = assign_credit(roots, [self._outcomes[m] for m in members])
        return credited[members.index(did)]

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
        flags, counts per arm and the outcome count at which it was written. The
        rows' columns are kept as terminals arrive (``OpeColumns``), so a summary
        costs one vectorised pass, not a walk over the ledger's rows.
        """
        r = self.reader
        cols = self._ope
        cols.extend(self.evidence.observations_since(cols.seen), r)
        report = offer_gate_report(
            cols.z, cols.y, cols.q1, cols.q0, cols.e, cols.runs, cols.parents
        )
        counts = self.evidence.counts()
        return {
            "estimand": "ITT (probe): offer vs withhold of the proposed card",
            "units": "raw oriented gain (invalid rows: R * G-)",
            "written_at_outcome": counts["edges"],  # the run's, across resumes
            "session_outcomes": self.outcomes,
            **_json_ready(report),
            "arms": cols.arms(),
            "decisions": counts["decisions"],
            "terminals": counts["terminals"],
            "censored": counts["censored"],
            "abstained": counts["abstained"],
            "cited": cols.counts["cited"],
            "runs": sorted(cols.run_names),
            "lineage_roots": counts["lineage_roots"],
            "evidence_version": self.evidence.evidence_version(),
        }

    def write_ope(self) -> Path:
        path = self.ope_path
        summary = self.ope_summary()
        # recomputed from the ledger at every close (gigaevo.analysis.memory reads a blank
        # one as missing and recomputes a stale one): atomic, not fsynced
        atomic_write_json(path, summary, durable=False, synced=False)
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


def _lineage_edge(e: EdgeRow) -> LineageEdge:
    disposition = archive_disposition(e.disposition) if e.status == "valid" else "none"
    return LineageEdge(e.parent_id, e.edge_id, e.island, e.ordinal, e.status, e.gain, disposition)


def _claimed(out: LineageOutcome | None) -> str | None:
    """The best descendant ``out`` claims credit for (``assign_credit``'s rule), or None."""
    if out is None or out.status != "outcome" or not out.residual:
        return None
    return out.best_descendant_id


class OpeColumns:
    """The OPE rows (randomised, non-censored) as columns, extended as terminals arrive.

    Kept as numpy arrays grown by doubling (a summary reads them as they are: converting
    Python lists of every OPE row cost O(rows) per summary). The clusters of the SEs (run
    ids, and "run/parent" for the ITT's) are kept coded, each label once as its row arrives
    (``causal.ClusterCodes``: the codes ``clustered_se`` would give them), so a summary does
    not hash every row's label again (four clustered SEs per summary, O(rows) each in
    Python: 0.8 ms per outcome late in a 10,000-mutant run)."""

    _FLOATS = ("z", "y", "q1", "q0", "e")

    def __init__(self) -> None:
        self.seen = 0  # observations read (terminal order)
        self.n = 0  # OPE rows kept
        self._cols = {k: np.empty(16) for k in self._FLOATS}
        self._runs = np.empty(16, dtype=np.intp)  # run id codes (first appearance order)
        self._parents = np.empty(16, dtype=np.intp)  # "run/parent" codes: the ITT SE's
        self._run_codes: dict[str, int] = {}
        self._parent_codes: dict[str, int] = {}
        self.counts: Counter[str] = Counter()

    @property
    def run_names(self) -> set[str]:
        return set(self._run_codes)

    @property
    def z(self) -> np.ndarray:
        return self._cols["z"][: self.n]

    @property
    def y(self) -> np.ndarray:
        return self._cols["y"][: self.n]

    @property
    def q1(self) -> np.ndarray:
        return self._cols["q1"][: self.n]

    @property
    def q0(self) -> np.ndarray:
        return self._cols["q0"][: self.n]

    @property
    def e(self) -> np.ndarray:
        return self._cols["e"][: self.n]

    @property
    def runs(self) -> ClusterCodes:
        return ClusterCodes(self._runs[: self.n])

    @property
    def parents(self) -> ClusterCodes:
        return ClusterCodes(self._parents[: self.n])

    def _append(
        self, values: tuple[float, float, float, float, float], run: str, parent: str
    ) -> None:
        if self.n == len(self._runs):  # full: double every column
            for k, col in self._cols.items():
                self._cols[k] = np.concatenate([col, np.empty(len(col))])
            self._runs = np.concatenate([self._runs, np.empty_like(self._runs)])
            self._parents = np.concatenate([self._parents, np.empty_like(self._parents)])
        for k, v in zip(self._FLOATS, values, strict=True):
            self._cols[k][self.n] = v
        runs, parents = self._run_codes, self._parent_codes
        self._runs[self.n] = runs.setdefault(run, len(runs))
        self._parents[self.n] = parents.setdefault(f"{run}/{parent}", len(parents))
        self.n += 1

    def extend(self, observations: Sequence[Observation], reader: CausalReader) -> None:
        for obs in observations:
            self.seen += 1
            if not ope_eligible(obs):
                continue
            d, t = obs.decision, obs.terminal
            lo, _ = raw_feasible_interval(reader.causal_reward, d.context.parent_fitness)
            self._append(
                (
                    float(d.z or 0),
                    float(t.gain) if t.gain is not None else lo,
                    float(d.q1 or 0.0),
                    float(d.q0 or 0.0),
                    float(d.offer or reader.settings.policy.offer_probability),
                ),
                d.run_id,
                d.context.parent_id,
            )
            arm = "treated" if obs.z == 1 else "control" if obs.z == 0 else "other"
            self.counts[f"{arm}.n"] += 1
            self.counts[f"{arm}.valid"] += int(obs.valid)
            self.counts[f"{arm}.invalid"] += int(obs.invalid)
            self.counts["cited"] += int(obs.cited)

    def arms(self) -> dict[str, dict[str, int]]:
        """Valid / invalid rows per arm, and cited / uncited deliveries."""
        c = self.counts
        out = {
            arm: {k: c[f"{arm}.{k}"] for k in ("n", "valid", "invalid")}
            for arm in ("treated", "control")
        }
        out["treated"]["cited"] = c["cited"]
        out["treated"]["uncited"] = out["treated"]["n"] - c["cited"]
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
