"""Selection specifics: relative quality, pressure, inspirations, island scheduling."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from gigaevo.evolution import (
    BestOrTournament,
    Elite,
    FitnessProportional,
    FitnessProportionalTournament,
    InspirationSampler,
    RoundRobinIslands,
    TournamentSelection,
    relative_quality,
)
from gigaevo.problems.spec import MetricsSpec


def test_relative_quality_is_direction_aware(higher: MetricsSpec, lower: MetricsSpec) -> None:
    elites = [Elite("a", 2.0, (0,)), Elite("b", 6.0, (1,)), Elite("c", 4.0, (2,))]
    assert relative_quality(elites, higher) == pytest.approx([0.0, 1.0, 0.5])
    assert relative_quality(elites, lower) == pytest.approx([1.0, 0.0, 0.5])


def test_relative_quality_of_equal_or_no_elites() -> None:
    metrics = MetricsSpec("r", True, lower_bound=-100.0, upper_bound=0.0, sentinel=-100.0)
    same = [Elite("a", -3.0, (0,)), Elite("b", -3.0, (1,))]
    assert relative_quality(same, metrics).tolist() == [0.0, 0.0]
    assert relative_quality([], metrics).shape == (0,)


def test_relative_quality_handles_negative_bounds_and_non_finite() -> None:
    metrics = MetricsSpec("r", True, lower_bound=-100.0, upper_bound=0.0, sentinel=-100.0)
    elites = [Elite("a", -75.0, (0,)), Elite("b", -25.0, (1,)), Elite("c", float("nan"), (2,))]
    assert relative_quality(elites, metrics) == pytest.approx([0.25 / 0.75, 1.0, 0.0])


def test_soft_tournament_prefers_better_elites(metrics: MetricsSpec, ladder) -> None:
    elites = ladder(metrics, 10)
    rng = np.random.default_rng(7)
    counts = Counter(
        FitnessProportionalTournament().select(elites, metrics, rng).program_id for _ in range(5000)
    )
    assert counts["e9"] > counts["e5"] > counts["e0"] > 0
    assert set(counts) == {e.program_id for e in elites}


def test_colder_soft_tournament_is_greedier(metrics: MetricsSpec, ladder) -> None:
    elites = ladder(metrics, 6)

    def share_of_best(temperature: float) -> float:
        rng = np.random.default_rng(11)
        sel = FitnessProportionalTournament(k=6, temperature=temperature)
        return sum(sel.select(elites, metrics, rng).program_id == "e5" for _ in range(2000)) / 2000

    assert share_of_best(0.01) == 1.0
    assert share_of_best(0.2) > share_of_best(1.0) > share_of_best(100.0) > 1 / 6 - 0.05


def test_tournament_with_k_at_least_n_returns_the_best(metrics: MetricsSpec, ladder) -> None:
    elites = ladder(metrics, 4)
    rng = np.random.default_rng(0)
    assert {
        TournamentSelection(k=4).select(elites, metrics, rng).program_id for _ in range(20)
    } == {"e3"}


def test_tournament_ties_go_to_the_smaller_id(metrics: MetricsSpec) -> None:
    elites = [Elite("b", 5.0, (0,)), Elite("a", 5.0, (1,))]
    chosen = TournamentSelection(k=2).select(elites, metrics, np.random.default_rng(0))
    assert chosen.program_id == "a"


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: FitnessProportionalTournament(k=0), "k"),
        (lambda: FitnessProportionalTournament(temperature=0.0), "temperature"),
        (lambda: FitnessProportionalTournament(temperature=float("inf")), "temperature"),
        (lambda: TournamentSelection(k=0), "k"),
        (lambda: FitnessProportional(epsilon=0.0), "epsilon"),
        (lambda: InspirationSampler(n=-1), "n"),
        (lambda: InspirationSampler(pool="nearby"), "pool"),
        (lambda: InspirationSampler(top=0), "top"),
        (lambda: BestOrTournament(p_best=1.5), "p_best"),
        (lambda: BestOrTournament(pending_decay=-0.1), "pending_decay"),
    ],
)
def test_invalid_parameters_are_named(build, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build()


def test_inspirations_exclude_the_parent_and_lead_with_the_best(
    metrics: MetricsSpec, ladder
) -> None:
    elites = ladder(metrics, 6)
    parent = elites[2]
    rng = np.random.default_rng(3)
    for _ in range(30):
        chosen = InspirationSampler(n=3).sample(elites, parent, metrics, rng)
        ids = [e.program_id for e in chosen]
        assert len(ids) == 3 == len(set(ids))
        assert parent.program_id not in ids
        assert ids[0] == "e5"


def test_inspirations_skip_the_best_when_it_is_the_parent(metrics: MetricsSpec, ladder) -> None:
    elites = ladder(metrics, 4)
    chosen = InspirationSampler(n=1).sample(elites, elites[3], metrics, np.random.default_rng(0))
    assert [e.program_id for e in chosen] == ["e2"]


def test_inspirations_without_best_are_uniform(metrics: MetricsSpec, ladder) -> None:
    elites = ladder(metrics, 5)
    sampler = InspirationSampler(n=1, include_best=False)
    rng = np.random.default_rng(9)
    counts = Counter(
        sampler.sample(elites, elites[0], metrics, rng)[0].program_id for _ in range(4000)
    )
    assert set(counts) == {"e1", "e2", "e3", "e4"}
    assert all(abs(c / 4000 - 0.25) < 0.04 for c in counts.values())


def test_inspirations_are_capped_by_what_is_available(metrics: MetricsSpec, ladder) -> None:
    elites = ladder(metrics, 3)
    rng = np.random.default_rng(0)
    dupes = [*elites, elites[1]]
    chosen = InspirationSampler(n=10).sample(dupes, elites[0], metrics, rng)
    assert sorted(e.program_id for e in chosen) == ["e1", "e2"]
    assert InspirationSampler(n=2).sample(elites[:1], elites[0], metrics, rng) == []
    assert InspirationSampler(n=0).sample(elites, elites[0], metrics, rng) == []


def test_inspirations_are_deterministic_given_the_rng(metrics: MetricsSpec, ladder) -> None:
    elites = ladder(metrics, 8)
    sampler = InspirationSampler(n=3, include_best=False)

    def run() -> list[list[str]]:
        rng = np.random.default_rng(123)
        return [
            [e.program_id for e in sampler.sample(elites, elites[0], metrics, rng)]
            for _ in range(20)
        ]

    assert run() == run()


def test_round_robin_islands() -> None:
    scheduler = RoundRobinIslands()
    assert [scheduler.island_for(step, 3) for step in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert scheduler.island_for(5, 1) == 0
    with pytest.raises(ValueError, match="n_islands"):
        scheduler.island_for(0, 0)


def test_inspirations_from_better_elites_only(metrics: MetricsSpec, ladder) -> None:
    elites = ladder(metrics, 6)
    sampler = InspirationSampler(n=2, pool="better")
    rng = np.random.default_rng(4)
    for _ in range(20):
        ids = [e.program_id for e in sampler.sample(elites, elites[3], metrics, rng)]
        assert ids[0] == "e5" and set(ids) <= {"e4", "e5"} and len(ids) == 2
    assert sampler.sample(elites, elites[5], metrics, rng) == []  # nothing beats the best


def test_inspirations_from_the_top_or_the_nearest_cells(metrics: MetricsSpec, ladder) -> None:
    elites = ladder(metrics, 8)  # cells (0,) .. (7,), e7 the best
    rng = np.random.default_rng(5)
    top = InspirationSampler(n=2, pool="top", top=3)
    near = InspirationSampler(n=2, include_best=False, pool="near", top=2)
    for _ in range(20):
        assert {e.program_id for e in top.sample(elites, elites[0], metrics, rng)} <= {
            "e5",
            "e6",
            "e7",
        }
        assert {e.program_id for e in near.sample(elites, elites[4], metrics, rng)} == {
            "e3",
            "e5",
        }


def test_best_or_tournament_spreads_over_parents_when_the_best_has_children_in_flight(
    metrics: MetricsSpec, ladder
) -> None:
    elites = ladder(metrics, 6)  # e5 is the best

    def share_of_best(pending: dict[str, int] | None, decay: float, p_best: float = 0.9) -> float:
        rng = np.random.default_rng(5)
        sel = BestOrTournament(p_best=p_best, pending_decay=decay)
        picks = [sel.select(elites, metrics, rng, pending=pending) for _ in range(4000)]
        return sum(e.program_id == "e5" for e in picks) / len(picks)

    alone = share_of_best(None, 0.5)
    assert alone == share_of_best({"e5": 3}, 1.0)  # decay 1 (the default): pending ignored
    assert alone == share_of_best({"e2": 4}, 0.5)  # others' children in flight: no change
    tour = share_of_best(None, 1.0, p_best=0.0)  # what the tournament alone gives e5
    for n in (0, 1, 2):  # p_best * decay ** n directly, plus the tournament's share of the rest
        direct = 0.9 * 0.5**n
        expected = direct + (1 - direct) * tour
        assert share_of_best({"e5": n}, 0.5) == pytest.approx(expected, abs=0.03)
    assert share_of_best({"e5": 2}, 0.5) < alone - 0.3
