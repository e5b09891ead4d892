"""A block fit's arm law of one card (``LogisticLaplaceHead.linear_predictor``) solves with
the Fisher information on the card's columns alone: the very numbers of two full solves."""

from __future__ import annotations

import numpy as np

from gigaevo.memory.v2.causal import DesignSpace, LogisticLaplaceHead


def _block_head() -> tuple[DesignSpace, LogisticLaplaceHead]:
    """A block-arrowhead fit on 24 lineages, rows on L00-L03 only (L04-L23 inactive)."""
    rng = np.random.default_rng(5)
    space = DesignSpace(3, tuple(f"L{i:02d}" for i in range(24)), kind_contrast=True)
    rows, d = [], []
    for i in range(160):
        x = np.array([1.0, rng.uniform(-1, 1), rng.uniform(0, 1)])
        treated = i % 3 != 0
        lineage = f"L{i % 4:02d}"
        rows.append(space.row(x, 1, lineage, "program") if treated else space.row(x, 0))
        d.append(float(rng.random() < (0.4 if treated and lineage == "L01" else 0.15)))
    mu, v = space.invalidity_prior(lineage_intercept_sd=0.8)
    layout = (space.shared_size, space.n_context)
    head = LogisticLaplaceHead(mu, v, block_layout=layout).fit(np.array(rows), np.array(d))
    assert head.ok_ and head.block_factor is not None  # the block path
    return space, head


def _full(head: LogisticLaplaceHead, z0: np.ndarray, z1: np.ndarray):
    """The law from two full solves (the formula before the card-local one)."""
    s = np.vstack([z0, z1])
    sigma_s = np.column_stack([head._precision.solve(z0), head._precision.solve(z1)])
    return s @ head.coef_, s @ sigma_s


def test_a_cards_law_is_the_two_full_solves_bit_for_bit() -> None:
    space, head = _block_head()
    rng = np.random.default_rng(0)
    pairs = []
    for lineage in ("L00", "L01", "L03", "L07", "L23"):  # active and inactive blocks
        for state in ("unassessed", "applicable"):
            x = np.array([1.0, rng.uniform(-1, 1), rng.uniform(0, 1)])
            pairs.append((space.row(x, 0), space.row(x, 1, lineage, "insight", state)))
    x = np.array([1.0, 0.2, 0.9])
    pairs.append((space.row(x, 0), space.row(x, 0)))  # no lineage block at all
    two = space.row(x, 1, "L01", "program") + space.row(x, 1, "L09", "program")
    pairs.append((space.row(x, 1, "L02", "insight"), two))  # three blocks, one inactive
    for z0, z1 in pairs:
        mean, cov = head.linear_predictor(z0, z1)
        want_mean, want_cov = _full(head, z0, z1)
        assert np.array_equal(mean, want_mean) and np.array_equal(cov, want_cov)
        assert np.array_equal(np.signbit(cov), np.signbit(want_cov))


def test_the_touched_solve_is_the_full_solve_on_the_touched_columns() -> None:
    space, head = _block_head()
    x = np.array([1.0, -0.4, 0.3])
    rows = np.vstack([space.row(x, 0), space.row(x, 1, "L02", "insight", "applicable")])
    touched = np.flatnonzero(rows.any(axis=0))
    got = head._precision.solve_touched(rows)
    full = np.column_stack([head._precision.solve(r) for r in rows])
    assert got.shape == (space.size, 2)
    assert np.array_equal(got[touched], full[touched])
    untouched = np.setdiff1d(np.arange(space.size), touched)
    assert not got[untouched].any() and full[untouched].any()  # the full solve fills them
