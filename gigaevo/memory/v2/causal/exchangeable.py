"""The two best cards of a block of exchangeable cards in every world, without drawing every
card (memory-model.md "Policy", "Exchangeable cards").

Cards without a row in any head, with the same design row and the same prior on their
lineage block, are exchangeable: given a world's shared draws, a member's latent in head h
is c_h + s_h xi_h with its own iid xi_h ~ N(0, 1) (a block without rows keeps its prior,
independent of everything else in the posterior). Probability matching needs of such a
block only its two largest effects in each world, and which cards hold them: a world's
winner and challenger are among them. Those are drawn exactly:

- A member's Delta depends on it through two numbers: its gain
  W = s_i xi_i + max(0, c_L + s_L xi_L) (immediate plus the lineage head's positive part;
  W = s_i xi_i without that head), and zeta = -xi_v of the invalidity head; Delta is
  non-decreasing in both. W's law is known: W > w iff s_i xi_i > w or
  s_i xi_i + c_L + s_L xi_L > w, a union of two Gaussian half-planes (its mass by Owen's T).
- Rounds draw the members of growing regions. A region is the complement of a lower set
  {W in cell i, zeta <= b_i}: W's range cut into cells (e_{i-1}, e_i], and b_i the largest
  zeta with Delta(e_i, zeta) <= a level; a round lowers the level until its region holds
  about 32, then 256, 2048 members (a world, not the law, chooses). How many of the members
  not drawn yet fall in the round's new shell is binomial, and each is drawn from its law
  given the shell (per cell, W by rejection from the half-planes, zeta by inverse CDF).
  Every member left below has Delta <= max_i Delta(e_i, b_i), so a world stops as soon as
  its second-best member drawn beats that. The last round draws every member left.
- A stopped world's two best lie strictly above every other member (so above the floor
  G- - q0 too: no tie), and the members' ids are a uniform permutation independent of
  the values: the best is a uniform member and the second a uniform one of the rest.
- Ties happen only at the floor (a valid value clipped at G-). A world whose members left
  all sit exactly at the floor, with fewer than two above it drawn, ranks those by id as
  the full draw does (the largest first); a world of the last round puts the ids on its
  n values by a uniform permutation and ranks (value, id), ties to the larger id.

The thresholds change only how many members are drawn, never the law of the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gigaevo.memory.v2.causal.policy import WorldVotes, top_two


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


FIRST_ROUND = 24.0  # expected members per world in the first round's region
GROWTH = 8.0  # each later round's region holds this many times more
ROUNDS = 3  # rounds with a region; after them every member left is drawn
FINE_CELLS = 64.0  # W's cells: upper tails 1/(8n), 2/(8n), ... 64/n, then x 8 up to one half
LEVEL_STEPS = 16  # bisection steps of a round's level (its region's mass is approximate)
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


def _law(cards: ExchangeableCards, rows: np.ndarray) -> _Gain:
    if len(cards.sds) < 3:
        return _Gain(cards.sds[0], None, None)
    return _Gain(cards.sds[0], cards.sds[2], cards.centres[2][rows])


def _tail(
    lo: np.ndarray,
    hi: np.ndarray,
    cdf: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """P(lo < xi <= hi) for a standard normal, accurate in both tails (each interval's
    form evaluated only where it is taken; ``cdf``: (ndtr(lo), ndtr(hi)) when the caller
    has them, read for the lower form)."""
    out = np.empty(np.broadcast_shapes(lo.shape, hi.shape))
    lo, hi = np.broadcast_to(lo, out.shape), np.broadcast_to(hi, out.shape)
    upper = lo >= 0.0
    if np.any(upper):
        out[upper] = ndtr(-lo[upper]) - _end_cdf(-hi[upper])
    lower = ~upper
    if np.any(lower):
        if cdf is None:
            out[lower] = ndtr(hi[lower]) - ndtr(lo[lower])
        else:
            cdf_lo, cdf_hi = (np.broadcast_to(c, out.shape) for c in cdf)
            out[lower] = cdf_hi[lower] - cdf_lo[lower]
    return out


@dataclass(frozen=True)
class _Grid:
    """W's cells (e_{i-1}, e_i] in each world (rows), e_0 = -inf, e_K = +inf.

    Attributes:
        edges: (S, K + 1); mass: (S, K) P(W in cell); room: (S, K) v(e_i) - G-, the valid
            value above the floor at the cell's upper edge (its best member's)."""

    edges: np.ndarray
    mass: np.ndarray
    room: np.ndarray

    @classmethod
    def build(
        cards: type[_Grid], block: ExchangeableCards, law: _Gain, bounds: tuple[float, float]
    ) -> _Grid:
        n, s = len(block.members), len(block.centres[0])
        tails = []
        tail = 1.0 / (8.0 * n)
        while tail < 0.5:
            tails.append(tail)
            tail *= 2.0 if tail < FINE_CELLS / n else 8.0
        z = -ndtri(np.array(tails[::-1]))  # ascending edges
        inner = law.above(np.broadcast_to(z, (s, len(z))))  # (S, K - 1)
        edges = np.column_stack([np.full(s, -np.inf), inner, np.full(s, np.inf)])
        sf = np.column_stack([np.ones(s), law.sf(inner.T).T, np.zeros(s)])
        mass = np.clip(sf[:, :-1] - sf[:, 1:], 0.0, 1.0)
        lo, hi = bounds
        room = np.clip(block.centres[0][:, None] + edges[:, 1:], lo, hi) - lo
        return cards(edges, mass, room)

    def take(self, rows: np.ndarray) -> _Grid:
        return _Grid(self.edges[rows], self.mass[rows], self.room[rows])


def _heights(
    block: ExchangeableCards,
    grid: _Grid,
    active: np.ndarray,
    level: np.ndarray,
    q0: np.ndarray,
    lo: float,
) -> np.ndarray:
    """(A, K) largest zeta per cell with Delta(e_i, zeta) <= level: the region's lower set
    is {W in cell i, zeta <= b_i}. keep(zeta) = expit(s_v zeta - c_v), Delta = G- - q0 +
    keep room, so b_i = (logit(r_i) + c_v) / s_v with r_i = (level - G- + q0) / room_i."""
    num = (level - lo + q0[active])[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(grid.room > 0.0, num / grid.room, np.where(num >= 0.0, np.inf, -np.inf))
        logit = np.log(r) - np.log1p(-r)
    b = (logit + block.centres[1][active, None]) / block.sds[1]
    return np.where(r >= 1.0, np.inf, np.where(r <= 0.0, -np.inf, b))


def _region_mass(grid: _Grid, heights: np.ndarray) -> np.ndarray:
    """P(a member is outside the lower set), per row."""
    return np.sum(grid.mass * ndtr(-heights), axis=1)


def _level(
    block: ExchangeableCards,
    grid: _Grid,
    active: np.ndarray,
    target: float,
    q0: np.ndarray,
    bounds: tuple[float, float],
) -> np.ndarray:
    """A level per world whose region holds about ``target`` of the members (bisection).

    Each step is ``_region_mass(grid, _heights(...)) > target`` with the same floats: what
    does not move with the level (the cells with room, the worlds' q0 and invalidity
    centres) is taken once, and ndtr(-b_i) is taken of every cell with r_i clipped to [0, 1]:
    b_i = inf where r_i >= 1 and -inf where r_i <= 0, whose tails ndtr(-inf) = 0 and
    ndtr(inf) = 1 are those of ``_heights``' infinite heights."""
    lo, hi = bounds
    q0a = q0[active]
    low, high = lo - q0a, hi - q0a
    room, mass = grid.room, grid.mass
    flat = ~(room > 0.0)  # cells without room: r = +-inf by the sign of num
    any_flat = bool(np.any(flat))
    centre, sd = block.centres[1][active, None], block.sds[1]
    r, b, log1m = np.empty(room.shape), np.empty(room.shape), np.empty(room.shape)
    total = np.empty(len(active))  # each step's region mass, in buffers kept across steps
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(LEVEL_STEPS):
            mid = 0.5 * (low + high)
            num = (mid - lo + q0a)[:, None]
            np.divide(num, room, out=r)
            if any_flat:
                r[flat] = np.broadcast_to(np.where(num >= 0.0, np.inf, -np.inf), r.shape)[flat]
            # r in [0, 1]: r = 1 gives b = inf (log1p(-1) = -inf), r = 0 gives b = -inf
            np.clip(r, 0.0, 1.0, out=r)
            np.log(r, out=b)
            np.negative(r, out=log1m)
            b -= np.log1p(log1m, out=log1m)
            b += centre
            b /= -sd  # -(b / sd), exactly
            ndtr(b, out=b)  # the tails
            b *= mass
            big = np.add.reduce(b, axis=1, out=total) > target  # (np.sum's reduction)
            low, high = np.where(big, mid, low), np.where(big, high, mid)
    return high


