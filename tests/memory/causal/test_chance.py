"""The vectorised chance constraint agrees with the careful integral (memory-model.md "Invalidity
head and chance constraint")."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import expit, logit
from scipy.stats import norm

from gigaevo.memory.v2.causal import (
    Acceptance,
    BlockDesign,
    DesignSpace,
    LogisticLaplaceHead,
    RewardDefinition,
    acceptance_probability,
    chance,
    context_features,
)
from gigaevo.memory.v2.causal.chance import acceptance_arrays, acceptance_probabilities


def _covariances(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random SPD 2x2 covariances over many scales and correlations."""
    sd = np.exp(rng.uniform(-5.0, 2.5, size=(n, 2)))
    rho = rng.uniform(-0.999, 0.999, size=n)
    c = np.empty((n, 2, 2))
    c[:, 0, 0], c[:, 1, 1] = sd[:, 0] ** 2, sd[:, 1] ** 2
    c[:, 0, 1] = c[:, 1, 0] = rho * sd[:, 0] * sd[:, 1]
    return c


def _cases() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(20261130)
    n = 400
    means = np.column_stack([rng.normal(-2.5, 2.5, n), rng.normal(-2.5, 3.0, n)])
    covs = _covariances(rng, n)
    # realistic: around the cold-start prior
    real_m = np.column_stack([rng.normal(-2.9, 0.4, 80), rng.normal(-2.9, 1.0, 80)])
    s00, s11 = rng.uniform(0.02, 0.1, 80), rng.uniform(0.05, 0.6, 80)
    r = rng.uniform(0.1, 0.95, 80) * np.sqrt(s00 * s11)
    real_c = np.stack([np.column_stack([s00, r]), np.column_stack([r, s11])], axis=1)
    # near-singular: varsigma / sd_1 just above, at and below 1e-5
    ratio = np.repeat([2e-5, 1.1e-5, 0.9e-5, 1e-3, 1e-2], 6)
    s = rng.uniform(0.01, 4.0, len(ratio))
    near_c = np.stack(
        [
            np.column_stack([s, s * np.sqrt(1 - ratio**2)]),
            np.column_stack([s * np.sqrt(1 - ratio**2), s]),
        ],
        axis=1,
    )
    near_m = np.column_stack([rng.normal(-3, 1, len(ratio)), rng.normal(-3, 1, len(ratio))])
    # extreme: huge or tiny means and variances, boundary at +inf inside the window
    ext_m = np.array([[-40.0, 40.0], [40.0, -40.0], [2.2, 2.2], [0.0, 30.0], [-30.0, -30.0]])
    ext_c = np.array(
        [[[1e3, 0.0], [0.0, 1e3]], [[1e-8, 0.0], [0.0, 1e-8]], [[25.0, 1.0], [1.0, 25.0]],
         [[1e-6, 1e-7], [1e-7, 1e2]], [[9.0, -8.9], [-8.9, 9.0]]]
    )  # fmt: skip
    # non-finite means (an infinite one on either arm gives the fixed rules a clean 0 or 1:
    # the card must fail all the same), singular, negative variance
    bad_m = np.array([[0.0, np.nan], [np.inf, -3.0], [-3.0, np.inf], [-3.0, -3.0], [-3.0, -3.0]])
    bad_c = np.array(
        [np.eye(2), np.eye(2), np.eye(2), [[0.2, 0.2], [0.2, 0.2]], [[-1.0, 0.0], [0.0, 1.0]]]
    )
    return (
        np.concatenate([means, real_m, near_m, ext_m, bad_m]),
        np.concatenate([covs, real_c, near_c, ext_c, bad_c]),
    )


def test_fast_path_agrees_with_careful_integral() -> None:
    means, covs = _cases()
    fast = acceptance_probabilities(means, covs)
    own_error = 0
    for m, c, got in zip(means, covs, fast, strict=True):
        want = acceptance_probability(m, c)
        assert got.failed == want.failed, (m, c)
        assert abs(got.probability - want.probability) <= 1e-8, (m, c, got, want)
        assert got.failed or got.error <= 1e-8
        own_error += got.error != want.error
    # most cards (339 of 520) are resolved by the fixed rules, which report their own error:
    # without this the agreement would also hold if every card fell back to the careful path
    # (a wrong rule whose two resolutions disagree)
    assert own_error >= 300


