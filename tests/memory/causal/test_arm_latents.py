"""Projected world draws (``head_latents``) have the law of projected full coefficient draws."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal import (
    BayesianLinearHead,
    BlockDesign,
    CandidateCard,
    DesignSpace,
    LogisticLaplaceHead,
)
from gigaevo.memory.v2.causal.arrowhead import BlockPosterior
from gigaevo.memory.v2.causal.projection import MixtureProjector, draw_arm_pairs, head_latents
from gigaevo.memory.v2.causal.selection import card_rows

C = 4
N = 40_000


def _space() -> DesignSpace:
    return DesignSpace(C, tuple(f"L{i:03d}" for i in range(24)))


def _context(rng: np.random.Generator) -> np.ndarray:
    return np.r_[1.0, rng.uniform(-1, 1, C - 1)]


def _fit(space: DesignSpace, n_rows: int, seed: int):
    """Both heads on rows of the first 8 lineages (the other 16 stay cold)."""
    rng = np.random.default_rng(seed)
    rows, d, y = [], [], []
    for _ in range(n_rows):
        x = _context(rng)
        treated = rng.random() < 0.6
        lin = space.lineages[int(rng.integers(8))]
        rows.append(space.row(x, 1, lin, "insight") if treated else space.row(x, 0))
        d.append(float(rng.random() < 0.15))
        y.append(rng.normal(0.05 * treated * x[1], 0.1))
    x, d, y = np.array(rows).reshape(-1, space.size), np.array(d), np.array(y)
    layout = (space.shared_size, C)
    imm = BayesianLinearHead(space.utility_prior_variance(), block_layout=layout)
    imm.fit(x, y, np.zeros(len(y)))
    mu, v = space.invalidity_prior()
    return imm, LogisticLaplaceHead(mu, v, layout).fit(x, d)


def _cards() -> list[CandidateCard]:
    """Active and cold lineages, and two lineages touched by two cards each (C-vector path)."""
    out = [CandidateCard(f"a{i}", f"L{i:03d}", "insight") for i in (0, 3)]
    out += [CandidateCard(f"c{i}", f"L{i:03d}", "program") for i in (12, 20)]
    out += [CandidateCard("s0", "L005", "insight"), CandidateCard("s1", "L005", "program")]
    out += [CandidateCard("t0", "L017", "insight"), CandidateCard("t1", "L017", "program")]
    return out


def _exact(head, space: DesignSpace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of rows @ theta under the head's (mixture) posterior, dense."""
    if isinstance(head, LogisticLaplaceHead):
        factor = head.block_factor
        assert factor is not None
        return rows @ head.coef_, rows @ factor.dense_cov() @ rows.T
    w, means = head.weights_, head.component_means_ @ rows.T
    mean = w @ means
    covs = [rows @ p.dense_cov() @ rows.T for p in head.components_]
    dev = means - mean
    return mean, np.einsum("k,kij->ij", w, np.array(covs)) + (dev.T * w) @ dev


def _assert_law(draws: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> None:
    """Sample mean and covariance within 5 Monte Carlo standard errors of the exact ones."""
    n = len(draws)
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(draws.mean(axis=0) - mean) <= 5.0 * sd / np.sqrt(n) + 1e-12)
    got = np.cov(draws, rowvar=False)
    se = np.sqrt((np.outer(sd, sd) ** 2 + cov**2) / n)
    assert np.all(np.abs(got - cov) <= 5.0 * se + 1e-12)


@pytest.mark.parametrize("n_rows", [300, 0], ids=["fitted", "cold"])
def test_projected_world_draws_match_full_vector_draws(n_rows: int) -> None:
    space = _space()
    imm, inv = _fit(space, n_rows, seed=7)
    assert all(isinstance(p, BlockPosterior) for p in imm.components_)
    assert inv.block_factor is not None
    if n_rows:
        assert len(imm.components_[0].active) == 8 and len(imm.weights_) > 1
    x = _context(np.random.default_rng(3))
    cards = _cards()
    z1 = card_rows(space, x, cards)
    assert isinstance(z1, BlockDesign)
    z0 = space.row(x, 0)
    rows = np.vstack([z0, z1.to_dense()])
    for seed, head in enumerate((imm, inv)):
        mean, cov = _exact(head, space, rows)
        e0, e1 = head_latents(head, z0, z1, N, np.random.default_rng(seed))
        new = np.column_stack([e0, e1])
        coef = head.sample(N, np.random.default_rng(100 + seed))  # the full-vector reference
        old = coef @ rows.T
        _assert_law(old, mean, cov)
        _assert_law(new, mean, cov)
        # the joint covariance covers coherence: cards of one world share the shared-block
        # draw, and cards sharing a lineage block (s0, s1 and t0, t1) share its draw
        i, j = (k + 1 for k, c in enumerate(cards) if c.lineage == "L005")
        assert (
            abs(
                np.corrcoef(new[:, i], new[:, j])[0, 1] - cov[i, j] / np.sqrt(cov[i, i] * cov[j, j])
            )
            < 0.02
        )


def test_projected_draws_are_seeded() -> None:
    space = _space()
    imm, inv = _fit(space, 300, seed=9)
    x = _context(np.random.default_rng(4))
    z0, z1 = space.row(x, 0), card_rows(space, x, _cards())
    for head in (imm, inv):
        a = head_latents(head, z0, z1, 256, np.random.default_rng(1))
        b = head_latents(head, z0, z1, 256, np.random.default_rng(1))
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        assert a[1].shape == (256, len(_cards()))


def test_summary_pairs_match_the_exact_bivariate_law() -> None:
    """Summary draws: MixtureProjector (immediate) and the Laplace pair (invalidity)."""
    space = _space()
    imm, inv = _fit(space, 300, seed=11)
    x = _context(np.random.default_rng(5))
    for card in (CandidateCard("a", "L002", "insight"), CandidateCard("c", "L019", "program")):
        z0, z1 = space.row(x, 0), space.row(x, 1, card.lineage, card.kind)
        rows = np.vstack([z0, z1])
        pair = MixtureProjector(imm, space).draw(card.lineage, z0, z1, N, np.random.default_rng(2))
        _assert_law(pair, *_exact(imm, space, rows))
        means, covs = inv.linear_predictors(z0, z1[None, :])
        eta = draw_arm_pairs(means[0], covs[0], N, np.random.default_rng(3))
        _assert_law(eta, *_exact(inv, space, rows))
