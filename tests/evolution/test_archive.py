"""MAP-Elites archive semantics in both metric directions: cells, ties, capacity, checkpoints."""

from __future__ import annotations

import json
import math

import pytest

from gigaevo.evolution import AddResult, Elite, MapElitesArchive
from gigaevo.problems.spec import MetricsSpec


def test_first_program_takes_an_empty_cell(metrics: MetricsSpec) -> None:
    archive = MapElitesArchive(metrics)
    result = archive.try_add("a", 5.0, (0, 1))
    assert result == AddResult("new_cell")
    assert result.accepted
    assert "a" in archive and len(archive) == 1
    assert archive.at((0, 1)) == Elite("a", 5.0, (0, 1))


def test_better_fitness_replaces_the_incumbent(
    metrics: MetricsSpec, good_bad: tuple[float, float]
) -> None:
    good, bad = good_bad
    archive = MapElitesArchive(metrics)
    archive.try_add("old", bad, (0,))
    result = archive.try_add("new", good, (0,))
    assert result == AddResult("improved", replaced="old")
    assert "old" not in archive
    assert archive.elites() == [Elite("new", good, (0,))]


def test_worse_fitness_is_rejected(metrics: MetricsSpec, good_bad: tuple[float, float]) -> None:
    good, bad = good_bad
    archive = MapElitesArchive(metrics)
    archive.try_add("old", good, (0,))
    result = archive.try_add("new", bad, (0,))
    assert result == AddResult("rejected")
    assert not result.accepted
    assert archive.elites() == [Elite("old", good, (0,))]


def test_equal_fitness_keeps_the_incumbent(metrics: MetricsSpec) -> None:
    archive = MapElitesArchive(metrics)
    archive.try_add("old", 5.0, (0,))
    assert archive.try_add("new", 5.0, (0,)).status == "rejected"
    assert "old" in archive and "new" not in archive


def test_known_id_and_nan_fitness_are_rejected(metrics: MetricsSpec) -> None:
    archive = MapElitesArchive(metrics)
    archive.try_add("a", 5.0, (0,))
    assert archive.try_add("a", 9.0 if metrics.higher_is_better else 1.0, (1,)).status == "rejected"
    assert archive.try_add("b", math.nan, (2,)).status == "rejected"
    assert len(archive) == 1


def test_infinite_fitness_is_ordered(metrics: MetricsSpec) -> None:
    archive = MapElitesArchive(metrics)
    archive.try_add("a", 5.0, (0,))
    worst = -math.inf if metrics.higher_is_better else math.inf
    archive.try_add("b", worst, (1,))
    assert archive.worst() == Elite("b", worst, (1,))
    assert archive.best() == Elite("a", 5.0, (0,))


def test_elites_are_sorted_by_cell_and_best_is_direction_aware(metrics: MetricsSpec) -> None:
    archive = MapElitesArchive(metrics)
    for pid, fit, cell in [("c", 3.0, (2, 0)), ("a", 1.0, (0, 1)), ("b", 9.0, (0, 0))]:
        archive.try_add(pid, fit, cell)
    assert [e.cell for e in archive.elites()] == [(0, 0), (0, 1), (2, 0)]
    assert list(archive) == archive.elites()
    best = archive.best()
    assert best is not None
    assert best.program_id == ("b" if metrics.higher_is_better else "a")
    assert [e.program_id for e in archive.ranked()] == (
        ["b", "c", "a"] if metrics.higher_is_better else ["a", "c", "b"]
    )


def test_ties_in_ranking_break_by_id(metrics: MetricsSpec) -> None:
    archive = MapElitesArchive(metrics)
    for pid, cell in [("b", (0,)), ("a", (1,)), ("c", (2,))]:
        archive.try_add(pid, 4.0, cell)
    assert archive.best() == Elite("a", 4.0, (1,))
    assert archive.worst() == Elite("c", 4.0, (2,))


def test_empty_archive(metrics: MetricsSpec) -> None:
    archive = MapElitesArchive(metrics)
    assert archive.best() is None and archive.worst() is None
    assert archive.elites() == [] and len(archive) == 0
    assert archive.get("x") is None and archive.at((0,)) is None


