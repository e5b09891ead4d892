"""The invalidity head's evidence, its two shift levels and its condition gate, against values
computed another way (memory-model.md "Invalidity head and chance constraint", "Card shift
levels", "Viability").

- ``log_evidence()`` is the Laplace approximation ln Z = -J(gamma-hat) - 1/2 ln|diag(v) F|:
  checked against J and F built here from the rows at a MAP found by plain Newton iterations
  (dense and block-arrowhead path), and against the exact evidence of a one-parameter model
  integrated numerically (the approximation's error shrinks with n).
- ``with_level`` is the head refitted with one card's shift column at the other variance and
  every other column at its level: the same MAP, posterior and evidence as a fresh fit with
  that prior.
- ``ShiftLevels.wide`` picks the columns whose posterior odds of the wide level are above 1:
  checked against the odds of the two Gaussian priors integrated numerically against the
  rows' likelihood.
- On the block path the condition gate first tries the Gershgorin bound
  max_i sum_j |F_ij| * max(v) (lambda_min(F) >= min(1/v)), computed here from the explicit F.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate
from scipy.special import expit, log_expit

from gigaevo.memory.v2.causal import DesignSpace, LogisticLaplaceHead
from gigaevo.memory.v2.causal.errors import DesignError
from gigaevo.memory.v2.causal.invalidity import ShiftLevels, card_shift_levels


def _problem(n_lineages: int, n: int, seed: int, harmful: str = "L01"):
    """Rows at random contexts: a third controls at 10 % invalid, the rest cited rows of four
    lineages, ``harmful`` at 45 % and the others at 10 % (not shaped like the model: rates,
    not logits, and no context effect)."""
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
            rate = 0.45 if lin == harmful else 0.1
        d.append(float(rng.random() < rate))
    mu, v = space.invalidity_prior(lineage_intercept_sd=0.8)
    return space, np.array(rows), np.array(d), mu, v


def _truth(x, d, mu, v):
    """(MAP, J at the MAP, ln|diag(v) F|) by plain Newton on the explicit penalised likelihood."""
    g = mu.copy()
    for _ in range(80):
        p = expit(x @ g)
        grad = x.T @ (p - d) + (g - mu) / v
        hess = np.diag(1 / v) + x.T @ ((p * (1 - p))[:, None] * x)
        g = g - np.linalg.solve(hess, grad)
    eta = x @ g
    j = float(np.sum(np.logaddexp(0.0, eta) - d * eta) + 0.5 * np.sum((g - mu) ** 2 / v))
    p = expit(eta)
    fisher = np.diag(1 / v) + x.T @ ((p * (1 - p))[:, None] * x)
    sign, logdet = np.linalg.slogdet(np.diag(v) @ fisher)
    assert sign > 0
    return g, j, float(logdet), fisher


@pytest.mark.parametrize("n_lineages", [4, 24], ids=["dense", "block"])
def test_log_evidence_is_minus_j_minus_half_log_det_of_diag_v_f(n_lineages: int) -> None:
    space, x, d, mu, v = _problem(n_lineages, 150, seed=11)
    head = LogisticLaplaceHead(mu, v, block_layout=(space.shared_size, space.n_context)).fit(x, d)
    assert head.ok_
    assert (head.block_factor is None) == (n_lineages == 4)
    g, j, logdet, _ = _truth(x, d, mu, v)
    np.testing.assert_allclose(head.coef_, g, atol=2e-6)
    # 20 of the 24 blocks have no rows: each contributes ln(v * 1/v) = 0 to the truth's
    # log-determinant, which runs over every column
    assert head.log_evidence() == pytest.approx(-j - 0.5 * logdet, abs=1e-6)


def test_log_evidence_is_the_prior_when_no_row_is_seen() -> None:
    """With no rows gamma-hat = mu, J = 0 and F = diag(1/v): ln Z = 0 (p(D) of no data is 1)."""
    space, _, _, mu, v = _problem(4, 3, seed=0)
    head = LogisticLaplaceHead(mu, v).fit(np.zeros((0, space.size)), np.zeros(0))
    assert head.ok_
    np.testing.assert_array_equal(head.coef_, mu)
    assert head.log_evidence() == pytest.approx(0.0, abs=1e-12)


def _exact_log_evidence(k: int, n: int, mu: float, v: float) -> float:
    """ln p(D) of k invalid of n rows under D ~ Bernoulli(expit(g)), g ~ N(mu, v), integrated
    numerically around the posterior mode."""

    def log_joint(g: float) -> float:
        return (
            k * float(log_expit(g))
            + (n - k) * float(log_expit(-g))
            - 0.5 * (g - mu) ** 2 / v
            - 0.5 * math.log(2 * math.pi * v)
        )

    grid = np.linspace(mu - 12 * math.sqrt(v), mu + 12 * math.sqrt(v), 20001)
    mode = float(grid[np.argmax([log_joint(g) for g in grid])])
    value, _ = integrate.quad(
        lambda g: math.exp(log_joint(g) - log_joint(mode)),
        mode - 15.0,
        mode + 15.0,
        points=[mode],
        epsabs=0.0,
        epsrel=1e-12,
        limit=500,
    )
    return log_joint(mode) + math.log(value)


def test_the_laplace_evidence_approaches_the_exact_evidence_as_rows_grow() -> None:
    """One intercept, k of n invalid at a 20 % rate: the head's ln Z is within the Laplace
    approximation's O(1/n) of the exact evidence, and the error shrinks with n."""
    mu, v = math.log(0.05 / 0.95), 1.5**2
    errors = []
    for n in (10, 40, 160, 640):
        k = n // 5
        d = np.r_[np.ones(k), np.zeros(n - k)]
        head = LogisticLaplaceHead(np.array([mu]), np.array([v])).fit(np.ones((n, 1)), d)
        assert head.ok_
        errors.append(abs(head.log_evidence() - _exact_log_evidence(k, n, mu, v)))
    assert errors[-1] < 2e-3, errors
    assert all(a > b for a, b in itertools.pairwise(errors)), errors


