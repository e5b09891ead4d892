"""Heilbronn problem: 11 points in a unit-area triangle, maximise the smallest triangle."""

import numpy as np

SIDE = 2.0 / 3.0**0.25  # side of the equilateral triangle whose area is exactly 1
VERTICES = np.array([[0.0, 0.0], [SIDE, 0.0], [SIDE / 2, SIDE * 3.0**0.5 / 2]])


# EVOLVE-BLOCK-START
def place_points():
    """11 points on a spiral around the triangle's centroid."""
    center = VERTICES.mean(axis=0)
    points = []
    for i in range(11):
        angle = 2.4 * i + 0.3
        radius = 0.04 + 0.035 * i
        points.append([center[0] + radius * np.cos(angle), center[1] + radius * np.sin(angle)])
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
