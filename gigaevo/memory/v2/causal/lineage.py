"""Delayed-lineage outcomes and exclusive credit (memory-model.md "Delayed-lineage head" and
"Worked example" (step 6)).

Pure and I/O-free: the caller supplies the eligible roots and every mutation edge as plain
frozen dataclasses and receives one ``LineageOutcome`` per root. Mapping to and from the
ledger's ``EdgeRow`` / ``LineageRow`` is left to the evidence provider; only the archive
disposition vocabulary is translated here (``archive_disposition``).

Rules (section 4.1):

- Maturity: the O-th mutation edge on the root's island completed (by per-island ordinal)
  after the root edge. Fewer than O such edges => ``pending`` (never zero).
- Completeness: every edge in the window (root ordinal, maturity] must be terminal (not
  ``pending``) and, when valid, carry an archive disposition (``accepted`` / ``rejected``).
  Invalid and censored edges never reach the archive, so they need no disposition.
- Scan: breadth-first from the root child (depth 1) through child edges on the root's island
  with ordinal <= maturity, up to depth H. Cumulative gain = direct gain + the edge gains
  along the path; a reachable censored edge censors the row, a reachable unresolved edge keeps
  it pending, invalid edges are counted and not expanded.
- Out-of-interval cumulative gain (beyond the root's feasible raw interval by more than 1e-9)
  **censors** the row (``censor_reason`` says why) rather than raising: one inconsistent edge
  must not stop the provider, and a censored row never trains the head. Inside the tolerance
  it is clamped, as ``RewardDefinition.normalise_gain`` does.
- best = max(direct, cumulative gain of archive-accepted descendants at depth >= 2); ties keep
  the direct gain, then the shallowest (first scanned) descendant. Residual
  g^L = max(0, best - direct) in raw units; y^L = g^L / R.
- Exclusive credit across roots: roots whose outcome names the same best descendant with
  g^L > 0 compete; the owner has the smallest best depth, then the latest root (largest root
  ordinal), then the smaller decision id. The others keep a structural zero row (g^L = 0,
  ``credit_owner`` = the owner). Credit is decided among the outcomes of one call; a later call
  may move it (the provider appends a new row version).
"""

from __future__ import annotations

import math
from bisect import bisect_right, insort
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from gigaevo.memory.v2.causal.errors import GainOutOfBoundsError
from gigaevo.memory.v2.causal.features import GAIN_TOLERANCE, RewardDefinition

DEFAULT_DEPTH = 3
DEFAULT_BUDGET = 32
ACCEPTED_ARCHIVE_STATUSES = frozenset({"new_cell", "improved", "accepted"})

EdgeStatus = Literal["valid", "invalid", "censored", "pending"]
Disposition = Literal["accepted", "rejected", "none"]
OutcomeStatus = Literal["outcome", "invalid", "pending", "censored"]


def archive_disposition(status: str | None) -> Disposition:
    """Map an archive status (``new_cell`` / ``improved`` / ``rejected`` / None)."""
    if status is None:
        return "none"
    return "accepted" if status in ACCEPTED_ARCHIVE_STATUSES else "rejected"


def raw_feasible_interval(reward: RewardDefinition, parent: float) -> tuple[float, float]:
    """Feasible raw gain interval (R * G-, R * G+) of a parent with metric ``parent``."""
    lo, hi = reward.feasible_interval(parent)
    return lo * reward.range, hi * reward.range


@dataclass(frozen=True)
class LineageEdge:
    """One mutation edge (memory or not).

    Attributes:
        parent_id: parent program id.
        child_id: child program id (the edge id).
        island: island the edge completed on.
        ordinal: per-island completion ordinal.
        status: ``valid`` / ``invalid`` / ``censored``, or ``pending`` (no terminal yet).
        gain: raw oriented gain versus its own parent; required (finite) when valid.
        disposition: archive disposition; ``none`` means not yet disposed.
    """

    parent_id: str
    child_id: str
    island: int
    ordinal: int
    status: EdgeStatus
    gain: float | None = None
    disposition: Disposition = "none"

    def __post_init__(self) -> None:
        if self.status == "valid" and (self.gain is None or not math.isfinite(self.gain)):
            raise ValueError(f"valid edge {self.child_id!r} needs a finite gain")

    @property
    def resolved(self) -> bool:
        """Terminal, and disposed by the archive when valid."""
        if self.status == "pending":
            return False
        return self.status != "valid" or self.disposition != "none"


