"""The prefix fit's third-order term (``Cubic``, memory-model.md "The prefix in Laplace form"):
the row groups' z z' products kept across expansions give the very numbers a fresh
expansion gives."""

from __future__ import annotations

import numpy as np

from gigaevo.memory.v2.causal.arrowhead import BlockDesign
from gigaevo.memory.v2.causal.invalidity import Cubic, _cube, _pairs
from gigaevo.memory.v2.read.headrows import InvalidityFitter
from tests.memory.test_invalidity_prefix import (
    ALIAS,
    PROTECTIVE,
    WIDE,
    WIDE_SPACE,
    _first,
    _ledger,
    _levels,
    _oldest,
    _prior,
)

PS, C, B = 5, 3, 4


def _design(seed: int, n: int = 400) -> BlockDesign:
    """Control rows and rows of B lineage blocks, interleaved in terminal order."""
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal((n, PS))
    lineage = rng.integers(-1, B, size=n)
    part = np.where(lineage[:, None] >= 0, rng.standard_normal((n, C)), 0.0)
    return BlockDesign(shared, lineage, part, B)


def _same(a: Cubic, b: Cubic) -> bool:
    return all(
        np.array_equal(getattr(a, f), getattr(b, f))
        for f in ("control", "lineages", "blocks", "control_gram", "lineage_gram")
    )


def test_kept_products_give_the_bits_of_a_fresh_expansion_at_every_point() -> None:
    x = _design(0)
    rng = np.random.default_rng(1)
    outers: dict[int, np.ndarray] = {}
    for _ in range(3):  # the first call forms the products, the others take them
        at = 0.5 * rng.standard_normal(x.size)
        assert _same(Cubic.of_rows(x, at, outers), Cubic.of_rows(x, at))
    assert sorted(outers) == [-1, *range(B)]  # one entry per row group
    assert outers[-1].shape[0] == PS * (PS + 1) // 2  # the control rows: their shared part
    assert outers[0].shape[0] == (PS + C) * (PS + C + 1) // 2


def test_a_design_without_whole_groups_shares_the_kept_products() -> None:
    """The near anchor's rows without the small wide cards' rows (``_near_level``): the
    remaining groups are the same rows in the same order."""
    x = _design(2)
    outers: dict[int, np.ndarray] = {}
    at = np.random.default_rng(3).standard_normal(x.size)
    Cubic.of_rows(x, at, outers)
    kept = {g: a for g, a in outers.items()}
    keep = np.flatnonzero(~np.isin(x.lineage, [1, 3]))
    part = BlockDesign(x.shared[keep], x.lineage[keep], x.lineage_part[keep], B)
    got = Cubic.of_rows(part, at, outers)
    assert _same(got, Cubic.of_rows(part, at))
    assert list(got.lineages) == [0, 2]
    assert all(outers[g] is kept[g] for g in kept)  # taken, not formed again


def test_products_of_other_rows_are_formed_again_not_taken() -> None:
    """A kept entry whose shape does not fit the group's rows is not used."""
    x, other = _design(4), _design(5, n=300)
    outers: dict[int, np.ndarray] = {}
    at = np.zeros(x.size)
    Cubic.of_rows(other, at, outers)
    assert _same(Cubic.of_rows(x, at, outers), Cubic.of_rows(x, at))


def test_the_triangle_product_gives_the_bits_of_the_full_product() -> None:
    """``_cube`` multiplies by each z_b z_c with b <= c once and copies it to (c, b): the
    numbers the full (n, k k) product gave (each column of a matrix product is its own)."""
    rng = np.random.default_rng(6)
    for n, k in ((1, 11), (22, 16), (900, 16), (2803, 11), (1428, 16)):
        zr = rng.standard_normal((n, k))
        weighted = rng.standard_normal(n)[:, None] * zr
        full = (weighted.T @ (zr[:, :, None] * zr[:, None, :]).reshape(n, k * k)).reshape(k, k, k)
        assert np.array_equal(_cube(weighted, _pairs(zr)), full)


def test_the_near_anchor_keeps_its_products_until_the_fitter_moves_on() -> None:
    """A block-form prefix fit keeps its near anchor's products (the wide level's expansion
    and a card's other level take them); the next near anchor drops the old one's, and the
    other level of a head fitted before still comes out as a fresh fitter's, bit for bit."""
    n = _oldest(1100)
    table = _ledger(n + 40, seed=9, cards=WIDE)
    fitter = InvalidityFitter(True, False, shift_levels=_levels, method="laplace_prefix")
    head = fitter.fit(_first(table, n), WIDE_SPACE, ALIAS, _prior)
    near = fitter._near
    assert near is not None and near.outers  # formed by the fit's expansions
    assert all(a.shape[1] == int(np.sum(near.design.lineage == g)) for g, a in near.outers.items())
    fitter.fit(table, WIDE_SPACE, ALIAS, _prior)  # a later near anchor
    assert fitter._near is not near and near.outers is None
    fresh = InvalidityFitter(True, False, shift_levels=_levels, method="laplace_prefix")
    again = fresh.fit(_first(table, n), WIDE_SPACE, ALIAS, _prior)
    for card in (PROTECTIVE, "c5"):
        column = WIDE_SPACE.lineage_slice(card).start
        wide = bool(np.isin(column, head.wide_columns_))
        late, fresh_level = head.with_level(column, not wide), again.with_level(column, not wide)
        assert np.array_equal(late.coef_, fresh_level.coef_)
        assert late.log_evidence() == fresh_level.log_evidence()
