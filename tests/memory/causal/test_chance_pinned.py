"""The vectorised chance constraint pinned where the suite left it free (issue 19): each
failure below is a mutant of ``causal/chance.py`` that every other test let through.

- at delta = 0 and at a delta below ``_TANH_DELTA`` (the expit branch of the inner
  integrand) the fixed rules agree with the careful integral on asymmetric, correlated
  cards, and resolve most of them themselves;
- the reported error bound includes the 2 Phi(-10) tail: never negative, exactly the tail
  where both rules integrate to 0;
- no floating-point warning (RuntimeWarning) escapes, even where p_0 + delta reaches 1
  (log of 0 or of a negative ratio inside the integrand);
- one card with a non-finite covariance fails alone: the others keep the fast rules;
- mismatched inputs are refused with one exact message.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.integrate import IntegrationWarning
from scipy.special import ndtr

from gigaevo.memory.v2.causal import acceptance_probability
from gigaevo.memory.v2.causal.chance import acceptance_probabilities
from tests.memory.causal.test_chance import _cases

TAIL = 2.0 * float(ndtr(-10.0))  # the mass outside [-10, 10] of the standardised eta_0


def _some_cards() -> tuple[np.ndarray, np.ndarray]:
    """The first 120 random cards and the 80 realistic ones of test_chance's cases."""
    means, covs = _cases()
    keep = np.r_[0:120, 400:480]
    return means[keep], covs[keep]


@pytest.mark.parametrize("delta", [0.0, 5e-7], ids=["zero", "below-tanh"])
def test_small_deltas_agree_with_the_careful_integral(delta: float) -> None:
    means, covs = _some_cards()
    fast = acceptance_probabilities(means, covs, delta=delta)
    own = 0
    for m, c, got in zip(means, covs, fast, strict=True):
        want = acceptance_probability(m, c, delta=delta)
        assert got.failed == want.failed, (m, c)
        assert abs(got.probability - want.probability) <= 1e-8, (m, c, delta, got, want)
        own += got.error != want.error
    assert own >= 120  # the fixed rules resolved them (not the careful fallback)


def test_a_tiny_delta_is_not_zero() -> None:
    # a tight, correlated card whose acceptance moves by more than the tolerance between
    # delta = 0 and delta = 5e-7 (a sign slip on delta would be seen)
    m = np.array([[-2.0, -2.0]])
    c = np.array([[[0.04, 0.0399], [0.0399, 0.04]]])
    (zero,) = acceptance_probabilities(m, c, delta=0.0)
    (tiny,) = acceptance_probabilities(m, c, delta=5e-7)
    want = acceptance_probability(m[0], c[0], delta=5e-7)
    assert abs(tiny.probability - want.probability) <= 1e-8
    assert tiny.probability - zero.probability > 1e-6


def test_the_error_bound_includes_the_tail() -> None:
    means, covs = _some_cards()
    for acc in acceptance_probabilities(means, covs):
        assert acc.error >= TAIL
    # plainly unsafe (p_0 ~ 0.25 %, p_1 ~ 99.75 %): both rules integrate to exactly 0
    (unsafe,) = acceptance_probabilities(np.array([[-6.0, 6.0]]), np.diag([0.01, 0.01])[None])
    assert not unsafe.failed and unsafe.probability == 0.0
    assert unsafe.error == pytest.approx(TAIL, rel=1e-12)


def test_no_floating_point_warning_escapes() -> None:
    means, covs = _cases()
    # and cards whose p_0 + delta reaches 1 inside the window (the boundary is +inf there),
    # and a zero variance of eta_0 beside a non-zero covariance (0.1 / 0: a division by zero)
    high = np.array([[3.0, 3.0], [5.0, -1.0], [2.2, 2.2], [-3.0, -3.0]])
    high_c = np.array(
        [[[4.0, 1.0], [1.0, 4.0]], [[9.0, 0.0], [0.0, 1.0]], [[25.0, 1.0], [1.0, 25.0]],
         [[0.0, 0.1], [0.1, 1.0]]]
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's floating-point warnings
        warnings.simplefilter("error", IntegrationWarning)  # quad's abnormal ends fail closed
        with np.errstate(divide="warn", invalid="warn"):
            for delta in (0.0, 5e-7, 0.10, 0.5):
                acceptance_probabilities(np.r_[means, high], np.r_[covs, high_c], delta=delta)


def test_a_card_with_a_non_finite_covariance_fails_alone() -> None:
    means, covs = _some_cards()
    bad = covs.copy()
    bad[7, 0, 1] = bad[7, 1, 0] = np.nan
    out = acceptance_probabilities(means, bad)
    assert out[7].failed and out[7].probability == 0.0
    careful = [acceptance_probability(m, c) for m, c in zip(means, bad, strict=True)]
    # every other card still takes the fixed rules (their own error, not quad's)
    own = sum(
        o.error != c.error for k, (o, c) in enumerate(zip(out, careful, strict=True)) if k != 7
    )
    assert own >= 120


def test_mismatched_inputs_are_refused_with_one_exact_message() -> None:
    with pytest.raises(ValueError) as info:
        acceptance_probabilities(np.zeros((3, 2)), np.zeros((2, 2, 2)))
    assert str(info.value) == "eta_means and eta_covs must describe the same cards"