def test_arrays_are_the_per_card_records_bit_for_bit() -> None:
    """``acceptance_arrays`` (a decision's path) gives each card the floats the per-card
    records had: max(0.0, value - error) of the fixed rules as Python floats, the careful
    path's record otherwise; ``admitted`` is ``Acceptance.admitted`` card by card."""
    means, covs = _cases()
    means, covs = np.r_[means, means[:40]], np.r_[covs, covs[:40]]  # duplicates too
    arrays = acceptance_arrays(means, covs)
    fast = chance._well_posed(means, covs)
    value, error, resolved = chance._fast(means[fast], covs[fast], 0.10, 1e-8)
    pairs = zip(means, covs, strict=True)
    want: list[Acceptance] = [acceptance_probability(m, c) for m, c in pairs]
    for k, v, e, r in zip(np.flatnonzero(fast).tolist(), value, error, resolved, strict=True):
        if r:
            want[k] = Acceptance(max(0.0, float(v) - float(e)), float(e), False)
    assert arrays.results() == acceptance_probabilities(means, covs) == want
    assert [arrays.at(i) for i in range(len(arrays))] == want
    for alpha in (0.0, 0.1, 0.5, 0.99):
        assert arrays.admitted(alpha).tolist() == [a.admitted(alpha) for a in want]
    assert len(acceptance_arrays(np.zeros((0, 2)), np.zeros((0, 2, 2)))) == 0


def test_fast_path_is_used_and_conservative_on_realistic_cards() -> None:
    """Realistic cards take the vectorised rule (not the fallback) and stay conservative."""
    means, covs = _cases()
    real = slice(400, 480)
    fast = acceptance_probabilities(means[real], covs[real])
    careful = [acceptance_probability(m, c) for m, c in zip(means[real], covs[real], strict=True)]
    # the fixed rules report their own (tiny) error: not quad's estimate
    assert sum(f.error != c.error for f, c in zip(fast, careful, strict=True)) >= 70
    for f, c in zip(fast, careful, strict=True):
        assert f.probability <= c.probability + c.error + 1e-12


def test_duplicate_cards_share_one_integral_and_keep_order() -> None:
    m = np.array([[-2.9, -2.9], [-1.0, -0.2], [-2.9, -2.9]])
    cold = [[0.05, 0.05], [0.05, 0.3]]
    c = np.array([cold, [[0.3, 0.1], [0.1, 0.4]], cold])
    out = acceptance_probabilities(m, c)
    assert out[0] == out[2] and out[0] != out[1]
    assert acceptance_probabilities(np.zeros((0, 2)), np.zeros((0, 2, 2))) == []
    with pytest.raises(ValueError, match="eta_means and eta_covs must describe the same cards"):
        acceptance_probabilities(m, c[:2])


def test_cold_start_example_through_the_batch() -> None:
    x = context_features(RewardDefinition(0.0, 1.0), 0.80, 50, [0.25, 0.50])
    space = DesignSpace(5, lineages=("A", "B"), kind_contrast=False)
    mu, v = space.invalidity_prior()
    head = LogisticLaplaceHead(mu, v).fit(np.zeros((0, space.size)), np.zeros(0))
    z1 = np.array([space.row(x, 1, "A"), space.row(x, 1, "B")])
    means, covs = head.linear_predictors(space.row(x, 0), z1)
    out = acceptance_probabilities(means, covs)
    for acc in out:
        assert not acc.failed and acc.probability == pytest.approx(0.99058, abs=1e-4)


@pytest.mark.parametrize("block", [False, True])
def test_batched_linear_predictors_match_one_by_one(block: bool) -> None:
    rng = np.random.default_rng(3)
    c = 5
    lineages = tuple(f"L{i:02d}" for i in range(30))
    space = DesignSpace(c, lineages)
    mu, v = space.invalidity_prior()
    rows, d = [], []
    for _ in range(300):
        x = np.r_[1.0, rng.uniform(-1, 1, c - 1)]
        treated = rng.random() < 0.6
        lin = lineages[int(rng.integers(20))]  # ten lineages stay cold
        rows.append(space.row(x, 1, lin, "insight") if treated else space.row(x, 0))
        d.append(float(rng.random() < 0.1))
    dense = np.array(rows)
    design = BlockDesign.from_dense(dense, space.shared_size, c) if block else dense
    head = LogisticLaplaceHead(mu, v).fit(design, np.array(d))
    assert head.ok_
    x = np.r_[1.0, rng.uniform(-1, 1, c - 1)]
    z0 = space.row(x, 0)
    z1 = np.array([space.row(x, 1, lin, k) for lin in lineages for k in ("insight", "program")])
    means, covs = head.linear_predictors(z0, z1)
    for i, row in enumerate(z1):
        m, cov = head.linear_predictor(z0, row)
        np.testing.assert_allclose(means[i], m, rtol=0, atol=1e-12)
        np.testing.assert_allclose(covs[i], cov, rtol=0, atol=1e-12)


