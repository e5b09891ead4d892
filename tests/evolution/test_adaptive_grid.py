"""Adaptive descriptor ranges: growth by doubling, exact re-binning, no elite lost, resume."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gigaevo.evolution import BehaviourSpace, Descriptor, IslandModel
from gigaevo.problems.spec import MetricsSpec

HIGHER = MetricsSpec("score", higher_is_better=True, lower_bound=0.0, upper_bound=1.0, sentinel=0)


def _space() -> BehaviourSpace:
    return BehaviourSpace(
        [
            Descriptor("x", bins=4, adaptive=True),
            Descriptor("y", bins=6, scale="log", adaptive=True),
        ]
    )


def test_first_value_sits_mid_range_and_the_range_doubles_towards_new_values() -> None:
    space = BehaviourSpace([Descriptor("x", bins=4, adaptive=True)])
    assert space.cell_of((5.0,)) == (0,)  # nothing seen yet: bin 0, no range
    assert space.ranges()[0]["low"] is None
    assert space.observe((10.0,))
    assert space.cell_of((10.0,)) == (2,)
    low, high = space.ranges()[0]["low"], space.ranges()[0]["high"]
    assert low == pytest.approx(9.6) and high == pytest.approx(10.4)  # 2 % bins around 10
    assert not space.observe((10.3,))  # inside: no change
    assert space.observe((11.0,))  # outside to the right: doubles (maybe twice)
    r = space.ranges()[0]
    assert r["low"] == pytest.approx(low) and r["high"] >= 11.0
    assert (r["high"] - r["low"]) / (high - low) == pytest.approx(2.0)
    assert space.observe((1.0,))  # far to the left: doubles until it fits
    r = space.ranges()[0]
    assert r["low"] <= 1.0 < r["high"]
    width = (r["high"] - r["low"]) / (high - low)
    assert width == pytest.approx(2 ** round(math.log2(width)))  # a power-of-two multiple


@pytest.mark.parametrize("side", [1.0, -1.0])
def test_growth_merges_bins_in_pairs(side: float) -> None:
    space = BehaviourSpace([Descriptor("x", low=0.0, high=8.0, bins=8, adaptive=True)])
    points = [0.5 + i for i in range(8)]
    before = [space.cell_of((p,))[0] for p in points]
    assert before == list(range(8))
    assert space.observe((4.0 + side * 6.0,))  # just outside one side: one doubling
    after = [space.cell_of((p,))[0] for p in points]
    expected = [b // 2 for b in before] if side > 0 else [(b + 8) // 2 for b in before]
    assert after == expected


def test_non_finite_or_non_positive_log_values_go_to_bin_zero_without_growth() -> None:
    space = _space()
    space.observe((1.0, 1.0))
    version = space.version
    for values in [(math.nan, 1.0), (math.inf, 1.0), (1.0, 0.0), (1.0, -3.0)]:
        assert not space.observe(values)
        assert 0 in space.cell_of(values)
    assert space.version == version


def test_a_huge_value_grows_the_range_in_bounded_steps() -> None:
    space = BehaviourSpace([Descriptor("x", bins=2, adaptive=True)])
    space.observe((1.0,))
    assert space.observe((1e300,))
    assert space.cell_of((1e300,)) == (1,)
    assert space.cell_of((1.0,)) == (0,)


def test_a_log_axis_stretched_by_tiny_values_reports_finite_ranges() -> None:
    """A value near 0 stretches a log axis down by hundreds of e-folds; growing back up
    then doubles past exp's range. The reported range saturates instead of overflowing."""
    space = BehaviourSpace([Descriptor("r", bins=10, scale="log", adaptive=True)])
    space.observe((0.1,))
    assert space.observe((5e-324,))  # the smallest subnormal: log = -744
    assert space.observe((0.2,))  # just above: one doubling up by the whole width
    low, high = space.ranges()[0]["low"], space.ranges()[0]["high"]
    assert low == 0.0 and math.isfinite(high) and high > 0.2
    json.dumps(space.ranges(), allow_nan=False)
    assert space.cell_of((5e-324,))[0] < space.cell_of((0.2,))[0]


