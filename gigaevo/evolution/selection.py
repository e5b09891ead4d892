"""Parent selection, inspiration sampling and island scheduling; every draw uses a given rng.

All functions here are pure given the ``np.random.Generator`` they receive and
the order of the elites they are handed (archives list elites sorted by cell,
so the same archive and seed always give the same choice).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from gigaevo.evolution.archive import Elite, rank_elites
from gigaevo.problems.spec import MetricsSpec


class ParentSelector(Protocol):
    """Chooses the parent of the next mutation among an island's elites."""

    def select(
        self,
        elites: Sequence[Elite],
        metrics: MetricsSpec,
        rng: np.random.Generator,
        pending: Mapping[str, int] | None = None,
    ) -> Elite:
        """Return one of ``elites``; raises ValueError when ``elites`` is empty.

        ``pending`` counts, per program id, its children still in flight (their
        results unknown); selectors that do not use it ignore it.
        """
        ...


def relative_quality(elites: Sequence[Elite], metrics: MetricsSpec) -> np.ndarray:
    """Direction-aware quality rescaled over the given elites, shape ``(len(elites),)``.

    Each fitness goes through ``metrics.quality`` (position within the declared
    bounds, 1 = best bound, non-finite -> 0), then is min-max rescaled so the
    best of ``elites`` gets 1 and the worst 0; all zeros when they are equal.
    Well defined for negative values and lower-is-better metrics.
    """
    q = np.array([metrics.quality(e.fitness) for e in elites], dtype=float)
    if q.size == 0:
        return q
    spread = float(q.max() - q.min())
    return (q - q.min()) / spread if spread > 0 else np.zeros_like(q)


def _require(elites: Sequence[Elite]) -> None:
    if len(elites) == 0:
        raise ValueError("cannot select from an empty set of elites")


