"""The law of an exchangeable card's gain and exact draws from it given a region
(memory-model.md "Exchangeable cards"; ``exchangeable`` draws a block's two best with them).

A member's gain is W = s_i xi_i + max(0, c_L + s_L xi_L) (immediate plus the lineage
head's positive part; W = s_i xi_i without that head). W > w iff s_i xi_i > w or
s_i xi_i + c_L + s_L xi_L > w, a union of two Gaussian half-planes, so its mass is
Owen's T (``_Gain``). Given a cell of W's range, a member's W is drawn by rejection from the
half-planes (``_draw_gains``: passes of ``PROPOSALS`` candidates a member, each pass reading
its random numbers kind by kind in a fixed order, ``_Proposals``); zeta = -xi_v of the
invalidity head by inverse CDF from a truncated normal (``_TruncatedLaw``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


# scipy.special is imported on the first draw, not with the package: a run that makes no
# decision (max_mutants=0, the CLI) never loads scipy (tests/pipeline/test_startup.py)
def ndtr(x: Any, out: Any = None) -> Any:
    from scipy.special import ndtr as f

    return f(x) if out is None else f(x, out=out)


def ndtri(x: Any) -> Any:
    from scipy.special import ndtri as f

    return f(x)


def owens_t(h: Any, a: Any) -> Any:
    from scipy.special import owens_t as f

    return f(h, a)


PROPOSALS = 2  # candidates per member and rejection pass (each kept with probability >= 1/4)
MAX_PROPOSALS = 100  # rejection passes before the draw gives up
LAZY_MEMBERS = 1024  # a group this large forms a member's later candidates only when needed


@dataclass(frozen=True)
class ExchangeableCards:
    """A block of exchangeable safe cards and the law of their latents in S worlds.

    Attributes:
        members: (n,) positions of the cards among the safe cards, ascending; n >= 2.
        centres: per head (immediate, invalidity[, lineage]) the (S,) mean of a member's
            latent z_1'theta given the world's shared draws.
        sds: per head the sd of a member's own part (its lineage block's prior), all > 0.
    """

    members: np.ndarray
    centres: tuple[np.ndarray, ...]
    sds: tuple[float, ...]

    def values(
        self,
        world: np.ndarray,
        gain: np.ndarray,
        zeta: np.ndarray,
        q0: np.ndarray,
        bounds: tuple[float, float],
    ) -> np.ndarray:
        """Delta of members with gain W and zeta = -xi_v in worlds ``world`` (all (m,)):
        ``policy.world_effects``'s hurdle value, same operations."""
        lo, hi = bounds
        u = self.centres[0][world] + gain
        np.clip(u, lo, hi, out=u)
        u -= lo
        keep = self.centres[1][world] - self.sds[1] * zeta
        keep *= 0.5
        np.tanh(keep, out=keep)
        keep *= -0.5
        keep += 0.5
        u *= keep
        u += (lo - q0)[world]
        return u

    def gain(self, world: np.ndarray, xi_i: np.ndarray, xi_l: np.ndarray | None) -> np.ndarray:
        """W = s_i xi_i + max(0, c_L + s_L xi_L) of members in worlds ``world``."""
        if xi_l is None:
            return self.sds[0] * xi_i
        return _lifted_gain(self.sds[0], xi_i, self.centres[2][world], self.sds[2], xi_l)


def _lifted_gain(
    s_i: float, xi_i: np.ndarray, centre_l: np.ndarray, s_l: float, xi_l: np.ndarray
) -> np.ndarray:
    """W = s_i xi_i + max(0, c_L + s_L xi_L), elementwise (``ExchangeableCards.gain`` with
    the lineage head; ``_draw_gains`` on the centres it already took)."""
    return _gain(s_i * xi_i, centre_l, s_l * xi_l)


