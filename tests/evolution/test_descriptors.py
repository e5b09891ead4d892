"""Descriptor binning and unit transform, code features, and the behaviour space."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from gigaevo.evolution import BehaviourSpace, Descriptor, code_length, n_lines, n_statements


def test_linear_bins_cover_the_declared_range_with_clipping() -> None:
    d = Descriptor("x", low=0.0, high=10.0, bins=5)
    assert d.bin(0.0) == 0
    assert d.bin(1.99) == 0
    assert d.bin(2.01) == 1
    assert d.bin(9.99) == 4
    assert d.bin(10.0) == 4  # the upper bound belongs to the last bin
    assert d.bin(-5.0) == 0
    assert d.bin(1e9) == 4


def test_unit_is_bounded_and_monotone() -> None:
    d = Descriptor("x", low=-1.0, high=3.0, bins=4)
    values = [-10.0, -1.0, 0.0, 1.0, 2.5, 3.0, 100.0]
    units = [d.unit(v) for v in values]
    assert units == sorted(units)
    assert units[0] == 0.0 and units[1] == 0.0
    assert units[2] == pytest.approx(0.25)
    assert units[-2] == 1.0 and units[-1] == 1.0


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_values_go_to_bin_zero(value: float) -> None:
    d = Descriptor("x", low=0.0, high=1.0, bins=3)
    assert d.bin(value) == 0
    assert d.unit(value) == 0.0


def test_log_scale_bins_are_equal_in_log_space() -> None:
    d = Descriptor("x", low=1.0, high=1000.0, bins=3, scale="log")
    assert d.bin(1.0) == 0
    assert d.bin(5.0) == 0
    assert d.bin(20.0) == 1
    assert d.bin(500.0) == 2
    assert d.bin(1000.0) == 2
    assert d.bin(0.5) == 0
    assert d.bin(0.0) == 0  # log undefined: clipped low
    assert d.bin(-3.0) == 0
    assert d.unit(math.sqrt(1000.0)) == pytest.approx(0.5)


def test_single_bin_descriptor_always_gives_zero() -> None:
    d = Descriptor("x", low=0.0, high=1.0, bins=1)
    assert {d.bin(v) for v in (-1.0, 0.0, 0.5, 1.0, 2.0)} == {0}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"low": 1.0, "high": 1.0, "bins": 2}, "low < high"),
        ({"low": 2.0, "high": 1.0, "bins": 2}, "low < high"),
        ({"low": 0.0, "high": math.inf, "bins": 2}, "low < high"),
        ({"low": 0.0, "high": 1.0, "bins": 0}, "bins"),
        ({"low": 0.0, "high": 1.0, "bins": 2, "scale": "log"}, "log"),
        ({"low": 0.0, "high": 1.0, "bins": 2, "scale": "sqrt"}, "scale"),
        ({"low": 0.0, "high": 1.0, "bins": 2, "source": "oracle"}, "source"),
        ({"low": 0.0, "high": 1.0, "bins": 2, "source": "feature"}, "unknown feature"),
    ],
)
def test_invalid_descriptors_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Descriptor("x", **kwargs)


def test_code_features() -> None:
    code = "def f(x):\n\n    if x:\n        return 1\n    return 2\n   \n"
    assert code_length(code) == len(code)
    assert n_lines(code) == 4
    # def, if, return, return
    assert n_statements(code) == 4
    assert n_statements("x = 1; y = 2") == 2
    assert n_statements("") == 0


@pytest.mark.parametrize("code", ["def f(:\n  pass", "x = (", "a\x00b"])
def test_n_statements_is_zero_for_code_that_does_not_parse(code: str) -> None:
    assert n_statements(code) == 0


def test_space_cell_and_coordinates(space: BehaviourSpace) -> None:
    code = "\n".join(f"x{i} = {i}" for i in range(10))  # 10 lines: log10 = 1 of 2
    assert space.shape == (4, 3)
    assert space.n_cells == 12
    assert space.cell(code, {"x": 0.6}) == (2, 1)
    coords = space.coordinates(code, {"x": 0.6})
    assert coords == pytest.approx((0.6, 0.5))


def test_missing_or_non_finite_metric_gives_bin_zero(space: BehaviourSpace) -> None:
    code = "a = 1"
    assert space.cell(code, {}) == (0, 0)
    assert space.cell(code, {"x": math.nan}) == (0, 0)
    assert space.coordinates(code, {"other": 0.9}) == (0.0, 0.0)


def test_space_contains_checks_rank_and_range(space: BehaviourSpace) -> None:
    assert space.contains((3, 2))
    assert not space.contains((4, 0))
    assert not space.contains((0, -1))
    assert not space.contains((0,))


def test_from_dicts_round_trips_and_accepts_omegaconf_lists(space: BehaviourSpace) -> None:
    rebuilt = BehaviourSpace.from_dicts(space.to_dicts())
    assert rebuilt.descriptors == space.descriptors
    cfg = OmegaConf.create(
        [{"name": "code_length", "source": "feature", "low": 10, "high": 1000, "bins": 4}]
    )
    built = BehaviourSpace.from_dicts(cfg)
    assert built.shape == (4,)
    assert built.cell("x" * 1000, {}) == (3,)


def test_from_dicts_names_bad_keys() -> None:
    with pytest.raises(ValueError, match="colour"):
        BehaviourSpace.from_dicts([{"name": "x", "low": 0, "high": 1, "bins": 2, "colour": 1}])
    with pytest.raises(ValueError, match="need low and high"):
        BehaviourSpace.from_dicts([{"name": "x", "low": 0, "bins": 2}])


def test_descriptor_names_must_be_unique() -> None:
    d = Descriptor("x", low=0.0, high=1.0, bins=2)
    with pytest.raises(ValueError, match="unique"):
        BehaviourSpace([d, d])


def test_empty_space_has_one_cell() -> None:
    space = BehaviourSpace([])
    assert space.shape == ()
    assert space.n_cells == 1
    assert space.cell("x = 1", {}) == ()
    assert space.contains(())
