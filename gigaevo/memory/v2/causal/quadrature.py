"""Adaptive Gauss-Legendre integration of a 1-D log kernel (memory-model.md "Immediate head").

The kernel h(tau) is integrated over [lo, hi]: scan, polish the modes, place breakpoints where h
falls fixed amounts below each mode, then compare 8- and 16-node rules per piece and bisect.
``planned_gauss_legendre`` checks the pieces of an earlier integration (a plan) instead,
bisecting only those where the rules disagree (memory-model.md "Incremental fits").
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SCAN_POINTS = 17
MODE_WINDOW = 24.0
DROP_LEVELS = (0.5, 2.0, 8.0, 24.0)
MAX_DEPTH = 8
EDGE_FRACTION = 0.01
# a plan's pieces in disagreement are bisected while they hold at most this share of the mass
REFINE_SHARE = 1e-3

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
        pieces: the accepted pieces (a, b), in the order of the nodes.
    """

    fine_nodes: np.ndarray
    fine_log_weights: np.ndarray
    coarse_nodes: np.ndarray
    coarse_log_weights: np.ndarray
    modes: tuple[float, ...]
    modes_converged: bool
    depth_limit_hit: bool
    pieces: tuple[tuple[float, float], ...] = ()


def _evaluate(
    h: Callable[[float], float], h_batch: BatchKernel | None, t: np.ndarray
) -> np.ndarray:
    if h_batch is not None:
        return np.asarray(h_batch(t), dtype=float)
    return np.array([h(float(ti)) for ti in t])


def _find_modes(
    h: Callable[[float], float], lo: float, hi: float, h_batch: BatchKernel | None = None
) -> tuple[list[float], list[float], bool, tuple[float, float]]:
    """(modes, their heights, every polish converged, (h(lo), h(hi)))."""
    from scipy.optimize import minimize_scalar

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
    ends = (float(vals[0]), float(vals[-1]))
    return [m for m, _ in kept], [v for _, v in kept], converged, ends


def _breakpoints(
    h: Callable[[float], float],
    lo: float,
    hi: float,
    modes: list[float],
    heights: list[float],
    h_batch: BatchKernel | None,
    ends: tuple[float, float],
) -> np.ndarray:
    """Both ends, the 1 % cut points, the modes and, for every mode, the points where h falls
    ``DROP_LEVELS`` below it (towards each end where it falls that far), to 1e-10.

    The level crossings are found together (``_crossings``), so a batched kernel costs
    about one call per step for all of them; ``ends`` are h(lo), h(hi) (the mode scan's).
    """
    span = hi - lo
    points = {lo, hi, lo + EDGE_FRACTION * span, hi - EDGE_FRACTION * span, *modes}
    h_lo, h_hi = ends
    inner, outer, known = [], [], []
    for mode, height in zip(modes, heights, strict=True):
        for drop in DROP_LEVELS:
            for end, h_end in ((lo, h_lo), (hi, h_hi)):
                if end == mode or h_end >= height - drop:
                    continue
                inner.append(mode)
                outer.append(end)
                known.append((height - drop, height, h_end))
    if inner:
        level, h_in, h_out = (np.array(v) for v in zip(*known, strict=True))
        points.update(
            _crossings(h, h_batch, np.array(inner), np.array(outer), level, (h_in, h_out))
        )
    return np.array(sorted(points))


def _crossings(
    h: Callable[[float], float],
    h_batch: BatchKernel | None,
    inner: np.ndarray,
    outer: np.ndarray,
    level: np.ndarray,
    known: tuple[np.ndarray, np.ndarray],
    xtol: float = 1e-10,
) -> list[float]:
    """Where h crosses ``level`` between ``inner`` (h above) and ``outer`` (h below), each
    to ``xtol``: regula falsi with the Illinois modification, all crossings in one batch
    per step, a bisection step whenever a bracket did not halve in three steps.
    ``known``: h at ``inner`` and at ``outer``."""
    a, b = inner.astype(float), outer.astype(float)
    fa, fb = known[0] - level, known[1] - level
    width = np.abs(b - a)
    kept = np.zeros(len(a), dtype=int)  # +1: a kept last step, -1: b kept
    for step in range(200):
        live = np.abs(b - a) > xtol
        if not np.any(live):
            break
        idx = np.flatnonzero(live)
        secant = b[idx] - fb[idx] * (b[idx] - a[idx]) / (fb[idx] - fa[idx])
        stuck = (step % 3 == 2) & (np.abs(b[idx] - a[idx]) > 0.5 * width[idx])
        bad = ~np.isfinite(secant) | ((secant - a[idx]) * (secant - b[idx]) >= 0.0)
        c = np.where(stuck | bad, 0.5 * (a[idx] + b[idx]), secant)
        if step % 3 == 2:
            width[idx] = np.abs(b[idx] - a[idx])
        fc = _evaluate(h, h_batch, c) - level[idx]
        _update(idx, c, fc, (a, b, fa, fb), kept)
    return [float(x) for x in 0.5 * (a + b)]


