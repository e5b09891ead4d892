"""Immutable rows of the causal ledger (memory-model.md "Rows and eligibility") and their content
hashes.

Every row is a frozen dataclass whose JSON form (``records.to_json``) is
written canonically (sorted keys, no spaces); its SHA-256 is stored beside it
and checked on every read. Reading back refuses unknown or missing keys.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gigaevo.memory.v2.evidence.candidates import Candidate, CandidateTable

Direction = Literal["higher", "lower"]
TerminalStatus = Literal["valid", "invalid", "censored"]
EdgeStatus = Literal["valid", "invalid", "censored"]
LineageStatus = Literal["outcome", "invalid", "pending", "censored"]
CardKind = Literal["insight", "program"]
MeasurementKind = Literal["scalar", "paired", "deterministic"]

NO_CHILD = "no-child:"
STARTUP_ORPHAN = "startup orphan"
_TOL = 1e-9
_MASS_TOL = 1e-6


def canonical_json(data: Any) -> str:
    """``data`` as canonical JSON: sorted keys, no whitespace, finite numbers only."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def decision_key_id(run_id: str, attempt: int) -> str:
    """Decision id: digest of the decision key (run id, attempt)."""
    return "d-" + sha256_hex(canonical_json([run_id, attempt]))[:24]


@dataclass(frozen=True, slots=True)
class FrozenContext:
    """Pre-treatment context as binned at decision time (memory-model.md "Context features")."""

    task_key: str
    parent_id: str
    parent_fitness: float
    island: int
    cell: tuple[int, ...]
    coordinates: tuple[float, ...]
    progress: float
    features: tuple[float, ...]  # x = [1, 2f~-1, pi(t), 2b_1-1, ...]


@dataclass(frozen=True, slots=True)
class RewardDefinition:
    """Metric, direction, declared bounds [lower, upper], lineage depth H and budget O."""

    metric: str
    direction: Direction
    lower: float
    upper: float
    depth: int = 3
    budget: int = 32

    def __post_init__(self) -> None:
        if not self.upper > self.lower:
            raise ValueError(f"reward bounds need upper > lower, got [{self.lower}, {self.upper}]")

    def gain_interval(self, parent_fitness: float) -> tuple[float, float]:
        """Feasible normalised gain interval (G-, G+) of a parent."""
        span = self.upper - self.lower
        if self.direction == "higher":
            return (self.lower - parent_fitness) / span, (self.upper - parent_fitness) / span
        return (parent_fitness - self.upper) / span, (parent_fitness - self.lower) / span


@dataclass(frozen=True, slots=True)
class CardSnapshot:
    """One card of the eligible universe as it stood at the decision."""

    card_id: str
    absorbed_ids: tuple[str, ...]
    kind: CardKind
    text: str
    text_digest: str

    @property
    def lineage_ids(self) -> frozenset[str]:
        return frozenset((self.card_id, *self.absorbed_ids))


UNIVERSES_KEPT = 8  # universe indexes kept (decisions of one bank share their universe tuple)
_UNIVERSES: dict[int, tuple[Sequence[CardSnapshot], tuple[str, ...], dict[str, int]]] = {}


def _universe_entry(
    universe: Sequence[CardSnapshot],
) -> tuple[Sequence[CardSnapshot], tuple[str, ...], dict[str, int]]:
    hit = _UNIVERSES.get(id(universe))
    if hit is not None and hit[0] is universe:
        return hit
    ids = tuple(snap.card_id for snap in universe)
    index: dict[str, int] = {}
    for i, cid in enumerate(ids):
        index.setdefault(cid, i)
    if len(_UNIVERSES) >= UNIVERSES_KEPT:
        _UNIVERSES.pop(next(iter(_UNIVERSES), 0), None)
    entry = _UNIVERSES[id(universe)] = (universe, ids, index)  # held: its id is not reused
    return entry


def universe_ids(universe: Sequence[CardSnapshot]) -> tuple[str, ...]:
    """The card ids of ``universe`` in order (the same tuple for the same universe object)."""
    return _universe_entry(universe)[1]