def _sample_distinct(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """``min(k, n)`` distinct indices of ``range(n)``, uniformly, in draw order."""
    return rng.choice(n, size=min(k, n), replace=False)


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


class FitnessProportionalTournament:
    """The default: a uniform tournament of ``k`` distinct elites, then a soft pick.

    Draws ``min(k, n)`` distinct elites uniformly, then picks one of them with
    probability proportional to ``exp(r / temperature)``, where ``r`` is the
    :func:`relative_quality` within the tournament (best 1, worst 0). At
    ``temperature=1`` the tournament's best is ``e`` times as likely as its
    worst; a small temperature approaches best-of-k, a large one uniform.
    Every elite has positive probability whenever the set is not empty.

    Raises:
        ValueError: when ``k < 1`` or ``temperature`` is not positive and finite.
    """

    def __init__(self, k: int = 3, temperature: float = 1.0) -> None:
        _check_k(k)
        if not (math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be positive and finite, got {temperature}")
        self.k = k
        self.temperature = temperature

    def select(
        self,
        elites: Sequence[Elite],
        metrics: MetricsSpec,
        rng: np.random.Generator,
        pending: Mapping[str, int] | None = None,
    ) -> Elite:
        _require(elites)
        entrants = [elites[i] for i in _sample_distinct(len(elites), self.k, rng)]
        logits = relative_quality(entrants, metrics) / self.temperature
        weights = np.exp(logits - logits.max())
        return entrants[int(rng.choice(len(entrants), p=weights / weights.sum()))]


class BestOrTournament:
    """The island's best elite with probability ``p_best``, else a soft tournament.

    The tournament is a :class:`FitnessProportionalTournament` of ``k`` elites.

    A spread archive holds many cells whose elites are far from the best;
    drawing parents from all of them alone explores but slows the climb. This
    keeps a fixed share of the mutations on the best elite (exploitation) and
    spreads the rest over the archive (exploration). One draw decides which,
    then the chosen rule draws as usual, so the choice is deterministic given
    the generator. ``p_best=0`` is the tournament, ``p_best=1`` a hill-climb
    on the island's best.

    ``pending_decay`` makes the choice aware of what is in flight: the best is
    taken with probability ``p_best * pending_decay ** n``, where ``n`` of its
    children are still in flight (1, the default, ignores them; below 1 spreads
    the mutations in flight over more parents).

    Raises:
        ValueError: ``p_best`` or ``pending_decay`` outside [0, 1], or a bad
            ``k`` or ``temperature``.
    """

    def __init__(
        self,
        p_best: float = 0.5,
        k: int = 3,
        temperature: float = 1.0,
        pending_decay: float = 1.0,
    ) -> None:
        if not (0.0 <= p_best <= 1.0):
            raise ValueError(f"p_best must be in [0, 1], got {p_best}")
        if not (0.0 <= pending_decay <= 1.0):
            raise ValueError(f"pending_decay must be in [0, 1], got {pending_decay}")
        self.p_best = p_best
        self.pending_decay = pending_decay
        self.tournament = FitnessProportionalTournament(k, temperature)

    def select(
        self,
        elites: Sequence[Elite],
        metrics: MetricsSpec,
        rng: np.random.Generator,
        pending: Mapping[str, int] | None = None,
    ) -> Elite:
        _require(elites)
        best = rank_elites(elites, metrics)[0]
        n = (pending or {}).get(best.program_id, 0)
        if rng.random() < self.p_best * self.pending_decay**n:
            return best
        return self.tournament.select(elites, metrics, rng)


class TournamentSelection:
    """Best of ``min(k, n)`` distinct elites drawn uniformly (ties: smaller id).

    Raises:
        ValueError: when ``k < 1``.
    """

    def __init__(self, k: int = 3) -> None:
        _check_k(k)
        self.k = k

    def select(
        self,
        elites: Sequence[Elite],
        metrics: MetricsSpec,
        rng: np.random.Generator,
        pending: Mapping[str, int] | None = None,
    ) -> Elite:
        _require(elites)
        entrants = [elites[i] for i in _sample_distinct(len(elites), self.k, rng)]
        return rank_elites(entrants, metrics)[0]


class UniformSelection:
    """Every elite equally likely; ignores fitness."""

    def select(
        self,
        elites: Sequence[Elite],
        metrics: MetricsSpec,
        rng: np.random.Generator,
        pending: Mapping[str, int] | None = None,
    ) -> Elite:
        _require(elites)
        return elites[int(rng.integers(len(elites)))]


class FitnessProportional:
    """Roulette over all elites: probability proportional to ``relative_quality + epsilon``.

    The best elite weighs ``1 + epsilon`` and the worst ``epsilon``, so every
    elite keeps positive probability; equal fitness everywhere gives uniform.

    Raises:
        ValueError: when ``epsilon`` is not positive and finite.
    """

    def __init__(self, epsilon: float = 0.1) -> None:
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError(f"epsilon must be positive and finite, got {epsilon}")
        self.epsilon = epsilon

    def select(
        self,
        elites: Sequence[Elite],
        metrics: MetricsSpec,
        rng: np.random.Generator,
        pending: Mapping[str, int] | None = None,
    ) -> Elite:
        _require(elites)
        weights = relative_quality(elites, metrics) + self.epsilon
        return elites[int(rng.choice(len(elites), p=weights / weights.sum()))]


INSPIRATION_POOLS = ("all", "top", "better", "near")


class InspirationSampler:
    """Chooses up to ``n`` elites other than the parent to show in the prompt.

    With ``include_best`` the best of the candidates comes first (ties:
    smaller id); the rest are drawn uniformly without replacement, in draw
    order, from all candidates (``pool="all"``) or from the best
    ``top`` of them (``pool="top"``: in a spread archive most elites are far
    from the best, and a model borrowing from them borrows their faults).
    Candidates are the given elites minus the parent, each id once.

    Raises:
        ValueError: when ``n < 0``, ``top < 1`` or ``pool`` is unknown.
    """

    def __init__(
        self, n: int = 2, include_best: bool = True, pool: str = "all", top: int = 5
    ) -> None:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if pool not in INSPIRATION_POOLS:
            raise ValueError(f"pool must be one of {INSPIRATION_POOLS}, got {pool!r}")
        if top < 1:
            raise ValueError(f"top must be >= 1, got {top}")
        self.n = n
        self.include_best = include_best
        self.pool = pool
        self.top = top

    def sample(
        self,
        elites: Sequence[Elite],
        parent: Elite,
        metrics: MetricsSpec,
        rng: np.random.Generator,
    ) -> list[Elite]:
        """Up to ``n`` distinct elites, none of them ``parent``; ``[]`` when none remain."""
        seen = {parent.program_id}
        pool: list[Elite] = []
        for e in elites:
            if e.program_id not in seen:
                seen.add(e.program_id)
                pool.append(e)
        if self.n == 0 or not pool:
            return []
        if self.pool == "top":
            pool = sorted(rank_elites(pool, metrics)[: self.top], key=lambda e: e.cell)
        elif self.pool == "near":
            pool = sorted(_nearest(pool, parent, metrics)[: self.top], key=lambda e: e.cell)
        elif self.pool == "better":
            pool = [e for e in pool if metrics.better(e.fitness, parent.fitness)]
            if not pool:
                return []
        chosen: list[Elite] = []
        if self.include_best:
            best = rank_elites(pool, metrics)[0]
            chosen.append(best)
            pool = [e for e in pool if e.program_id != best.program_id]
        if pool and self.n > len(chosen):
            chosen += [pool[i] for i in _sample_distinct(len(pool), self.n - len(chosen), rng)]
        return chosen


def _nearest(pool: Sequence[Elite], parent: Elite, metrics: MetricsSpec) -> list[Elite]:
    """``pool`` by distance of its cells to the parent's (squared bins), then best first."""
    rank = {e.program_id: i for i, e in enumerate(rank_elites(pool, metrics))}

    def key(e: Elite) -> tuple[int, int]:
        far = sum((a - b) ** 2 for a, b in zip(e.cell, parent.cell, strict=False))
        return far, rank[e.program_id]

    return sorted(pool, key=key)


class IslandScheduler(Protocol):
    """Chooses the island the next mutation works on, from the step index alone."""

    def island_for(self, step: int, n_islands: int) -> int:
        """The island in ``[0, n_islands)`` for dispatch ``step`` (0, 1, 2, ...)."""
        ...


class RoundRobinIslands:
    """``step % n_islands``: islands take turns, so each gets an equal share of mutations.

    Uses no randomness; the same step always gives the same island, across
    resumes. Islands are never empty once the initial programs are added to
    each of them (archives only replace or evict on an add).

    Raises:
        ValueError: from :meth:`island_for` when ``n_islands < 1``.
    """

    def island_for(self, step: int, n_islands: int) -> int:
        if n_islands < 1:
            raise ValueError(f"n_islands must be >= 1, got {n_islands}")
        return step % n_islands