def _offers(n: int, seed: int) -> list[tuple[str, float, tuple[float, float]]]:
    rng = np.random.default_rng(seed)
    fitness = rng.permutation(n) / n  # distinct: no ties to break
    out = []
    for i in range(n):
        spread = 1.0 + i / 100  # the values spread as the run goes on
        x = float(rng.normal(3.0, spread))
        y = float(np.exp(rng.normal(0.0, 0.2 * spread)))
        out.append((f"p{i:03d}", float(fitness[i]), (x, y)))
    return out


def test_rebinning_keeps_the_elites_the_final_grid_would_have_kept() -> None:
    """No better elite is lost: growing as we go equals using the final grid from the start."""
    offers = _offers(300, seed=1)
    grown = IslandModel(2, _space(), HIGHER)
    for i, (pid, fitness, values) in enumerate(offers):
        grown.add(i % 2, pid, fitness, values=values)
    assert grown.space.version > 3  # the grid was re-drawn several times
    final = IslandModel(2, _space(), HIGHER)
    final.space.load_state(grown.space.state_dict())
    for i, (pid, fitness, values) in enumerate(offers):
        final.add(i % 2, pid, fitness, values=values)
    assert final.space.state_dict() == grown.space.state_dict()  # nothing grew any more
    for island in range(2):
        assert grown.elites(island) == final.elites(island)
        assert len(grown.elites(island)) >= 5


def test_rebins_are_reported_with_the_elites_that_merged_away() -> None:
    model = IslandModel(1, BehaviourSpace([Descriptor("x", bins=2, adaptive=True)]), HIGHER)
    model.add(0, "a", 0.5, values=(10.0,))
    model.add(0, "b", 0.9, values=(10.1,))  # the upper bin of the first range
    assert {e.program_id for e in model.elites(0)} == {"a", "b"}
    model.take_rebins()
    result = model.add(0, "c", 0.1, values=(30.0,))  # far right: a and b merge
    assert result.status == "new_cell"
    rebins = model.take_rebins()
    assert len(rebins) == 1 and [(i, e.program_id) for i, e in rebins[0].dropped] == [(0, "a")]
    assert {e.program_id for e in model.elites(0)} == {"b", "c"}
    assert model.take_rebins() == []


def test_an_adaptive_space_needs_values() -> None:
    model = IslandModel(1, _space(), HIGHER)
    with pytest.raises(ValueError, match="descriptor values"):
        model.add(0, "a", 0.5, (0, 0))
    with pytest.raises(ValueError, match="2 descriptors"):
        model.add(0, "a", 0.5, values=(1.0,))


def test_resume_restores_the_same_archive_and_continues_identically() -> None:
    offers = _offers(200, seed=2)
    whole = IslandModel(2, _space(), HIGHER, capacity_per_island=16)
    for i, (pid, fitness, values) in enumerate(offers):
        whole.add(i % 2, pid, fitness, values=values)
    first = IslandModel(2, _space(), HIGHER, capacity_per_island=16)
    for i, (pid, fitness, values) in enumerate(offers[:90]):
        first.add(i % 2, pid, fitness, values=values)
    saved = json.loads(json.dumps(first.to_dict()))
    resumed = IslandModel(2, _space(), HIGHER, capacity_per_island=16)
    resumed.load_dict(saved)
    assert resumed.to_dict() == saved
    for i, (pid, fitness, values) in enumerate(offers[90:], start=90):
        resumed.add(i % 2, pid, fitness, values=values)
    assert resumed.to_dict() == whole.to_dict()


