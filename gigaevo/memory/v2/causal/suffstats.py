"""Sufficient statistics of the linear heads, kept exactly as rows come and go.

(memory-model.md "Immediate head": the formulas do not change, only how their sums
are kept.)

Every design row touches the shared block (width P_s) and at most one lineage block
(width C), so a Gaussian head needs, per measurement level omega^2, the cross-products

    A = sum s s',  b_s = sum s y,  y'y,  n            (shared columns)
    D_l = sum u u',  G_l = sum u s',  b_l = sum u y     (rows of lineage block l)

with s the row's shared part and u its lineage part. ``GaussianStatistics`` keeps them
per level and per block key (the card id a row proposed; aliases are merged at fit
time), updated by ``add`` / ``remove`` in O(P_s^2 + C P_s) per row instead of a
rebuild over every row.

The sums are exact: each product is rounded once to a multiple of 2^-56 (it is its own
value when |product| >= 2^-4, and off by at most 2^-57 below that) and accumulated as a
pair of int64 words (``ExactSum``), so a sum does not depend on the order of the rows,
nor on rows added and later removed: the statistics of a set of rows are a function of
the set. A resumed run that rebuilds them from its ledger therefore fits exactly what
the uninterrupted run fitted, bit for bit, and an incremental fit equals a batch fit on
the same rows (to the rounding of the products, ~1e-17 each).

``FitStatistics`` is the float view of one fit (a lineage layout, one level grouping),
from which ``blr`` builds its solvers.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import numpy as np

from gigaevo.memory.v2.causal.errors import DesignError

_BITS = 56  # fixed-point resolution 2^-56
_SPLIT = 28  # q = hi * 2^28 + lo with 0 <= lo < 2^28
_MASK = (1 << _SPLIT) - 1
_LIMIT = 64.0  # |value| < 2^6 keeps q inside int64


def _fixed(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) words of the fixed-point values: q = round(v 2^56) = hi 2^28 + lo."""
    v = np.asarray(values, dtype=float)
    if not np.all(np.abs(v) < _LIMIT):
        raise DesignError("sufficient statistics need finite products below 64 in magnitude")
    q = np.rint(np.ldexp(v, _BITS)).astype(np.int64)
    return q >> _SPLIT, q & _MASK