# -- against an independent integral, and each side of the constraint (issue 19) -------


def _reference(mean: np.ndarray, cov: np.ndarray, delta: float, cap: float | None = None) -> float:
    """P(expit(eta_1) - expit(eta_0) <= delta [and expit(eta_1) <= cap]) integrated over eta_0
    (not the standardised t of the product code), with eta_1 | eta_0 normal."""
    m0, m1 = float(mean[0]), float(mean[1])
    s0 = np.sqrt(cov[0, 0])
    slope = cov[0, 1] / cov[0, 0]
    sd1 = np.sqrt(cov[1, 1] - cov[0, 1] ** 2 / cov[0, 0])

    def integrand(e0: float) -> float:
        p = float(expit(e0)) + delta
        bound = np.inf if p >= 1.0 else float(logit(p))
        if cap is not None:
            bound = min(bound, float(logit(cap)))
        return float(norm.pdf(e0, m0, s0) * norm.cdf(bound, m1 + slope * (e0 - m0), sd1))

    lo, hi = m0 - 12 * s0, m0 + 12 * s0
    value, _ = quad(integrand, lo, hi, epsabs=1e-13, epsrel=1e-12, limit=500)
    return float(value)


REFERENCE_CASES = [
    ((-2.94444, -2.94444), ((0.05004, 0.05004), (0.05004, 0.29914)), 0.10),  # cold start
    ((-2.9, -1.2), ((0.04, 0.01), (0.01, 0.09)), 0.10),  # +18 points, tight: mostly unsafe
    ((-1.2, -2.9), ((0.04, 0.01), (0.01, 0.09)), 0.10),  # -18 points: safe
    ((-2.0, -1.5), ((0.3, -0.2), (-0.2, 0.5)), 0.05),  # anti-correlated arms
    ((0.5, 1.5), ((1.0, 0.9), (0.9, 1.0)), 0.20),  # strongly correlated, high rates
    ((-3.0, -3.0), ((0.5, 0.0), (0.0, 0.5)), 0.0),  # delta = 0: P(p_1 <= p_0) = 1/2
]


@pytest.mark.parametrize(("mean", "cov", "delta"), REFERENCE_CASES)
def test_acceptance_equals_an_independent_integral(
    mean: tuple[float, float], cov: tuple[tuple[float, float], ...], delta: float
) -> None:
    m, c = np.array(mean), np.array(cov)
    want = _reference(m, c, delta)
    careful = acceptance_probability(m, c, delta=delta)
    (batched,) = acceptance_probabilities(m[None], c[None], delta=delta)
    for got in (careful, batched):
        assert not got.failed and got.error <= 1e-8
        # conservative: the integral minus its error bound, never above the truth
        assert want - 2e-8 <= got.probability <= want + 1e-10, (got, want)
    if delta == 0.0:
        assert want == pytest.approx(0.5, abs=1e-9)


def test_the_credible_cap_also_bounds_the_treated_rate() -> None:
    m, c = np.array([-2.0, -1.6]), np.array([[0.2, 0.1], [0.1, 0.3]])
    for cap in (0.15, 0.5):
        want = _reference(m, c, 0.10, cap)
        got = acceptance_probability(m, c, delta=0.10, absolute_cap=cap)
        assert want - 2e-8 <= got.probability <= want + 1e-10
        (batched,) = acceptance_probabilities(m[None], c[None], delta=0.10, absolute_cap=cap)
        assert batched == got
    assert _reference(m, c, 0.10, 0.15) < acceptance_probability(m, c, delta=0.10).probability


TIGHT = np.array([[1e-4, 0.0], [0.0, 1e-4]])  # posterior sure of both invalid rates


@pytest.mark.parametrize(
    ("p0", "p1", "admitted"),
    [
        (0.05, 0.35, False),  # raises the invalid rate by 30 points
        (0.35, 0.05, True),  # lowers it by 30 points: safe
        (0.05, 0.05, True),  # no change
        (0.05, 0.17, False),  # +12 points > delta
        (0.05, 0.13, True),  # +8 points <= delta
    ],
)
def test_the_constraint_bounds_the_rise_not_the_fall(p0: float, p1: float, admitted: bool) -> None:
    mean = logit(np.array([p0, p1]))
    careful = acceptance_probability(mean, TIGHT, delta=0.10)
    (batched,) = acceptance_probabilities(mean[None], TIGHT[None], delta=0.10)
    for got in (careful, batched):
        assert got.admitted(0.10) is admitted
        assert got.probability == pytest.approx(1.0 if admitted else 0.0, abs=1e-3)