@dataclass(frozen=True)
class LineageRoot:
    """An eligible root (usefulness-eligible, valid, non-censored decision).

    Attributes:
        decision_id: the root decision.
        child_id: the root child (the root edge's child).
        island: island of the root edge.
        ordinal: per-island completion ordinal of the root edge.
        direct_gain: raw oriented gain of the root edge.
        feasible: the root parent's feasible raw gain interval (lo, hi).
    """

    decision_id: str
    child_id: str
    island: int
    ordinal: int
    direct_gain: float
    feasible: tuple[float, float]

    def __post_init__(self) -> None:
        lo, hi = self.feasible
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
            raise ValueError(f"bad feasible interval {self.feasible} for {self.decision_id!r}")
        if not self.contains(self.direct_gain):
            raise GainOutOfBoundsError(
                f"direct gain {self.direct_gain} outside feasible {self.feasible}"
            )

    def contains(self, gain: float) -> bool:
        """Whether ``gain`` lies in the feasible raw interval (up to 1e-9)."""
        lo, hi = self.feasible
        return math.isfinite(gain) and lo - GAIN_TOLERANCE <= gain <= hi + GAIN_TOLERANCE

    def clamp(self, gain: float) -> float:
        lo, hi = self.feasible
        return min(max(gain, lo), hi)


@dataclass(frozen=True)
class LineageOutcome:
    """The lineage outcome of one root (fields mirror ``evidence.rows.LineageRow``).

    ``best_*`` and ``residual`` are set for ``outcome`` rows only; ``residual`` is g^L >= 0 in
    raw units. ``credit_owner`` is the decision owning the best descendant's credit (the root
    itself when it owns it, None when g^L = 0 natively). ``structural_zero`` marks a root that
    lost exclusive credit (residual forced to 0, still a row).
    """

    decision_id: str
    status: OutcomeStatus
    depth: int
    budget: int
    maturity_ordinal: int | None = None
    best_descendant_id: str | None = None
    best_depth: int | None = None
    best_gain: float | None = None
    residual: float | None = None
    credit_owner: str | None = None
    structural_zero: bool = False
    invalid_edges: int = 0
    censor_reason: str | None = None


def _child_order(edge: LineageEdge) -> tuple[int, str]:
    return edge.ordinal, edge.child_id


class IslandEdges:
    """The edges of one island, indexed once for every root on it.

    Ordinals sorted (with a prefix count of unresolved edges), the first edge of each child
    id, and each parent's children sorted by (ordinal, child id): a root's maturity, window
    check and scan then cost O(log E + scanned edges) instead of O(E).
    """

    def __init__(self, edges: Sequence[LineageEdge]) -> None:
        self.edges = list(edges)  # input (completion) order
        by_ordinal = sorted(edges, key=lambda e: e.ordinal)
        self.ordinals = [e.ordinal for e in by_ordinal]
        self._unresolved = [0]  # unresolved edges among the first i by ordinal
        for edge in by_ordinal:
            self._unresolved.append(self._unresolved[-1] + (not edge.resolved))
        self.first: dict[str, LineageEdge] = {}
        self.children: dict[str, list[LineageEdge]] = {}
        for edge in edges:
            self.first.setdefault(edge.child_id, edge)
            self.children.setdefault(edge.parent_id, []).append(edge)
        for kids in self.children.values():
            kids.sort(key=_child_order)

    def append(self, edge: LineageEdge) -> bool:
        """Add an edge completed after every indexed one; False (nothing changed) otherwise."""
        if self.ordinals and edge.ordinal < self.ordinals[-1]:
            return False
        self.edges.append(edge)
        self.ordinals.append(edge.ordinal)
        self._unresolved.append(self._unresolved[-1] + (not edge.resolved))
        self.first.setdefault(edge.child_id, edge)
        insort(self.children.setdefault(edge.parent_id, []), edge, key=_child_order)
        return True

    def maturity(self, ordinal: int, budget: int) -> int | None:
        """Ordinal of the ``budget``-th edge completed after ``ordinal``, or None."""
        at = bisect_right(self.ordinals, ordinal) + budget - 1
        return self.ordinals[at] if at < len(self.ordinals) else None

    def window_resolved(self, after: int, through: int) -> bool:
        """Whether every edge with ``after`` < ordinal <= ``through`` is resolved."""
        lo, hi = bisect_right(self.ordinals, after), bisect_right(self.ordinals, through)
        return self._unresolved[hi] == self._unresolved[lo]


def extend_index(index: dict[int, IslandEdges], edges: Iterable[LineageEdge]) -> set[int]:
    """Add ``edges`` (in completion order) to ``index``; returns the islands rebuilt because
    they received an edge older than their newest one (their roots' windows may move)."""
    rebuilt: set[int] = set()
    for edge in edges:
        island = index.setdefault(edge.island, IslandEdges(()))
        if not island.append(edge):
            index[edge.island] = IslandEdges([*island.edges, edge])
            rebuilt.add(edge.island)
    return rebuilt


def island_index(edges: Iterable[LineageEdge]) -> dict[int, IslandEdges]:
    """``IslandEdges`` per island (edges of other islands never enter a root's scan)."""
    grouped: dict[int, list[LineageEdge]] = {}
    for edge in edges:
        grouped.setdefault(edge.island, []).append(edge)
    return {island: IslandEdges(group) for island, group in grouped.items()}