def _bound(
    block: ExchangeableCards,
    grid: _Grid,
    active: np.ndarray,
    heights: np.ndarray,
    q0: np.ndarray,
    bounds: tuple[float, float],
) -> np.ndarray:
    """The largest Delta of the lower set, by the same arithmetic as a member's: the max
    over the cells' corners (e_i, b_i) (-inf where the lower set is empty)."""
    rows, k = heights.shape
    world = np.repeat(active, k)
    gain = np.minimum(grid.edges[:, 1:], np.finfo(float).max).reshape(-1)
    corner = block.values(world, gain, heights.reshape(-1), q0, bounds).reshape(rows, k)
    return np.max(np.where(np.isneginf(heights), -np.inf, corner), axis=1)


def _segment_top_two(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """(A, 2) largest and second-largest of consecutive segments of ``counts`` values
    (-inf where a segment has fewer)."""
    out = np.full((len(counts), 2), -np.inf)
    some = counts > 0
    if not np.any(some):
        return out
    starts = (np.cumsum(counts) - counts)[some]
    first = np.maximum.reduceat(values, starts)
    seg = np.repeat(np.arange(len(starts)), counts[some])
    rest = values.copy()
    top_at = np.flatnonzero(values == first[seg])
    # mask one occurrence of each segment's maximum (its first), keep ties for the second
    rest[top_at[np.r_[True, seg[top_at][1:] != seg[top_at][:-1]]]] = -np.inf
    out[some, 0] = first
    out[some, 1] = np.maximum.reduceat(rest, starts)
    return out


def _shell(
    block: ExchangeableCards,
    world: np.ndarray,
    rows: np.ndarray,
    edges: np.ndarray,
    low: np.ndarray,
    high: np.ndarray,
    pieces: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """(W, zeta) of members given the shell: cell i with mass pieces_i, zeta in
    (low_i, high_i] (members in ``world``; ``rows`` index their world's edges (A, K + 1),
    heights (A, K) and masses (A, K))."""
    m, k = len(world), pieces.shape[1]
    cum = np.take(np.cumsum(pieces, axis=1), rows, axis=0)
    pick = rng.random(m) * cum[:, -1]
    cell = np.zeros(m, dtype=int)  # how many cumulative masses pick reaches, column by column
    for j in range(k - 1):  # (the last column's count is cut off by the min with k - 1)
        cell += pick >= cum[:, j]
    at = rows * k + cell
    # zeta's law per (world, cell), then the members' draws from it (same values as per member)
    zeta = _TruncatedLaw(low.reshape(-1), high.reshape(-1)).draw(1.0 - rng.random(m), at)
    lo_at = rows * (k + 1) + cell  # each member's cell's lower edge, a key of its laws
    hi_edge = edges.reshape(-1)[lo_at + 1]
    gain = _draw_gains(block, world, edges.reshape(-1)[lo_at], hi_edge, rng, key=lo_at)
    return gain, zeta


def exchangeable_top_two(
    cards: ExchangeableCards,
    q0: np.ndarray,
    bounds: tuple[float, float],
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """The block's two largest Delta in each of S worlds and the cards holding them.

    Args:
        cards: the block (n >= 2 members) and its latents' law per world.
        q0: (S,) control value per world; bounds: (G-, G+).
        rng: the block's stream, read in a fixed order: the rounds, then the cards of the
            worlds that stopped, then the last round's permutations world by world.

    Returns:
        values (S, 2), best first, and their cards as positions among the safe cards (S, 2).
    """
    s, n = len(q0), len(cards.members)
    full = _Grid.build(cards, _law(cards, np.arange(s)), bounds)
    k = full.mass.shape[1]
    prev = np.full((s, k), np.inf)  # heights of the lower set not drawn yet
    prev_cdf = np.ones((s, k))  # their ndtr (ndtr(inf) = 1), kept from the round that set them
    remaining = np.full(s, n)
    best = np.full((s, 2), -np.inf)
    active = np.arange(s)
    kept_world, kept_value = [], []
    floor = bounds[0] - q0  # Delta of a member whose valid value is clipped at G-
    stopped = np.ones(s, dtype=bool)  # best two drawn above every member left
    floored = np.zeros(s, dtype=bool)  # every member left sits at the floor
    for r in range(ROUNDS + 1):
        grid, tp, cdf_tp = full.take(active), prev[active], prev_cdf[active]
        if r == ROUNDS:
            heights = np.full_like(tp, -np.inf)
        else:
            target = min(FIRST_ROUND * GROWTH**r / n, 1.0)
            level = _level(cards, grid, active, target, q0, bounds)
            heights = _heights(cards, grid, active, level, q0, bounds[0])
            # few members above the floor: draw them all, leave those at the floor
            lift = np.sum(np.where(grid.room > 0.0, grid.mass, 0.0), axis=1) <= target
            heights[lift] = np.where(grid.room[lift] > 0.0, -np.inf, np.inf)
            heights = np.minimum(heights, tp)
        cdf_h = ndtr(heights)
        pieces = grid.mass * _tail(heights, tp, (cdf_h, cdf_tp))
        left = remaining[active]
        below = np.sum(grid.mass * cdf_tp, axis=1)
        empty = np.sum(grid.mass * cdf_h, axis=1) <= 0.0  # none left below: draw all
        share = np.divide(pieces.sum(axis=1), below, out=np.ones_like(below), where=below > 0)
        counts = rng.binomial(left, np.where(empty, 1.0, np.clip(share, 0.0, 1.0)))
        rows = np.repeat(np.arange(len(active)), counts)
        world = active[rows]
        gain, zeta = _shell(cards, world, rows, grid.edges, heights, tp, pieces, rng)
        vals = cards.values(world, gain, zeta, q0, bounds)
        kept_world.append(world)
        kept_value.append(vals)
        merged = np.column_stack([best[active], _segment_top_two(vals, counts)])
        merged.sort(axis=1)
        best[active] = merged[:, :-3:-1]
        remaining[active] = left - counts
        prev[active], prev_cdf[active] = heights, cdf_h
        if r == ROUNDS:
            stopped[active] = False
            break
        bound = _bound(cards, grid, active, heights, q0, bounds)
        done = best[active, 1] > bound
        at_floor = ~done & (bound == floor[active])
        floored[active[at_floor]] = True
        stopped[active[at_floor]] = False
        active = active[~(done | at_floor)]
        if not len(active):
            break
    pos = np.empty((s, 2), dtype=int)
    drawn = stopped | floored
    top = rng.integers(0, n, size=int(drawn.sum()))
    second = rng.integers(0, n - 1, size=len(top))
    second += second >= top
    pos[drawn, 0], pos[drawn, 1] = top, second
    if np.any(floored):
        _at_the_floor(np.flatnonzero(floored), floor, n, best, pos)
    if not np.all(drawn):
        world_of, values = np.concatenate(kept_world), np.concatenate(kept_value)
        for w in np.flatnonzero(~drawn):
            vals = values[world_of == w]
            if len(vals) != n:
                raise RuntimeError("exchangeable cards: a world lost or duplicated a member")
            ids = rng.permutation(n)  # the members' positions on the n values
            order = np.lexsort((ids, vals))  # by value, ties to the larger position
            best[w] = vals[order[-1]], vals[order[-2]]
            pos[w] = ids[order[-1]], ids[order[-2]]
    return best, cards.members[pos]


def _at_the_floor(
    worlds: np.ndarray, floor: np.ndarray, n: int, best: np.ndarray, pos: np.ndarray
) -> None:
    """Worlds with fewer than two members above the floor, all those drawn (and every
    other member exactly at the floor): a member above it holds a uniform position (its
    draw in ``pos``), the floor's members rank by position, the largest first."""
    for w in worlds:
        if best[w, 0] > floor[w]:  # one member above the floor
            top = pos[w, 0]
            pos[w, 1] = n - 1 if top != n - 1 else n - 2
            best[w, 1] = floor[w]
        else:
            pos[w] = n - 1, n - 2
            best[w] = floor[w], floor[w]


def block_votes(
    card_ids: tuple[str, ...],
    hot: np.ndarray,
    hot_effect: np.ndarray,
    tops: list[tuple[np.ndarray, np.ndarray]],
    threshold: float = 0.0,
) -> WorldVotes:
    """Probability matching over the safe cards from the cards drawn one by one and each
    exchangeable block's two best (``exchangeable_top_two``): the world's two best are
    among those (ties to the larger id, as ``policy.match_worlds``).

    Args:
        card_ids: the safe cards in ascending id order (J,).
        hot: (J_h,) ascending positions of the cards drawn one by one; hot_effect: their
            (S, J_h) effects (masked in place for the second rank, not restored).
        tops: per block, values (S, 2) and positions (S, 2).
    """
    values, positions = [], []
    if len(hot):
        (first, second), (v1, v2) = top_two(hot_effect, restore=False)
        values += [v1, v2]
        positions += [hot[first], np.where(second >= 0, hot[second], -1)]
    for vals, pos in tops:
        values += [vals[:, 0], vals[:, 1]]
        positions += [pos[:, 0], pos[:, 1]]
    val, at = np.column_stack(values), np.column_stack(positions)
    best = val.max(axis=1)
    top = np.where(val == best[:, None], at, -1).max(axis=1)
    rest = at != top[:, None]
    val[~rest] = -np.inf
    second = np.where(rest & (val == val.max(axis=1)[:, None]), at, -1).max(axis=1)
    winners = np.where(best > threshold, top, -1)
    challengers = np.where(winners >= 0, second, top) if len(card_ids) > 1 else top
    return WorldVotes(card_ids, winners, challengers)
