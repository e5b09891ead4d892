"""The kept sufficient statistics against the cross-products numpy forms from the rows.

Per noise level, ``FitStatistics.dense`` must be X'X and X'y of that level's rows (aliases
of one lineage summed into its block), and ``centred(mu0)`` the statistics of the targets
y - X mu0: X'(y - X mu0) and |y - X mu0|^2, each checked against numpy on the rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal import DesignSpace
from gigaevo.memory.v2.causal.errors import DesignError
from gigaevo.memory.v2.causal.suffstats import ExactSum, GaussianStatistics, RowTerms

C = 3
LEVELS = (0.0, 0.05**2, 0.2**2)


def _rows(seed: int, n: int = 40):
    """Rows over 4 lineages (positions 0..3) whose cards are c0..c4, c4 an alias of L1."""
    rng = np.random.default_rng(seed)
    space = DesignSpace(C, lineages=("L0", "L1", "L2", "L3"), kind_contrast=True)
    lineage_of = {"c0": "L0", "c1": "L1", "c2": "L2", "c3": "L3", "c4": "L1"}
    rows, x, y, level = [], [], [], []
    for i in range(n):
        xc = np.array([1.0, rng.uniform(-1, 1), rng.uniform(0, 1)])
        key = None if i % 4 == 0 else ("c0", "c1", "c4", "c2")[i % 3 + (i % 5 == 0)]
        if key is None:
            z = space.row(xc, 0)
        else:
            z = space.row(xc, 1, lineage=lineage_of[key], kind=("insight", "program")[i % 2])
        yi, lv = float(rng.normal(0.05, 0.2)), LEVELS[int(rng.integers(3))]
        ps = space.shared_size
        part = None if key is None else z[space.lineage_slice(lineage_of[key])]
        rows.append(RowTerms(z[:ps], part, key, yi, lv))
        x.append(z)
        y.append(yi)
        level.append(lv)
    block_of = {k: space.lineage_position(v) for k, v in lineage_of.items()}
    return space, rows, np.array(x), np.array(y), np.array(level), block_of


def test_dense_view_is_the_cross_products_of_each_level() -> None:
    space, rows, x, y, level, block_of = _rows(1)
    stats = GaussianStatistics(space.shared_size, C)
    for r in rows:
        stats.add(r)
    assert stats.n == len(rows)
    view = stats.fit_view(block_of, 4)
    assert view.n == len(rows) and view.size == space.size
    np.testing.assert_array_equal(view.levels, sorted(set(level)))
    # L3 has no rows: only positions 0, 1, 2 are active
    np.testing.assert_array_equal(view.active, [0, 1, 2])
    for lv, group in zip(view.levels, view.groups, strict=True):
        rows_of = level == lv
        xtx, xty = view.dense(group)
        np.testing.assert_allclose(xtx, x[rows_of].T @ x[rows_of], rtol=0, atol=1e-14)
        np.testing.assert_allclose(xty, x[rows_of].T @ y[rows_of], rtol=0, atol=1e-14)
        assert group.count == int(np.sum(rows_of))
        assert group.yty == pytest.approx(float(y[rows_of] @ y[rows_of]), abs=1e-14)


def test_centred_view_is_the_statistics_of_the_residual_targets() -> None:
    space, rows, x, y, level, block_of = _rows(2)
    stats = GaussianStatistics(space.shared_size, C)
    for r in rows:
        stats.add(r)
    view = stats.fit_view(block_of, 4)
    mu0 = np.random.default_rng(3).normal(0.0, 0.3, space.size)
    centred = view.centred(mu0)
    for lv, group in zip(centred.levels, centred.groups, strict=True):
        rows_of = level == lv
        xl, res = x[rows_of], y[rows_of] - x[rows_of] @ mu0
        xtx, xty = centred.dense(group)
        np.testing.assert_allclose(xtx, xl.T @ xl, atol=1e-13)  # the gram does not move
        np.testing.assert_allclose(xty, xl.T @ res, atol=1e-13)
        assert group.yty == pytest.approx(float(res @ res), abs=1e-12)
    # a zero prior mean leaves every number as it was
    same = view.centred(np.zeros(space.size))
    for a, b in zip(view.groups, same.groups, strict=True):
        assert a.yty == b.yty and np.array_equal(a.bs, b.bs) and np.array_equal(a.bl, b.bl)


def test_controls_only_have_no_active_block_and_still_fit_densely() -> None:
    space, rows, x, _y, _level, block_of = _rows(4)
    keep = [i for i, r in enumerate(rows) if r.key is None]
    stats = GaussianStatistics(space.shared_size, C)
    for i in keep:
        stats.add(rows[i])
    view = stats.fit_view(block_of, 4)
    assert len(view.active) == 0
    xtx = sum(view.dense(g)[0] for g in view.groups)
    np.testing.assert_allclose(xtx, x[keep].T @ x[keep], atol=1e-14)


def test_a_row_never_added_cannot_be_removed() -> None:
    space, rows, *_ = _rows(5, n=4)
    stats = GaussianStatistics(space.shared_size, C)
    with pytest.raises(DesignError, match=r"^removing a row that was never added$"):
        stats.remove(rows[0])
    stats.add(rows[1])
    stats.remove(rows[1])
    assert stats.n == 0 and stats.keys() == set()


OUT_OF_RANGE = r"^sufficient statistics need finite products below 64 in magnitude$"


@pytest.mark.parametrize("bad", [64.0, -70.0, float("nan"), float("inf")])
def test_products_out_of_range_are_refused_with_the_reason(bad: float) -> None:
    acc = ExactSum((2,))
    with pytest.raises(DesignError, match=OUT_OF_RANGE):
        acc.add(np.array([1.0, bad]))
    assert np.array_equal(acc.value(), [0.0, 0.0])  # nothing half-added


def test_integer_and_boolean_terms_sum_exactly() -> None:
    """Indicators and small counts of any dtype are summed as the numbers they are."""
    acc = ExactSum((3,))
    acc.add(np.array([True, False, True]))
    acc.add(np.array([3, -2, 60], dtype=np.int8))
    acc.add(np.array([0.5, 0.25, -0.125], dtype=np.float32))
    np.testing.assert_array_equal(acc.value(), [4.5, -1.75, 60.875])


def test_the_version_changes_with_every_add_and_remove() -> None:
    """``version`` keys the reader's fitted-head cache ("equal versions, equal sums"): no two
    states reached by adds and removes may share one, also when a remove returns the count
    of rows to an earlier state with other rows."""
    space, rows, *_ = _rows(3, n=6)
    stats = GaussianStatistics(space.shared_size, C)
    seen = [stats.version]
    for op, i in (("add", 1), ("add", 2), ("remove", 1), ("add", 1), ("remove", 2)):
        getattr(stats, op)(rows[i])
        seen.append(stats.version)
    assert len(set(seen)) == len(seen), seen


def _dense(stats: GaussianStatistics, block_of: dict[str, int]) -> list[tuple]:
    view = stats.fit_view(block_of, 4)
    return [(lv, *view.dense(g)) for lv, g in zip(view.levels, view.groups, strict=True)]


def test_a_copy_is_independent_of_its_original() -> None:
    space, rows, _, _, _, block_of = _rows(4, n=12)
    stats = GaussianStatistics(space.shared_size, C)
    for r in rows[:8]:
        stats.add(r)
    before, keys, n = _dense(stats, block_of), stats.keys(), stats.n
    other = stats.copy()
    for r in rows[8:]:
        other.add(r)
    other.remove(rows[1])
    assert (stats.n, stats.keys()) == (n, keys)
    for (lv, xtx, xty), (lv2, xtx2, xty2) in zip(before, _dense(stats, block_of), strict=True):
        assert lv == lv2
        np.testing.assert_array_equal(xtx, xtx2)
        np.testing.assert_array_equal(xty, xty2)
    assert other.n == n + 3


@pytest.mark.parametrize("which", ["no key", "no part"])
def test_a_row_without_its_key_or_its_lineage_part_counts_as_a_control(which: str) -> None:
    """Only a row with both a lineage part and a block key fills a block; with either
    missing its shared terms alone are kept, exactly as for a control row."""
    space, rows, _, _, _, block_of = _rows(5, n=8)
    treated = next(r for r in rows if r.key is not None)
    odd = RowTerms(
        treated.shared,
        None if which == "no part" else treated.part,
        None if which == "no key" else treated.key,
        treated.y,
        treated.level,
    )
    control = RowTerms(treated.shared, None, None, treated.y, treated.level)
    got, want = GaussianStatistics(space.shared_size, C), GaussianStatistics(space.shared_size, C)
    got.add(odd)
    want.add(control)
    assert got.keys() == set() and got.n == 1
    assert len(got.fit_view(block_of, 4).active) == 0
    for a, b in zip(_dense(got, block_of), _dense(want, block_of), strict=True):
        assert a[0] == b[0]
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[2], b[2])
    got.remove(odd)
    assert got.n == 0 and got.keys() == set()
