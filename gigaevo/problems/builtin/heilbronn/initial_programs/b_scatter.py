"""Heilbronn problem: 11 points in a unit-area triangle, maximise the smallest triangle."""

import numpy as np

SIDE = 2.0 / 3.0**0.25  # side of the equilateral triangle whose area is exactly 1
VERTICES = np.array([[0.0, 0.0], [SIDE, 0.0], [SIDE / 2, SIDE * 3.0**0.5 / 2]])


# EVOLVE-BLOCK-START
def place_points():
    """11 hand-placed points (an arbitrary scatter inside the triangle)."""
    points = [
        [0.86, 0.33],
        [0.64, 0.99],
        [1.39, 0.22],
        [0.92, 0.36],
        [0.79, 0.64],
        [1.3, 0.24],
        [1.07, 0.08],
        [1.19, 0.49],
        [0.35, 0.21],
        [0.47, 0.02],
        [1.04, 0.43],
    ]
    return np.array(points)


# EVOLVE-BLOCK-END


def to_triangle(points):
    """Map each point into the closed triangle (clip its barycentric coordinates at 0)."""
    points = np.asarray(points, dtype=float)
    basis = np.array([VERTICES[1] - VERTICES[0], VERTICES[2] - VERTICES[0]])
    lam12 = np.linalg.solve(basis.T, (points - VERTICES[0]).T).T
    lam = np.column_stack([1.0 - lam12.sum(axis=1), lam12]).clip(min=0.0)
    lam /= lam.sum(axis=1, keepdims=True)
    return lam @ VERTICES


def run_heilbronn():
    """Entry point: an (11, 2) array of points inside the triangle."""
    return to_triangle(place_points())