class ExactSum:
    """Exact running sums of float arrays of one shape (order-free, removable).

    The total is kept as two int64 words per entry, hi (multiples of 2^-28) and lo
    (multiples of 2^-56, each term in [0, 2^28)), good for 2^25 rows of terms below 64.
    ``value`` is the correctly rounded float of the exact sum.
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.hi = np.zeros(shape, dtype=np.int64)
        self.lo = np.zeros(shape, dtype=np.int64)

    @classmethod
    def of_words(cls, hi: np.ndarray, lo: np.ndarray) -> ExactSum:
        """The sums whose words are ``hi`` and ``lo`` (int64 arrays of one shape, kept)."""
        out = cls.__new__(cls)
        out.hi, out.lo = hi, lo
        return out

    def add(self, values: np.ndarray, sign: int = 1) -> None:
        self.add_fixed(*_fixed(values), sign)

    def add_fixed(self, hi: np.ndarray, lo: np.ndarray, sign: int = 1) -> None:
        """Add (or subtract) terms already converted by ``_fixed``."""
        if sign > 0:
            self.hi += hi
            self.lo += lo
        else:
            self.hi -= hi
            self.lo -= lo

    def value(self) -> np.ndarray:
        # each word times its power of two is exact; one rounding in the sum
        return np.ldexp(self.hi.astype(float), _SPLIT - _BITS) + np.ldexp(
            self.lo.astype(float), -_BITS
        )


@dataclass(frozen=True, eq=False)
class RowTerms:
    """One design row of a Gaussian head: shared part s (P_s,), lineage part u (C,) or None,
    block key (the proposed card id, None for a control), target y and level omega^2."""

    shared: np.ndarray
    part: np.ndarray | None
    key: str | None
    y: float
    level: float


class _Level:
    """The statistics of the rows of one omega^2 level."""

    def __init__(self, p_shared: int, width: int) -> None:
        self.p_shared, self.width = p_shared, width
        self.count = 0
        self.a = ExactSum((p_shared, p_shared))
        self.bs = ExactSum((p_shared,))
        self.yty = ExactSum(())
        self.keys: dict[str, int] = {}  # block key -> slot
        self.block_rows: list[int] = []  # rows per slot
        self.d = ExactSum((0, width, width))
        self.g = ExactSum((0, width, p_shared))
        self.bl = ExactSum((0, width))

    def slot(self, key: str) -> int:
        at = self.keys.get(key)
        if at is None:
            at = self.keys[key] = len(self.block_rows)
            self.block_rows.append(0)
            if at >= len(self.d.hi):  # grow the stacked blocks by doubling
                grow = max(4, len(self.d.hi))
                for acc in (self.d, self.g, self.bl):
                    pad = ((0, grow),) + ((0, 0),) * (acc.hi.ndim - 1)
                    acc.hi, acc.lo = np.pad(acc.hi, pad), np.pad(acc.lo, pad)
        return at

    def update(self, row: RowTerms, sign: int) -> None:
        """Add (sign +1) or remove (-1) one row's terms; all or nothing (every product is
        converted before any sum moves, so a row out of range changes nothing)."""
        s = row.shared
        shared = [_fixed(np.outer(s, s)), _fixed(s * row.y), _fixed(np.array(row.y * row.y))]
        block = None
        if row.part is not None and row.key is not None:
            u = row.part
            block = [_fixed(np.outer(u, u)), _fixed(np.outer(u, s)), _fixed(u * row.y)]
        self.count += sign
        for acc, (hi, lo) in zip((self.a, self.bs, self.yty), shared, strict=True):
            acc.add_fixed(hi, lo, sign)
        if block is None or row.key is None:
            return
        at = self.slot(row.key)
        self.block_rows[at] += sign
        for acc, (hi, lo) in zip((self.d, self.g, self.bl), block, strict=True):
            if sign > 0:
                acc.hi[at] += hi
                acc.lo[at] += lo
            else:
                acc.hi[at] -= hi
                acc.lo[at] -= lo


class GaussianStatistics:
    """Exact sufficient statistics of a Gaussian head's rows, per omega^2 level and block key.

    Args:
        p_shared: P_s, the width of the shared block.
        width: C, the width of a lineage block.
    """

    def __init__(self, p_shared: int, width: int) -> None:
        self.p_shared, self.width = p_shared, width
        self._levels: dict[float, _Level] = {}
        self.version = 0  # changes with every add and remove: equal versions, equal sums

    @property
    def n(self) -> int:
        return sum(lv.count for lv in self._levels.values())

    def add(self, row: RowTerms) -> None:
        """Add one row; a row out of range raises DesignError and changes nothing."""
        level = self._level(row.level)
        try:
            level.update(row, +1)
        finally:
            if level.count == 0:
                del self._levels[row.level]
        self.version += 1

    def remove(self, row: RowTerms) -> None:
        """Remove a row added before (the very same terms)."""
        level = self._levels.get(row.level)
        if level is None or level.count < 1:
            raise DesignError("removing a row that was never added")
        level.update(row, -1)
        self.version += 1
        if level.count == 0:
            del self._levels[row.level]

    def copy(self) -> GaussianStatistics:
        """An independent copy (the same exact sums)."""
        return copy.deepcopy(self)

    def keys(self) -> set[str]:
        """Block keys that hold at least one row."""
        return {k for lv in self._levels.values() for k, i in lv.keys.items() if lv.block_rows[i]}

    def _level(self, level: float) -> _Level:
        if level not in self._levels:
            self._levels[level] = _Level(self.p_shared, self.width)
        return self._levels[level]

    def fit_view(self, block_of: dict[str, int], n_lineages: int) -> FitStatistics:
        """The float statistics of one fit: block key -> lineage position (aliases share one).

        Keys missing from ``block_of`` raise DesignError (every row's lineage is in the space).
        """
        levels = sorted(self._levels)
        per_level = []
        positions: set[int] = set()
        for lv in levels:
            data = self._levels[lv]
            live = [(k, i) for k, i in data.keys.items() if data.block_rows[i]]
            missing = [k for k, _ in live if k not in block_of]
            if missing:
                raise DesignError(f"lineage {missing[0]!r} is not in the fitted space")
            positions.update(block_of[k] for k, _ in live)
            per_level.append((data, live))
        active = np.array(sorted(positions), dtype=int)
        where = {int(b): j for j, b in enumerate(active)}
        groups = []
        for data, live in per_level:
            # this level's blocks only (aliases of one lineage add up exactly before the
            # conversion to float); ``at`` places them among the fit's active blocks
            at_all = np.array([where[block_of[k]] for k, _ in live], dtype=int)
            at, inverse = np.unique(at_all, return_inverse=True)
            slots = np.array([i for _, i in live], dtype=int)
            # no two keys of one lineage at this level (no aliases): each block is one key's
            # sums, its words taken in block order instead of added to zeros (the same words)
            rows = slots[np.argsort(inverse)] if len(at) == len(at_all) else None
            blocks = []
            for acc in (data.d, data.g, data.bl):
                if rows is not None:
                    summed = ExactSum.of_words(acc.hi[rows], acc.lo[rows])
                else:
                    summed = ExactSum((len(at), *acc.hi.shape[1:]))
                    np.add.at(summed.hi, inverse, acc.hi[slots])
                    np.add.at(summed.lo, inverse, acc.lo[slots])
                blocks.append(summed.value())
            groups.append(
                StatGroup(
                    count=data.count,
                    a=data.a.value(),
                    bs=data.bs.value(),
                    yty=float(data.yty.value()),
                    at=at,
                    d=blocks[0],
                    g=blocks[1],
                    bl=blocks[2],
                )
            )
        return FitStatistics(
            self.p_shared, self.width, n_lineages, active, np.array(levels), tuple(groups)
        )


@dataclass(frozen=True)
class StatGroup:
    """Float statistics of the rows of one omega^2 level: the shared block, and the blocks
    this level's rows touch (``at``: their positions among the fit's active blocks)."""

    count: int
    a: np.ndarray  # (P_s, P_s)
    bs: np.ndarray  # (P_s,)
    yty: float
    at: np.ndarray  # (B_j,) positions in FitStatistics.active
    d: np.ndarray  # (B_j, C, C)
    g: np.ndarray  # (B_j, C, P_s)
    bl: np.ndarray  # (B_j, C)

    def dense_blocks(self, n_active: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(d, g, bl) over all the fit's active blocks (zeros where this level has none)."""
        c, ps = self.d.shape[1], self.g.shape[2]
        d, g, bl = np.zeros((n_active, c, c)), np.zeros((n_active, c, ps)), np.zeros((n_active, c))
        d[self.at], g[self.at], bl[self.at] = self.d, self.g, self.bl
        return d, g, bl


