"""One contract run against every ParentSelector: membership, determinism, exact odds.

Each implementation comes with its analytic selection probabilities over a
ladder of elites; the empirical frequencies of 10,000 seeded draws must match.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import combinations

import numpy as np
import pytest

from gigaevo.evolution import (
    BestOrTournament,
    Elite,
    FitnessProportional,
    FitnessProportionalTournament,
    ParentSelector,
    TournamentSelection,
    UniformSelection,
    relative_quality,
)
from gigaevo.problems.spec import MetricsSpec

Odds = Callable[[Sequence[Elite], MetricsSpec], np.ndarray]


def _soft_tournament_odds(k: int, temperature: float) -> Odds:
    def odds(elites: Sequence[Elite], metrics: MetricsSpec) -> np.ndarray:
        n = len(elites)
        p = np.zeros(n)
        subsets = list(combinations(range(n), min(k, n)))
        for subset in subsets:
            w = np.exp(relative_quality([elites[i] for i in subset], metrics) / temperature)
            for i, wi in zip(subset, w / w.sum(), strict=True):
                p[i] += wi / len(subsets)
        return p

    return odds


def _tournament_odds(k: int) -> Odds:
    def odds(elites: Sequence[Elite], metrics: MetricsSpec) -> np.ndarray:
        # the ladder's elite i beats exactly the i elites below it
        n = len(elites)
        m = min(k, n)
        return np.array([math.comb(i, m - 1) / math.comb(n, m) for i in range(n)])

    return odds


def _best_or_tournament_odds(p_best: float, k: int) -> Odds:
    soft = _soft_tournament_odds(k, 1.0)

    def odds(elites: Sequence[Elite], metrics: MetricsSpec) -> np.ndarray:
        best = np.zeros(len(elites))
        best[-1] = 1.0  # the ladder's best comes last
        return p_best * best + (1 - p_best) * soft(elites, metrics)

    return odds


def _uniform_odds(elites: Sequence[Elite], metrics: MetricsSpec) -> np.ndarray:
    return np.full(len(elites), 1.0 / len(elites))


def _roulette_odds(epsilon: float) -> Odds:
    def odds(elites: Sequence[Elite], metrics: MetricsSpec) -> np.ndarray:
        w = relative_quality(elites, metrics) + epsilon
        return w / w.sum()

    return odds


CASES: list[tuple[ParentSelector, Odds]] = [
    (FitnessProportionalTournament(), _soft_tournament_odds(3, 1.0)),
    (FitnessProportionalTournament(k=2, temperature=0.25), _soft_tournament_odds(2, 0.25)),
    (FitnessProportionalTournament(k=10), _soft_tournament_odds(10, 1.0)),
    (TournamentSelection(k=3), _tournament_odds(3)),
    (TournamentSelection(k=1), _tournament_odds(1)),
    (UniformSelection(), _uniform_odds),
    (FitnessProportional(), _roulette_odds(0.1)),
    (BestOrTournament(p_best=0.9), _best_or_tournament_odds(0.9, 3)),
    (BestOrTournament(p_best=0.3, k=2), _best_or_tournament_odds(0.3, 2)),
]
IDS = ["soft_tournament", "soft_tournament_k2_cold", "soft_tournament_k_gt_n",
       "tournament_k3", "tournament_k1", "uniform", "fitness_proportional",
       "best_or_tournament", "best_or_tournament_k2"]  # fmt: skip


@pytest.fixture(params=CASES, ids=IDS)
def case(request: pytest.FixtureRequest) -> tuple[ParentSelector, Odds]:
    return request.param


def test_returns_one_of_the_elites(case, metrics: MetricsSpec, ladder) -> None:
    selector, _ = case
    elites = ladder(metrics, 5)
    rng = np.random.default_rng(0)
    for _ in range(50):
        assert selector.select(elites, metrics, rng) in elites


def test_same_seed_same_choices(case, metrics: MetricsSpec, ladder) -> None:
    selector, _ = case
    elites = ladder(metrics, 7)

    def run(seed: int) -> list[str]:
        rng = np.random.default_rng(seed)
        return [selector.select(elites, metrics, rng).program_id for _ in range(100)]

    assert run(42) == run(42)


def test_leaves_global_random_state_and_input_alone(case, metrics: MetricsSpec, ladder) -> None:
    selector, _ = case
    elites = tuple(ladder(metrics, 5))
    np_state, py_state = np.random.get_state(), random.getstate()
    selector.select(elites, metrics, np.random.default_rng(1))
    after = np.random.get_state()
    assert all(np.array_equal(a, b) for a, b in zip(np_state, after, strict=True))
    assert random.getstate() == py_state
    assert elites == tuple(ladder(metrics, 5))


def test_single_elite_is_always_chosen(case, metrics: MetricsSpec) -> None:
    selector, _ = case
    only = Elite("only", 3.0, (0,))
    assert selector.select([only], metrics, np.random.default_rng(3)) == only


def test_empty_elites_raise(case, metrics: MetricsSpec) -> None:
    selector, _ = case
    with pytest.raises(ValueError, match="empty"):
        selector.select([], metrics, np.random.default_rng(0))


def test_handles_negative_and_infinite_fitness(case) -> None:
    selector, _ = case
    metrics = MetricsSpec("r", True, lower_bound=-100.0, upper_bound=0.0, sentinel=-100.0)
    elites = [Elite("a", -50.0, (0,)), Elite("b", -math.inf, (1,)), Elite("c", -1e6, (2,))]
    rng = np.random.default_rng(5)
    assert {selector.select(elites, metrics, rng).program_id for _ in range(20)} <= {"a", "b", "c"}


def test_frequencies_match_the_analytic_odds(case, metrics: MetricsSpec, ladder) -> None:
    selector, odds = case
    elites = ladder(metrics, 5)
    expected = odds(elites, metrics)
    assert expected.sum() == pytest.approx(1.0)
    rng = np.random.default_rng(2024)
    draws = 10_000
    counts = Counter(selector.select(elites, metrics, rng).program_id for _ in range(draws))
    observed = np.array([counts[e.program_id] / draws for e in elites])
    # 4 binomial standard deviations at worst (p = 0.5): 0.02
    assert observed == pytest.approx(expected, abs=0.02)
    # better elites are never less likely (the ladder runs worst to best)
    assert np.all(np.diff(expected) >= -1e-12)
