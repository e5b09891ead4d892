"""Validator for rastrigin: a vector of 6 floats in [-5.12, 5.12], scored by Rastrigin."""

from __future__ import annotations

import numpy as np

DIM = 6
BOX = 5.12
TOL = 1e-12  # float rounding only


def validate(output):
    """Check the vector and score it.

    Args:
        output: a list of 6 numbers (after the sandbox's JSON round trip).

    Returns:
        ``rastrigin_value`` (primary, 10 d + sum(x_i^2 - 10 cos(2 pi x_i)), 0 at the
        origin, lower is better) and ``l2_norm``.

    Raises:
        ValueError: not a flat list of 6 numbers, NaN/inf, or a coordinate outside
            [-5.12, 5.12] by more than 1e-12.
    """
    if isinstance(output, np.ndarray):
        output = output.tolist()
    if not isinstance(output, (list, tuple)) or len(output) != DIM:
        raise ValueError(f"output must be a flat list of {DIM} numbers")
    for i, v in enumerate(output):
        if isinstance(v, (bool, np.bool_)) or not isinstance(
            v, (int, float, np.integer, np.floating)
        ):
            raise ValueError(f"x[{i}] must be a number, found {type(v).__name__}")
    x = np.asarray(output, dtype=float)
    if not np.all(np.isfinite(x)):
        raise ValueError("x contains NaN or inf")
    outside = np.flatnonzero(np.abs(x) > BOX + TOL)
    if outside.size:
        i = int(outside[0])
        raise ValueError(f"x[{i}] = {x[i]!r} is outside [-{BOX}, {BOX}]")
    value = 10.0 * DIM + float(np.sum(x * x - 10.0 * np.cos(2.0 * np.pi * x)))
    return {"rastrigin_value": max(value, 0.0), "l2_norm": float(np.linalg.norm(x))}
