"""Validator for circle_packing: 26 disjoint circles inside the unit square."""

from __future__ import annotations

import numpy as np

N_CIRCLES = 26
TOL = 1e-12  # float rounding only; no other slack an evolved program could exploit


def _number_array(value, name, shape):
    """``value`` as a float array of ``shape``; rejects non-numbers, bools and NaN/inf."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    try:
        arr = np.asarray(_check_numbers(value, name), dtype=float)
    except ValueError as exc:  # ragged nesting
        raise ValueError(f"{name} must be a rectangular array of numbers of shape {shape}") from exc
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    return arr


def _check_numbers(value, name):
    if isinstance(value, (list, tuple)):
        return [_check_numbers(v, name) for v in value]
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise ValueError(f"{name} must contain only numbers, found {type(value).__name__}")
    return float(value)


def validate(output):
    """Check a packing and score it.

    Args:
        output: ``[centers, radii]`` after the sandbox's JSON round trip:
            centers is 26 ``[x, y]`` pairs, radii is 26 numbers.

    Returns:
        ``sum_radii`` (primary), ``min_radius`` and ``radius_spread`` (std of radii).

    Raises:
        ValueError: wrong structure or shape, NaN/inf, a negative radius, a circle
            outside the unit square or two overlapping circles (beyond 1e-12).
    """
    if not isinstance(output, (list, tuple)) or len(output) != 2:
        raise ValueError("output must be a pair (centers, radii)")
    centers = _number_array(output[0], "centers", (N_CIRCLES, 2))
    radii = _number_array(output[1], "radii", (N_CIRCLES,))
    negative = np.flatnonzero(radii < 0)
    if negative.size:
        i = int(negative[0])
        raise ValueError(f"circle {i} has negative radius {radii[i]!r}")
    low = centers - radii[:, None]
    high = centers + radii[:, None]
    outside = np.flatnonzero(np.any(low < -TOL, axis=1) | np.any(high > 1.0 + TOL, axis=1))
    if outside.size:
        i = int(outside[0])
        raise ValueError(
            f"circle {i} (centre {centers[i].tolist()}, radius {radii[i]!r}) "
            "extends outside the unit square"
        )
    diff = centers[:, None, :] - centers[None, :, :]
    dist = np.sqrt(np.sum(diff * diff, axis=-1))
    gap = dist - (radii[:, None] + radii[None, :])
    rows, cols = np.triu_indices(N_CIRCLES, k=1)
    bad = np.flatnonzero(gap[rows, cols] < -TOL)
    if bad.size:
        i, j = int(rows[bad[0]]), int(cols[bad[0]])
        raise ValueError(f"circles {i} and {j} overlap by {-gap[i, j]:.3g}")
    return {
        "sum_radii": float(np.sum(radii)),
        "min_radius": float(np.min(radii)),
        "radius_spread": float(np.std(radii)),
    }
