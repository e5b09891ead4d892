"""The arm-pair law of a dense (at most 64 columns) head, where the card summary takes it
from each node's full covariance, against the quadratic forms formed here; and the 2 x 2
Cholesky factor by its defining identity."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal import BayesianLinearHead, DesignSpace, LogisticLaplaceHead
from gigaevo.memory.v2.causal.projection import MixtureProjector, chol2x2, head_latents

SPACE = DesignSpace(3, lineages=("a", "b", "c"), kind_contrast=True)


@pytest.fixture(scope="module")
def heads():
    rng = np.random.default_rng(1)
    rows, y, d = [], [], []
    for i in range(80):
        x = np.array([1.0, rng.uniform(-1, 1), rng.uniform(0, 1)])
        lin = (None, "a", "b")[i % 3]  # "c" has no rows
        rows.append(SPACE.row(x, 0) if lin is None else SPACE.row(x, 1, lin, "insight"))
        y.append(rng.normal(0.1 if lin == "a" else 0.0, 0.1))
        d.append(float(rng.random() < 0.1))
    x = np.array(rows)
    imm = BayesianLinearHead(SPACE.utility_prior_variance()).fit(x, np.array(y))
    mu, v = SPACE.invalidity_prior()
    return imm, LogisticLaplaceHead(mu, v).fit(x, np.array(d))


def _assert_law(draws: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> None:
    """Sample mean and covariance within 5 Monte Carlo standard errors of the exact ones."""
    n, sd = len(draws), np.sqrt(np.diag(cov))
    assert np.all(np.abs(draws.mean(axis=0) - mean) <= 5.0 * sd / np.sqrt(n))
    se = np.sqrt((np.outer(sd, sd) ** 2 + cov**2) / n)
    assert np.all(np.abs(np.cov(draws, rowvar=False) - cov) <= 5.0 * se)


@pytest.mark.parametrize("lineage", ["a", "c"])
def test_node_moments_are_the_dense_quadratic_forms(heads, lineage: str) -> None:
    imm, _ = heads
    xc = np.array([1.0, 0.4, 0.3])
    z0, z1 = SPACE.row(xc, 0), SPACE.row(xc, 1, lineage, "program")
    means, covs = MixtureProjector(imm, SPACE).moments(lineage, z0, z1)
    s = np.vstack([z0, z1])
    assert imm.coef_cov_ is not None  # a dense fit: full node covariances
    np.testing.assert_allclose(means, imm.component_means_ @ s.T, atol=1e-13)
    want = np.array([s @ p.cov @ s.T for p in imm.components_])
    np.testing.assert_allclose(covs, want, rtol=1e-10, atol=1e-15)
    with pytest.raises(ValueError, match=r"^design rows touch columns outside the card's blocks$"):
        MixtureProjector(imm, SPACE).moments(lineage, z0, SPACE.row(xc, 1, "b", "program"))


def test_mixture_draws_have_the_mixture_law(heads) -> None:
    imm, _ = heads
    xc = np.array([1.0, -0.2, 0.8])
    z0, z1 = SPACE.row(xc, 0), SPACE.row(xc, 1, "a", "insight")
    s = np.vstack([z0, z1])
    w = imm.weights_
    node_means = imm.component_means_ @ s.T
    mean = w @ node_means
    dev = node_means - mean
    cov = np.einsum("k,kij->ij", w, [s @ p.cov @ s.T for p in imm.components_])
    cov = cov + (dev.T * w) @ dev
    draws = MixtureProjector(imm, SPACE).draw("a", z0, z1, 40_000, np.random.default_rng(2))
    _assert_law(draws, mean, cov)


def test_dense_laplace_latents_are_projected_coefficient_draws(heads) -> None:
    _, inv = heads
    xc = np.array([1.0, 0.1, 0.2])
    z0 = SPACE.row(xc, 0)
    z1 = np.array([SPACE.row(xc, 1, k, "insight") for k in SPACE.lineages])
    eta0, eta1 = head_latents(inv, z0, z1, 30_000, np.random.default_rng(3))
    assert eta0.shape == (30_000,) and eta1.shape == (30_000, 3)
    assert inv.coef_cov_ is not None
    s = np.vstack([z0, z1])
    mean, cov = s @ inv.coef_, s @ inv.coef_cov_ @ s.T
    _assert_law(np.column_stack([eta0, eta1]), mean, cov)


def test_two_by_two_factors() -> None:
    covs = np.array([[[4.0, 1.0], [1.0, 2.0]], [[1.0, 1.0], [1.0, 1.0]], [[0.0, 0.0], [0.0, 3.0]]])
    roots = chol2x2(covs)
    np.testing.assert_allclose(roots @ roots.transpose(0, 2, 1), covs, atol=1e-14)
    assert np.all(roots[:, 0, 1] == 0.0)
    np.testing.assert_allclose(roots[0], [[2.0, 0.0], [0.5, np.sqrt(1.75)]])
    with pytest.raises(np.linalg.LinAlgError):
        chol2x2(np.array([[[1.0, 2.0], [2.0, 1.0]]]))
    with pytest.raises(np.linalg.LinAlgError):
        chol2x2(np.array([[[-1.0, 0.0], [0.0, 1.0]]]))
