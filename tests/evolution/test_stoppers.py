"""Stopping rules: budgets, wall clock, plateau with and without min_delta, target, any-of."""

from __future__ import annotations

import dataclasses
import math

import pytest

from gigaevo.evolution import (
    AnyStopper,
    FitnessPlateau,
    MaxMutants,
    RunState,
    TargetFitness,
    WallClock,
)
from gigaevo.problems.spec import MetricsSpec


def state(n: int = 0, wall: float = 0.0, best: float | None = None, since: int = 0) -> RunState:
    return RunState(
        n_mutants=n, wall_seconds=wall, best_fitness=best, mutants_since_improvement=since
    )


def test_run_state_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        state().n_mutants = 3  # type: ignore[misc]


def test_max_mutants() -> None:
    stopper = MaxMutants(10)
    assert stopper.check(state(n=9)) is None
    reason = stopper.check(state(n=10))
    assert reason is not None and "max_mutants" in reason
    assert MaxMutants(0).check(state(n=0)) is not None


def test_wall_clock() -> None:
    stopper = WallClock(60.0)
    assert stopper.check(state(wall=59.9)) is None
    assert stopper.check(state(wall=60.0)) is not None
    assert WallClock(math.inf).check(state(wall=1e12)) is None


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: MaxMutants(-1), "n"),
        (lambda: WallClock(-0.5), "seconds"),
        (lambda: WallClock(math.nan), "seconds"),
        (lambda: FitnessPlateau(0), "patience"),
        (lambda: FitnessPlateau(5, min_delta=-0.1), "min_delta"),
        (lambda: TargetFitness(math.nan, MetricsSpec("s", True, 0.0, 1.0, 0.0)), "value"),
    ],
)
def test_bad_budgets_are_refused_by_name(build, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        build()


def test_plateau_without_min_delta_follows_the_engine_counter() -> None:
    stopper = FitnessPlateau(patience=3)
    assert stopper.check(state(n=0, best=None, since=0)) is None
    assert stopper.check(state(n=1, best=1.0, since=0)) is None
    assert stopper.check(state(n=3, best=1.0, since=2)) is None
    assert stopper.check(state(n=4, best=1.5, since=0)) is None
    assert stopper.check(state(n=6, best=1.5, since=2)) is None
    reason = stopper.check(state(n=7, best=1.5, since=3))
    assert reason is not None and "plateau" in reason


def test_plateau_ignores_improvements_within_min_delta() -> None:
    stopper = FitnessPlateau(patience=4, min_delta=0.5)
    assert stopper.check(state(n=1, best=1.0, since=0)) is None
    assert stopper.check(state(n=3, best=1.2, since=0)) is None  # +0.2: not enough
    assert stopper.check(state(n=5, best=1.4, since=0)) is not None  # 4 since n=1
    fresh = FitnessPlateau(patience=4, min_delta=0.5)
    assert fresh.check(state(n=1, best=1.0, since=0)) is None
    assert fresh.check(state(n=3, best=1.6, since=0)) is None  # +0.6: counts
    assert fresh.check(state(n=6, best=1.6, since=3)) is None
    assert fresh.check(state(n=7, best=1.6, since=4)) is not None


def test_plateau_after_resume_counts_from_the_last_improvement() -> None:
    stopper = FitnessPlateau(patience=10, min_delta=0.1)
    assert stopper.check(state(n=100, best=2.0, since=9)) is None
    assert stopper.check(state(n=101, best=2.0, since=10)) is not None


def test_plateau_in_a_lower_is_better_run() -> None:
    stopper = FitnessPlateau(patience=2, min_delta=0.5)
    assert stopper.check(state(n=1, best=5.0, since=0)) is None
    assert stopper.check(state(n=2, best=4.0, since=0)) is None  # improved by 1.0
    assert stopper.check(state(n=3, best=3.9, since=0)) is None
    assert stopper.check(state(n=4, best=3.9, since=1)) is not None


def test_target_fitness_in_both_directions(higher: MetricsSpec, lower: MetricsSpec) -> None:
    up = TargetFitness(8.0, higher)
    assert up.check(state(best=None)) is None
    assert up.check(state(best=7.9)) is None
    assert up.check(state(best=8.0)) is not None
    down = TargetFitness(2.0, lower)
    assert down.check(state(best=2.1)) is None
    reason = down.check(state(best=1.0))
    assert reason is not None and "target" in reason


def test_any_stopper_reports_the_first_reason_and_checks_all() -> None:
    calls: list[str] = []

    class Spy:
        def check(self, s: RunState) -> str | None:
            calls.append("spy")
            return None

    combined = AnyStopper([MaxMutants(100), WallClock(10.0), Spy()])
    assert combined.check(state(n=5, wall=1.0)) is None
    reason = combined.check(state(n=500, wall=50.0))
    assert reason is not None and reason.startswith("max_mutants")
    assert calls == ["spy", "spy"]
    assert AnyStopper([]).check(state(n=10**9)) is None