def test_remove(metrics: MetricsSpec) -> None:
    archive = MapElitesArchive(metrics)
    archive.try_add("a", 5.0, (0,))
    assert archive.remove("a") == Elite("a", 5.0, (0,))
    assert len(archive) == 0 and archive.at((0,)) is None
    with pytest.raises(KeyError):
        archive.remove("a")
    assert archive.try_add("a", 5.0, (0,)).status == "new_cell"


def _fitness(metrics: MetricsSpec, quality: float) -> float:
    return 10.0 * quality if metrics.higher_is_better else 10.0 * (1.0 - quality)


def test_capacity_evicts_the_worst_other_elite(metrics: MetricsSpec) -> None:
    archive = MapElitesArchive(metrics, capacity=2)
    archive.try_add("mid", _fitness(metrics, 0.5), (0,))
    archive.try_add("low", _fitness(metrics, 0.2), (1,))
    result = archive.try_add("top", _fitness(metrics, 0.9), (2,))
    assert result == AddResult("new_cell", evicted=("low",))
    assert {e.program_id for e in archive.elites()} == {"mid", "top"}
    assert len(archive) == 2


def test_full_archive_rejects_a_candidate_no_better_than_its_worst(metrics: MetricsSpec) -> None:
    archive = MapElitesArchive(metrics, capacity=2)
    archive.try_add("mid", _fitness(metrics, 0.5), (0,))
    archive.try_add("low", _fitness(metrics, 0.2), (1,))
    assert archive.try_add("worse", _fitness(metrics, 0.1), (2,)).status == "rejected"
    assert archive.try_add("tie", _fitness(metrics, 0.2), (3,)).status == "rejected"
    assert {e.program_id for e in archive.elites()} == {"mid", "low"}


def test_capacity_eviction_among_equal_worst_takes_the_larger_id(metrics: MetricsSpec) -> None:
    archive = MapElitesArchive(metrics, capacity=3)
    archive.try_add("p", _fitness(metrics, 0.2), (0,))
    archive.try_add("q", _fitness(metrics, 0.2), (1,))
    archive.try_add("r", _fitness(metrics, 0.6), (2,))
    result = archive.try_add("s", _fitness(metrics, 0.4), (3,))
    assert result.evicted == ("q",)
    assert {e.program_id for e in archive.elites()} == {"p", "r", "s"}


def test_improving_a_cell_in_a_full_archive_evicts_nothing(metrics: MetricsSpec) -> None:
    archive = MapElitesArchive(metrics, capacity=1)
    archive.try_add("a", _fitness(metrics, 0.2), (0,))
    result = archive.try_add("b", _fitness(metrics, 0.3), (0,))
    assert result == AddResult("improved", replaced="a")


@pytest.mark.parametrize("capacity", [0, -1])
def test_capacity_must_be_positive(metrics: MetricsSpec, capacity: int) -> None:
    with pytest.raises(ValueError, match="capacity"):
        MapElitesArchive(metrics, capacity=capacity)


def test_round_trip_through_json(metrics: MetricsSpec) -> None:
    archive = MapElitesArchive(metrics, capacity=5)
    for i, fit in enumerate([3.0, 7.5, -1.25, 0.0]):
        archive.try_add(f"id{i}", fit, (i % 2, i))
    state = json.loads(json.dumps(archive.to_dict()))
    restored = MapElitesArchive.from_dict(state, metrics)
    assert restored.to_dict() == archive.to_dict()
    assert restored.elites() == archive.elites()
    assert restored.capacity == 5
    # the restored archive behaves like the original
    assert restored.try_add("x", 1.0, (0, 0)) == archive.try_add("x", 1.0, (0, 0))


def test_from_dict_refuses_inconsistent_state(metrics: MetricsSpec) -> None:
    same_cell = {"capacity": None, "elites": [
        {"program_id": "a", "fitness": 1.0, "cell": [0]},
        {"program_id": "b", "fitness": 2.0, "cell": [0]},
    ]}  # fmt: skip
    with pytest.raises(ValueError, match="duplicate"):
        MapElitesArchive.from_dict(same_cell, metrics)
    too_many = {"capacity": 1, "elites": [
        {"program_id": "a", "fitness": 1.0, "cell": [0]},
        {"program_id": "b", "fitness": 2.0, "cell": [1]},
    ]}  # fmt: skip
    with pytest.raises(ValueError, match="capacity"):
        MapElitesArchive.from_dict(too_many, metrics)
