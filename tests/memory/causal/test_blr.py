"""Ground truths 2-4 (memory-model.md "Ground-truth tests") for the immediate-utility head."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from gigaevo.memory.v2.causal import (
    BayesianLinearHead,
    abstain_proposal,
    conditional_posterior,
    head_allows_selection,
)
from gigaevo.memory.v2.causal.quadrature import adaptive_gauss_legendre
from tests.memory.causal.simulate import average_effect_direction, card_world


def _dense_truth(
    x: np.ndarray, y: np.ndarray, sigma: float, v: np.ndarray, mu: np.ndarray, omega: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """Brute force: y ~ N(X mu, X V X' + D) and the Gaussian conditioning formulas."""
    big_v = np.diag(v)
    cov_y = x @ big_v @ x.T + np.diag(sigma**2 + omega**2)
    gain = big_v @ x.T @ np.linalg.inv(cov_y)
    mean = mu + gain @ (y - x @ mu)
    cov = big_v - gain @ x @ big_v
    return mean, cov, float(multivariate_normal(x @ mu, cov_y).logpdf(y))


@pytest.mark.parametrize("sigma", [0.02, 0.2, 1.5])
def test_conjugacy_matches_dense_gaussian(sigma: float) -> None:
    rng = np.random.default_rng(7)
    n, p = 60, 9
    x = rng.normal(size=(n, p))
    y = rng.normal(size=n) * 0.3
    omega = rng.choice([0.0, 0.05, 0.15], size=n)
    v = rng.uniform(0.05, 0.6, size=p)
    mu = rng.normal(size=p) * 0.1
    post = conditional_posterior(x, y, sigma, v, mu, omega)
    mean, cov, log_ev = _dense_truth(x, y, sigma, v, mu, omega)
    np.testing.assert_allclose(post.mean, mean, atol=1e-8)
    np.testing.assert_allclose(post.cov, cov, atol=1e-8)
    assert post.log_evidence == pytest.approx(log_ev, abs=1e-8)


def test_conjugacy_with_many_distinct_omegas() -> None:
    rng = np.random.default_rng(8)
    x = rng.normal(size=(30, 4))
    y = rng.normal(size=30)
    omega = rng.uniform(0.0, 0.3, size=30)  # > 8 distinct levels: row-wise path
    v = np.full(4, 0.5)
    post = conditional_posterior(x, y, 0.3, v, None, omega)
    mean, cov, log_ev = _dense_truth(x, y, 0.3, v, np.zeros(4), omega)
    np.testing.assert_allclose(post.mean, mean, atol=1e-8)
    np.testing.assert_allclose(post.cov, cov, atol=1e-8)
    assert post.log_evidence == pytest.approx(log_ev, abs=1e-8)


def test_sigma_mixture_healthy_and_matches_brute_force_integral() -> None:
    world = card_world(80, 40, np.random.default_rng(3))
    v = world.space.utility_prior_variance()
    head = BayesianLinearHead(v).fit(world.design, world.y)
    assert head.health_.ok and not head.health_.at_boundary
    assert head.weights_.sum() == pytest.approx(1.0)
    # brute-force trapezoid over tau on a fine grid as independent truth for E[beta], E[sigma^2]
    taus = np.linspace(np.log(0.01), np.log(5.0), 20001)
    logk = np.array(
        [
            conditional_posterior(world.design, world.y, np.exp(t), v).log_evidence
            - 0.5 * ((t - np.log(0.2)) / 0.75) ** 2
            for t in taus[::20]
        ]
    )
    grid = taus[::20]
    w = np.exp(logk - logk.max())
    w /= np.trapezoid(w, grid)
    sigma2 = np.trapezoid(w * np.exp(2 * grid), grid)
    assert head.residual_variance_ == pytest.approx(sigma2, rel=1e-3)
    assert np.sqrt(head.residual_variance_) == pytest.approx(0.05, rel=0.25)


def test_draws_match_mixture_moments() -> None:
    world = card_world(40, 30, np.random.default_rng(4))
    head = BayesianLinearHead(world.space.utility_prior_variance()).fit(world.design, world.y)
    draws = head.sample(40000, np.random.default_rng(0))
    sd = np.sqrt(head.coef_var_)
    assert np.max(np.abs(draws.mean(axis=0) - head.coef_mean_) / sd) < 0.05
    np.testing.assert_allclose(draws.std(axis=0), sd, rtol=0.03)


def test_draws_with_the_nodes_factored_in_one_batch_are_those_factored_one_by_one() -> None:
    """``sample`` factors the visited dense nodes in one batched call: the same factors as
    a call per node (each node's first draw factoring it), so the same draws to the bit."""
    world = card_world(40, 30, np.random.default_rng(4))
    v = world.space.utility_prior_variance()
    batched, single = (BayesianLinearHead(v).fit(world.design, world.y) for _ in range(2))
    for post in single.components_:  # factored one by one, as before the batch
        post.sample(np.zeros((1, len(v))))
    assert len(batched.components_) > 8
    for seed in range(3):
        a = batched.sample(500, np.random.default_rng(seed))
        b = single.sample(500, np.random.default_rng(seed))
        assert np.array_equal(a, b)


def _effect_posterior(n_cited: int, n_control: int, seed: int) -> tuple[float, float]:
    world = card_world(n_cited, n_control, np.random.default_rng(seed))
    head = BayesianLinearHead(world.space.utility_prior_variance()).fit(world.design, world.y)
    assert head.health_.ok and not head.health_.at_boundary
    c = average_effect_direction(world)
    return float(c @ head.coef_mean_), float(np.sqrt(c @ head.coef_cov_ @ c))


def test_convergence_effect_recovered() -> None:
    mean, sd = _effect_posterior(300, 129, seed=11)
    assert abs(mean - 0.05) < 0.03
    assert abs(mean - 0.05) < 4 * sd
    assert 0.003 < sd < 0.015  # memory-model.md "Ground-truth tests" (3): sd ~ 0.01
    _, sd_big = _effect_posterior(1200, 516, seed=12)
    assert sd_big / sd == pytest.approx(0.5, abs=0.12)  # sd shrinks like 1/sqrt(n)


def test_boundary_detected_and_policy_abstains() -> None:
    rng = np.random.default_rng(5)
    world = card_world(100, 60, rng, sigma=0.2)
    head = BayesianLinearHead(world.space.utility_prior_variance(), residual_sd_bounds=(0.01, 0.02))
    head.fit(world.design, world.y)
    assert head.health_.at_boundary
    assert head.health_.mass_upper >= 1e-4
    assert not head_allows_selection(head.health_)
    assert abstain_proposal().rho0 == 1.0


def test_cold_head_is_the_prior() -> None:
    world = card_world(1, 1, np.random.default_rng(0))
    v = world.space.utility_prior_variance()
    head = BayesianLinearHead(v).fit(world.design[:0], world.y[:0])
    assert head.health_.ok and not head.health_.at_boundary
    assert head.coef_cov_ is not None
    np.testing.assert_allclose(head.coef_cov_, np.diag(v), atol=1e-12)
    np.testing.assert_allclose(head.coef_mean_, 0.0, atol=1e-12)


def test_batched_kernel_gives_the_same_quadrature() -> None:
    """The vectorised kernel path of the quadrature places the same nodes as the scalar one."""

    def batch(t: np.ndarray) -> np.ndarray:
        return np.logaddexp(-0.5 * ((t + 1.0) / 0.3) ** 2, -2.0 - 0.5 * ((t - 0.7) / 0.1) ** 2)

    def scalar(t: float) -> float:
        return float(batch(np.array([t]))[0])

    ref = adaptive_gauss_legendre(scalar, -4.0, 2.0)
    got = adaptive_gauss_legendre(scalar, -4.0, 2.0, h_batch=batch)
    np.testing.assert_allclose(got.fine_nodes, ref.fine_nodes, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.fine_log_weights, ref.fine_log_weights, atol=1e-12)
    np.testing.assert_allclose(got.coarse_log_weights, ref.coarse_log_weights, atol=1e-12)
    assert got.modes == pytest.approx(ref.modes, abs=1e-12)


def test_dense_pencil_equals_the_per_sigma_cholesky_posterior() -> None:
    """One eigen-decomposition per fit gives the same posterior at every sigma (memory-model.md
    "Immediate head")."""
    from gigaevo.memory.v2.causal.blr import conditional_posterior
    from gigaevo.memory.v2.causal.spectral import DensePencil

    rng = np.random.default_rng(21)
    for trial in range(12):
        n, p = int(rng.integers(1, 200)), int(rng.integers(2, 40))
        x = rng.normal(size=(n, p)) * (rng.random(p) < 0.7)  # some all-zero columns
        y = x @ rng.normal(0, 0.1, p) + rng.normal(0, 0.2, n)
        omega = 0.05 if trial % 2 else 0.0
        v = rng.uniform(0.05, 1.0, p)
        pencil = DensePencil(x, y, omega**2, v)
        sigmas = np.array([0.02, 0.2, 1.5])
        evidence, means, covs = (
            pencil.log_evidence(sigmas),
            pencil.means(sigmas),
            pencil.covariances(sigmas),
        )
        for k, s in enumerate(sigmas):
            ref = conditional_posterior(x, y, float(s), v, omega=np.full(n, omega))
            assert evidence[k] == pytest.approx(ref.log_evidence, rel=1e-11, abs=1e-9)
            np.testing.assert_allclose(means[k], ref.mean, rtol=0, atol=1e-10)
            np.testing.assert_allclose(covs[k], ref.cov, rtol=1e-9, atol=1e-10)


def test_dense_head_with_one_noise_level_matches_the_node_by_node_fit() -> None:
    """The pencil path (every omega equal) and the per-node Cholesky path (several noise
    levels) give the same head on a dense design. The second fit takes the node path
    because one row's omega is the next float up: a distinct level, the same likelihood."""
    rng = np.random.default_rng(22)
    for trial in range(6):
        n, p = int(rng.integers(5, 250)), int(rng.integers(3, 50))
        x = rng.normal(size=(n, p))
        y = x @ rng.normal(0, 0.1, p) + rng.normal(0, 0.3, n)
        v = rng.uniform(0.05, 1.0, p)
        mu0 = rng.normal(0, 0.05, p) if trial % 2 else None
        omega = np.full(n, 0.02 * trial)
        two_levels = omega.copy()
        two_levels[0] = np.nextafter(omega[0], 1.0)
        assert len(np.unique(two_levels)) == 2
        fast = BayesianLinearHead(v, mu0).fit(x, y, omega)
        slow = BayesianLinearHead(v, mu0).fit(x, y, two_levels)
        flags = (fast.health_.ok, fast.health_.at_boundary)
        assert flags == (slow.health_.ok, slow.health_.at_boundary)
        assert len(fast.weights_) == len(slow.weights_)
        np.testing.assert_allclose(fast.coef_mean_, slow.coef_mean_, rtol=0, atol=1e-10)
        np.testing.assert_allclose(fast.coef_cov_, slow.coef_cov_, rtol=0, atol=1e-10)
        assert fast.residual_variance_ == pytest.approx(slow.residual_variance_, rel=1e-9)
        assert fast.log_marginal_ == pytest.approx(slow.log_marginal_, rel=1e-10)


@pytest.mark.parametrize("seed", [13, 14])
def test_a_health_check_settled_by_the_shift_bound_gives_the_exact_shift_when_read(
    seed: int,
) -> None:
    """When the other checks pass and a bound of the shift (variances bounded below: by
    1 / diag of each node's precision, else by the lineage blocks' diag(D^-1) part) clears
    its gate, ``ok`` is settled without the shift's exact maximum: the flags are
    those of the check that forms it (``_mean_shift``), the shift read afterwards is that
    maximum, and the health copies, pickles and compares as those plain flags. A shift the
    bound cannot settle is formed at once and decides ``ok``."""
    import copy
    import pickle
    from dataclasses import replace

    from gigaevo.memory.v2.causal import FitHealth
    from gigaevo.memory.v2.causal.arrowhead import BlockDesign
    from gigaevo.memory.v2.causal.blr import _health, _mean_shift, _PendingShift, _shift_bound
    from tests.memory.causal.test_arrowhead import _random_design

    space, x, y, _ = _random_design(300, 40, 25, seed=seed)
    design = BlockDesign.from_dense(x, space.shared_size, space.n_context)
    head = BayesianLinearHead(space.utility_prior_variance()).fit(design, y, np.full(len(y), 0.15))
    fine = head._fine
    full = fine.weights @ fine.node_var.per_node() + fine.spread
    # the cheap variance floor (1 / diag of each node's precision) is below the variance
    moving = fine.node_var.moving
    floor = fine.node_var.weighted_floor(fine.weights) + fine.spread[moving]
    assert np.all(floor <= full[moving]) and np.all(floor > 0.0)
    for scale, settled in ((1e-6, True), (2e-3, False), (5e-4, None)):
        coarse = replace(fine, mean=fine.mean + scale * np.sqrt(full))
        bound = _shift_bound(fine, coarse)
        assert bound is not None and bound >= _mean_shift(fine, coarse)
        got = _health(fine, coarse, True, False, math.log(0.01), math.log(5.0))
        exact = _mean_shift(fine, coarse)
        assert exact == pytest.approx(scale, rel=1e-9)
        if settled is not None:
            assert isinstance(got, _PendingShift) == settled
        assert got.ok == (exact <= 1e-3)
        assert got.mean_shift == exact  # formed when read, or at once: the same value
        plain = FitHealth(
            got.ok, got.at_boundary, got.mass_lower, got.mass_upper, got.modes_converged,
            got.depth_limit_hit, got.mass_error, got.variance_error, exact,
        )  # fmt: skip
        for other in (got, copy.deepcopy(got), pickle.loads(pickle.dumps(got))):
            assert other == plain and plain == other and hash(other) == hash(plain)
            assert type(copy.deepcopy(other)) is FitHealth or other is got
    failing = _health(fine, replace(fine, mean=fine.mean), False, False, -4.6, 1.6)
    assert not failing.ok and failing.mean_shift == 0.0  # other checks failed: never formed