def _gain(own: np.ndarray, centre_l: np.ndarray, lift: np.ndarray) -> np.ndarray:
    """W = own + max(0, c_L + lift) from the products own = s_i xi_i and lift = s_L xi_L
    (``_lifted_gain``'s, for a caller that has them; a sum in either order is one float)."""
    lifted = centre_l + lift
    np.maximum(lifted, 0.0, out=lifted)
    lifted += own
    return lifted


def _bivariate_cdf(
    x: np.ndarray,
    y: np.ndarray,
    rho: float,
    cdf: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """P(X <= x, Y <= y) for standard normals of correlation rho (|rho| < 1), by Owen's T.

    ``cdf``: (ndtr(x), ndtr(y)) when the caller has them (the same values: ndtr(-0.0) =
    ndtr(0.0))."""
    r = np.sqrt(1.0 - rho * rho)
    x, y = np.asarray(x) + 0.0, np.asarray(y) + 0.0  # -0.0 -> 0.0: the formula's sign cases
    with np.errstate(divide="ignore", invalid="ignore"):
        ax = (y - rho * x) / (x * r)
        ay = (x - rho * y) / (y * r)
    half = np.where((x * y < 0) | ((x * y == 0) & (x + y < 0)), 0.5, 0.0)
    cdf_x, cdf_y = (ndtr(x), ndtr(y)) if cdf is None else cdf
    out = 0.5 * cdf_x + 0.5 * cdf_y - owens_t(x, ax) - owens_t(y, ay) - half
    both = (x == 0) & (y == 0)
    return np.where(both, 0.25 + np.arcsin(rho) / (2.0 * np.pi), out)


@dataclass(frozen=True)
class _Gain:
    """The law of a member's gain W in the worlds of ``centre`` (lineage centre per row)."""

    s_i: float
    s_l: float | None
    centre: np.ndarray | None

    def sf(self, w: np.ndarray) -> np.ndarray:
        """P(W > w) per row."""
        w = np.asarray(w, dtype=float)
        if self.s_l is None or self.centre is None:
            return ndtr(-w / self.s_i)
        sigma = np.hypot(self.s_i, self.s_l)
        finite = np.isfinite(w)
        wf = np.where(finite, w, 0.0)
        h, k = wf / self.s_i, (wf - self.centre) / sigma
        cdf_h, cdf_k = ndtr(-h), ndtr(-k)
        out = cdf_h + cdf_k - _bivariate_cdf(-h, -k, self.s_i / sigma, (cdf_h, cdf_k))
        return np.where(finite, np.clip(out, 0.0, 1.0), np.where(w > 0, 0.0, 1.0))

    def mass(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """P(lo < W <= hi) per row."""
        return np.clip(self.sf(lo) - self.sf(hi), 0.0, 1.0)

    def above(self, z: np.ndarray) -> np.ndarray:
        """A threshold whose tail is about ndtr(-z) (each half-plane's tail is exactly);
        z: (rows,) or (rows, J), a row's centre for each of its columns."""
        if self.s_l is None or self.centre is None:
            return self.s_i * z
        centre = self.centre if z.ndim == 1 else self.centre[:, None]
        return np.maximum(self.s_i * z, centre + np.hypot(self.s_i, self.s_l) * z)


def _unbounded(x: np.ndarray) -> bool:
    """Whether every one of intervals' far ends x is -inf (NaN is not: max propagates it)."""
    return bool(x.size) and bool(x.max() == -np.inf)


def _end_cdf(x: np.ndarray) -> np.ndarray:
    """ndtr(x) at intervals' far ends (-inf where unbounded): zeros, without evaluating
    ndtr, when every end is -inf (a first round's zeta cells, a mask's share of them),
    since ndtr(-inf) = 0 (and a difference with 0 is its other term, bit for bit)."""
    return np.zeros(x.shape) if _unbounded(x) else ndtr(x)


class _TruncatedLaw:
    """Standard normals given lo < xi <= hi by inverse CDF from u in (0, 1] (the upper form
    where the interval is in the upper half or unbounded above, so no 1 - tiny rounds).

    The CDF terms of intervals (lo, hi] are kept so that draws of a subset of them
    (``draw(u, rows)``: a shell's members of each cell, the members a rejection pass still
    needs) read them instead of evaluating the normal CDF at the same bounds again: the
    same values (elementwise), so the same draws."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray) -> None:
        self.upper = upper = (lo >= 0.0) | np.isposinf(hi)
        n_upper = int(np.count_nonzero(upper))
        # the form of every interval (True: the upper one), None where they are mixed
        self.form = None if 0 < n_upper < len(lo) else n_upper > 0
        self.qa: np.ndarray | None
        if self.form is not None:  # one form for every interval: no mask to apply
            end = -hi if n_upper else lo  # upper: xi = -eta, eta in [-hi, -lo)
            cdf = ndtr(-lo) if n_upper else ndtr(hi)
            # every far end unbounded: qa = ndtr(-inf) = 0, and 0 + u span = u span (>= +0)
            self.qa = None if _unbounded(end) else ndtr(end)
            self.span = cdf if self.qa is None else cdf - self.qa
            return
        self.qa = np.empty(len(lo))
        self.span = np.empty(len(lo))
        qa = _end_cdf(-hi[upper])
        self.qa[upper], self.span[upper] = qa, ndtr(-lo[upper]) - qa
        lower = ~upper
        qa = _end_cdf(lo[lower])
        self.qa[lower], self.span[lower] = qa, ndtr(hi[lower]) - qa

    def draw(self, u: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Draws from u for the intervals ``rows`` (all when None), in that order."""
        qa, span = self.qa, self.span
        if rows is not None:
            qa, span = None if qa is None else qa[rows], span[rows]
        if self.form is not None:  # one form for every interval
            x = ndtri(u * span if qa is None else qa + u * span)
            return -x if self.form else x
        assert qa is not None  # (mixed forms keep every qa)
        upper = self.upper if rows is None else self.upper[rows]
        n_upper = int(np.count_nonzero(upper))
        if n_upper in (0, len(u)):  # one form for every draw: no mask to apply
            x = ndtri(qa + u * span)
            return -x if n_upper else x
        out = np.empty_like(u)
        out[upper] = -ndtri(qa[upper] + u[upper] * span[upper])
        lower = ~upper
        out[lower] = ndtri(qa[lower] + u[lower] * span[lower])
        return out


def _draw_gains(
    cards: ExchangeableCards,
    world: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    rng: np.random.Generator,
    key: np.ndarray | None = None,
) -> np.ndarray:
    """Gains W of members given lo < W <= hi (per row; lo is -inf or a tail threshold).

    Without the lineage head W = s_i xi_i: a truncated normal. With it, by rejection:
    rows with lo = -inf propose xi_i given s_i xi_i <= hi and xi_L ~ N(0, 1) (half of
    {W <= hi}'s two constraints); the others propose from the union of the half-planes
    H1 = {s_i xi_i > lo} and H2 = {s_i xi_i + c_L + s_L xi_L > lo} (pick one by its mass,
    draw from it, keep with probability 1 / the number of the two holding the point).
    Either proposal is then kept only if lo < W <= hi (``_Proposals``).

    ``key``: (m,) small non-negative ints, one per (world, lo, hi) (a shell's cells): the
    laws' CDF terms are evaluated once per key, then read by its members (the same values).
    """
    s_i, m = cards.sds[0], len(world)
    if not m:
        return np.empty(0)
    first, entry = _distinct(key, m)
    if len(cards.sds) < 3:
        law = _TruncatedLaw(lo[first] / s_i, hi[first] / s_i)
        return s_i * law.draw(1.0 - rng.random(m), entry)
    proposals = _Proposals(s_i, cards.sds[2], lo, hi, cards.centres[2][world], first, entry)
    out = np.empty(len(world))
    todo = np.arange(len(world))
    for _ in range(MAX_PROPOSALS):
        if not len(todo):
            return out
        got, value = proposals.rejection_pass(todo, rng)
        out[todo[got]] = value[got]
        todo = todo[~got]
    raise RuntimeError("exchangeable cards: the gain draws were rejected too often")


# the p-th candidates of the members ``sel`` (all: a slice) of a group: (W, kept) per member
# (a column read as a[:, p][sel]: a[sel, p] with an index array is several times slower)
_Column = Callable[[Any, int], tuple[np.ndarray, np.ndarray]]


class _Proposals:
    """``_draw_gains``' rejection passes with the lineage head, for members (m,) with
    bounds lo, hi and lineage centres ``centre``.

    What does not change between passes is computed once per entry of ``_distinct``
    (elementwise, as a pass would): the half-planes' masses of the members with a threshold,
    the truncated law of xi_i of the others (lo = -inf: s_i xi_i <= hi). A pass reads the
    stream as one candidate-interleaved draw per kind: xi_L of every candidate, the floor
    candidates' uniforms, then the others' choice, inverse-CDF and coin uniforms; a
    member's draw is its first kept candidate (``_first_kept``).

    Args:
        first, entry: ``_distinct``'s members of each entry and entry of each member."""

    def __init__(
        self,
        s_i: float,
        s_l: float,
        lo: np.ndarray,
        hi: np.ndarray,
        centre: np.ndarray,
        first: np.ndarray,
        entry: np.ndarray,
    ) -> None:
        self.s_i, self.s_l, self.sigma = s_i, s_l, np.hypot(s_i, s_l)
        self.lo, self.hi, self.centre = lo, hi, centre
        # the laws per distinct entry (``_distinct``: ``first`` members, ``entry`` of each)
        lo_d = lo[first]
        floor = np.isneginf(lo_d)
        self.at_floor = floor[entry]
        below = np.cumsum(floor)  # floor entries up to each entry: its row in the floor law
        # an entry's row in its group's arrays (the floor law or the half-planes' masses)
        self.row = np.where(floor, below - 1, np.arange(len(floor)) - below)[entry]
        lo_up = lo_d[~floor]
        self.p1 = ndtr(-lo_up / s_i)
        self.p2 = ndtr((centre[first][~floor] - lo_up) / self.sigma)
        self.floor_law = _TruncatedLaw(lo_d[floor], hi[first][floor] / s_i)

    def rejection_pass(
        self, todo: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """PROPOSALS candidates for each member of ``todo`` (ascending): (t,) whether one
        was kept, and the first kept one's W (arbitrary where none was)."""
        t = len(todo)
        xi_l = rng.standard_normal(PROPOSALS * t).reshape(t, PROPOSALS)
        on_floor = self.at_floor[todo]
        n_f = int(np.count_nonzero(on_floor))
        # consecutive uniform draws are one stream: the floor's, then the others' three kinds
        uni = rng.random(PROPOSALS * (n_f + 3 * (t - n_f))).reshape(-1, PROPOSALS)
        if n_f == t:
            return _first_kept(self._floor, todo, xi_l, 1.0 - uni)
        if not n_f:
            return _first_kept(self._planes, todo, xi_l, *uni.reshape(3, t, PROPOSALS))
        got, value = np.empty(t, dtype=bool), np.empty(t)
        # (rows by np.take: indexing a (t, P) array by rows is many times slower)
        at = on_floor.nonzero()[0]
        own = np.take(xi_l, at, axis=0)
        got[at], value[at] = _first_kept(self._floor, todo[at], own, 1.0 - uni[:n_f])
        at = (~on_floor).nonzero()[0]
        r = uni[n_f:].reshape(3, t - n_f, PROPOSALS)
        own = np.take(xi_l, at, axis=0)
        got[at], value[at] = _first_kept(self._planes, todo[at], own, *r)
        return got, value

    def _floor(self, members: np.ndarray, xi_l: np.ndarray, u: np.ndarray) -> _Column:
        """Candidates of members with lo = -inf: xi_i from its truncated law by u."""
        rows, hi, centre = self.row[members], self.hi[members], self.centre[members]
        s_i, s_l, law = self.s_i, self.s_l, self.floor_law

        def column(sel: Any, p: int) -> tuple[np.ndarray, np.ndarray]:
            w = _lifted_gain(
                s_i, law.draw(u[:, p][sel], rows[sel]), centre[sel], s_l, xi_l[:, p][sel]
            )
            return w, (w > -np.inf) & (w <= hi[sel])

        return column

    def _planes(self, members: np.ndarray, xi_l: np.ndarray, *r: np.ndarray) -> _Column:
        """Candidates of members with a threshold, from the union of the half-planes by the
        uniforms r: the choice of a half-plane, its inverse CDF, the coin."""
        at = self.row[members]
        lo, hi, centre = self.lo[members], self.hi[members], self.centre[members]
        q1, q2 = self.p1[at], self.p2[at]
        s_i, s_l, sigma = self.s_i, self.s_l, self.sigma
        pick, inverse, coin = r

        def column(sel: Any, p: int) -> tuple[np.ndarray, np.ndarray]:
            a, c, m1, m2 = lo[sel], centre[sel], q1[sel], q2[sel]
            first = pick[:, p][sel] * (m1 + m2) < m1
            # the chosen half-plane's normal coordinate above its threshold, by inverse CDF
            z = -ndtri((1.0 - inverse[:, p][sel]) * np.where(first, m1, m2))
            other = xi_l[:, p][sel]
            # from H1: (z, other); from H2: rotate (z, other) back to (xi_i, xi_L)
            xi_i = np.where(first, z, (s_i * z - s_l * other) / sigma)
            lin = np.where(first, other, (s_l * z + s_i * other) / sigma)
            own, lift = s_i * xi_i, s_l * lin  # each product taken once
            lifted = own + c + lift
            keep = ~((own > a) & (lifted > a)) | (coin[:, p][sel] < 0.5)
            w = _gain(own, c, lift)
            return w, keep & (w > a) & (w <= hi[sel])

        return column


def _distinct(key: np.ndarray | None, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(d,) a member of each distinct key and (m,) each member's entry among them
    (ascending keys); without keys every member is its own entry."""
    if key is None:
        every = np.arange(m)
        return every, every
    one = np.empty(int(key.max()) + 1, dtype=np.intp)
    one[key] = np.arange(m)  # some member of each key: they share their laws
    used = np.zeros(len(one), dtype=bool)
    used[key] = True
    keys = used.nonzero()[0]
    entry = np.empty(len(one), dtype=np.intp)
    entry[keys] = np.arange(len(keys))
    return one[keys], entry[key]


def _first_kept(
    group: Callable[..., _Column], members: np.ndarray, *candidates: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(n,) whether each of ``members`` kept a candidate, and its first kept one's W.

    ``candidates``: the group's random numbers, (n, PROPOSALS) each. A large group forms
    candidate p only for the members whose earlier candidates were all rejected (its random
    numbers were read with the others); a small one forms them all at once (fewer array
    operations), then walks the columns from the last, so the first kept one is written
    last."""
    n = len(members)
    if n >= LAZY_MEMBERS:
        column = group(members, *candidates)
        value, got = column(slice(None), 0)
        rest = (~got).nonzero()[0]
        for p in range(1, PROPOSALS):
            if not len(rest):
                break
            w, keep = column(rest, p)
            got[rest], value[rest] = keep, w
            rest = rest[~keep]
        return got, value
    flat = (c.reshape(-1, 1) for c in candidates)
    w, keep = group(np.repeat(members, PROPOSALS), *flat)(slice(None), 0)
    keep_of, w_of = keep.reshape(n, PROPOSALS), w.reshape(n, PROPOSALS)
    got, value = keep_of[:, -1].copy(), w_of[:, -1]
    for p in range(PROPOSALS - 2, -1, -1):
        got |= keep_of[:, p]
        value = np.where(keep_of[:, p], w_of[:, p], value)
    return got, value
