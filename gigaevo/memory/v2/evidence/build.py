"""Rows built from the engine's records: ``MutationContext`` and ``MutationResult``.

These adapters fix the grounding rules in one place: the cited set of a
terminal is ``result.cited_card_ids`` (already ``card_ids_used`` ∩ slate)
further intersected with {proposed id}, and only when the card was shown
(Z = 1); a duplicate child or one without a fitness is censored, never
invented a gain.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from gigaevo.memory.base import MutationContext, MutationResult
from gigaevo.memory.v2.evidence.rows import (
    NO_CHILD,
    DecisionRow,
    EdgeRow,
    EdgeStatus,
    FrozenContext,
    MeasurementKind,
    RewardDefinition,
    TerminalRow,
    TerminalStatus,
)
from gigaevo.problems.spec import MetricsSpec

DISCARDED = "discarded child"


def reward_definition(
    metrics: MetricsSpec, *, depth: int = 3, budget: int = 32
) -> RewardDefinition:
    """The reward definition a decision freezes, from the problem's metrics spec."""
    return RewardDefinition(
        metric=metrics.primary,
        direction="higher" if metrics.higher_is_better else "lower",
        lower=metrics.lower_bound,
        upper=metrics.upper_bound,
        depth=depth,
        budget=budget,
    )


def frozen_context(context: MutationContext, features: Sequence[float]) -> FrozenContext:
    """The decision's frozen context: the engine context plus the feature vector x."""
    return FrozenContext(
        task_key=context.task_key,
        parent_id=context.parent_id,
        parent_fitness=context.parent_fitness,
        island=context.island,
        cell=tuple(context.cell),
        coordinates=tuple(float(c) for c in context.coordinates),
        progress=context.progress,
        features=tuple(float(f) for f in features),
    )


def raw_gain(reward: RewardDefinition, parent: float, child: float) -> float:
    """Direction-oriented raw gain g (positive = better)."""
    return child - parent if reward.direction == "higher" else parent - child


def terminal_from_result(decision: DecisionRow, result: MutationResult) -> TerminalRow:
    """The terminal of ``decision`` for the engine's ``result``.

    Valid children with a gain are ``valid`` (raw gain versus the frozen
    parent fitness, with the result's measurement: see ``measurement_of``);
    ``result.valid`` False is ``invalid``; a valid result without a gain
    (duplicate, discarded) is ``censored``.
    """
    shown = decision.z == 1 and decision.proposed_id is not None
    cited = tuple(c for c in result.cited_card_ids if shown and c == decision.proposed_id)

    def row(child_id: str, status: TerminalStatus, **extra: Any) -> TerminalRow:
        return TerminalRow(
            decision_id=decision.decision_id,
            child_id=child_id,
            base_id=decision.context.parent_id,
            metric=decision.reward.metric,
            direction=decision.reward.direction,
            status=status,
            created_at=time.time(),
            **extra,
        )

    if not result.valid:
        return row(result.child_id or f"{NO_CHILD}invalid", "invalid", cited_ids=cited)
    if not _has_gain(result):
        child = result.child_id or f"{NO_CHILD}{DISCARDED}"
        return row(child, "censored", cited_ids=(), censor_reason=DISCARDED)
    gain = raw_gain(decision.reward, decision.context.parent_fitness, result.child_fitness)
    se, kind = measurement_of(result)
    return row(result.child_id, "valid", cited_ids=cited, gain=gain, se=se, measurement=kind)


def measurement_of(result: MutationResult) -> tuple[float | None, MeasurementKind]:
    """(se, kind) a valid terminal records for ``result`` (memory-model.md "Rows and eligibility").

    ``deterministic`` (omega = 0) when the problem declares it; else ``scalar`` with the
    result's standard error (raw metric units), or with none when it is unknown or
    unusable (negative, non-finite): the heads then take the configured unknown omega.
    """
    se = result.se
    if result.measurement == "deterministic":
        return 0.0, "deterministic"
    if se is None or not math.isfinite(se) or se < 0:
        return None, "scalar"
    kind: MeasurementKind = "paired" if result.measurement == "paired" else "scalar"
    return float(se), kind


def _has_gain(result: MutationResult) -> bool:
    return result.normalised_gain is not None and math.isfinite(result.child_fitness)


def edge_from_result(
    result: MutationResult, *, run_id: str, decision_id: str | None, metrics: MetricsSpec
) -> EdgeRow:
    """The mutation edge of ``result`` (its ordinal is assigned by ``record_edge``)."""
    status: EdgeStatus = "invalid"
    if result.valid:
        status = "valid" if _has_gain(result) else "censored"
    gain = None
    if status == "valid":
        gain = metrics.oriented(result.child_fitness) - metrics.oriented(result.parent_fitness)
    return EdgeRow(
        edge_id=result.child_id or f"{NO_CHILD}{run_id}:{result.attempt}",
        run_id=run_id,
        attempt=result.attempt,
        parent_id=result.parent_id,
        child_id=result.child_id,
        island=result.island,
        ordinal=0,
        status=status,
        gain=gain,
        disposition=result.archive_status,
        decision_id=decision_id,
        created_at=time.time(),
    )
