"""Ground truth 5 (memory-model.md "Ground-truth tests" (5)): invalidity head and chance
constraint."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import multivariate_normal

from gigaevo.memory.v2.causal import (
    DesignSpace,
    LogisticLaplaceHead,
    RewardDefinition,
    acceptance_probability,
    context_features,
)
from tests.memory.causal.simulate import CARD, card_world


def _example_eta() -> tuple[np.ndarray, np.ndarray]:
    x = context_features(RewardDefinition(0.0, 1.0), 0.80, 50, [0.25, 0.50])
    space = DesignSpace(5, lineages=("A", "B"), kind_contrast=False)
    mu, v = space.invalidity_prior()
    head = LogisticLaplaceHead(mu, v).fit(np.zeros((0, space.size)), np.zeros(0))
    return head.linear_predictor(space.row(x, 0), space.row(x, 1, "A"))


def test_cold_start_example() -> None:
    eta, cov = _example_eta()
    np.testing.assert_allclose(eta, [-2.94444, -2.94444], atol=1e-5)
    np.testing.assert_allclose(cov, [[0.05004, 0.05004], [0.05004, 0.29914]], atol=1e-5)
    acc = acceptance_probability(eta, cov)
    assert not acc.failed
    assert acc.probability == pytest.approx(0.99058, abs=1e-4)
    assert acc.admitted(0.10)


def test_acceptance_matches_monte_carlo() -> None:
    eta, cov = np.array([-1.0, -0.2]), np.array([[0.3, 0.1], [0.1, 0.4]])
    acc = acceptance_probability(eta, cov, delta=0.10)
    draws = multivariate_normal(eta, cov).rvs(400000, random_state=1)
    p = expit(draws)
    mc = float(np.mean(p[:, 1] - p[:, 0] <= 0.10))
    assert acc.probability == pytest.approx(mc, abs=4 * np.sqrt(mc * (1 - mc) / 400000) + 1e-8)
    assert acc.error <= 1e-8


def test_forced_singular_covariance_excluded() -> None:
    acc = acceptance_probability(np.array([-3.0, -3.0]), np.array([[0.2, 0.2], [0.2, 0.2]]))
    assert acc.failed and acc.probability == 0.0 and not acc.admitted()
    assert acceptance_probability(np.array([0.0, np.nan]), np.eye(2)).probability == 0.0


def test_map_matches_prior_without_rows_and_gradient_small() -> None:
    space = DesignSpace(5, lineages=(CARD,), kind_contrast=False)
    mu, v = space.invalidity_prior()
    head = LogisticLaplaceHead(mu, v).fit(np.zeros((0, space.size)), np.zeros(0))
    assert head.ok_ and np.array_equal(head.coef_, mu)
    assert head.coef_cov_ is not None
    np.testing.assert_allclose(head.coef_cov_, np.diag(v))
    world = card_world(300, 129, np.random.default_rng(2), p_cited=0.35)
    head = LogisticLaplaceHead(mu, v).fit(world.design, world.d)
    assert head.ok_ and head.gradient_norm_ <= 1e-5 and head.condition_ <= 1e12


def test_map_solves_penalised_likelihood() -> None:
    """Independent check: the MAP solves X'(p - D) + (gamma - mu)/v = 0 (plain Newton)."""
    world = card_world(60, 40, np.random.default_rng(9), p_cited=0.3)
    mu, v = world.space.invalidity_prior()
    head = LogisticLaplaceHead(mu, v).fit(world.design, world.d)
    g = mu.copy()
    for _ in range(100):
        p = expit(world.design @ g)
        grad = world.design.T @ (p - world.d) + (g - mu) / v
        hess = np.diag(1 / v) + world.design.T @ ((p * (1 - p))[:, None] * world.design)
        g = g - np.linalg.solve(hess, grad)
    np.testing.assert_allclose(head.coef_, g, atol=1e-5)
    assert head.coef_cov_ is not None
    np.testing.assert_allclose(head.coef_cov_, np.linalg.inv(hess), rtol=1e-4)


