"""Ring migration: when it is due, which elites go where, and no duplicates."""

from __future__ import annotations

import pytest

from gigaevo.evolution import BehaviourSpace, IslandModel, Migrant, RingMigration
from gigaevo.problems.spec import MetricsSpec


def test_due_every_interval_and_never_when_disabled() -> None:
    migration = RingMigration(interval=5, count=1)
    assert [n for n in range(16) if migration.due(n)] == [5, 10, 15]
    assert not any(RingMigration(interval=0, count=3).due(n) for n in range(50))


@pytest.mark.parametrize(("interval", "count", "name"), [(-1, 1, "interval"), (1, -1, "count")])
def test_negative_parameters_are_named(interval: int, count: int, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        RingMigration(interval=interval, count=count)


def _quality(metrics: MetricsSpec, q: float) -> float:
    return 10.0 * q if metrics.higher_is_better else 10.0 * (1.0 - q)


def _three_islands(space: BehaviourSpace, metrics: MetricsSpec) -> IslandModel:
    model = IslandModel(3, space, metrics)
    for island in range(3):
        for j, q in enumerate([0.2, 0.9, 0.5]):
            model.add(island, f"i{island}_{j}", _quality(metrics, q), (j, island))
    return model


def test_top_elites_go_to_the_next_island_in_the_ring(
    space: BehaviourSpace, metrics: MetricsSpec
) -> None:
    model = _three_islands(space, metrics)
    plan = RingMigration(interval=1, count=2).plan(model)
    assert [(m.program_id, m.from_island, m.to_island) for m in plan] == [
        ("i0_1", 0, 1),
        ("i0_2", 0, 1),
        ("i1_1", 1, 2),
        ("i1_2", 1, 2),
        ("i2_1", 2, 0),
        ("i2_2", 2, 0),
    ]
    assert plan[0] == Migrant("i0_1", _quality(metrics, 0.9), 0, 1, (1, 0))


def test_migrants_keep_their_cell_and_are_accepted_into_empty_cells(
    space: BehaviourSpace, metrics: MetricsSpec
) -> None:
    model = _three_islands(space, metrics)
    for m in RingMigration(interval=1, count=1).plan(model):
        assert model.add(m.to_island, m.program_id, m.fitness, m.cell).status == "new_cell"
        assert model.archive(m.to_island).get(m.program_id) == model.archive(m.from_island).get(
            m.program_id
        )


def test_no_migrant_to_an_island_that_already_holds_it(
    space: BehaviourSpace, metrics: MetricsSpec
) -> None:
    model = _three_islands(space, metrics)
    migration = RingMigration(interval=1, count=1)
    first = migration.plan(model)
    for m in first:
        model.add(m.to_island, m.program_id, m.fitness, m.cell)
    second = migration.plan(model)
    # island 0's best (tied with the migrant it received, smaller id) is
    # already on island 1, so it is skipped rather than replaced by the next
    assert [(m.program_id, m.to_island) for m in second] == [("i0_1", 2), ("i1_1", 0)]
    for m in second:
        assert m.program_id not in model.archive(m.to_island)
    keys = [(m.program_id, m.to_island) for m in second]
    assert len(keys) == len(set(keys))


def test_a_program_on_every_island_never_migrates(
    space: BehaviourSpace, metrics: MetricsSpec
) -> None:
    model = IslandModel(3, space, metrics)
    for island in range(3):
        model.add(island, "seed", 5.0, (0, 0))
    assert RingMigration(interval=1, count=5).plan(model) == []


def test_degenerate_plans_are_empty(space: BehaviourSpace, metrics: MetricsSpec) -> None:
    single = IslandModel(1, space, metrics)
    single.add(0, "a", 1.0, (0, 0))
    assert RingMigration(interval=1, count=3).plan(single) == []
    assert RingMigration(interval=1, count=0).plan(_three_islands(space, metrics)) == []
    assert RingMigration(interval=1, count=2).plan(IslandModel(2, space, metrics)) == []


def test_count_beyond_the_island_size_sends_everything(
    space: BehaviourSpace, metrics: MetricsSpec
) -> None:
    model = IslandModel(2, space, metrics)
    model.add(0, "a", 1.0, (0, 0))
    model.add(0, "b", 2.0, (1, 0))
    plan = RingMigration(interval=1, count=10).plan(model)
    assert sorted(m.program_id for m in plan) == ["a", "b"]
    assert {(m.from_island, m.to_island) for m in plan} == {(0, 1)}