def test_a_state_without_ranges_is_placed_on_a_fresh_grid_from_the_values() -> None:
    model = IslandModel(1, _space(), HIGHER)
    for pid, fitness, values in _offers(40, seed=3):
        model.add(0, pid, fitness, values=values)
    state = model.to_dict()
    del state["space"]
    for item in state["islands"][0]["elites"]:
        del item["values"]
    values = {pid: v for pid, _, v in _offers(40, seed=3)}
    again = IslandModel(1, _space(), HIGHER)
    again.load_dict(state, values_of=values.__getitem__)
    best, before = again.island_best(0), model.island_best(0)
    assert best is not None and before is not None
    assert (best.program_id, best.values) == (before.program_id, before.values)
    assert all(again.space.contains(e.cell) for e in again.elites(0))


def test_saved_ranges_for_an_unknown_axis_are_refused() -> None:
    space = _space()
    with pytest.raises(ValueError, match="not adaptive axes"):
        space.load_state({"axes": {"z": {"origin": 0.0, "step": 1.0, "offset": 0, "level": 0}}})
    with pytest.raises(ValueError, match="bad adaptive axis state"):
        space.load_state({"axes": {"x": {"origin": 0.0, "step": -1.0, "offset": 0, "level": 0}}})


def test_a_floor_anchors_the_range_and_stops_its_growth() -> None:
    space = BehaviourSpace([Descriptor("x", bins=4, adaptive=True, floor=0.0)])
    space.observe((5.0,))
    assert space.ranges()[0]["low"] == 0.0 and space.ranges()[0]["high"] == pytest.approx(10.0)
    assert space.cell_of((5.0,)) == (2,)
    assert not space.observe((-3.0,))  # below the floor: the edge bin, no growth
    assert space.cell_of((-3.0,)) == (0,)
    assert space.observe((25.0,))
    assert space.ranges()[0]["low"] == 0.0 and space.ranges()[0]["high"] == pytest.approx(40.0)


def test_a_ceiling_anchors_the_range_from_above() -> None:
    space = BehaviourSpace([Descriptor("x", bins=4, adaptive=True, ceiling=1.0)])
    space.observe((1.0,))  # at the ceiling: a narrow range below it
    r = space.ranges()[0]
    assert r["high"] == pytest.approx(1.0) and r["low"] == pytest.approx(0.92)
    assert space.cell_of((1.0,)) == (3,)
    assert not space.observe((1.5,))
    assert space.observe((0.5,))
    assert space.ranges()[0]["high"] == pytest.approx(1.0)
    assert space.ranges()[0]["low"] < 0.5


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bins": 4, "floor": 0.0}, "adaptive axes only"),
        ({"bins": 4, "adaptive": True, "floor": 1.0, "ceiling": 1.0}, "floor < ceiling"),
        ({"bins": 4, "adaptive": True, "floor": 0.0, "scale": "log"}, "> 0 on a log"),
        ({"bins": 3, "adaptive": True}, "even"),
        ({"low": 1.0, "bins": 4, "adaptive": True}, "both low and high or neither"),
        ({"bins": 4}, "need low and high"),
    ],
)
def test_bad_adaptive_declarations_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Descriptor("x", **kwargs)


def test_a_restored_space_numbers_its_re_drawings_as_the_uninterrupted_one() -> None:
    """The grid's version (what each ``rebin`` event carries) survives a save and load, so a
    run resumed from a checkpoint reports the re-drawings the uninterrupted run reports."""
    rng = np.random.default_rng(4)
    values = [(float(a), float(b)) for a, b in rng.lognormal(0.0, 2.0, size=(60, 2))]
    whole = _space()
    versions = [whole.version for v in values if whole.observe(v) or True]
    for cut in (0, 7, 30):
        saved = _space()
        for v in values[:cut]:
            saved.observe(v)
        state = json.loads(json.dumps(saved.state_dict()))
        resumed = _space()
        resumed.load_state(state)
        assert resumed.version == saved.version
        after = [resumed.version for v in values[cut:] if resumed.observe(v) or True]
        assert after == versions[cut:]
    legacy = _space()  # a state saved before it kept its version: the load counts as one
    legacy.load_state({"axes": whole.state_dict()["axes"]})
    assert legacy.version == 1