def _excluded(seed: int, n_cited: int, n_control: int = 129) -> bool:
    rng = np.random.default_rng(seed)
    world = card_world(n_cited, n_control, rng, p_control=0.05, p_cited=0.35)
    mu, v = world.space.invalidity_prior()
    head = LogisticLaplaceHead(mu, v).fit(world.design, world.d)
    assert head.ok_
    x = world.contexts[rng.integers(len(world.contexts))]
    eta, cov = head.linear_predictor(world.space.row(x, 0), world.space.row(x, 1, CARD))
    return not acceptance_probability(eta, cov).admitted(0.10)


def test_sparse_harmful_card_admitted() -> None:
    assert sum(_excluded(seed, 10) for seed in range(10)) <= 1


def test_harmful_card_excluded_in_95_percent_of_seeds() -> None:
    excluded = sum(_excluded(seed, 300) for seed in range(200))
    assert excluded >= 190


def _block_problem(seed: int):
    """300 treated rows over 12 of 30 lineages (P = 161 > 64: the block path), ~10 % invalid."""
    space = DesignSpace(5, tuple(f"c{i:03d}" for i in range(30)), kind_contrast=True)
    rng = np.random.default_rng(seed)
    rows = [
        space.row(np.r_[1.0, rng.uniform(-1, 1, 4)], 1, f"c{i % 12:03d}", kind="insight")
        for i in range(300)
    ]
    x = np.array(rows)
    d = (rng.uniform(size=len(x)) < 0.1).astype(float)
    mu, v = space.invalidity_prior()
    return x, d, mu, v, (space.shared_size, space.n_context)


def _dense_condition(head: LogisticLaplaceHead, x: np.ndarray, v: np.ndarray) -> float:
    """cond(F) of the Laplace precision at the head's MAP, from a dense eigen-decomposition."""
    p = expit(x @ head.coef_)
    eig = np.linalg.eigvalsh(np.diag(1 / v) + x.T @ ((p * (1 - p))[:, None] * x))
    return float(eig[-1] / eig[0])


def test_block_condition_number_matches_dense_eigenvalues(monkeypatch: pytest.MonkeyPatch) -> None:
    """cond(F) of the block Laplace precision: a true upper bound while it clears the gate,
    exact (Lanczos on the block operators) when the bound does not."""
    from gigaevo.memory.v2.causal import invalidity

    x, d, mu, v, layout = _block_problem(13)
    head = LogisticLaplaceHead(mu, v, layout).fit(x, d)
    assert head.ok_ and head.block_factor is not None
    p = expit(x @ head.coef_)
    fisher = np.diag(1 / v) + x.T @ ((p * (1 - p))[:, None] * x)
    exact = _dense_condition(head, x, v)
    bound = np.max(np.abs(fisher).sum(axis=1)) * np.max(v)  # Gershgorin / min(1/v)
    assert exact <= head.condition_ <= 1e12
    assert head.condition_ == pytest.approx(bound, rel=1e-9)
    # a gate between the exact value and the bound: the reported value is the exact one
    monkeypatch.setattr(invalidity, "MAX_CONDITION", 0.5 * (exact + bound))
    between = LogisticLaplaceHead(mu, v, layout).fit(x, d)
    assert between.ok_ and between.condition_ == pytest.approx(exact, rel=1e-6)


def test_an_ill_conditioned_block_fisher_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the bound does not clear the gate the exact condition number decides (fail-closed)."""
    from gigaevo.memory.v2.causal import invalidity

    x, d, mu, v, layout = _block_problem(14)
    well = LogisticLaplaceHead(mu, v, layout).fit(x, d)
    exact = _dense_condition(well, x, v)
    monkeypatch.setattr(invalidity, "MAX_CONDITION", 0.5 * exact)  # below the exact value
    refused = LogisticLaplaceHead(mu, v, layout).fit(x, d)
    assert not refused.ok_ and "ill-conditioned" in refused.failure_
