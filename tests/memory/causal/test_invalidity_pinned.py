"""The chance constraint and the Laplace head against values computed another way.

P(expit(eta_1) - expit(eta_0) <= delta) for a bivariate normal (eta_0, eta_1) is, with
t the standardised eta_0 and eta_1 | t ~ N(m1 + zeta t, vs^2),

    int phi(t) Phi((lambda(m0 + sd0 t) - m1 - zeta t) / vs) dt,
    lambda(e) = logit(expit(e) + delta) (+inf when expit(e) + delta >= 1),

here by the trapezoid rule on 400,001 points (the code integrates adaptively with
breakpoints), and in closed form where eta_0 is (nearly) known. The Laplace head's
posterior is checked against the Hessian of the penalised log likelihood at a MAP found
by plain Newton iterations, on the dense and on the block-arrowhead path.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import expit, logit, ndtr

from gigaevo.memory.v2.causal import DesignSpace, LogisticLaplaceHead, acceptance_probability
from gigaevo.memory.v2.causal.arrowhead import BlockDesign
from gigaevo.memory.v2.causal.errors import DesignError
from gigaevo.memory.v2.causal.invalidity import Acceptance


def _trapezoid(mean, cov, delta: float, cap: float | None = None) -> float:
    m0, m1 = mean
    sd0 = math.sqrt(cov[0][0])
    zeta = cov[0][1] / sd0
    vs = math.sqrt(cov[1][1] - zeta * zeta)
    t = np.linspace(-12.0, 12.0, 400_001)
    p = expit(m0 + sd0 * t) + delta
    lam = np.where(p < 1.0, logit(np.minimum(p, 1.0 - 1e-16)), np.inf)
    if cap is not None:
        lam = np.minimum(lam, logit(cap))
    f = np.exp(-0.5 * t * t) / math.sqrt(2 * math.pi) * ndtr((lam - m1 - zeta * t) / vs)
    return float(np.trapezoid(f, t))


CASES = [
    ((-1.0, -0.2), ((0.3, 0.1), (0.1, 0.4)), 0.10),
    ((-3.0, -1.5), ((0.05, 0.02), (0.02, 0.8)), 0.10),
    ((0.5, 1.0), ((1.0, -0.3), (-0.3, 0.6)), 0.05),
    ((2.5, 3.0), ((0.5, 0.2), (0.2, 0.5)), 0.10),  # p0 near 0.9: the boundary goes infinite
    ((-2.0, 0.0), ((0.2, 0.0), (0.0, 2.0)), 0.20),
]


@pytest.mark.parametrize(("mean", "cov", "delta"), CASES)
def test_acceptance_equals_the_one_dimensional_integral(mean, cov, delta: float) -> None:
    acc = acceptance_probability(np.array(mean), np.array(cov), delta=delta)
    assert not acc.failed
    assert 0.0 <= acc.error <= 1e-8
    assert acc.probability == pytest.approx(_trapezoid(mean, cov, delta), abs=2e-8)


@pytest.mark.parametrize("cap", [0.3, 0.6])
def test_the_absolute_cap_also_bounds_the_treated_rate(cap: float) -> None:
    mean, cov = (-1.0, -0.5), ((0.3, 0.1), (0.1, 0.6))
    acc = acceptance_probability(np.array(mean), np.array(cov), delta=0.1, absolute_cap=cap)
    assert not acc.failed
    assert acc.probability == pytest.approx(_trapezoid(mean, cov, 0.1, cap), abs=2e-8)
    assert acc.probability < acceptance_probability(np.array(mean), np.array(cov)).probability


def test_a_known_control_arm_gives_the_normal_cdf() -> None:
    """eta_0 known (variance 1e-14): P = Phi((logit(expit(m0) + delta) - m1) / sd1)."""
    m0, m1, s11 = -2.0, -1.0, 0.5
    acc = acceptance_probability(np.array([m0, m1]), np.array([[1e-14, 0.0], [0.0, s11]]))
    want = ndtr((logit(expit(m0) + 0.1) - m1) / math.sqrt(s11))
    assert acc.probability == pytest.approx(want, abs=1e-8)


@pytest.mark.parametrize(
    ("mean", "cov"),
    [
        ((0.0, math.inf), ((1.0, 0.0), (0.0, 1.0))),
        ((0.0, 0.0), ((1.0, 0.0), (0.0, math.nan))),
        ((0.0, 0.0), ((0.0, 0.0), (0.0, 1.0))),  # no variance in eta_0
        ((0.0, 0.0), ((1.0, 0.0), (0.0, -1.0))),
        ((0.0, 0.0), ((1.0, 1.0), (1.0, 1.0 + 1e-12))),  # eta_1 a function of eta_0
    ],
)
def test_degenerate_laws_fail_closed(mean, cov) -> None:
    acc = acceptance_probability(np.array(mean), np.array(cov))
    assert acc.failed and acc.probability == 0.0 and acc.error == math.inf
    assert not acc.admitted(0.0)


@pytest.mark.filterwarnings("ignore:The occurrence of roundoff error")  # quad says it too
def test_an_integral_short_of_its_tolerance_fails_closed_with_its_error() -> None:
    """A tolerance no quadrature reaches (1e-18): the card is refused (P_acc = 0, failed)
    and the error actually reached is reported, finite and above the tolerance."""
    acc = acceptance_probability(
        np.array([-1.0, -0.2]), np.array([[0.3, 0.1], [0.1, 0.4]]), tolerance=1e-18
    )
    assert acc.failed and acc.probability == 0.0
    assert 1e-18 < acc.error < 1e-6


def test_admission_is_strictly_above_alpha() -> None:
    assert not Acceptance(0.10, 0.0, False).admitted(0.10)
    assert Acceptance(0.1000001, 0.0, False).admitted(0.10)
    assert Acceptance(0.11, 0.0, False).admitted()
    assert not Acceptance(0.10, 0.0, False).admitted()


BAD_INDICATORS = r"^invalid indicators must be 0/1 and match the design rows$"
ILL_CONDITIONED = r"^invalidity head failed: Fisher information ill-conditioned"


def _problem(n_lineages: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    space = DesignSpace(3, tuple(f"L{i:02d}" for i in range(n_lineages)), kind_contrast=True)
    rows, d = [], []
    for i in range(n):
        x = np.array([1.0, rng.uniform(-1, 1), rng.uniform(0, 1)])
        if i % 3 == 0:
            rows.append(space.row(x, 0))
            rate = 0.1
        else:
            lin = f"L{i % 4:02d}"
            rows.append(space.row(x, 1, lineage=lin, kind="program"))
            rate = 0.4 if lin == "L01" else 0.1
        d.append(float(rng.random() < rate))
    mu, v = space.invalidity_prior(lineage_intercept_sd=0.8)
    return space, np.array(rows), np.array(d), mu, v


def _newton_truth(x, d, mu, v):
    g = mu.copy()
    for _ in range(60):
        p = expit(x @ g)
        grad = x.T @ (p - d) + (g - mu) / v
        hess = np.diag(1 / v) + x.T @ ((p * (1 - p))[:, None] * x)
        g = g - np.linalg.solve(hess, grad)
    p = expit(x @ g)
    return g, np.linalg.inv(np.diag(1 / v) + x.T @ ((p * (1 - p))[:, None] * x))


@pytest.mark.parametrize("n_lineages", [4, 24], ids=["dense", "block"])
def test_laplace_posterior_and_arm_laws_match_the_hessian(n_lineages: int) -> None:
    space, x, d, mu, v = _problem(n_lineages, 150, seed=3)
    gamma, cov = _newton_truth(x, d, mu, v)
    layout = (space.shared_size, space.n_context)
    head = LogisticLaplaceHead(mu, v, block_layout=layout).fit(x, d)
    assert head.ok_ and head.failure_ == ""
    assert (head.block_factor is None) == (space.size <= 64)
    np.testing.assert_allclose(head.coef_, gamma, atol=2e-6)
    xc = np.array([1.0, -0.3, 0.7])
    z0 = space.row(xc, 0)
    z1 = np.array([space.row(xc, 1, lineage=k, kind="insight") for k in space.lineages])
    means, covs = head.linear_predictors(z0, z1)
    np.testing.assert_allclose(means[:, 0], z0 @ gamma, atol=2e-6)
    np.testing.assert_allclose(means[:, 1], z1 @ gamma, atol=2e-6)
    np.testing.assert_allclose(covs[:, 0, 0], z0 @ cov @ z0, rtol=1e-5)
    np.testing.assert_allclose(covs[:, 0, 1], z1 @ cov @ z0, rtol=1e-5)
    np.testing.assert_allclose(covs[:, 1, 0], z1 @ cov @ z0, rtol=1e-5)
    np.testing.assert_allclose(covs[:, 1, 1], np.einsum("jp,pq,jq->j", z1, cov, z1), rtol=1e-5)
    # the same laws from a block design of the rows, and one card at a time
    block_means, block_covs = head.linear_predictors(
        z0, BlockDesign.from_dense(z1, space.shared_size, space.n_context)
    )
    np.testing.assert_allclose(block_means, means, atol=1e-12)
    np.testing.assert_allclose(block_covs, covs, rtol=1e-9, atol=1e-15)
    eta, eta_cov = head.linear_predictor(z0, z1[1])
    np.testing.assert_allclose(eta, means[1], atol=1e-12)
    np.testing.assert_allclose(eta_cov, covs[1], rtol=1e-9, atol=1e-15)
    if head.coef_cov_ is not None:
        np.testing.assert_allclose(head.coef_cov_, cov, rtol=1e-5, atol=1e-12)
    # draws: mean gamma-hat, covariance the inverse Hessian (projected on two rows)
    draws = head.sample(20000, np.random.default_rng(0))
    proj = draws @ np.vstack([z0, z1[1]]).T
    np.testing.assert_allclose(proj.mean(axis=0), means[1], atol=0.05)
    np.testing.assert_allclose(np.cov(proj.T), covs[1], rtol=0.06)


def test_a_warm_start_reaches_the_same_map() -> None:
    _, x, d, mu, v = _problem(4, 120, seed=4)
    gamma, _ = _newton_truth(x, d, mu, v)
    near = gamma + np.random.default_rng(1).normal(0, 0.05, len(gamma))
    head = LogisticLaplaceHead(mu, v).fit(x, d, start=near)
    assert head.ok_ and head.gradient_norm_ <= 1e-6
    np.testing.assert_allclose(head.coef_, gamma, atol=1e-6)


def test_dense_condition_number_is_numpys() -> None:
    _, x, d, mu, v = _problem(4, 120, seed=5)
    head = LogisticLaplaceHead(mu, v).fit(x, d)
    p = expit(x @ head.coef_)
    eig = np.linalg.eigvalsh(np.diag(1 / v) + x.T @ ((p * (1 - p))[:, None] * x))
    assert head.condition_ == pytest.approx(eig[-1] / eig[0], rel=1e-8)


def test_bad_indicators_and_failed_heads_are_named() -> None:
    space, x, d, mu, v = _problem(6, 30, seed=6)
    with pytest.raises(DesignError, match=BAD_INDICATORS):
        LogisticLaplaceHead(mu, v).fit(x, np.where(d > 0, 2.0, 0.0))
    with pytest.raises(DesignError, match=BAD_INDICATORS):
        LogisticLaplaceHead(mu, v).fit(x, d[:-1])
    # tiny prior variances, but huge ones on a lineage without rows: cond(F) = 1e16
    v_bad = np.full(len(v), 1e-8)
    v_bad[space.lineage_slice("L05")] = 1e8
    head = LogisticLaplaceHead(mu, v_bad).fit(x, d)
    assert not head.ok_ and head.failure_.startswith("Fisher information ill-conditioned")
    with pytest.raises(DesignError, match=ILL_CONDITIONED):
        head.linear_predictor(x[0], x[1])
    with pytest.raises(DesignError, match=r"^invalidity head failed: "):
        head.sample(3, np.random.default_rng(0))