def test_admission_needs_p_acc_strictly_above_alpha() -> None:
    assert not Acceptance(0.10, 0.0, False).admitted(0.10)
    assert Acceptance(0.1000001, 0.0, False).admitted(0.10)
    assert not Acceptance(0.5, 0.0, False).admitted(0.5)
    assert Acceptance(0.11, 0.0, False).admitted()  # the default alpha is 0.10
    assert not Acceptance(0.09, 0.0, False).admitted()


@pytest.mark.parametrize("delta", [0.10, 1e-7])
def test_shared_control_logit_is_each_cards_own(delta: float) -> None:
    """Cards of one decision share (eta-bar_0, sd_0) (one control row): ``_inner`` given that
    one pair takes logit(p_0(t) + delta) once for all of them, and every card's row of Phi
    is the one it has integrated alone, bit for bit (both the tanh form and expit, for tiny
    delta); cards with their own control moments are integrated row by row as before."""
    rng = np.random.default_rng(11)
    n = 60
    m1 = rng.normal(-1.0, 1.5, n)
    zeta, vs = rng.normal(0.0, 0.3, n), np.exp(rng.uniform(-3.0, 0.5, n))
    for m0, sd0 in ((np.full(n, -2.3), np.full(n, 0.4)), (rng.normal(-2, 1, n), np.full(n, 0.4))):
        shared = bool(np.all(m0 == m0[0]))
        for t in (chance._FINE_T, chance._COARSE_T):
            together = chance._inner(t, m0, sd0, m1, zeta, vs, delta)
            if shared:  # the one pair, as ``acceptance_arrays(shared_control=True)`` passes it
                np.testing.assert_array_equal(
                    chance._inner(t, m0[:1], sd0[:1], m1, zeta, vs, delta), together
                )
            for j in range(n):
                alone = chance._inner(
                    t, m0[j : j + 1], sd0[j : j + 1], m1[j : j + 1], zeta[j : j + 1],
                    vs[j : j + 1], delta,
                )  # fmt: skip
                np.testing.assert_array_equal(together[j], alone[0])
    # a control arm that always clears delta gives Phi = 1 (p_1 may be anything)
    sure = chance._inner(np.zeros(1), np.full(2, 50.0), np.ones(2), m1[:2], zeta[:2], vs[:2], 0.5)
    np.testing.assert_array_equal(sure, np.ones((2, 1)))


@pytest.mark.parametrize("delta", [0.10, 1e-7])
def test_a_shared_control_gives_the_same_arrays(delta: float) -> None:
    """``acceptance_arrays(shared_control=True)`` (a decision's cards: one control row) gives
    the per-card path's P_acc, errors and failures bit for bit, on cards that take the fast
    rules and cards that take the careful path; and it really reads the first card's control
    (a second card with another control arm gets the first's)."""
    rng = np.random.default_rng(5)
    n = 300
    covs = _covariances(rng, n)
    covs[:, 0, 0] = 0.3
    covs[:, 0, 1] = covs[:, 1, 0] = np.clip(covs[:, 0, 1], -0.5, 0.5) * np.sqrt(covs[:, 1, 1])
    means = np.column_stack([np.full(n, -1.7), rng.normal(-1.5, 2.0, n)])
    means[:5, 1] = np.nan  # not well posed: the careful path fails them
    alone = acceptance_arrays(means, covs, delta)
    shared = acceptance_arrays(means, covs, delta, shared_control=True)
    assert 0 < np.count_nonzero(alone.failed) < n
    for got, want in zip(
        (shared.probability, shared.error, shared.failed),
        (alone.probability, alone.error, alone.failed),
        strict=True,
    ):
        np.testing.assert_array_equal(got, want)
    other = np.array([[-1.7, -1.5], [2.0, -1.5]])  # two cards, the same but for p_0
    pair = np.array([[[0.3, 0.1], [0.1, 0.5]]] * 2)
    lone = acceptance_arrays(other, pair, delta).probability
    first = acceptance_arrays(other, pair, delta, shared_control=True).probability
    assert lone[1] > lone[0] + 0.01  # a control arm that is high leaves more room
    assert first[1] == first[0] == lone[0]