def _scan(
    root: LineageRoot, base: LineageOutcome, island: IslandEdges, maturity: int
) -> LineageOutcome:
    """Breadth-first scan of the matured window (section 4.1)."""
    best = (root.direct_gain, root.child_id, 1)
    invalid = 0
    frontier = deque([(root.child_id, 1, root.direct_gain)])
    seen = {root.child_id}
    while frontier:
        node, depth, cumulative = frontier.popleft()
        if depth >= base.depth:
            continue
        for edge in island.children.get(node, ()):
            if edge.ordinal > maturity:  # children are sorted by ordinal
                break
            if edge.status == "censored":
                return replace(
                    base, status="censored", censor_reason=f"censored edge {edge.child_id}"
                )
            if not edge.resolved:
                return replace(base, status="pending", invalid_edges=invalid)
            if edge.status == "invalid":
                invalid += 1
                continue
            if edge.child_id in seen:
                continue
            seen.add(edge.child_id)
            assert edge.gain is not None  # guaranteed for valid edges
            total = cumulative + edge.gain
            if not root.contains(total):
                reason = (
                    f"cumulative gain {total} at {edge.child_id} outside feasible {root.feasible}"
                )
                return replace(base, status="censored", censor_reason=reason)
            total = root.clamp(total)
            if edge.disposition == "accepted" and total > best[0]:
                best = (total, edge.child_id, depth + 1)
            frontier.append((edge.child_id, depth + 1, total))
    gain, descendant, best_depth = best
    residual = max(0.0, gain - root.direct_gain)
    return replace(
        base,
        status="outcome",
        best_descendant_id=descendant,
        best_depth=best_depth,
        best_gain=gain,
        residual=residual,
        credit_owner=root.decision_id if residual > 0 else None,
        invalid_edges=invalid,
    )


def root_outcome(
    root: LineageRoot,
    edges: Sequence[LineageEdge] | IslandEdges,
    depth: int = DEFAULT_DEPTH,
    budget: int = DEFAULT_BUDGET,
) -> LineageOutcome:
    """The lineage outcome of one root before exclusive credit.

    ``edges``: every edge (any island), or the root island's ``IslandEdges`` already built.
    """
    if depth < 1 or budget < 1:
        raise ValueError(f"depth and budget must be >= 1, got H={depth}, O={budget}")
    if isinstance(edges, IslandEdges):
        island = edges
    else:
        island = IslandEdges([e for e in edges if e.island == root.island])
    base = LineageOutcome(root.decision_id, "pending", depth, budget)
    root_edge = island.first.get(root.child_id)
    if root_edge is not None and root_edge.status == "invalid":
        return replace(base, status="invalid")
    if root_edge is not None and root_edge.status == "censored":
        return replace(base, status="censored", censor_reason="censored root edge")
    maturity = island.maturity(root.ordinal, budget)
    if maturity is None:
        return base
    base = replace(base, maturity_ordinal=maturity)
    if not island.window_resolved(root.ordinal, maturity):
        return base
    return _scan(root, base, island, maturity)


def assign_credit(
    roots: Sequence[LineageRoot], outcomes: Sequence[LineageOutcome]
) -> tuple[LineageOutcome, ...]:
    """Exclusive credit: one owner per best descendant with g^L > 0 (section 4.1).

    Owner = smallest best depth, then latest root (largest root ordinal), then smaller decision
    id; the other claimants become structural zero rows crediting the owner.
    """
    ordinal = {r.decision_id: r.ordinal for r in roots}
    claims: dict[str, list[LineageOutcome]] = {}
    for out in outcomes:
        if out.status == "outcome" and out.residual and out.best_descendant_id is not None:
            claims.setdefault(out.best_descendant_id, []).append(out)
    owner_of: dict[str, str] = {}
    for claimants in claims.values():
        owner = min(
            claimants,
            key=lambda o: (o.best_depth or 0, -ordinal[o.decision_id], o.decision_id),
        )
        for out in claimants:
            owner_of[out.decision_id] = owner.decision_id
    result = []
    for out in outcomes:
        owner_id = owner_of.get(out.decision_id)
        if owner_id is not None and owner_id != out.decision_id:
            out = replace(out, residual=0.0, credit_owner=owner_id, structural_zero=True)
        result.append(out)
    return tuple(result)


def lineage_outcomes(
    roots: Sequence[LineageRoot],
    edges: Sequence[LineageEdge],
    depth: int = DEFAULT_DEPTH,
    budget: int = DEFAULT_BUDGET,
) -> tuple[LineageOutcome, ...]:
    """One lineage outcome per root (in input order), exclusive credit applied.

    Args:
        roots: the eligible roots (distinct decision ids).
        edges: every mutation edge of the run, any island, any status.
        depth: H, the scan depth (root child = depth 1).
        budget: O, the same-island opportunity budget that fixes maturity.

    Raises:
        ValueError: duplicate root decision ids, or H / O below 1.
    """
    ids = [r.decision_id for r in roots]
    if len(set(ids)) != len(ids):
        raise ValueError("root decision ids must be distinct")
    islands = island_index(edges)
    empty = IslandEdges(())
    outcomes = [root_outcome(r, islands.get(r.island, empty), depth, budget) for r in roots]
    return assign_credit(roots, outcomes)
