"""The factored posteriors (block-arrowhead, one-level and several-level pencils) against
dense linear algebra written here.

For a residual sd sigma and rows with noise levels omega_i^2, with W = diag(1/(sigma^2 +
omega_i^2)): Lambda = diag(1/v) + X'WX, the posterior mean Lambda^-1 X'Wy, the covariance
Lambda^-1 and log p(y | sigma) = log N(y; 0, X V X' + W^-1) (numpy and scipy on the dense
(n, P) design). Every factored answer (mean, evidence, marginal and full covariance,
solves, draws' covariance, arm quadratic forms, the sparse design products) must equal it.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from gigaevo.memory.v2.causal import DesignSpace
from gigaevo.memory.v2.causal.arrowhead import (
    BlockDesign,
    BlockStatistics,
    arm_quadratics,
    block_posterior,
    row_products,
)
from gigaevo.memory.v2.causal.errors import DesignError
from gigaevo.memory.v2.causal.levels import LevelPencil
from gigaevo.memory.v2.causal.spectral import (
    DensePencil,
    NoisePencil,
    batched_cholesky,
    lower_inverse,
)
from gigaevo.memory.v2.causal.suffstats import GaussianStatistics, RowTerms

C, B = 3, 6
SPACE = DesignSpace(C, lineages=tuple(f"L{i}" for i in range(B)), kind_contrast=True)
PS = SPACE.shared_size
SIGMAS = np.array([0.03, 0.2, 1.3])


def _rows(n: int, levels: tuple[float, ...], seed: int):
    """Controls and treated rows of lineages L0..L3 (L4, L5 without rows)."""
    rng = np.random.default_rng(seed)
    x, keys = [], []
    for i in range(n):
        xc = np.array([1.0, rng.uniform(-1, 1), rng.uniform(0, 1)])
        if i % 3 == 0:
            x.append(SPACE.row(xc, 0))
            keys.append(None)
        else:
            lin = f"L{int(rng.integers(4))}"
            x.append(SPACE.row(xc, 1, lineage=lin, kind=("insight", "program")[i % 2]))
            keys.append(lin)
    y = rng.normal(0.02, 0.1, n)
    omega = np.sqrt(np.array([levels[i % len(levels)] for i in range(n)]))
    return np.array(x), y, omega, keys


def _dense(x, y, omega, v, sigma):
    w = 1.0 / (sigma**2 + omega**2)
    lam = np.diag(1.0 / v) + (x.T * w) @ x
    cov = np.linalg.inv(lam)
    mean = cov @ (x.T @ (w * y))
    cov_y = (x * v) @ x.T + np.diag(1.0 / w)
    log_ev = float(multivariate_normal(np.zeros(len(y)), cov_y).logpdf(y))
    return lam, mean, cov, log_ev


@pytest.fixture(scope="module")
def data():
    x, y, omega, keys = _rows(30, (0.0, 0.05**2, 0.15**2), seed=1)
    v = SPACE.utility_prior_variance() * np.random.default_rng(2).uniform(0.5, 2.0, SPACE.size)
    return x, y, omega, keys, v


@pytest.mark.parametrize("sigma", list(SIGMAS))
def test_block_posterior_is_the_dense_posterior(data, sigma: float) -> None:
    x, y, omega, _, v = data
    _, mean, cov, log_ev = _dense(x, y, omega, v, sigma)
    post = block_posterior(BlockStatistics(BlockDesign.from_dense(x, PS, C), y, omega), v, sigma)
    np.testing.assert_allclose(post.mean, mean, rtol=1e-9, atol=1e-12)
    assert post.log_evidence == pytest.approx(log_ev, abs=1e-9)
    np.testing.assert_allclose(post.dense_cov(), cov, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(post.marginal_variance(), np.diag(cov), rtol=1e-9)
    rhs = np.random.default_rng(3).normal(size=SPACE.size)
    np.testing.assert_allclose(post.solve(rhs), cov @ rhs, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(post.apply_inverse(rhs), cov @ rhs, rtol=1e-9, atol=1e-12)
    # the draws are mean + xi R for a fixed R: their covariance R'R must be Lambda^-1
    r = post.sample(np.eye(SPACE.size)) - post.mean
    np.testing.assert_allclose(r.T @ r, cov, rtol=1e-9, atol=1e-14)


def test_kept_row_products_give_the_same_posterior(data) -> None:
    x, y, omega, _, v = data
    plain = BlockDesign.from_dense(x, PS, C)
    kept = BlockDesign(
        plain.shared,
        plain.lineage,
        plain.lineage_part,
        B,
        row_products(plain.shared, plain.lineage_part),
    )
    _, mean, _, log_ev = _dense(x, y, omega, v, 0.2)
    post = block_posterior(BlockStatistics(kept, y, omega), v, 0.2)
    np.testing.assert_allclose(post.mean, mean, rtol=1e-9, atol=1e-12)
    assert post.log_evidence == pytest.approx(log_ev, abs=1e-9)
    # a subset of the rows keeps its products aligned
    sub = kept.take([5, 1, 7, 2, 9])
    np.testing.assert_array_equal(sub.to_dense(), x[[5, 1, 7, 2, 9]])
    _, mean, _, _ = _dense(x[[5, 1, 7, 2, 9]], y[[5, 1, 7, 2, 9]], omega[[5, 1, 7, 2, 9]], v, 0.2)
    post = block_posterior(BlockStatistics(sub, y[[5, 1, 7, 2, 9]], omega[[5, 1, 7, 2, 9]]), v, 0.2)
    np.testing.assert_allclose(post.mean, mean, rtol=1e-9, atol=1e-12)


def test_sparse_design_products_are_the_dense_ones(data) -> None:
    x, *_ = data
    design = BlockDesign.from_dense(x, PS, C)
    np.testing.assert_array_equal(design.to_dense(), x)
    rng = np.random.default_rng(4)
    vec, coef = rng.normal(size=SPACE.size), rng.normal(size=(5, SPACE.size))
    r = rng.normal(size=30)
    np.testing.assert_allclose(design.dot(vec), x @ vec, atol=1e-13)
    np.testing.assert_allclose(design.dot_draws(coef), coef @ x.T, atol=1e-13)
    np.testing.assert_allclose(design.rdot(r), x.T @ r, atol=1e-13)
    active, pos = design.active_positions()
    np.testing.assert_array_equal(active, [0, 1, 2, 3])
    np.testing.assert_array_equal(pos, [0, 1, 2, 3, -1, -1])
    two = x[1].copy()
    two[PS + 4 * C] = 1.0  # the row now touches two lineage blocks
    with pytest.raises(DesignError, match=r"^a design row touches more than one lineage block$"):
        BlockDesign.from_dense(np.vstack([x, two]), PS, C)


def test_arm_quadratics_are_the_dense_forms(data) -> None:
    """z0' L^-1 z0, z0' L^-1 z1_j and z1_j' L^-1 z1_j for treated rows of active and of
    row-less lineages, from a dense matrix and from a block design."""
    x, y, omega, _, v = data
    _, _, cov, _ = _dense(x, y, omega, v, 0.2)
    post = block_posterior(BlockStatistics(BlockDesign.from_dense(x, PS, C), y, omega), v, 0.2)
    xc = np.array([1.0, 0.3, 0.6])
    z0 = SPACE.row(xc, 0)
    z1 = np.array([SPACE.row(xc, 1, lineage=f"L{i}", kind="program") for i in range(B)])
    want = (z0 @ cov @ z0, z1 @ cov @ z0, np.einsum("jp,pq,jq->j", z1, cov, z1))
    for design in (z1, BlockDesign.from_dense(z1, PS, C)):
        q00, q01, q11 = arm_quadratics(post, z0, design)
        assert q00 == pytest.approx(want[0], rel=1e-10)
        np.testing.assert_allclose(q01, want[1], rtol=1e-10)
        np.testing.assert_allclose(q11, want[2], rtol=1e-10)
    # rows outside the arrowhead shape (two lineage blocks) are solved densely, same forms
    odd = z1.copy()
    odd[:, PS + 5 * C] = 0.4
    q00, q01, q11 = arm_quadratics(post, z0, odd)
    np.testing.assert_allclose(q01, odd @ cov @ z0, rtol=1e-10)
    np.testing.assert_allclose(q11, np.einsum("jp,pq,jq->j", odd, cov, odd), rtol=1e-10)
    with pytest.raises(DesignError, match=r"^the control row must not touch a lineage block$"):
        arm_quadratics(post, z1[0], BlockDesign.from_dense(z1, PS, C))


def _pencil_matches(pencil, truth):
    """Check a pencil's evidence, means and per-sigma posteriors against the dense ``truth``
    (mean, covariance, log evidence per sigma); (posterior, truth) pairs for further checks."""
    np.testing.assert_allclose(pencil.log_evidence(SIGMAS), [t[3] for t in truth], atol=1e-9)
    np.testing.assert_allclose(pencil.means(SIGMAS), [t[1] for t in truth], atol=1e-11)
    posts, means, var = pencil.posteriors(SIGMAS)
    for post, mean, vk, t in zip(posts, means, var, truth, strict=True):
        np.testing.assert_allclose(mean, t[1], atol=1e-11)
        np.testing.assert_allclose(vk, np.diag(t[2]), rtol=1e-9)
        assert post.log_evidence == pytest.approx(t[3], abs=1e-9)
    return list(zip(posts, truth, strict=True))


def test_one_level_pencils_are_the_dense_posteriors(data) -> None:
    x, y, _, _, v = data
    omega = np.full(len(y), 0.05)
    truth = [_dense(x, y, omega, v, s) for s in SIGMAS]
    pencil = NoisePencil(BlockStatistics(BlockDesign.from_dense(x, PS, C), y, omega), v)
    for post, t in _pencil_matches(pencil, truth):
        np.testing.assert_allclose(post.dense_cov(), t[2], rtol=1e-8, atol=1e-14)
        r = post.sample(np.eye(SPACE.size)) - post.mean
        np.testing.assert_allclose(r.T @ r, t[2], rtol=1e-8, atol=1e-14)
    for dense in (
        DensePencil(x, y, 0.05**2, v),
        DensePencil.from_gram(x.T @ x, x.T @ y, float(y @ y), len(y), 0.05**2, v),
    ):
        np.testing.assert_allclose(dense.log_evidence(SIGMAS), [t[3] for t in truth], atol=1e-9)
        np.testing.assert_allclose(dense.means(SIGMAS), [t[1] for t in truth], atol=1e-11)
        np.testing.assert_allclose(dense.covariances(SIGMAS), [t[2] for t in truth], atol=1e-12)
    with pytest.raises(ValueError, match=r"^the noise pencil needs exactly one omega level$"):
        NoisePencil(BlockStatistics(BlockDesign.from_dense(x, PS, C), y, data[2]), v)


def test_the_several_level_pencil_is_the_dense_posterior(data) -> None:
    x, y, omega, keys, v = data
    truth = [_dense(x, y, omega, v, s) for s in SIGMAS]
    stats = GaussianStatistics(PS, C)
    for z, yi, om, key in zip(x, y, omega, keys, strict=True):
        part = None if key is None else z[SPACE.lineage_slice(key)]
        stats.add(RowTerms(z[:PS], part, key, float(yi), float(om) ** 2))
    pencil = LevelPencil(stats.fit_view({k: i for i, k in enumerate(SPACE.lineages)}, B), v)
    for post, t in _pencil_matches(pencil, truth):
        np.testing.assert_allclose(post.marginal_variance(), np.diag(t[2]), rtol=1e-9)
        r = post.sample(np.eye(SPACE.size)) - post.mean
        np.testing.assert_allclose(r.T @ r, t[2], rtol=1e-8, atol=1e-14)


def test_batched_factors_are_numpys() -> None:
    rng = np.random.default_rng(5)
    m = rng.normal(size=(2, 7, 4, 4))
    spd = m @ m.transpose(0, 1, 3, 2) + 0.1 * np.eye(4)
    chol = batched_cholesky(spd)
    np.testing.assert_allclose(chol, np.linalg.cholesky(spd), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(lower_inverse(chol), np.linalg.inv(chol), rtol=1e-10, atol=1e-12)
    bad = spd.copy()
    bad[1, 3] = -np.eye(4)
    with pytest.raises(np.linalg.LinAlgError):
        batched_cholesky(bad)


@pytest.mark.parametrize("sigma", list(SIGMAS))
def test_a_posterior_without_its_inverse_factors_solves_by_back_substitution(
    data, sigma: float
) -> None:
    """``solve`` has two routes: products with the inverse factors the builder kept, and,
    without them, the Schur complement and back-substitution; both are Lambda^-1 rhs."""
    import dataclasses

    x, y, omega, _, v = data
    _, _, cov, _ = _dense(x, y, omega, v, sigma)
    post = block_posterior(BlockStatistics(BlockDesign.from_dense(x, PS, C), y, omega), v, sigma)
    bare = dataclasses.replace(post, precomputed=None)
    for seed in (3, 4):
        rhs = np.random.default_rng(seed).normal(size=SPACE.size)
        np.testing.assert_allclose(bare.solve(rhs), cov @ rhs, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(post.solve(rhs), cov @ rhs, rtol=1e-9, atol=1e-12)
