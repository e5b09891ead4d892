"""Adaptive Gauss-Legendre integration of a 1-D log kernel (memory-model.md "Immediate head").

The kernel h(tau) is integrated over [lo, hi]: scan, polish the modes, place breakpoints where h
falls fixed amounts below each mode, then compare 8- and 16-node rules per piece and bisect.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq, minimize_scalar

SCAN_POINTS = 17
MODE_WINDOW = 24.0
DROP_LEVELS = (0.5, 2.0, 8.0, 24.0)
MAX_DEPTH = 8
EDGE_FRACTION = 0.01

BatchKernel = Callable[[np.ndarray], np.ndarray]

_X8, _W8 = np.polynomial.legendre.leggauss(8)
_X16, _W16 = np.polynomial.legendre.leggauss(16)


@dataclass(frozen=True)
class QuadratureNodes:
    """Nodes of the accepted pieces.

    Attributes:
        fine_nodes, fine_log_weights: 16-node points and ln(GL weight) + h, shape (K,).
        coarse_nodes, coarse_log_weights: the 8-node points of the same pieces, shape (K/2,).
        modes: polished mode locations.
        modes_converged: every bounded mode search converged.
        depth_limit_hit: some piece was still unresolved at the maximum bisection depth.
    """

    fine_nodes: np.ndarray
    fine_log_weights: np.ndarray
    coarse_nodes: np.ndarray
    coarse_log_weights: np.ndarray
    modes: tuple[float, ...]
    modes_converged: bool
    depth_limit_hit: bool


def _evaluate(
    h: Callable[[float], float], h_batch: BatchKernel | None, t: np.ndarray
) -> np.ndarray:
    if h_batch is not None:
        return np.asarray(h_batch(t), dtype=float)
    return np.array([h(float(ti)) for ti in t])


def _find_modes(
    h: Callable[[float], float], lo: float, hi: float, h_batch: BatchKernel | None = None
) -> tuple[list[float], list[float], bool]:
    grid = np.linspace(lo, hi, SCAN_POINTS)
    vals = _evaluate(h, h_batch, grid)
    modes: list[float] = []
    heights: list[float] = []
    converged = True
    for i in range(SCAN_POINTS):
        left = vals[i - 1] if i > 0 else -np.inf
        right = vals[i + 1] if i < SCAN_POINTS - 1 else -np.inf
        if not (vals[i] >= left and vals[i] >= right):
            continue
        if 0 < i < SCAN_POINTS - 1:
            res = minimize_scalar(
                lambda t: -h(float(t)),
                bounds=(grid[i - 1], grid[i + 1]),
                method="bounded",
                options={"xatol": 1e-7},
            )
            converged = converged and bool(res.success)
            t_best, h_best = float(res.x), -float(res.fun)
            if h_best < vals[i]:
                t_best, h_best = float(grid[i]), float(vals[i])
        else:
            t_best, h_best = float(grid[i]), float(vals[i])
        modes.append(t_best)
        heights.append(h_best)
    top = max(heights)
    kept = [(m, v) for m, v in zip(modes, heights, strict=True) if v >= top - MODE_WINDOW]
    return [m for m, _ in kept], [v for _, v in kept], converged


def _breakpoints(
    h: Callable[[float], float], lo: float, hi: float, modes: list[float], heights: list[float]
) -> np.ndarray:
    span = hi - lo
    points = {lo, hi, lo + EDGE_FRACTION * span, hi - EDGE_FRACTION * span, *modes}
    for mode, height in zip(modes, heights, strict=True):
        for drop in DROP_LEVELS:
            level = height - drop
            for end in (lo, hi):
                if end == mode or h(end) >= level:
                    continue
                a, b = sorted((mode, end))
                points.add(float(brentq(lambda t, lv=level: h(t) - lv, a, b, xtol=1e-10)))
    return np.array(sorted(points))


def _rule(a: float, b: float, x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    half = 0.5 * (b - a)
    return a + half * (x + 1.0), np.log(half * w)


def adaptive_gauss_legendre(
    h: Callable[[float], float],
    lo: float,
    hi: float,
    shift: float | None = None,
    h_batch: BatchKernel | None = None,
) -> QuadratureNodes:
    """Integrate exp(h) over [lo, hi] adaptively (8 vs 16 nodes per piece, bisection <= depth 8).

    Args:
        h: log kernel, finite on [lo, hi].
        shift: value subtracted from h before comparing masses (defaults to the top mode height).
        h_batch: optional vectorised h (an array of points to their values), used for the
            scan grid and the nodes of each piece; it must agree with h.
    """
    modes, heights, converged = _find_modes(h, lo, hi, h_batch)
    top = max(heights) if shift is None else shift
    pieces = [
        (float(a), float(b), 0) for a, b in _pairwise(_breakpoints(h, lo, hi, modes, heights))
    ]
    fine_t: list[np.ndarray] = []
    fine_w: list[np.ndarray] = []
    coarse_t: list[np.ndarray] = []
    coarse_w: list[np.ndarray] = []
    depth_hit = False
    while pieces:
        a, b, depth = pieces.pop()
        t16, lw16 = _rule(a, b, _X16, _W16)
        t8, lw8 = _rule(a, b, _X8, _W8)
        both = _evaluate(h, h_batch, np.concatenate([t16, t8]))
        h16, h8 = both[:16], both[16:]
        m16 = float(np.sum(np.exp(lw16 + h16 - top)))
        m8 = float(np.sum(np.exp(lw8 + h8 - top)))
        if abs(m16 - m8) > 1e-10 + 1e-6 * m16 and depth < MAX_DEPTH:
            mid = 0.5 * (a + b)
            pieces.extend([(a, mid, depth + 1), (mid, b, depth + 1)])
            continue
        depth_hit = depth_hit or abs(m16 - m8) > 1e-10 + 1e-6 * m16
        fine_t.append(t16)
        fine_w.append(lw16 + h16)
        coarse_t.append(t8)
        coarse_w.append(lw8 + h8)
    return QuadratureNodes(
        fine_nodes=np.concatenate(fine_t),
        fine_log_weights=np.concatenate(fine_w),
        coarse_nodes=np.concatenate(coarse_t),
        coarse_log_weights=np.concatenate(coarse_w),
        modes=tuple(modes),
        modes_converged=converged,
        depth_limit_hit=depth_hit,
    )


def _pairwise(points: np.ndarray) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in itertools.pairwise(points) if b > a]