def _levelled(n_cards: int, seed: int):
    """Rows of ``n_cards`` cards and controls at random contexts with exact invalid counts:
    cards "H0", "H1" at 50 % invalid, the rest at the 5 % base rate."""
    rng = np.random.default_rng(seed)
    cards = tuple(["H0", "H1", *(f"C{i}" for i in range(n_cards - 2))])
    space = DesignSpace(3, cards, kind_contrast=False)
    rows, d = [], []
    for arm, card, n, rate in [(0, None, 120, 0.05)] + [
        (1, c, 24, 0.5 if c.startswith("H") else 0.05) for c in cards
    ]:
        flags = np.zeros(n)
        flags[rng.permutation(n)[: round(rate * n)]] = 1.0
        for _ in range(n):
            x = np.array([1.0, rng.uniform(-1, 1), rng.uniform(0, 1)])
            rows.append(space.row(x, arm, card) if card else space.row(x, 0))
        d.append(flags)
    mu, v = space.invalidity_prior(
        baseline_intercept_sd=1.5, shared_sd=0.10, lineage_sd=0.15, lineage_intercept_sd=None
    )
    levels = card_shift_levels(space.shared_size, space.size, space.n_context, 2.0, 0.1)
    assert levels is not None
    return space, np.array(rows), np.concatenate(d), mu, v, levels


@pytest.mark.parametrize("n_cards", [4, 24], ids=["dense", "block"])
def test_with_level_is_a_fresh_fit_with_that_column_relevelled(n_cards: int) -> None:
    space, x, d, mu, v, levels = _levelled(n_cards, seed=5)
    layout = (space.shared_size, space.n_context)
    head = LogisticLaplaceHead(mu, v, layout, levels).fit(x, d)
    assert head.ok_
    h0, h1 = space.lineage_slice("H0").start, space.lineage_slice("H1").start
    calm = space.lineage_slice("C0").start
    assert sorted(head.wide_columns_.tolist()) == [h0, h1]
    chosen = v.copy()
    chosen[[h0, h1]] = levels.wide_variance

    def fresh(var: np.ndarray) -> LogisticLaplaceHead:
        return LogisticLaplaceHead(mu, var, layout).fit(x, d)

    # the chosen levels: the head's own posterior and evidence are a plain fit's
    assert head.log_evidence() == pytest.approx(fresh(chosen).log_evidence(), abs=1e-6)
    # H0 back to the narrow level, H1 kept wide; a calm card given the wide level
    narrow_h0 = chosen.copy()
    narrow_h0[h0] = v[h0]
    wide_calm = chosen.copy()
    wide_calm[calm] = levels.wide_variance
    for column, wide, var in [(h0, False, narrow_h0), (calm, True, wide_calm)]:
        other, truth = head.with_level(column, wide), fresh(var)
        assert other.ok_
        np.testing.assert_allclose(other.coef_, truth.coef_, atol=1e-6)
        assert other.log_evidence() == pytest.approx(truth.log_evidence(), abs=1e-6)
        z0 = space.row(np.array([1.0, 0.2, 0.5]), 0)
        z1 = space.row(np.array([1.0, 0.2, 0.5]), 1, "H0")
        eta, cov = other.linear_predictor(z0, z1)
        eta_t, cov_t = truth.linear_predictor(z0, z1)
        np.testing.assert_allclose(eta, eta_t, atol=1e-6)
        np.testing.assert_allclose(cov, cov_t, rtol=1e-5)
    # a harmful card's rows favour the wide level: its evidence there is the larger
    assert head.log_evidence() > head.with_level(h0, False).log_evidence()
    # and the head's own prior is left as it was
    np.testing.assert_array_equal(head.prior_variance, v)


