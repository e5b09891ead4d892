"""Built-in validators: exact metric values, the 1e-12 boundary, and strict rejection."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from gigaevo.problems import builtin_root

Validate = Callable[[Any], dict[str, float]]

SIDE = 2.0 / 3.0**0.25
VERTICES = [(0.0, 0.0), (SIDE, 0.0), (SIDE / 2, SIDE * math.sqrt(3) / 2)]


@pytest.fixture
def packing(validator: Callable[[str], Validate]) -> Validate:
    return validator("circle_packing")


@pytest.fixture
def heilbronn(validator: Callable[[str], Validate]) -> Validate:
    return validator("heilbronn")


@pytest.fixture
def rastrigin(validator: Callable[[str], Validate]) -> Validate:
    return validator("rastrigin")


# ------------------------------------------------------------ circle packing


def _two_circles(r0: float = 0.2, r1: float = 0.2) -> tuple[list[list[float]], list[float]]:
    """Circles 0 and 1 touch at (0.5, 0.5); 24 radius-0 circles sit along the top edge."""
    centers = [[0.3, 0.5], [0.7, 0.5]] + [[0.04 * (k + 1), 1.0] for k in range(24)]
    return centers, [r0, r1] + [0.0] * 24


def test_packing_grid_metrics(packing: Validate, round_trip: Callable[[Any], Any]) -> None:
    # 5 x 5 grid of radius-0.1 circles touching each other and the walls, plus one point circle
    grid = [[0.1 + 0.2 * i, 0.1 + 0.2 * j] for i in range(5) for j in range(5)]
    centers = np.array([*grid, [0.2, 0.2]])
    radii = np.array([0.1] * 25 + [0.0])
    metrics = packing(round_trip((centers, radii)))
    assert metrics["sum_radii"] == pytest.approx(2.5, abs=1e-12)
    assert metrics["min_radius"] == 0.0
    assert metrics["radius_spread"] == pytest.approx(0.5 / 26, abs=1e-12)


def test_packing_touching_is_valid(packing: Validate) -> None:
    assert packing(list(_two_circles()))["sum_radii"] == pytest.approx(0.4)


def test_packing_overlap_tolerance(packing: Validate) -> None:
    assert packing(list(_two_circles(0.2, 0.2 + 5e-13)))
    with pytest.raises(ValueError, match="circles 0 and 1 overlap"):
        packing(list(_two_circles(0.2, 0.2 + 1e-9)))


@pytest.mark.parametrize(
    "center",
    [[0.25, 0.5], [0.75, 0.5], [0.5, 0.25], [0.5, 0.75]],
    ids=["left", "right", "bottom", "top"],
)
def test_packing_wall_tolerance(packing: Validate, center: list[float]) -> None:
    centers, radii = _two_circles(0.0, 0.0)
    centers[0], centers[1] = center, [0.05, 0.05]
    for r, ok in [(0.25, True), (0.25 + 5e-13, True), (0.25 + 1e-9, False)]:
        radii[0] = r
        if ok:
            assert packing([centers, radii])["sum_radii"] == r
        else:
            with pytest.raises(ValueError, match=r"circle 0 .* outside the unit square"):
                packing([centers, radii])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("where", ["center", "radius"])
def test_packing_rejects_non_finite(packing: Validate, bad: float, where: str) -> None:
    centers, radii = _two_circles()
    if where == "center":
        centers[3][1] = bad
    else:
        radii[3] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        packing([centers, radii])


def test_packing_rejects_negative_radius(packing: Validate) -> None:
    centers, radii = _two_circles()
    radii[5] = -1e-15
    with pytest.raises(ValueError, match="circle 5 has negative radius"):
        packing([centers, radii])


@pytest.mark.parametrize(
    "reshape",
    [
        lambda c, r: [c[:25], r[:25]],  # wrong count
        lambda c, r: [c, r[:25]],
        lambda c, r: [[[x, y, 0.0] for x, y in c], r],  # wrong shape
        lambda c, r: [c, [[v] for v in r]],
        lambda c, r: [c, r, r],  # wrong structure
        lambda c, r: [c],
        lambda c, r: {"centers": c, "radii": r},
        lambda c, r: [c, [*r[:25], "0.1"]],  # not a number
        lambda c, r: [c, [*r[:25], False]],
    ],
)
def test_packing_rejects_bad_structure(packing: Validate, reshape: Callable[..., Any]) -> None:
    with pytest.raises(ValueError):
        packing(reshape(*_two_circles()))


# ----------------------------------------------------------------- heilbronn


def _brute_force_min_area(points: list[list[float]]) -> float:
    smallest = math.inf
    for a, b, c in itertools.combinations(points, 3):
        cross = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
        smallest = min(smallest, abs(cross) / 2)
    return smallest


def _interior_points(seed: int) -> list[list[float]]:
    weights = np.random.default_rng(seed).dirichlet([2.0, 2.0, 2.0], size=11)
    return (weights @ np.array(VERTICES)).tolist()


def test_heilbronn_container_has_unit_area() -> None:
    (x0, y0), (x1, y1), (x2, y2) = VERTICES
    assert abs((x1 - x0) * (y2 - y0) - (x2 - x0) * (y1 - y0)) / 2 == pytest.approx(1.0, abs=1e-15)
    text = (builtin_root() / "heilbronn" / "task.md").read_text()
    assert "a = 2 / 3**(1/4)" in text


@pytest.mark.parametrize("seed", range(5))
def test_heilbronn_matches_brute_force(heilbronn: Validate, seed: int) -> None:
    points = _interior_points(seed)
    metrics = heilbronn(points)
    assert metrics["min_triangle_area"] == pytest.approx(_brute_force_min_area(points), rel=1e-9)
    pairs = [math.dist(p, q) for p, q in itertools.combinations(points, 2)]
    assert metrics["min_pair_distance"] == pytest.approx(min(pairs), rel=1e-12)


def test_heilbronn_vertices_and_edges_are_inside(heilbronn: Validate) -> None:
    on_edges = [
        [(VERTICES[k][0] + VERTICES[k - 1][0]) / 2, (VERTICES[k][1] + VERTICES[k - 1][1]) / 2]
        for k in range(3)
    ]
    points = [list(v) for v in VERTICES] + on_edges + _interior_points(0)[:5]
    metrics = heilbronn(points)
    assert metrics["boundary_fraction"] == pytest.approx(6 / 11)
    assert metrics["min_triangle_area"] == pytest.approx(_brute_force_min_area(points), rel=1e-9)


def test_heilbronn_collinear_points_are_valid_with_zero_area(heilbronn: Validate) -> None:
    base = [[SIDE * k / 10, 0.0] for k in range(11)]
    metrics = heilbronn(base)
    assert metrics["min_triangle_area"] == 0.0
    assert metrics["boundary_fraction"] == 1.0
    repeated = [list(VERTICES[2])] * 2 + _interior_points(1)[:9]
    assert heilbronn(repeated)["min_triangle_area"] == 0.0


def _outward(edge: int, distance: float) -> list[float]:
    """Midpoint of edge ``edge`` (from vertex edge to edge+1) moved ``distance`` outwards."""
    (x0, y0), (x1, y1) = VERTICES[edge], VERTICES[(edge + 1) % 3]
    length = math.hypot(x1 - x0, y1 - y0)
    normal = ((y1 - y0) / length, -(x1 - x0) / length)  # counter-clockwise order: right is out
    return [(x0 + x1) / 2 + distance * normal[0], (y0 + y1) / 2 + distance * normal[1]]


@pytest.mark.parametrize("edge", range(3))
def test_heilbronn_boundary_tolerance(heilbronn: Validate, edge: int) -> None:
    points = _interior_points(2)
    points[4] = _outward(edge, 5e-13)
    assert heilbronn(points)
    points[4] = _outward(edge, 1e-9)
    with pytest.raises(ValueError, match=r"point 4 .* outside the triangle"):
        heilbronn(points)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_heilbronn_rejects_non_finite(heilbronn: Validate, bad: float) -> None:
    points = _interior_points(3)
    points[0][0] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        heilbronn(points)


@pytest.mark.parametrize(
    "reshape",
    [
        lambda p: p[:10],
        lambda p: [*p, p[0]],
        lambda p: [[x, y, 0.0] for x, y in p],
        lambda p: [v for point in p for v in point],
        lambda p: [*p[:10], ["0.5", "0.5"]],
    ],
)
def test_heilbronn_rejects_bad_structure(heilbronn: Validate, reshape: Callable[..., Any]) -> None:
    with pytest.raises(ValueError):
        heilbronn(reshape(_interior_points(4)))


# ----------------------------------------------------------------- rastrigin


@pytest.mark.parametrize(
    ("x", "value"),
    [([0.0] * 6, 0.0), ([1.0] * 6, 6.0), ([0.5] * 6, 121.5), ([0, 0, 0, 0, 0, 2], 4.0)],
)
def test_rastrigin_values(rastrigin: Validate, x: list[float], value: float) -> None:
    metrics = rastrigin(x)
    assert metrics["rastrigin_value"] == pytest.approx(value, abs=1e-9)
    assert metrics["l2_norm"] == pytest.approx(math.sqrt(sum(v * v for v in x)))


def test_rastrigin_upper_bound_covers_the_box() -> None:
    grid = np.linspace(-5.12, 5.12, 200_001)
    per_coordinate = np.max(grid**2 - 10 * np.cos(2 * np.pi * grid) + 10)
    assert 242.0 < 6 * per_coordinate <= 250.0


@pytest.mark.parametrize("edge", [5.12, -5.12])
def test_rastrigin_box_tolerance(rastrigin: Validate, edge: float) -> None:
    sign = 1.0 if edge > 0 else -1.0
    assert rastrigin([edge, 0, 0, 0, 0, 0])
    assert rastrigin([edge + sign * 5e-13, 0, 0, 0, 0, 0])
    with pytest.raises(ValueError, match=r"x\[0\] .* outside"):
        rastrigin([edge + sign * 1e-9, 0, 0, 0, 0, 0])


@pytest.mark.parametrize(
    "bad",
    [
        [math.nan] + [0.0] * 5,
        [0.0] * 5 + [math.inf],
        [0.0] * 5,
        [0.0] * 7,
        [[0.0] * 6],
        [0.0] * 5 + ["1"],
        [0.0] * 5 + [None],
    ],
)
def test_rastrigin_rejects(rastrigin: Validate, bad: Any) -> None:
    with pytest.raises(ValueError):
        rastrigin(bad)