@dataclass(frozen=True)
class FitStatistics:
    """The statistics of one fit: P_s, C, B, the active lineage positions (sorted), the
    omega^2 levels (sorted) and one ``StatGroup`` per level."""

    p_shared: int
    width: int
    n_lineages: int
    active: np.ndarray
    levels: np.ndarray
    groups: tuple[StatGroup, ...]

    @property
    def n(self) -> int:
        return sum(g.count for g in self.groups)

    @property
    def size(self) -> int:
        return self.p_shared + self.n_lineages * self.width

    def centred(self, mu0: np.ndarray) -> FitStatistics:
        """The statistics of y - X mu0 (the prior mean moved into the targets)."""
        if not np.any(mu0):
            return self
        ps, c = self.p_shared, self.width
        m_s = mu0[:ps]
        m_all = mu0[ps:].reshape(self.n_lineages, c)[self.active]  # (B_act, C)
        groups = []
        for grp in self.groups:
            m_l = m_all[grp.at]
            # X'X mu0 by blocks: shared A m_s + sum G' m_l; lineage G m_s + D m_l
            xx_s = grp.a @ m_s + np.einsum("kcp,kc->p", grp.g, m_l)
            xx_l = grp.g @ m_s + np.einsum("kcj,kj->kc", grp.d, m_l)
            quad = float(m_s @ xx_s + np.sum(m_l * xx_l))
            cross = float(m_s @ grp.bs + np.sum(m_l * grp.bl))
            groups.append(
                replace(grp, bs=grp.bs - xx_s, bl=grp.bl - xx_l, yty=grp.yty - 2.0 * cross + quad)
            )
        return replace(self, groups=tuple(groups))

    def dense(self, group: StatGroup) -> tuple[np.ndarray, np.ndarray]:
        """(X'X (P, P), X'y (P,)) of one level as dense arrays."""
        ps, c, p = self.p_shared, self.width, self.size
        xtx, xty = np.zeros((p, p)), np.zeros(p)
        xtx[:ps, :ps], xty[:ps] = group.a, group.bs
        for j, b in enumerate(self.active[group.at].tolist()):
            cols = slice(ps + int(b) * c, ps + (int(b) + 1) * c)
            xtx[cols, cols] = group.d[j]
            xtx[cols, :ps] = group.g[j]
            xtx[:ps, cols] = group.g[j].T
            xty[cols] = group.bl[j]
        return xtx, xty