def test_with_level_needs_two_levels_and_a_fitted_head() -> None:
    space, x, d, mu, v, levels = _levelled(4, seed=6)
    plain = LogisticLaplaceHead(mu, v).fit(x, d)
    with pytest.raises(DesignError, match=r"^a head without shift levels has one level$"):
        plain.with_level(space.lineage_slice("H0").start, True)
    bad_v = np.full(len(v), 1e-8)
    bad_v[space.lineage_slice("C1")] = 1e8  # cond(F) ~ 1e16: the fit fails closed
    failed = LogisticLaplaceHead(mu, bad_v, None, levels).fit(x, d)
    assert not failed.ok_
    with pytest.raises(DesignError, match=r"^invalidity head failed: "):
        failed.with_level(space.lineage_slice("H0").start, True)
    with pytest.raises(DesignError, match=r"^invalidity head failed: "):
        failed.log_evidence()


def _numeric_log_odds(mean, variance, mu0, v_narrow, v_wide, weight) -> float:
    """ln P(wide | rows) / P(narrow | rows) for one column: the rows' likelihood of the shift
    is what turns the narrow prior N(mu0, v_narrow) into the posterior N(mean, variance); the
    two priors' evidences are integrated numerically."""
    lam = 1 / variance - 1 / v_narrow
    centre = (mean / variance - mu0 / v_narrow) / lam  # the rows' own estimate of the shift

    def evidence(v: float) -> float:
        sd = math.sqrt(v)
        value, _ = integrate.quad(
            lambda s: (
                math.exp(-0.5 * lam * (s - centre) ** 2 - 0.5 * (s - mu0) ** 2 / v)
                / math.sqrt(2 * math.pi * v)
            ),
            mu0 - 40 * sd,
            mu0 + 40 * sd,
            points=[centre, mu0],
            epsabs=0.0,
            epsrel=1e-11,
            limit=500,
        )
        return value

    return math.log(weight / (1 - weight)) + math.log(evidence(v_wide) / evidence(v_narrow))


def test_shift_levels_pick_the_columns_whose_posterior_odds_favour_the_wide_level() -> None:
    v_narrow, v_wide = 0.15**2 * 3, 3 * 2.0**2
    rng = np.random.default_rng(3)
    for weight in (0.1, 0.3):
        # narrow posteriors: shrunk means at various information levels, some prior means
        # away from 0, and columns without rows (variance == prior variance)
        k = 400
        mu0 = rng.choice([0.0, 0.0, 0.3], size=k)
        variance = v_narrow / (1 + rng.choice([0.0, 0.5, 2.0, 8.0, 40.0], size=k))
        mean = mu0 + rng.normal(0, 1, size=k) * rng.choice([0.05, 0.2, 0.5, 1.0], size=k)
        cols = np.arange(100, 100 + k)
        levels = ShiftLevels(cols, v_wide, weight)
        picked = set(levels.wide(mean, variance, (mu0, np.full(k, v_narrow))).tolist())
        odds = np.array(
            [
                _numeric_log_odds(m, s, m0, v_narrow, v_wide, weight) if s < v_narrow else -np.inf
                for m, s, m0 in zip(mean, variance, mu0, strict=True)
            ]
        )
        clear = np.abs(odds) > 1e-6
        assert 20 < int(np.sum(odds > 0)) < k - 100  # both answers occur
        want = {int(c) for c in cols[clear & (odds > 0)]}
        assert picked & set(cols[clear].tolist()) == want


def test_card_shift_levels_put_the_wide_level_on_each_lineage_intercept() -> None:
    levels = card_shift_levels(7, 7 + 4 * 5, 5, 2.0, 0.1)
    assert levels is not None
    assert levels.columns.tolist() == [7, 12, 17, 22]
    assert levels.wide_variance == pytest.approx(5 * 4.0)
    assert levels.weight == 0.1
    assert card_shift_levels(7, 27, 5, None, 0.1) is None  # no wide sd: one level
    assert card_shift_levels(7, 27, 5, 2.0, 1.0) is None  # weight 1: wide is the only level
    assert card_shift_levels(7, 27, 5, 2.0, 0.999) is not None
    assert card_shift_levels(7, 7, 5, 2.0, 0.1) is None  # no lineage block


def test_block_condition_is_the_gershgorin_bound_of_f() -> None:
    """Block path, bound under 1e12: cond(F) reported as max_i sum_j |F_ij| * max(v), which
    is at least the true condition number."""
    space, x, d, mu, v = _problem(24, 150, seed=12)
    head = LogisticLaplaceHead(mu, v, block_layout=(space.shared_size, space.n_context)).fit(x, d)
    assert head.ok_ and head.block_factor is not None
    p = expit(x @ head.coef_)
    fisher = np.diag(1 / v) + x.T @ ((p * (1 - p))[:, None] * x)
    bound = float(np.max(np.abs(fisher).sum(axis=1))) * float(np.max(v))
    assert head.condition_ == pytest.approx(bound, rel=1e-9)
    eig = np.linalg.eigvalsh(fisher)
    assert head.condition_ >= eig[-1] / eig[0]
