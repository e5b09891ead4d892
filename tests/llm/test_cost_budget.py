"""The cost budget stopper reads the run's LLM spending."""

from __future__ import annotations

import math

import pytest

from gigaevo.evolution.stoppers import CostBudget, RunState


def _state(cost: float) -> RunState:
    return RunState(
        n_mutants=3, wall_seconds=1.0, best_fitness=0.0, mutants_since_improvement=0,
        llm_cost_usd=cost,
    )  # fmt: skip


def test_stops_once_reached() -> None:
    budget = CostBudget(0.5)
    assert budget.check(_state(0.49)) is None
    reason = budget.check(_state(0.5))
    assert reason is not None and reason.startswith("cost_budget: $0.5000 >= $0.5000")


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_bad_budget(bad: float) -> None:
    with pytest.raises(ValueError):
        CostBudget(bad)