def _update(
    idx: np.ndarray,
    c: np.ndarray,
    fc: np.ndarray,
    brackets: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    kept: np.ndarray,
) -> None:
    """One regula falsi step's update of the brackets (a, b) (N,) with their values (fa, fb)
    and which end was kept (``kept``), in place, at the live positions ``idx`` (distinct)
    from the new points c and their values fc (len(idx),): c = 0 closes the bracket; the
    crossing between c and b (fc > 0) moves a to c, else b moves (a NaN too), and the end
    kept twice in a row has its value halved (Illinois). Every position is its own, so the
    masks do at once what a loop over the positions does one by one (the same numbers)."""
    a, b, fa, fb = brackets
    zero = fc == 0.0
    up = fc > 0.0  # the crossing lies between c and b
    down = ~up & ~zero
    at = idx[zero]
    a[at] = b[at] = c[zero]
    at = idx[up]
    halve = at[kept[at] == -1]  # read before ``kept`` is set below
    a[at], fa[at] = c[up], fc[up]
    fb[halve] *= 0.5
    kept[at] = -1
    at = idx[down]
    halve = at[kept[at] == 1]
    b[at], fb[at] = c[down], fc[down]
    fa[halve] *= 0.5
    kept[at] = 1


def _rule(a: float, b: float, x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    half = 0.5 * (b - a)
    return a + half * (x + 1.0), np.log(half * w)


# one accepted piece: its 16 nodes and log weights (ln GL weight + h), then its 8
_PieceNodes = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _nodes(
    parts: list[_PieceNodes],
    modes: tuple[float, ...],
    converged: bool,
    depth_hit: bool,
    pieces: tuple[tuple[float, float], ...],
) -> QuadratureNodes:
    """The accepted pieces' nodes, concatenated in the order of ``parts``."""
    return QuadratureNodes(
        fine_nodes=np.concatenate([p[0] for p in parts]),
        fine_log_weights=np.concatenate([p[1] for p in parts]),
        coarse_nodes=np.concatenate([p[2] for p in parts]),
        coarse_log_weights=np.concatenate([p[3] for p in parts]),
        modes=modes,
        modes_converged=converged,
        depth_limit_hit=depth_hit,
        pieces=pieces,
    )


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
    modes, heights, converged, ends = _find_modes(h, lo, hi, h_batch)
    top = max(heights) if shift is None else shift
    cuts = _breakpoints(h, lo, hi, modes, heights, h_batch, ends)
    first = _pairwise(cuts)
    accepted, parts, depth_hit = _bisect(_piece_rules(h, h_batch, first, top), first)
    return _nodes(parts, tuple(modes), converged, depth_hit, tuple(accepted))


def _bisect(
    rules: dict[tuple[float, float, int], Rule], first: list[tuple[float, float]]
) -> tuple[list[tuple[float, float]], list[_PieceNodes], bool]:
    """The accepted sub-pieces of the pieces ``first`` and their nodes, in the order of a
    depth-first bisection from the last piece, and whether a sub-piece was still unresolved
    at ``MAX_DEPTH`` (then accepted as it is)."""
    pieces = [(a, b, 0) for a, b in first]
    parts: list[_PieceNodes] = []
    accepted: list[tuple[float, float]] = []
    depth_hit = False
    while pieces:
        a, b, depth = pieces.pop()
        t16, lw16, h16, t8, lw8, h8, agree = rules[(a, b, depth)]
        if not agree and depth < MAX_DEPTH:
            mid = 0.5 * (a + b)
            pieces.extend([(a, mid, depth + 1), (mid, b, depth + 1)])
            continue
        depth_hit = depth_hit or not agree
        accepted.append((a, b))
        parts.append((t16, lw16 + h16, t8, lw8 + h8))
    return accepted, parts, depth_hit


def planned_gauss_legendre(
    h: Callable[[float], float],
    pieces: tuple[tuple[float, float], ...],
    modes: tuple[float, ...],
    modes_converged: bool,
    h_batch: BatchKernel | None = None,
    on_refine: Callable[[], None] | None = None,
) -> QuadratureNodes | None:
    """The 16- and 8-node rules of fixed ``pieces`` (a plan, e.g. an earlier fit's accepted
    pieces), every node in one batch, masses compared after subtracting the largest node
    value of h, as ``adaptive_gauss_legendre`` compares them. A piece where the two rules
    disagree is bisected as the adaptive integration bisects (its halves' rules, one batch
    per depth, at most ``MAX_DEPTH`` deep) when the pieces in disagreement hold at most
    ``REFINE_SHARE`` of the 16-node mass: a tail piece whose mass grew past the absolute
    tolerance as the peak sharpened. None when a node value is not finite, when the
    disagreeing pieces hold more (the kernel has moved off the plan) or when a bisected
    piece is still unresolved at the maximum depth. ``on_refine`` is called once before
    the bisection's first evaluation (e.g. to stop keeping the kernel's per-point sums).
    """
    if not pieces:
        return None
    # every piece's rules at once: row i holds piece i's 16 then 8 nodes (as ``_rule``)
    ends = np.array(pieces, dtype=float)
    lo, half = ends[:, :1], 0.5 * (ends[:, 1:] - ends[:, :1])
    t16, lw16 = lo + half * (_X16 + 1.0), np.log(half * _W16)
    t8, lw8 = lo + half * (_X8 + 1.0), np.log(half * _W8)
    values = _evaluate(h, h_batch, np.concatenate([t16, t8], axis=1).ravel())
    if not np.all(np.isfinite(values)):
        return None
    top = float(np.max(values))
    values = values.reshape(len(pieces), 24)
    fine, coarse = lw16 + values[:, :16], lw8 + values[:, 16:]
    m16 = np.sum(np.exp(fine - top), axis=1)
    m8 = np.sum(np.exp(coarse - top), axis=1)
    failed = np.flatnonzero(~(np.abs(m16 - m8) <= 1e-10 + 1e-6 * m16)).tolist()
    if not failed:
        return QuadratureNodes(
            fine_nodes=t16.ravel(),
            fine_log_weights=fine.ravel(),
            coarse_nodes=t8.ravel(),
            coarse_log_weights=coarse.ravel(),
            modes=modes,
            modes_converged=modes_converged,
            depth_limit_hit=False,
            pieces=pieces,
        )
    if not float(np.sum(m16[failed])) <= REFINE_SHARE * float(np.sum(m16)):
        return None
    parts: list[_PieceNodes] = [(t16[i], fine[i], t8[i], coarse[i]) for i in range(len(pieces))]
    accepted = list(pieces)
    if on_refine is not None:
        on_refine()
    # the failed pieces' own rules (depth 0) are the ones just evaluated: their halves on
    known: dict[tuple[float, float, int], Rule] = {}
    for i in failed:
        a, b = (float(x) for x in pieces[i])
        known[(a, b, 0)] = (t16[i], lw16[i], values[i, :16], t8[i], lw8[i], values[i, 16:], False)
    rules = _piece_rules(h, h_batch, [pieces[i] for i in failed], top, known)
    for i in reversed(failed):  # each failed piece's accepted halves in its place
        sub, got, unresolved = _bisect(rules, [pieces[i]])
        if unresolved:
            return None
        parts[i : i + 1] = got
        accepted[i : i + 1] = sub
    return _nodes(parts, modes, modes_converged, False, tuple(accepted))


Rule = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]


