"""Wide designs (many card lineages) take the block-arrowhead paths and agree with dense ones."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal import (
    BayesianLinearHead,
    BlockDesign,
    CandidateCard,
    DesignSpace,
    LogisticLaplaceHead,
    arm_values,
    select,
)
from gigaevo.memory.v2.causal.arrowhead import DENSE_MAX_SIZE
from gigaevo.memory.v2.causal.selection import card_rows

C = 5


def _space(n: int, *, rag: bool = False) -> DesignSpace:
    return DesignSpace(C, tuple(f"L{i:03d}" for i in range(n)), rag_contrast=rag)


def _cards(space: DesignSpace, rng: np.random.Generator) -> list[CandidateCard]:
    kinds = ("insight", "program")
    rags = ("applicable", "not_applicable", "unassessed", None)
    out = []
    for i, lin in enumerate(space.lineages):
        rag = rags[int(rng.integers(4))] if space.rag_contrast else None
        out.append(CandidateCard(f"c{i}", lin, kinds[i % 2], rag))
    return out


@pytest.mark.parametrize("rag", [False, True])
def test_card_rows_match_dense_rows(rag: bool) -> None:
    rng = np.random.default_rng(1)
    space = _space(40, rag=rag)
    assert space.size > DENSE_MAX_SIZE
    x = np.r_[1.0, rng.uniform(-1, 1, C - 1)]
    cards = _cards(space, rng)
    rows = card_rows(space, x, cards)
    assert isinstance(rows, BlockDesign)
    dense = np.array([space.row(x, 1, c.lineage, c.kind, c.rag) for c in cards])
    np.testing.assert_array_equal(rows.to_dense(), dense)
    beta = rng.standard_normal((7, space.size))
    np.testing.assert_allclose(rows.dot_draws(beta), beta @ dense.T, rtol=0, atol=1e-12)
    small = _space(2)
    assert isinstance(card_rows(small, x, _cards(small, rng)), np.ndarray)


def _world(space: DesignSpace, rng: np.random.Generator, n: int = 400):
    rows, d, y = [], [], []
    for _ in range(n):
        x = np.r_[1.0, rng.uniform(-1, 1, C - 1)]
        lin = space.lineages[int(rng.integers(len(space.lineages) // 2))]
        treated = rng.random() < 0.6
        rows.append(space.row(x, 1, lin, "insight") if treated else space.row(x, 0))
        d.append(float(rng.random() < 0.1))
        y.append(rng.normal(0.02 * treated, 0.1))
    return np.array(rows), np.array(d), np.array(y)


def test_heads_switch_to_the_block_path_and_agree_with_dense() -> None:
    rng = np.random.default_rng(5)
    space = _space(30)
    x, d, y = _world(space, rng)
    layout = (space.shared_size, C)
    mu, v = space.invalidity_prior()
    dense_inv = LogisticLaplaceHead(mu, v).fit(x, d)
    block_inv = LogisticLaplaceHead(mu, v, layout).fit(x, d)
    assert dense_inv.coef_cov_ is not None and block_inv.coef_cov_ is None  # block form kept
    np.testing.assert_allclose(block_inv.coef_, dense_inv.coef_, atol=1e-6)
    pv = space.utility_prior_variance()
    dense_imm = BayesianLinearHead(pv).fit(x, y, np.zeros(len(y)))
    block_imm = BayesianLinearHead(pv, block_layout=layout).fit(x, y, np.zeros(len(y)))
    assert dense_imm.coef_cov_ is not None and block_imm.coef_cov_ is None
    np.testing.assert_allclose(block_imm.coef_mean_, dense_imm.coef_mean_, atol=1e-8)
    np.testing.assert_allclose(block_imm.coef_var_, dense_imm.coef_var_, rtol=1e-6)
    # the selection over the block rows equals the one over dense rows
    xc = np.r_[1.0, rng.uniform(-1, 1, C - 1)]
    cards = _cards(space, rng)
    rows = card_rows(space, xc, cards)
    dense_rows = rows.to_dense() if isinstance(rows, BlockDesign) else rows
    m_b, c_b = block_inv.linear_predictors(space.row(xc, 0), rows)
    m_d, c_d = dense_inv.linear_predictors(space.row(xc, 0), dense_rows)
    np.testing.assert_allclose(m_b, m_d, atol=1e-6)
    np.testing.assert_allclose(c_b, c_d, atol=1e-6)
    beta = block_imm.sample(64, np.random.default_rng(0))
    gamma = block_inv.sample(64, np.random.default_rng(1))
    got = arm_values(beta, gamma, space.row(xc, 0), rows, (-0.5, 0.5))
    want = arm_values(beta, gamma, space.row(xc, 0), dense_rows, (-0.5, 0.5))
    np.testing.assert_allclose(got.effect, want.effect, rtol=0, atol=1e-12)


def test_small_spaces_keep_the_dense_reference_path() -> None:
    """At most DENSE_MAX_SIZE columns the layout is ignored: identical to a plain dense fit."""
    rng = np.random.default_rng(2)
    space = _space(2)
    x, d, y = _world(space, rng, 120)
    layout = (space.shared_size, C)
    pv = space.utility_prior_variance()
    a = BayesianLinearHead(pv).fit(x, y, np.zeros(len(y)))
    b = BayesianLinearHead(pv, block_layout=layout).fit(x, y, np.zeros(len(y)))
    np.testing.assert_array_equal(
        a.sample(50, np.random.default_rng(3)), b.sample(50, np.random.default_rng(3))
    )
    mu, v = space.invalidity_prior()
    ga, gb = LogisticLaplaceHead(mu, v).fit(x, d), LogisticLaplaceHead(mu, v, layout).fit(x, d)
    xc = np.r_[1.0, rng.uniform(-1, 1, C - 1)]
    cards = _cards(space, rng)
    sa = select("key", space, xc, (-0.5, 0.5), 1.0, cards, a, ga)
    sb = select("key", space, xc, (-0.5, 0.5), 1.0, cards, b, gb)
    assert sa.draw == sb.draw and np.array_equal(sa.proposal.rho, sb.proposal.rho)


def test_a_wide_head_with_no_rows_yet_is_its_prior() -> None:
    """A new run on a shared bank of many cards: its immediate head is wider than
    ``DENSE_MAX_SIZE`` columns before its first row. The block path then fits no rows (it
    raised on an empty stack, and the reader abstained until a row came), and gives the
    prior, as the dense path does on a narrow head."""
    from gigaevo.memory.v2.causal.suffstats import GaussianStatistics

    ps, c, n_lineages = 9, 4, 20
    v = np.linspace(0.2, 0.9, ps + c * n_lineages)
    assert len(v) > DENSE_MAX_SIZE
    mu0 = np.linspace(-0.3, 0.3, len(v))
    head = BayesianLinearHead(v, prior_mean=mu0, block_layout=(ps, c)).fit_statistics(
        GaussianStatistics(ps, c).fit_view({}, n_lineages)
    )
    np.testing.assert_allclose(head.coef_mean_, mu0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(head.coef_var_, v, rtol=1e-12)
    draws = head.sample(500, np.random.default_rng(0))
    np.testing.assert_allclose(draws.mean(axis=0), mu0, atol=5 * np.sqrt(v.max() / 500))
