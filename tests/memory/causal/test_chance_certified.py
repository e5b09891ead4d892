"""The certified lower bound of P_acc that lets a decision admit a card without its integral
(memory-model.md "Invalidity head and chance constraint"; ``chance.certified``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import expit, logit, ndtr

from gigaevo.memory.v2.causal import Acceptance, acceptance_probability
from gigaevo.memory.v2.causal.chance import (
    CERTIFY_MARGIN,
    acceptance_arrays,
    certified,
)


def _cards(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Cards of every kind: wide random ones, realistic ones around the cold-start prior,
    and tight ones (eta_1 - eta_0 nearly fixed next to eta_0's spread) whose P_acc sits
    near the bound, where an optimistic bound shows."""
    rng = np.random.default_rng(seed)
    sd = np.exp(rng.uniform(-4.0, 1.5, size=(n, 2)))
    rho = rng.uniform(-0.99, 0.999, size=n)
    wide_c = np.empty((n, 2, 2))
    wide_c[:, 0, 0], wide_c[:, 1, 1] = sd[:, 0] ** 2, sd[:, 1] ** 2
    wide_c[:, 0, 1] = wide_c[:, 1, 0] = rho * sd[:, 0] * sd[:, 1]
    wide_m = np.column_stack([rng.normal(-2.0, 2.5, n), rng.normal(-2.0, 3.0, n)])
    real_m = np.column_stack([rng.normal(-2.9, 0.4, n), rng.normal(-2.9, 1.0, n)])
    s00, s11 = rng.uniform(0.02, 0.1, n), rng.uniform(0.05, 0.6, n)
    r = rng.uniform(0.1, 0.95, n) * np.sqrt(s00 * s11)
    real_c = np.stack([np.column_stack([s00, r]), np.column_stack([r, s11])], axis=1)
    # tight: eta_1 = eta_0 + c + small noise, eta_0 spread wide enough to cross the turn
    s0 = rng.uniform(0.3, 3.0, n)
    small = rng.uniform(0.05, 0.3, n)
    tight_c = np.stack(
        [np.column_stack([s0**2, s0**2]), np.column_stack([s0**2, s0**2 + small**2])], axis=1
    )
    m0 = rng.normal(-1.0, 2.0, n)
    tight_m = np.column_stack([m0, m0 + rng.uniform(-0.5, 1.5, n)])
    return (
        np.concatenate([wide_m, real_m, tight_m]),
        np.concatenate([wide_c, real_c, tight_c]),
    )


def _optimistic(means: np.ndarray, covs: np.ndarray, delta: float) -> np.ndarray:
    """A wrong bound: lambda(eta) - eta taken at eta_0's mean instead of its least value
    over eta_0's range (what the test must be able to catch)."""
    m0, m1 = means[:, 0], means[:, 1]
    rise = logit(np.minimum(expit(m0) + delta, 1.0 - 1e-16)) - m0
    var = covs[:, 1, 1] + covs[:, 0, 0] - 2.0 * covs[:, 0, 1]
    return ndtr((rise - (m1 - m0)) / np.sqrt(var))


@pytest.mark.parametrize("delta", [1e-3, 0.10, 0.40])
def test_the_bound_is_below_the_careful_integral(delta: float) -> None:
    means, covs = _cards(7, 120)
    bound = certified(means, covs, delta)
    exact = [acceptance_probability(m, c, delta) for m, c in zip(means, covs, strict=True)]
    ok = np.array([not a.failed for a in exact])
    value = np.array([a.probability + a.error for a in exact])  # the integral itself
    assert ok.sum() >= 300
    assert np.all(bound[ok] <= value[ok] + 1e-12)
    assert np.all((bound >= 0.0) & (bound <= 1.0))
    # the comparison has power: the optimistic bound breaks it on these cards
    assert np.any(_optimistic(means, covs, delta)[ok] > value[ok] + 1e-3)


def test_the_bound_certifies_most_admitted_realistic_cards() -> None:
    """Around the cold-start prior (invalid rate ~5 %) most cards the integral admits clear
    alpha by the bound alone (89 % here; 98 % of a 1,000-card bank's decision in a run), so
    a decision integrates only a few."""
    means, covs = _cards(11, 200)
    real = slice(200, 400)
    admitted = acceptance_arrays(means[real], covs[real]).admitted(0.10)
    sure = certified(means[real], covs[real], 0.10) > 0.10 + CERTIFY_MARGIN
    assert admitted.sum() >= 150 and sure[admitted].mean() >= 0.85
    assert not np.any(sure & ~admitted)


def test_the_bound_by_hand() -> None:
    """A card with eta_0 fixed near the turn and eta_1 - eta_0 ~ N(0.1, 0.2^2): the least
    rise is 2 log(1.1 / 0.9) = 0.4013 (delta 0.1), so the bound is Phi((0.4013 - 0.1) / 0.2)
    less the window's tail, against an exact P_acc that is larger (the rise is larger away
    from the turn)."""
    turn = math.log(0.9 / 1.1)
    s0, s = 1e-4, 0.2
    means = np.array([[turn, turn + 0.1]])
    covs = np.array([[[s0**2, s0**2], [s0**2, s0**2 + s**2]]])
    least = 2.0 * math.log(1.1 / 0.9)
    want = float(ndtr((least - 0.1) / s))
    got = float(certified(means, covs, 0.10)[0])
    assert got == pytest.approx(want, abs=1e-8)
    exact = acceptance_probability(means[0], covs[0], 0.10)
    assert got <= exact.probability + exact.error