def _piece_rules(
    h: Callable[[float], float],
    h_batch: BatchKernel | None,
    first: list[tuple[float, float]],
    top: float,
    known: dict[tuple[float, float, int], Rule] | None = None,
) -> dict[tuple[float, float, int], Rule]:
    """The 16- and 8-node rules of every piece the bisection visits, keyed by (a, b, depth):
    (t16, ln w16, h16, t8, ln w8, h8, masses agree). The pieces of one depth are evaluated
    together (one batched kernel call per depth instead of one per piece). ``known``: the
    rules of pieces of ``first`` already evaluated (a plan's pieces in disagreement, the
    same numbers this would form), not evaluated again."""
    out: dict[tuple[float, float, int], Rule] = {}
    level, depth = [(float(a), float(b)) for a, b in first], 0
    if known:
        out.update(known)
        nxt = []
        for a, b in level:
            if (a, b, 0) not in known:
                return _piece_rules(h, h_batch, first, top)  # not all known: as without
            if not known[(a, b, 0)][6]:
                mid = 0.5 * (a + b)
                nxt += [(a, mid), (mid, b)]
        level, depth = nxt, 1
    while level:
        # every piece of this depth at once (the numbers ``_rule`` forms for each, row i
        # its 16 then 8 nodes): one batch, masses and their test per row
        ends = np.array(level, dtype=float)
        lo, half = ends[:, :1], 0.5 * (ends[:, 1:] - ends[:, :1])
        t16, lw16 = lo + half * (_X16 + 1.0), np.log(half * _W16)
        t8, lw8 = lo + half * (_X8 + 1.0), np.log(half * _W8)
        values = _evaluate(h, h_batch, np.concatenate([t16, t8], axis=1).ravel())
        values = values.reshape(len(level), 24)
        h16, h8 = values[:, :16], values[:, 16:]
        m16 = np.sum(np.exp(lw16 + h16 - top), axis=1)
        m8 = np.sum(np.exp(lw8 + h8 - top), axis=1)
        agree = (np.abs(m16 - m8) <= 1e-10 + 1e-6 * m16).tolist()
        nxt = []
        for i, (a, b) in enumerate(level):
            out[(a, b, depth)] = (t16[i], lw16[i], h16[i], t8[i], lw8[i], h8[i], agree[i])
            if not agree[i] and depth < MAX_DEPTH:
                mid = 0.5 * (a + b)
                nxt += [(a, mid), (mid, b)]
        level, depth = nxt, depth + 1
    return out


def _pairwise(points: np.ndarray) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in itertools.pairwise(points) if b > a]
