"""The residual-scale mixture of the linear head against an independent brute force, on
every solver path.

The truth is computed without the package: y ~ N(X mu0, X V X' + diag(sigma^2 + omega^2))
for each sigma on a fine grid of tau = ln sigma (Gaussian conditioning with a Cholesky
factor of the n x n covariance), weighted by the head's log-normal prior kernel
exp(-(tau - ln 0.2)^2 / (2 0.75^2)) on [ln 0.01, ln 5] and integrated by the trapezoid
rule: the posterior mean and marginal variances of beta, E[sigma^2 | y] and the log mass.
The head reaches the same numbers by a different route on each path (a dense or
block-arrowhead design, one noise level or several, the rows or their kept sufficient
statistics, narrow or wider than the dense limit), so a wrong sum, factor, Schur
complement, level weight or quadrature weight shows as a wrong number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from gigaevo.memory.v2.causal import BayesianLinearHead, DesignSpace
from gigaevo.memory.v2.causal.arrowhead import BlockDesign
from gigaevo.memory.v2.causal.errors import DesignError
from gigaevo.memory.v2.causal.suffstats import GaussianStatistics, RowTerms

C = 3
MEDIAN, LOG_SD, BOUNDS = 0.2, 0.75, (0.01, 5.0)


@dataclass(frozen=True)
class World:
    space: DesignSpace
    x: np.ndarray  # (n, P) dense design
    y: np.ndarray
    omega: np.ndarray
    keys: list[str | None]  # the card (lineage) of each row, None for a control


def _world(
    n_lineages: int, n: int, levels: tuple[float, ...], seed: int, controls: float = 0.35
) -> World:
    """Rows of a memory-shaped design: controls and treated rows of a few of the lineages
    (the others have no rows), a gain that depends on the context and on the card."""
    rng = np.random.default_rng(seed)
    lineages = tuple(f"L{i:02d}" for i in range(n_lineages))
    space = DesignSpace(C, lineages=lineages, kind_contrast=True)
    used = lineages[: max(2, n_lineages // 3)]
    effect = {k: rng.normal(0, 0.05) for k in used}
    rows, ys, keys = [], [], []
    for _ in range(n):
        x = np.array([1.0, rng.uniform(-1, 1), rng.uniform(0, 1)])
        if rng.random() < controls:
            rows.append(space.row(x, 0))
            keys.append(None)
            gain = 0.01 + 0.02 * x[1]
        else:
            card = used[int(rng.integers(len(used)))]
            rows.append(space.row(x, 1, lineage=card, kind=("insight", "program")[card < "L01"]))
            keys.append(card)
            gain = 0.03 + 0.02 * x[1] + effect[card] * x[2]
        ys.append(gain + rng.normal(0, 0.06))
    omega = np.sqrt(np.array([levels[int(rng.integers(len(levels)))] for _ in range(n)]))
    return World(space, np.array(rows), np.array(ys), omega, keys)


@dataclass(frozen=True)
class Truth:
    mean: np.ndarray
    var: np.ndarray
    sigma2: float
    log_mass: float


def _truth(w: World, v: np.ndarray, mu0: np.ndarray, grid: int = 801) -> Truth:
    """The mixture over sigma by brute force (see the module docstring)."""
    x, r = w.x, w.y - w.x @ mu0
    xv = x * v  # X V
    k = xv @ x.T
    taus = np.linspace(math.log(BOUNDS[0]), math.log(BOUNDS[1]), grid)
    n = len(r)
    # every grid point at once: cov (grid, n, n), its Cholesky factor, the solves
    cov = k + (np.exp(2 * taus)[:, None] + w.omega**2)[:, :, None] * np.eye(n)
    chol = np.linalg.cholesky(cov)
    alpha = np.linalg.solve(cov, r)  # (grid, n)
    logdet = 2.0 * np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2)), axis=1)
    log_ev = -0.5 * (n * math.log(2 * math.pi) + logdet + alpha @ r)
    log_k = log_ev - 0.5 * ((taus - math.log(MEDIAN)) / LOG_SD) ** 2
    means = mu0 + alpha @ xv  # (grid, P)
    half = np.linalg.solve(chol, np.broadcast_to(xv, (grid, *xv.shape)))  # L^-1 X V
    variances = v - np.sum(half * half, axis=1)
    top = float(np.max(log_k))
    wt = np.exp(log_k - top)
    mass = float(np.trapezoid(wt, taus))
    p = wt / mass
    mean = np.trapezoid(p[:, None] * means, taus, axis=0)
    second = np.trapezoid(p[:, None] * (variances + means**2), taus, axis=0)
    sigma2 = float(np.trapezoid(p * np.exp(2 * taus), taus))
    return Truth(mean, second - mean**2, sigma2, top + math.log(mass))


def _head(v: np.ndarray, mu0: np.ndarray, layout: tuple[int, int] | None = None):
    return BayesianLinearHead(
        v,
        prior_mean=mu0,
        residual_sd_bounds=BOUNDS,
        residual_sd_median=MEDIAN,
        residual_log_sd=LOG_SD,
        block_layout=layout,
    )


def _statistics(w: World) -> GaussianStatistics:
    ps = w.space.shared_size
    stats = GaussianStatistics(ps, C)
    for z, y, om, key in zip(w.x, w.y, w.omega, w.keys, strict=True):
        part = None if key is None else z[w.space.lineage_slice(key)]
        stats.add(RowTerms(z[:ps], part, key, float(y), float(om) ** 2))
    return stats


def _at_sigma(w: World, v: np.ndarray, mu0: np.ndarray, sigma: float):
    """(mean, marginal variances, log p(y | sigma)) of the conditional posterior, densely."""
    x, r = w.x, w.y - w.x @ mu0
    cov_y = (x * v) @ x.T + np.diag(sigma**2 + w.omega**2)
    alpha = np.linalg.solve(cov_y, r)
    _, logdet = np.linalg.slogdet(cov_y)
    log_ev = -0.5 * (len(r) * math.log(2 * math.pi) + logdet + float(r @ alpha))
    var = v - np.sum((x * v) * np.linalg.solve(cov_y, x * v), axis=0)
    return mu0 + (x * v).T @ alpha, var, log_ev


def _check(head: BayesianLinearHead, truth: Truth, w: World | None = None, prior=None) -> None:
    """The mixture's figures; with the world, also three of its nodes one by one (each a
    conditional posterior at sigma = exp(log_sd_nodes_[k]), aligned with weights_)."""
    if w is not None and prior is not None:
        comps = head.components_
        assert len(comps) == len(head.weights_) == len(head.log_sd_nodes_)
        for k in (0, len(comps) // 2, len(comps) - 1):
            mean, var, log_ev = _at_sigma(w, *prior, math.exp(head.log_sd_nodes_[k]))
            assert comps[k].log_evidence == pytest.approx(log_ev, abs=1e-8)
            np.testing.assert_allclose(head.component_means_[k], mean, atol=1e-10)
            np.testing.assert_allclose(comps[k].mean + prior[1], mean, atol=1e-10)
            np.testing.assert_allclose(comps[k].marginal_variance(), var, rtol=1e-8)
    assert head.health_.ok
    sd = np.sqrt(truth.var)
    assert np.max(np.abs(head.coef_mean_ - truth.mean) / sd) < 1e-4
    np.testing.assert_allclose(head.coef_var_, truth.var, rtol=1e-4)
    assert head.residual_variance_ == pytest.approx(truth.sigma2, rel=1e-5)
    assert head.log_marginal_ == pytest.approx(truth.log_mass, abs=1e-5)
    assert float(np.sum(head.weights_)) == pytest.approx(1.0, abs=1e-12)


def _prior(space: DesignSpace, seed: int) -> tuple[np.ndarray, np.ndarray]:
    v = space.utility_prior_variance()
    mu0 = np.random.default_rng(seed).normal(0.0, 0.02, space.size)
    return v, mu0


@pytest.fixture(scope="module")
def wide_levels() -> tuple[World, np.ndarray, np.ndarray, Truth]:
    """67 columns (7 shared + 20 lineages of 3), three noise levels."""
    w = _world(20, 36, (0.0, 0.03**2, 0.08**2), seed=1)
    assert w.space.size > 64
    v, mu0 = _prior(w.space, 2)
    return w, v, mu0, _truth(w, v, mu0)


@pytest.fixture(scope="module")
def wide_one_level() -> tuple[World, np.ndarray, np.ndarray, Truth]:
    w = _world(20, 36, (0.04**2,), seed=3)
    v, mu0 = _prior(w.space, 4)
    return w, v, mu0, _truth(w, v, mu0)


@pytest.fixture(scope="module")
def narrow() -> dict[str, tuple[World, np.ndarray, np.ndarray, Truth]]:
    """22 columns (7 shared + 5 lineages of 3): one level and three levels."""
    out = {}
    for name, levels, seed in (("one", (0.05**2,), 5), ("three", (0.0, 0.02**2, 0.1**2), 6)):
        w = _world(5, 30, levels, seed)
        v, mu0 = _prior(w.space, seed + 10)
        out[name] = (w, v, mu0, _truth(w, v, mu0))
    return out


def test_several_levels_on_every_wide_path(wide_levels) -> None:
    """A block design (a block posterior per node) and kept statistics (every node at
    once, per level); the dense rows' path is checked on the narrow design (it is slow
    this wide)."""
    w, v, mu0, truth = wide_levels
    ps = w.space.shared_size
    block = BlockDesign.from_dense(w.x, ps, C)
    _check(_head(v, mu0).fit(block, w.y, w.omega), truth, w, (v, mu0))
    view = _statistics(w).fit_view({k: i for i, k in enumerate(w.space.lineages)}, 20)
    _check(_head(v, mu0).fit_statistics(view), truth, w, (v, mu0))


def test_one_level_on_every_wide_path(wide_one_level) -> None:
    """One noise level: every sigma shares one eigenbasis (dense pencil, block pencil,
    block pencil from the kept statistics)."""
    w, v, mu0, truth = wide_one_level
    ps = w.space.shared_size
    _check(_head(v, mu0).fit(w.x, w.y, w.omega), truth, w, (v, mu0))
    block = BlockDesign.from_dense(w.x, ps, C)
    _check(_head(v, mu0).fit(block, w.y, w.omega), truth, w, (v, mu0))
    _check(_head(v, mu0, layout=(ps, C)).fit(w.x, w.y, w.omega), truth, w, (v, mu0))
    view = _statistics(w).fit_view({k: i for i, k in enumerate(w.space.lineages)}, 20)
    _check(_head(v, mu0).fit_statistics(view), truth, w, (v, mu0))


@pytest.mark.parametrize("levels", ["one", "three"])
def test_narrow_statistics_match_the_rows(narrow, levels: str) -> None:
    """Under the dense limit the kept statistics go through the dense solvers."""
    w, v, mu0, truth = narrow[levels]
    _check(_head(v, mu0).fit(w.x, w.y, w.omega), truth, w, (v, mu0))
    view = _statistics(w).fit_view({k: i for i, k in enumerate(w.space.lineages)}, 5)
    _check(_head(v, mu0).fit_statistics(view), truth, w, (v, mu0))
    with pytest.raises(DesignError, match=r"^statistics and prior have inconsistent shapes$"):
        _head(v[:-1], mu0[:-1]).fit_statistics(view)


def test_no_omega_means_exact_measurements_on_both_designs() -> None:
    """omega left out is omega = 0 for every row, on a dense and on a block design."""
    w = _world(5, 30, (0.0,), seed=11)
    v, mu0 = _prior(w.space, 12)
    truth = _truth(w, v, mu0)
    _check(_head(v, mu0).fit(w.x, w.y), truth)
    block = BlockDesign.from_dense(w.x, w.space.shared_size, C)
    _check(_head(v, mu0).fit(block, w.y), truth)


def test_the_cold_head_gives_the_prior_mass() -> None:
    """No rows: beta keeps its prior, and the mass is the prior kernel's integral,
    LOG_SD sqrt(2 pi) (Phi(b) - Phi(a)) in closed form."""
    from scipy.special import ndtr

    space = DesignSpace(C, lineages=("a",))
    v, mu0 = _prior(space, 9)
    head = _head(v, mu0).fit(np.zeros((0, space.size)), np.zeros(0))
    a, b = ((math.log(bd) - math.log(MEDIAN)) / LOG_SD for bd in BOUNDS)
    mass = LOG_SD * math.sqrt(2 * math.pi) * (ndtr(b) - ndtr(a))
    assert head.log_marginal_ == pytest.approx(math.log(mass), abs=1e-9)
    np.testing.assert_allclose(head.coef_mean_, mu0, atol=1e-15)
    np.testing.assert_allclose(head.coef_var_, v, rtol=1e-12)
    # E[sigma^2] under the truncated log-normal prior: exp(2 mu + 2 s^2) times a ratio of cdfs
    m, s = math.log(MEDIAN), LOG_SD
    lo, hi = (math.log(bd) for bd in BOUNDS)
    ratio = (ndtr((hi - m) / s - 2 * s) - ndtr((lo - m) / s - 2 * s)) / (ndtr(b) - ndtr(a))
    assert head.residual_variance_ == pytest.approx(math.exp(2 * m + 2 * s * s) * ratio, rel=1e-8)


@pytest.mark.parametrize("levels", [(0.05**2,), (0.0, 0.1**2)], ids=["one level", "two levels"])
def test_controls_only_statistics_wider_than_the_dense_limit(levels) -> None:
    """A cold start: only control rows, no lineage block active, wide space."""
    w = _world(20, 24, levels, seed=7, controls=1.0)
    v, mu0 = _prior(w.space, 8)
    view = _statistics(w).fit_view({k: i for i, k in enumerate(w.space.lineages)}, 20)
    _check(_head(v, mu0).fit_statistics(view), _truth(w, v, mu0))


def test_bad_bounds_priors_and_shapes_are_refused_word_for_word() -> None:
    """Equal residual-sd bounds, a zero prior variance on kept statistics and a block
    design of the wrong length each fail with their own message."""
    rng = np.random.default_rng(8)
    x, y = rng.normal(size=(12, 3)), rng.normal(size=12)
    head = BayesianLinearHead(np.ones(3), residual_sd_bounds=(0.1, 0.1))
    with pytest.raises(DesignError, match=r"^residual sd bounds must satisfy 0 < low < high$"):
        head.fit(x, y)
    stats = GaussianStatistics(3, 0)
    for row, target in zip(x, y, strict=True):
        stats.add(RowTerms(row, None, None, float(target), 0.0))
    view = stats.fit_view({}, 0)
    with pytest.raises(DesignError, match=r"^prior variances must be positive and data finite$"):
        BayesianLinearHead(np.array([1.0, 0.0, 1.0])).fit_statistics(view)
    block = BlockDesign.from_dense(np.hstack([x, x[:, :2]]), 3, 2)
    msg = r"^block design, targets, omega and prior have inconsistent shapes$"
    with pytest.raises(DesignError, match=msg):
        BayesianLinearHead(np.ones(5)).fit(block, y[:-1])