def test_the_bound_takes_the_least_rise_over_the_cards_own_range() -> None:
    """Far from the turn the least rise over eta_0's 8-sd range is its nearer end's, much
    above the global least: a card at p_0 ~ 5 % (eta_0 = -3, sd 0.1) has D_I = lambda(-2.2)
    + 2.2 = 0.8121, so eta_1 - eta_0 ~ N(0.5, 0.2^2) gives Phi(1.56) = 0.94 (the global
    least 0.4013 would give 0.31). Each card's own range counts, not its neighbours'."""
    far = [-3.0, -2.5]
    near = [math.log(0.9 / 1.1), math.log(0.9 / 1.1) + 0.5]
    means = np.array([far, near])
    sd0, s = 0.1, 0.2
    c = [[sd0**2, sd0**2], [sd0**2, sd0**2 + s**2]]
    covs = np.array([c, c])
    end = -3.0 + 8.0 * sd0
    least = float(logit(expit(end) + 0.10)) - end
    assert least == pytest.approx(0.8121, abs=1e-4)
    got = certified(means, covs, 0.10)
    assert got[0] == pytest.approx(float(ndtr((least - 0.5) / s)), abs=1e-7)
    assert got[0] > 0.9 and got[1] < 0.35
    exact = acceptance_probability(means[0], covs[0], 0.10)
    assert got[0] <= exact.probability + exact.error


def test_a_nearly_degenerate_difference_is_not_certified() -> None:
    """eta_1 - eta_0 with a variance lost in the rounding of its parts gets no bound, at any
    scale of the parts (here 1e4, with a difference variance of 1e-6)."""
    means = np.array([[-3.0, -3.0], [-3.0, -3.0]])
    covs = np.array([[[1.0, 1.0], [1.0, 1.0 + 1e-12]], [[1e4, 1e4], [1e4, 1e4 + 1e-6]]])
    assert certified(means, covs, 0.10).tolist() == [0.0, 0.0]


def test_a_bound_within_the_margin_of_alpha_is_integrated() -> None:
    """A card whose bound clears alpha by less than ``CERTIFY_MARGIN`` is integrated at
    once; one that clears it by more is deferred (its floats NaN until asked for)."""
    turn = math.log(0.9 / 1.1)
    sd0, s = 1e-4, 0.2
    cov = np.array([[sd0**2, sd0**2], [sd0**2, sd0**2 + s**2]])

    def mean_with_bound(target: float) -> float:  # bisection on the difference's mean
        lo, hi = -2.0, 2.0  # bound falls as the mean rises
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if certified(np.array([[turn, turn + mid]]), cov[None], 0.10)[0] > target:
                lo = mid
            else:
                hi = mid
        return lo

    inside = mean_with_bound(0.10 + 0.5 * CERTIFY_MARGIN)
    outside = mean_with_bound(0.10 + 2.0 * CERTIFY_MARGIN)
    means = np.array([[turn, turn + inside], [turn, turn + outside]])
    got = acceptance_arrays(means, np.stack([cov, cov]), certify=0.10)
    assert got.deferred is not None
    assert got.deferred.of_card.tolist() == [-1, 0]
    assert not math.isnan(got.probability[0]) and math.isnan(got.probability[1])
    assert got.admitted(0.10).tolist() == [True, True]


@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.10, 0.30])
def test_certified_admission_is_the_integrals(alpha: float) -> None:
    """``acceptance_arrays(certify=alpha)`` admits the cards the full path admits, at alpha
    and at any laxer level; a stricter level or a record integrates the deferred cards, whose
    floats are then the full path's (to the last bits a batch's products may round)."""
    means, covs = _cards(3, 150)
    full = acceptance_arrays(means, covs)
    fast = acceptance_arrays(means, covs, certify=alpha)
    assert fast.deferred is not None and int(np.count_nonzero(fast.deferred.of_card >= 0)) > 100
    for level in (0.0, alpha / 2, alpha):
        np.testing.assert_array_equal(fast.admitted(level), full.admitted(level))
    assert not fast.deferred.done  # answered from the bound
    late = fast.deferred.of_card >= 0
    assert np.all(np.isnan(fast.probability[late])) and not np.any(
        np.isnan(fast.probability[~late])
    )
    np.testing.assert_array_equal(fast.admitted(0.9), full.admitted(0.9))
    assert fast.deferred.done
    np.testing.assert_allclose(fast.probability, full.probability, rtol=0, atol=1e-15)
    np.testing.assert_allclose(fast.error, full.error, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(fast.failed, full.failed)


def test_a_record_of_a_deferred_card_is_its_integral() -> None:
    means, covs = _cards(5, 40)
    fast = acceptance_arrays(means, covs, certify=0.10)
    assert fast.deferred is not None
    i = int(np.flatnonzero(fast.deferred.of_card >= 0)[0])
    got = fast.at(i)
    want = acceptance_arrays(means, covs).at(i)
    assert isinstance(got, Acceptance) and got.admitted(0.10)
    assert got.failed == want.failed
    assert got.probability == pytest.approx(want.probability, abs=1e-15)


def test_no_bound_with_the_credible_cap_or_for_ill_posed_cards() -> None:
    """The cap mode integrates every card; singular or non-finite cards fail as before."""
    means = np.array([[-3.0, -3.0], [-3.0, np.nan], [-3.0, -3.0]])
    covs = np.array([np.eye(2) * 0.05, np.eye(2), [[0.2, 0.2], [0.2, 0.2]]])
    capped = acceptance_arrays(means, covs, absolute_cap=0.5, certify=0.10)
    assert capped.deferred is None
    fast = acceptance_arrays(means, covs, certify=0.10)
    assert fast.admitted(0.10).tolist() == [True, False, False]
    assert [a.failed for a in fast.results()] == [False, True, True]
