"""The delayed-lineage head's rows replay: a resumed reader plans and fits it as the
uninterrupted one did (memory-model.md "Incremental fits", issue 16).

Its rows are replaced as lineage windows mature (a later version of a root's row, a root's
row withdrawn), so the head fitter reads every move of a matured row, each with the row it
moved to, in ledger order (``matured_moves_since``), and counts its plan points (256, 272,
289, ... moves) on that stream. A reader that fitted all along and a fresh one syncing the
whole ledger at once must hold the same plan and the very same head, bit for bit; and a
row version out of range that a later version supersedes no longer fails the fits.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gigaevo.memory.v2.causal.suffstats import GaussianStatistics
from gigaevo.memory.v2.read.heads import HeadFitter
from gigaevo.memory.v2.read.reader import CausalReader
from tests.memory.ledger_rows import context, decision, fast_dir, lineage, observe
from tests.memory.test_reader_lineage_head import CARDS, _features, _reader


def _fresh(heads: HeadFitter) -> HeadFitter:
    return HeadFitter(
        heads.evidence,
        heads.causal_reward,
        heads.posterior,
        run_id=heads.run_id,
        task_key=heads.task_key,
        transfer=heads.transfer,
        rag_contrast=heads.rag_contrast,
    )


def _sums(stats: GaussianStatistics) -> list[tuple[float, bytes, bytes]]:
    """The exact sums of every level, as bytes."""
    out = []
    for level, data in sorted(stats._levels.items()):
        for acc in (data.a, data.bs, data.yty):
            out.append((level, acc.hi.tobytes(), acc.lo.tobytes()))
    return out


def stats_now(heads: HeadFitter, width: int) -> GaussianStatistics:
    return heads.rows.rows(width).lineage


def _roots(reader: CausalReader, n: int, rng: np.random.Generator, fit_every: int) -> None:
    """n roots with matured rows; every fourth gets a second version later (a move that
    replaces a row), every 23rd a pending version that withdraws it for a while."""
    r = reader.causal_reward.range
    rows = []
    version: dict[str, int] = {}

    def move(root: int, residual: float | None, status: str = "outcome") -> None:
        row = rows[root]
        version[row.decision_id] = version.get(row.decision_id, 0) + 1
        lineage(reader, row, residual, version=version[row.decision_id], status=status)

    for i in range(n):
        arm = i % 3
        row = decision(reader, i, _features(rng), proposed=CARDS[(arm - 1) % 2], z=int(arm > 0))
        observe(reader, row, gain=float(rng.normal(0.0, 0.3)), cited=arm > 0)
        rows.append(row)
        move(i, float(abs(rng.normal(0.3, 0.1))) * r)
        if i >= 8 and i % 4 == 0:
            move(i - 8, float(abs(rng.normal(0.3, 0.1))) * r)
        if i >= 5 and i % 23 == 0:
            move(i - 5, None, status="pending")
            move(i - 5, float(abs(rng.normal(0.3, 0.1))) * r)
        if i % fit_every == 0:
            assert reader.heads_for(context(10_000)).lineage is not None


def test_a_fresh_fitter_plans_and_fits_the_lineage_head_as_the_one_that_fitted_all_along(
    tmp_path: Path,
) -> None:
    with fast_dir(tmp_path) as base:
        reader = _reader(base)
        _roots(reader, 345, np.random.default_rng(3), fit_every=11)
        heads = reader.heads
        cards = reader.store.cards()
        heads.rows.sync()
        width = heads.rows.last_width
        moves = heads.rows.rows(width).lineage_moves
        assert moves > 289  # past three plan points: 256, 272, 289
        along = heads.fitted(width, cards).lineage
        fresh = _fresh(heads)
        fresh.rows.sync()
        assert fresh.rows.rows(width).lineage_moves == moves
        # the latest plan point (438 moves) lies 20 moves back, some of them new versions of
        # rows it holds: the fresh fitter's copy there is the live one's, not today's rows
        live_plan, fresh_plan = (h.rows.rows(width).lineage_plan_rows for h in (heads, fresh))
        assert live_plan is not None and fresh_plan is not None
        assert live_plan[0] == fresh_plan[0] and moves - live_plan[0] >= 16
        assert _sums(live_plan[1]) == _sums(fresh_plan[1]) != _sums(stats_now(fresh, width))
        again = fresh.fitted(width, cards).lineage
        assert along is not None and again is not None
        assert heads.lineage_plans >= 3 and fresh.lineage_plans == 1
        assert along.planned_ and again.planned_
        assert along.quadrature_.pieces == again.quadrature_.pieces
        assert np.array_equal(along.coef_mean_, again.coef_mean_)
        assert np.array_equal(along.coef_var_, again.coef_var_)
        assert np.array_equal(along.weights_, again.weights_)
        # the planned fit is the fit memory-model.md defines: the adaptive one agrees
        stats = fresh.rows.rows(width).lineage
        space = fresh.current[1].space if fresh.current else None
        assert space is not None
        keys = stats.keys()  # GaussianStatistics.keys: the block keys holding rows
        block_of = {k: space.lineage_position(k) for k in keys}
        adaptive = fresh._utility_head(space).fit_statistics(
            stats.fit_view(block_of, len(space.lineages))
        )
        assert not adaptive.planned_
        sd = np.sqrt(adaptive.coef_var_)
        assert np.max(np.abs(again.coef_mean_ - adaptive.coef_mean_) / sd) < 1e-5
        np.testing.assert_allclose(again.coef_var_, adaptive.coef_var_, rtol=1e-5)
        reader.evidence.close()


def test_a_superseded_row_out_of_range_no_longer_fails_the_fits(tmp_path: Path) -> None:
    with fast_dir(tmp_path) as base:
        reader = _reader(base)
        rng = np.random.default_rng(4)
        r = reader.causal_reward.range
        roots = []
        for i in range(12):
            arm = i % 3
            row = decision(reader, i, _features(rng), proposed=CARDS[(arm - 1) % 2], z=int(arm > 0))
            observe(reader, row, gain=0.1, cited=arm > 0)
            lineage(reader, row, 0.3 * r)
            roots.append(row)
        lineage(reader, roots[4], 90.0 * r, version=2)  # y^L = 90: its square leaves the range
        fit = reader.heads_for(context(10_000))
        assert fit.lineage is None and "lineage row" in fit.failure
        lineage(reader, roots[4], 0.25 * r, version=3)
        fit = reader.heads_for(context(10_000))
        assert fit.failure == "" and fit.lineage is not None
        # the same as a reader that never saw the bad version between two syncs
        fresh = _fresh(reader.heads)
        fresh.rows.sync()
        again = fresh.fitted(fresh.rows.last_width, reader.store.cards()).lineage
        assert again is not None
        assert np.array_equal(fit.lineage.coef_mean_, again.coef_mean_)
        reader.evidence.close()
