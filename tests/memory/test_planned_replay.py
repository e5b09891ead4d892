"""A resumed reader plans and fits the immediate head as the uninterrupted one did
(memory-model.md "Incremental fits", issue 16.1).

The reader of a ledger past several plan points (256, 272, 289, ... valid rows) fits along
the way; a fresh head fitter on the same ledger (a resumed session) syncs every row at
once. Both must hold the same plan and the very same immediate head, bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.memory.ledger_rows import fast_dir
from tests.memory.test_evictor import build_run
from tests.memory.test_lineage_plan_replay import _fresh


def test_a_fresh_fitter_plans_and_fits_as_the_one_that_fitted_all_along(tmp_path: Path) -> None:
    with fast_dir(tmp_path) as base:
        run = build_run(base, effect=0.02, p_invalid=0.0, seed=5)  # 290 valid rows
        heads = run.reader.heads
        cards = run.store.cards()
        rng = np.random.default_rng(5)
        for i in range(70):
            parent = float(rng.uniform(3.0, 7.0))
            row = run.row(z=i % 2, parent=parent, island=i % 2, cell=i % 3)
            run.commit(row, y=0.01 + 0.02 * (i % 2) + 0.05 * float(rng.standard_normal()))
            if i % 9 == 0:
                heads.rows.sync()
                assert heads.fitted(heads.rows.last_width, cards).immediate is not None
        heads.rows.sync()
        along = heads.fitted(heads.rows.last_width, cards).immediate
        fresh = _fresh(heads)
        fresh.rows.sync()
        again = fresh.fitted(fresh.rows.last_width, cards).immediate
        assert along is not None and again is not None
        assert heads.plans >= 3 and fresh.plans == 1  # 256, 272, 289, ... rows; one at resume
        assert along.planned_ and again.planned_
        assert along.quadrature_.pieces == again.quadrature_.pieces
        assert np.array_equal(along.coef_mean_, again.coef_mean_)
        assert np.array_equal(along.weights_, again.weights_)
        assert np.array_equal(along.log_sd_nodes_, again.log_sd_nodes_)
        run.reader.evidence.close()
