"""Incremental sufficient statistics equal the batch fit on the same rows (issue 16.1).

Thousands of random updates (rows added, rows removed, whole card lineages emptied and
dropped from the layout, aliases merging two cards' blocks), then the posterior fitted
from the kept statistics is compared with ``BayesianLinearHead.fit`` on a design built
from scratch from the surviving rows: means and covariances to 1e-8 (the formulas of
memory-model.md "Immediate head" unchanged).
Rows carry mixed measurement sds (three levels), and one level.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gigaevo.memory.v2.causal import BayesianLinearHead, DesignSpace, conditional_posterior
from gigaevo.memory.v2.causal.arrowhead import BlockDesign
from gigaevo.memory.v2.causal.suffstats import ExactSum, GaussianStatistics, RowTerms

C = 4  # context width: 3 + one behaviour axis
UNIT = DesignSpace(C, ("",), kind_contrast=True)
PS = UNIT.shared_size


def _row(rng: np.random.Generator, key: str | None, level: float) -> RowTerms:
    x = np.r_[1.0, rng.uniform(-1, 1), rng.uniform(0, 1), rng.uniform(-1, 1)]
    y = float(np.clip(0.02 + 0.05 * x[1] + rng.normal(0, 0.1), -1, 1))
    if key is None:
        return RowTerms(UNIT.row(x, 0)[:PS], None, None, y, level)
    z = UNIT.row(x, 1, "", "insight" if rng.random() < 0.6 else "program")
    return RowTerms(z[:PS], z[PS:], key, y, level)


def _batch(rows: list[RowTerms], space: DesignSpace, lineage_of: dict[str, str]) -> BlockDesign:
    """The design of ``rows`` built from scratch (the reference)."""
    shared = np.array([r.shared for r in rows])
    block = np.array(
        [-1 if r.key is None else space.lineage_position(lineage_of[r.key]) for r in rows]
    )
    part = np.array([np.zeros(C) if r.part is None else r.part for r in rows])
    return BlockDesign(shared, block, part, len(space.lineages))


def _head(space: DesignSpace) -> BayesianLinearHead:
    return BayesianLinearHead(
        space.utility_prior_variance(), block_layout=(space.shared_size, space.n_context)
    )


def _random_history(
    rng: np.random.Generator, levels: list[float], n_cards: int, updates: int
) -> tuple[GaussianStatistics, list[RowTerms], dict[str, str]]:
    """Random adds and removes; some cards lose all their rows and leave; two cards merge."""
    stats = GaussianStatistics(PS, C)
    live: list[RowTerms] = []
    keys = [f"card-{i:02d}" for i in range(n_cards)]
    for step in range(updates):
        if live and rng.random() < 0.3:
            row = live.pop(int(rng.integers(len(live))))
            stats.remove(row)
        else:
            key = None if rng.random() < 0.35 else keys[int(rng.integers(len(keys)))]
            row = _row(rng, key, float(rng.choice(levels)))
            stats.add(row)
            live.append(row)
        if step == updates // 2:  # retire two cards: every row of theirs leaves, then the card
            for gone in keys[:2]:
                for row in [r for r in live if r.key == gone]:
                    live.remove(row)
                    stats.remove(row)
            keys = keys[2:]
    lineage_of = {k: k for k in keys}
    lineage_of[keys[-1]] = keys[-2]  # the last card was absorbed: its rows join the other's
    return stats, live, lineage_of


@pytest.mark.parametrize(
    ("levels", "n_cards"),
    [
        pytest.param([0.15**2], 5, id="one level, dense"),
        pytest.param([0.0, 0.15**2, 0.3**2], 5, id="three levels, dense"),
        pytest.param([0.15**2], 20, id="one level, block"),
        pytest.param([0.0, 0.15**2, 0.3**2], 20, id="three levels, block"),
    ],
)
def test_incremental_fit_equals_the_batch_fit_after_thousands_of_updates(
    levels: list[float], n_cards: int
) -> None:
    rng = np.random.default_rng(len(levels) * 100 + n_cards)
    stats, live, lineage_of = _random_history(rng, levels, n_cards, updates=3000)
    assert len(live) > 900 and stats.n == len(live)
    space = DesignSpace(C, tuple(sorted(set(lineage_of.values()))), kind_contrast=True)
    block_of = {k: space.lineage_position(v) for k, v in lineage_of.items()}
    view = stats.fit_view(block_of, len(space.lineages))
    assert (space.size > 64) == (n_cards > 10)
    design = _batch(live, space, lineage_of)
    y = np.array([r.y for r in live])
    omega = np.sqrt([r.level for r in live])
    # conditional posteriors at fixed sigma: m, Sigma and log p(y | sigma)
    dense = design.to_dense()
    prior = space.utility_prior_variance()
    for sigma in (0.03, 0.2, 1.5):
        want = conditional_posterior(dense, y, sigma, prior, omega=omega)
        got_node = _node_at(space, view, sigma)
        np.testing.assert_allclose(got_node[0], want.mean, atol=1e-8, rtol=0)
        np.testing.assert_allclose(got_node[1], want.cov, atol=1e-8, rtol=0)
        assert got_node[2] == pytest.approx(want.log_evidence, abs=1e-8 * len(live))
    # the whole sigma mixture: means and covariances (marginal variances on the block path)
    inc = _head(space).fit_statistics(view)
    ref = _head(space).fit(design if space.size > 64 else dense, y, omega)
    np.testing.assert_allclose(inc.coef_mean_, ref.coef_mean_, atol=1e-8, rtol=0)
    np.testing.assert_allclose(inc.coef_var_, ref.coef_var_, atol=1e-8, rtol=0)
    if ref.coef_cov_ is not None:
        np.testing.assert_allclose(inc.coef_cov_, ref.coef_cov_, atol=1e-8, rtol=0)
    # the node weights follow the mode search's stopping point, which moves with rounding
    np.testing.assert_allclose(inc.weights_, ref.weights_, rtol=1e-5)
    assert inc.health_.ok == ref.health_.ok and inc.health_.at_boundary == ref.health_.at_boundary


def _node_at(
    space: DesignSpace, view: object, sigma: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """(m, Sigma, log evidence) at one sigma from the kept statistics (dense solve)."""
    from gigaevo.memory.v2.causal.blr import _conditional, _Statistics

    stats = _Statistics.from_fit(view)  # type: ignore[arg-type]
    post = _conditional(stats, space.utility_prior_variance(), sigma)
    return post.mean, post.cov, post.log_evidence


def test_statistics_are_a_function_of_the_row_set_bit_for_bit() -> None:
    """Any order, with rows added and removed on the way, gives the very same numbers: a
    resumed run rebuilding them from its ledger fits exactly what the uninterrupted one did."""
    rng = np.random.default_rng(7)
    levels = [0.0, 0.15**2]
    rows = [_row(rng, f"card-{i % 6}" if i % 3 else None, levels[i % 2]) for i in range(600)]
    extra = [_row(rng, "card-9", 0.0) for _ in range(200)]
    a = GaussianStatistics(PS, C)
    for r in rows:
        a.add(r)
    b = GaussianStatistics(PS, C)
    for i in rng.permutation(len(rows)):
        b.add(rows[i])
        if i % 5 == 0:  # a detour: rows that come and go
            b.add(extra[i % len(extra)])
            b.remove(extra[i % len(extra)])
    block_of = {f"card-{i}": i for i in range(10)}
    va, vb = a.fit_view(block_of, 10), b.fit_view(block_of, 10)
    assert np.array_equal(va.levels, vb.levels) and np.array_equal(va.active, vb.active)
    for ga, gb in zip(va.groups, vb.groups, strict=True):
        for name in ("a", "bs", "d", "g", "bl", "at"):
            assert np.array_equal(getattr(ga, name), getattr(gb, name)), name
        assert ga.yty == gb.yty and ga.count == gb.count


def test_exact_sums_round_once() -> None:
    acc = ExactSum((3,))
    values = [np.array([0.1, -1e-9, 3.0]), np.array([0.2, 2e-9, -1.0]), np.array([0.3, 0.0, 1e-3])]
    for v in values:
        acc.add(v)
    want = [math.fsum(v[i] for v in values) for i in range(3)]
    assert np.allclose(acc.value(), want, rtol=0, atol=2e-17)
    for v in values:
        acc.add(v, -1)
    assert np.array_equal(acc.value(), np.zeros(3))


def test_a_row_out_of_range_raises_and_changes_nothing() -> None:
    """A row whose products leave the sums' range (|y| = 9: y^2 = 81 >= 64) raises
    DesignError and leaves the statistics as they were: no level, block or count moves, so
    a later fit (and a replay that meets the same row) sees only the rows taken."""
    from gigaevo.memory.v2.causal.errors import DesignError

    rng = np.random.default_rng(7)
    stats = GaussianStatistics(PS, C)
    for i in range(40):
        stats.add(_row(rng, f"card-{i % 3}", 0.01))
    before = stats.copy()
    bad = _row(rng, "card-new", 0.04)
    bad = RowTerms(bad.shared, bad.part, bad.key, 9.0, bad.level)
    with pytest.raises(DesignError):
        stats.add(bad)
    assert stats.n == before.n and stats.keys() == before.keys()
    assert sorted(stats._levels) == sorted(before._levels) == [0.01]
    view, ref = (s.fit_view({f"card-{i}": i for i in range(3)}, 3) for s in (stats, before))
    for g, h in zip(view.groups, ref.groups, strict=True):
        assert g.count == h.count and g.yty == h.yty
        assert np.array_equal(g.a, h.a) and np.array_equal(g.d, h.d) and np.array_equal(g.g, h.g)
