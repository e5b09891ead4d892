"""Validator for heilbronn: 11 points in a unit-area triangle, score the smallest triangle."""

from __future__ import annotations

import itertools

import numpy as np

N_POINTS = 11
SIDE = 2.0 / 3.0**0.25  # equilateral triangle of area exactly 1
VERTICES = np.array([[0.0, 0.0], [SIDE, 0.0], [SIDE / 2, SIDE * 3.0**0.5 / 2]])
TOL = 1e-12  # float rounding only; no other slack an evolved program could exploit
BOUNDARY_BAND = 1e-3  # a point this close to an edge counts as "on the boundary"
_TRIPLES = np.array(list(itertools.combinations(range(N_POINTS), 3)))
_E1, _E2 = VERTICES[1] - VERTICES[0], VERTICES[2] - VERTICES[0]
CONTAINER_AREA = 0.5 * abs(_E1[0] * _E2[1] - _E1[1] * _E2[0])  # 1 up to rounding


def _check_numbers(value, name):
    if isinstance(value, (list, tuple)):
        return [_check_numbers(v, name) for v in value]
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise ValueError(f"{name} must contain only numbers, found {type(value).__name__}")
    return float(value)


def _points(output):
    if isinstance(output, np.ndarray):
        output = output.tolist()
    if not isinstance(output, (list, tuple)):
        raise ValueError(f"output must be a list of {N_POINTS} [x, y] points")
    try:
        arr = np.asarray(_check_numbers(output, "points"), dtype=float)
    except ValueError as exc:  # ragged nesting
        raise ValueError(f"points must be a rectangular array of shape ({N_POINTS}, 2)") from exc
    if arr.shape != (N_POINTS, 2):
        raise ValueError(f"points must have shape ({N_POINTS}, 2), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("points contain NaN or inf")
    return arr


def _edge_distances(points):
    """Signed distance of each point to each edge, shape (n, 3); >= 0 means inside."""
    start = VERTICES
    edge = np.roll(VERTICES, -1, axis=0) - VERTICES
    rel = points[:, None, :] - start[None, :, :]
    cross = edge[None, :, 0] * rel[:, :, 1] - edge[None, :, 1] * rel[:, :, 0]
    return cross / np.linalg.norm(edge, axis=1)[None, :]


def _triangle_areas(points):
    a, b, c = (points[_TRIPLES[:, k]] for k in range(3))
    cross = (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])
    return 0.5 * np.abs(cross)


def validate(output):
    """Check the points and score the smallest triangle.

    Args:
        output: 11 ``[x, y]`` points (after the sandbox's JSON round trip).

    Returns:
        ``min_triangle_area`` (primary; smallest area over all 165 triples divided
        by the container's area, 1), ``min_pair_distance`` and ``boundary_fraction``
        (share of points within 1e-3 of an edge). Collinear or repeated points are
        valid and give ``min_triangle_area`` 0.

    Raises:
        ValueError: wrong structure or shape, NaN/inf, or a point outside the
            closed triangle by more than 1e-12.
    """
    points = _points(output)
    dist = _edge_distances(points)
    outside = np.flatnonzero(np.any(dist < -TOL, axis=1))
    if outside.size:
        i = int(outside[0])
        raise ValueError(
            f"point {i} {points[i].tolist()} lies outside the triangle (by {-dist[i].min():.3g})"
        )
    pair = np.linalg.norm(points[:, None, :] - points[None, :, :], axis=-1)
    rows, cols = np.triu_indices(N_POINTS, k=1)
    return {
        "min_triangle_area": float(_triangle_areas(points).min() / CONTAINER_AREA),
        "min_pair_distance": float(pair[rows, cols].min()),
        "boundary_fraction": float(np.mean(dist.min(axis=1) <= BOUNDARY_BAND)),
    }
