"""The island model: per-island archives, global best, cell validation, checkpoints."""

from __future__ import annotations

import json

import pytest

from gigaevo.evolution import BehaviourSpace, Elite, IslandModel
from gigaevo.problems.spec import MetricsSpec


def test_islands_are_independent(
    space: BehaviourSpace, metrics: MetricsSpec, good_bad: tuple[float, float]
) -> None:
    good, bad = good_bad
    model = IslandModel(3, space, metrics, capacity_per_island=None)
    assert model.add(0, "a", bad, (1, 1)).status == "new_cell"
    assert model.add(1, "b", good, (1, 1)).status == "new_cell"
    assert model.elites(0) == [Elite("a", bad, (1, 1))]
    assert model.elites(1) == [Elite("b", good, (1, 1))]
    assert model.elites(2) == []
    assert model.island_best(2) is None
    assert model.best() == Elite("b", good, (1, 1))
    assert model.populated() == [0, 1]
    assert len(model) == 2
    assert "a" in model and "z" not in model


def test_same_program_on_several_islands(space: BehaviourSpace, metrics: MetricsSpec) -> None:
    model = IslandModel(3, space, metrics)
    model.add(0, "a", 5.0, (0, 0))
    model.add(2, "a", 5.0, (0, 0))
    assert model.islands_of("a") == (0, 2)
    assert model.remove(2, "a") == Elite("a", 5.0, (0, 0))
    assert model.islands_of("a") == (0,)


def test_capacity_applies_per_island(space: BehaviourSpace, metrics: MetricsSpec) -> None:
    model = IslandModel(2, space, metrics, capacity_per_island=1)
    model.add(0, "a", 5.0, (0, 0))
    model.add(1, "b", 5.0, (0, 0))
    assert len(model.archive(0)) == 1 and len(model.archive(1)) == 1


def test_bad_island_or_cell_is_refused(space: BehaviourSpace, metrics: MetricsSpec) -> None:
    model = IslandModel(2, space, metrics)
    with pytest.raises(IndexError):
        model.add(2, "a", 1.0, (0, 0))
    with pytest.raises(IndexError):
        model.elites(-1)
    with pytest.raises(ValueError, match="shape"):
        model.add(0, "a", 1.0, (4, 0))
    with pytest.raises(ValueError, match="shape"):
        model.add(0, "a", 1.0, (0,))
    with pytest.raises(ValueError, match="n_islands"):
        IslandModel(0, space, metrics)


def _filled(space: BehaviourSpace, metrics: MetricsSpec, capacity: int | None) -> IslandModel:
    model = IslandModel(2, space, metrics, capacity_per_island=capacity)
    for i in range(6):
        model.add(i % 2, f"p{i}", float(i), (i % 4, i % 3))
    return model


def test_round_trip_through_json(space: BehaviourSpace, metrics: MetricsSpec) -> None:
    model = _filled(space, metrics, capacity=None)
    state = json.loads(json.dumps(model.to_dict()))
    restored = IslandModel.from_dict(state, space, metrics)
    assert restored.to_dict() == model.to_dict()
    assert restored.best() == model.best()


def test_load_dict_replaces_the_state_of_a_built_model(
    space: BehaviourSpace, metrics: MetricsSpec
) -> None:
    model = _filled(space, metrics, capacity=None)
    fresh = IslandModel(2, space, metrics)
    fresh.add(0, "stale", 1.0, (3, 2))
    fresh.load_dict(model.to_dict())
    assert fresh.to_dict() == model.to_dict()
    assert "stale" not in fresh


def test_load_dict_with_smaller_capacity_keeps_the_best(
    space: BehaviourSpace, metrics: MetricsSpec
) -> None:
    model = _filled(space, metrics, capacity=None)
    small = IslandModel(2, space, metrics, capacity_per_island=1)
    small.load_dict(model.to_dict())
    for i in range(2):
        assert small.elites(i) == [model.island_best(i)]


def test_load_dict_refuses_mismatched_state(space: BehaviourSpace, metrics: MetricsSpec) -> None:
    state = _filled(space, metrics, capacity=None).to_dict()
    with pytest.raises(ValueError, match="islands"):
        IslandModel(3, space, metrics).load_dict(state)
    narrow = BehaviourSpace.from_dicts([{"name": "x", "low": 0, "high": 1, "bins": 2}])
    with pytest.raises(ValueError, match="outside"):
        IslandModel(2, narrow, metrics).load_dict(state)
