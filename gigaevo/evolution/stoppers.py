"""Stopping rules for the steady-state loop: budgets, wall clock, plateau, target fitness, cost."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gigaevo.problems.spec import MetricsSpec


@dataclass(frozen=True)
class RunState:
    """What a stopper may look at, frozen by the engine after each commit.

    Attributes:
        n_mutants: mutants committed so far (initial programs excluded).
        wall_seconds: seconds since the run (or the first start) began.
        best_fitness: best fitness so far (never worsens); None before any
            valid program.
        mutants_since_improvement: committed mutants since ``best_fitness``
            last improved.
        llm_cost_usd: LLM spending so far in USD (every recorded call of the
            run, resumed sessions included).
    """

    n_mutants: int
    wall_seconds: float
    best_fitness: float | None
    mutants_since_improvement: int
    llm_cost_usd: float = 0.0


class Stopper(Protocol):
    """Decides whether the run should stop."""

    def check(self, state: RunState) -> str | None:
        """A human-readable reason to stop, or None to go on."""
        ...


class MaxMutants:
    """Stop once ``n`` mutants are committed (0: evaluate the initial programs only).

    Raises:
        ValueError: when ``n`` is negative.
    """

    def __init__(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        self.n = n

    def check(self, state: RunState) -> str | None:
        if state.n_mutants >= self.n:
            return f"max_mutants: {state.n_mutants} >= {self.n}"
        return None


class WallClock:
    """Stop once ``seconds`` of wall time have passed (``math.inf``: never).

    Raises:
        ValueError: when ``seconds`` is negative or NaN.
    """

    def __init__(self, seconds: float) -> None:
        if math.isnan(seconds) or seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        self.seconds = seconds

    def check(self, state: RunState) -> str | None:
        if state.wall_seconds >= self.seconds:
            return f"wall_clock: {state.wall_seconds:.1f}s >= {self.seconds:.1f}s"
        return None


class FitnessPlateau:
    """Stop after ``patience`` committed mutants without an improvement above ``min_delta``.

    With ``min_delta == 0`` the count is ``state.mutants_since_improvement``.
    With ``min_delta > 0`` the stopper remembers a reference best and the
    mutant count at which it was reached; only a change of the best by more
    than ``min_delta`` moves the reference (the best never worsens, so any
    change is an improvement and no direction is needed). On the first check
    (also after a resume) the reference is the current best, reached
    ``mutants_since_improvement`` mutants ago.

    Raises:
        ValueError: when ``patience < 1`` or ``min_delta`` is negative or NaN.
    """

    def __init__(self, patience: int, min_delta: float = 0.0) -> None:
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        if math.isnan(min_delta) or min_delta < 0:
            raise ValueError(f"min_delta must be >= 0, got {min_delta}")
        self.patience = patience
        self.min_delta = min_delta
        self._reference: float | None = None
        self._reference_n = 0

    def check(self, state: RunState) -> str | None:
        if state.best_fitness is None:
            return None
        if self._reference is None or abs(state.best_fitness - self._reference) > self.min_delta:
            self._reference = state.best_fitness
            self._reference_n = state.n_mutants - state.mutants_since_improvement
        stale = state.n_mutants - self._reference_n
        if stale >= self.patience:
            return f"fitness_plateau: {stale} mutants without improvement > {self.min_delta}"
        return None


class TargetFitness:
    """Stop once the best fitness is at least as good as ``value`` (direction-aware).

    Raises:
        ValueError: when ``value`` is NaN.
    """

    def __init__(self, value: float, metrics: MetricsSpec) -> None:
        if math.isnan(value):
            raise ValueError("value must not be NaN")
        self.value = value
        self.metrics = metrics

    def check(self, state: RunState) -> str | None:
        best = state.best_fitness
        if best is not None and not math.isnan(best) and not self.metrics.better(self.value, best):
            return f"target_fitness: best {best} reached target {self.value}"
        return None


class CostBudget:
    """Stop once the LLM spending reaches ``max_cost_usd``.

    Calls already in flight when it fires still finish (and are paid for),
    so the final cost may exceed the budget by up to ``max_in_flight - 1``
    calls.

    Raises:
        ValueError: when ``max_cost_usd`` is not a positive finite number.
    """

    def __init__(self, max_cost_usd: float) -> None:
        if not math.isfinite(max_cost_usd) or max_cost_usd <= 0:
            raise ValueError(f"max_cost_usd must be > 0, got {max_cost_usd}")
        self.max_cost_usd = max_cost_usd

    def check(self, state: RunState) -> str | None:
        if state.llm_cost_usd >= self.max_cost_usd:
            return f"cost_budget: ${state.llm_cost_usd:.4f} >= ${self.max_cost_usd:.4f}"
        return None


class AnyStopper:
    """Stop when any of ``stoppers`` says so; all are checked each time, first reason wins."""

    def __init__(self, stoppers: Sequence[Stopper]) -> None:
        self.stoppers: tuple[Stopper, ...] = tuple(stoppers)

    def check(self, state: RunState) -> str | None:
        reasons = [s.check(state) for s in self.stoppers]
        return next((r for r in reasons if r is not None), None)