def universe_index(universe: Sequence[CardSnapshot]) -> dict[str, int]:
    """Card id -> its first position in ``universe`` (do not modify the dict).

    Kept per universe object: the decisions of one bank state share their universe tuple, so
    a decision over 10,000 cards looks its proposed card up instead of scanning them.
    """
    return _universe_entry(universe)[2]


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One named fit diagnostic (e.g. ``immediate.rows``, ``immediate.sigma``)."""

    name: str
    value: float


@dataclass(frozen=True, slots=True)
class PendingCount:
    card_id: str
    count: int


@dataclass(frozen=True, slots=True)
class DecisionRow:
    """A decision, committed before the prompt is exposed. Abstentions carry no treatment.

    Raises:
        ValueError: treatment fields inconsistent with ``abstain`` or with each
            other (masses rho_0 + sum rho_j not 1, proposed id outside the
            universe or without its candidate's rho, Z not 0/1, joint
            propensity not rho*e or rho*(1-e)).
        TypeError: ``candidates`` holds something other than ``Candidate``, or
            ``fitted_row_ids`` is not a sequence.
    """

    decision_id: str
    run_id: str
    seed: int
    attempt: int
    event_ordinal: int
    owner: str  # "host:pid:nonce" of the writing session (startup orphan detection)
    context: FrozenContext
    reward: RewardDefinition
    universe: tuple[CardSnapshot, ...]
    pending: tuple[PendingCount, ...]
    # a CandidateTable once built (any sequence of Candidate is taken and converted)
    candidates: Sequence[Candidate]
    fit: tuple[Diagnostic, ...]
    # a tuple, or once in the ledger a RowIdSet shared by the decisions of one fit
    fitted_row_ids: Sequence[str]
    evidence_version: str  # V at decision time
    abstain: bool
    rho0: float
    proposed_id: str | None = None
    z: int | None = None
    offer: float | None = None
    rho: float | None = None
    joint: float | None = None
    q0: float | None = None
    q1: float | None = None
    r0: float | None = None
    r1: float | None = None
    rag_record: str = ""
    created_at: float = 0.0
    # cards (bank ids) left out of the candidates by the lineage excluder; rows written
    # before the field existed read back with none
    excluded_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        table = CandidateTable.of(self.candidates)
        if table is not self.candidates:
            object.__setattr__(self, "candidates", table)
        if isinstance(self.fitted_row_ids, str) or not isinstance(self.fitted_row_ids, Sequence):
            raise TypeError("fitted_row_ids must be a sequence of row ids")
        if isinstance(self.fitted_row_ids, list):
            object.__setattr__(self, "fitted_row_ids", tuple(self.fitted_row_ids))
        treatment = (self.proposed_id, self.z, self.offer, self.rho, self.joint)
        total = self.rho0 + table.rho_sum()
        if not math.isclose(total, 1.0, abs_tol=_MASS_TOL):
            raise ValueError(f"proposal masses rho_0 + sum rho_j = {total}, not 1")
        if self.abstain:
            if any(v is not None for v in (*treatment, self.q0, self.q1, self.r0, self.r1)):
                raise ValueError("an abstention carries no treatment fields")
            return
        if any(v is None for v in treatment):
            raise ValueError("a non-abstaining decision needs proposed_id, z, offer, rho, joint")
        if self.z not in (0, 1):
            raise ValueError(f"z must be 0 or 1, got {self.z}")
        if self.proposed_id not in universe_index(self.universe):
            raise ValueError(f"proposed id {self.proposed_id!r} is not in the universe")
        if self.proposed_id in self.excluded_ids:
            raise ValueError(f"proposed id {self.proposed_id!r} was excluded")
        assert self.rho is not None and self.offer is not None and self.joint is not None
        at = table.position(self.proposed_id)
        logged = None if at is None else float(table.rho[at])
        if logged is None or not math.isclose(logged, self.rho, abs_tol=_TOL):
            raise ValueError(f"rho {self.rho} of {self.proposed_id!r} is not its candidate's rho")
        want = self.rho * (self.offer if self.z == 1 else 1.0 - self.offer)
        if not (0.0 < self.joint <= 1.0) or not math.isclose(self.joint, want, abs_tol=_TOL):
            raise ValueError(f"joint propensity {self.joint} != rho*(e or 1-e) = {want}")

    @property
    def randomised(self) -> bool:
        return not self.abstain

    def snapshot(self, card_id: str) -> CardSnapshot | None:
        i = universe_index(self.universe).get(card_id)
        return None if i is None else self.universe[i]

    def candidate(self, card_id: str) -> Candidate | None:
        """The candidate of ``card_id`` (the first, as logged), or None."""
        table = self.candidates
        assert isinstance(table, CandidateTable)  # made one in __post_init__
        return table.get(card_id)


@dataclass(frozen=True, slots=True)
class TerminalRow:
    """The one terminal of a decision (valid, invalid or censored).

    ``se`` (raw metric units) and ``measurement`` say how precisely a valid
    child's fitness was measured (memory-model.md "Rows and eligibility": omega = se / R, 0 for a
    deterministic measurement; se None: unknown).

    Raises:
        ValueError: a valid row without gain, a gain on a non-valid row, a
            censored row without reason, cited ids on a censored row, a
            negative or non-finite se, or a measurement on a non-valid row.
    """

    decision_id: str
    child_id: str  # or "no-child:<why>"
    base_id: str
    metric: str
    direction: Direction
    status: TerminalStatus
    cited_ids: tuple[str, ...]
    gain: float | None = None
    se: float | None = None
    measurement: MeasurementKind | None = None
    censor_reason: str | None = None
    created_at: float = 0.0

    def __post_init__(self) -> None:
        if (self.status == "valid") != (self.gain is not None):
            raise ValueError("a gain is recorded for valid terminals and only for them")
        if self.status == "censored" and not self.censor_reason:
            raise ValueError("a censored terminal needs a censor reason")
        if self.status == "censored" and self.cited_ids:
            raise ValueError("a censored terminal cites nothing")
        if len(set(self.cited_ids)) != len(self.cited_ids):
            raise ValueError("cited ids repeat")
        if self.se is not None and not (math.isfinite(self.se) and self.se >= 0):
            raise ValueError(f"a standard error must be finite and >= 0, got {self.se}")
        if self.status != "valid" and (self.se is not None or self.measurement is not None):
            raise ValueError("a measurement is recorded for valid terminals and only for them")


@dataclass(frozen=True, slots=True)
class EdgeRow:
    """A mutation edge (every mutation, memory or not); ``ordinal`` counts per island."""

    edge_id: str  # child id or "no-child:<attempt>"
    run_id: str
    attempt: int
    parent_id: str
    child_id: str
    island: int
    ordinal: int
    status: EdgeStatus
    gain: float | None  # raw oriented gain versus its own parent
    disposition: str | None  # archive disposition (new_cell / improved / rejected)
    decision_id: str | None = None
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class LineageRow:
    """One version of a root's delayed-lineage row; the highest ``version`` supersedes."""

    root_decision_id: str
    version: int
    status: LineageStatus
    depth: int
    budget: int
    maturity_ordinal: int | None = None
    best_descendant_id: str | None = None
    best_depth: int | None = None
    best_gain: float | None = None
    residual: float | None = None  # g^L >= 0, raw units
    credit_owner: str | None = None  # decision id owning the best descendant's credit
    created_at: float = 0.0

    def __post_init__(self) -> None:
        if self.version < 1:
            raise ValueError("lineage versions start at 1")
        if self.residual is not None and self.residual < 0:
            raise ValueError(f"lineage residual must be >= 0, got {self.residual}")


def censored_terminal(decision: DecisionRow, reason: str) -> TerminalRow:
    """The censored terminal of ``decision`` (no child, nothing cited, no gain)."""
    return TerminalRow(
        decision_id=decision.decision_id,
        child_id=f"{NO_CHILD}{reason}",
        base_id=decision.context.parent_id,
        metric=decision.reward.metric,
        direction=decision.reward.direction,
        status="censored",
        cited_ids=(),
        censor_reason=reason,
        created_at=time.time(),
    )
