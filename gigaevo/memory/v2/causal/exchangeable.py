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

from dataclasses import dataclass

import numpy as np

from gigaevo.memory.v2.causal.gainlaw import (
    MAX_PROPOSALS,
    PROPOSALS,
    ExchangeableCards,
    _draw_gains,
    _end_cdf,
    _Gain,
    _TruncatedLaw,
    ndtr,
    ndtri,
    owens_t,
)
from gigaevo.memory.v2.causal.policy import WorldVotes, top_two

# the block's law and the gain draws live in ``gainlaw``; the names below are taken from
# here too (the constants of the draws with the rest of the block's)
__all__ = [
    "MAX_PROPOSALS",
    "PROPOSALS",
    "ExchangeableCards",
    "block_votes",
    "exchangeable_top_two",
    "owens_t",
]

FIRST_ROUND = 24.0  # expected members per world in the first round's region
GROWTH = 8.0  # each later round's region holds this many times more
ROUNDS = 3  # rounds with a region; after them every member left is drawn
FINE_CELLS = 64.0  # W's cells: upper tails 1/(8n), 2/(8n), ... 64/n, then x 8 up to one half
LEVEL_STEPS = 16  # bisection steps of a round's level (its region's mass is approximate)


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
