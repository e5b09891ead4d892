"""The adaptive Gauss-Legendre quadrature against integrals known in closed form.

Each case integrates exp(h) for a kernel whose integral (and moments) are worked by hand
or from the normal cdf, so a wrong node map, weight, mode or bisection shows as a wrong
number, not as a disagreement between two paths of the same code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ndtr

from gigaevo.memory.v2.causal.quadrature import adaptive_gauss_legendre


def _mass(log_weights: np.ndarray) -> float:
    return float(np.sum(np.exp(log_weights)))


def _gaussian(m: float, s: float):
    return lambda t: -0.5 * ((t - m) / s) ** 2


@pytest.mark.parametrize("batched", [False, True])
def test_polynomial_kernel_is_integrated_exactly_with_its_moments(batched: bool) -> None:
    """exp(h) = 1 + t^2 on [0, 2]: both rules are exact for a quadratic, so the mass is
    8/3 + 2 = 14/3 and the first moment int t (1 + t^2) = 2 + 4 = 6, to rounding."""
    h = lambda t: math.log1p(t * t)  # noqa: E731
    batch = (lambda t: np.log1p(t * t)) if batched else None
    q = adaptive_gauss_legendre(h, 0.0, 2.0, h_batch=batch)
    for nodes, lw in ((q.fine_nodes, q.fine_log_weights), (q.coarse_nodes, q.coarse_log_weights)):
        assert _mass(lw) == pytest.approx(14.0 / 3.0, rel=1e-12)
        assert float(np.sum(np.exp(lw) * nodes)) == pytest.approx(6.0, rel=1e-12)
        assert np.all((nodes > 0.0) & (nodes < 2.0))
    assert len(q.fine_nodes) == 2 * len(q.coarse_nodes)
    assert len(q.fine_nodes) % 16 == 0
    # increasing kernel: the only mode is the upper end
    assert q.modes == (2.0,)
    assert q.modes_converged and not q.depth_limit_hit


@pytest.mark.parametrize(
    ("m", "s", "lo", "hi"),
    [
        (0.3, 0.05, -2.0, 3.0),
        (-1.0, 0.7, -4.0, 0.5),
        (0.0, 0.1, -2.0, 2.0),  # the mode on a point of the scan
    ],
)
def test_gaussian_kernel_matches_the_normal_cdf(m: float, s: float, lo: float, hi: float) -> None:
    """int_lo^hi exp(-(t - m)^2 / (2 s^2)) dt = s sqrt(2 pi) (Phi((hi-m)/s) - Phi((lo-m)/s)),
    the mode found to 1e-6, and the second central moment s^2 when the window holds the
    whole bell."""
    h = _gaussian(m, s)
    q = adaptive_gauss_legendre(h, lo, hi)
    exact = s * math.sqrt(2 * math.pi) * (ndtr((hi - m) / s) - ndtr((lo - m) / s))
    assert _mass(q.fine_log_weights) == pytest.approx(exact, rel=1e-8)
    assert _mass(q.coarse_log_weights) == pytest.approx(exact, rel=1e-5)
    assert len(q.modes) == 1 and q.modes[0] == pytest.approx(m, abs=1e-6)
    assert q.modes_converged and not q.depth_limit_hit
    w = np.exp(q.fine_log_weights)
    mean = float(np.sum(w * q.fine_nodes) / np.sum(w))
    if (hi - m) / s > 8 and (m - lo) / s > 8:
        assert mean == pytest.approx(m, abs=1e-9)
        var = float(np.sum(w * (q.fine_nodes - m) ** 2) / np.sum(w))
        assert var == pytest.approx(s * s, rel=1e-8)
    assert np.all((q.fine_nodes > lo) & (q.fine_nodes < hi))


def test_two_separated_modes_are_both_found_and_the_mixture_integrates() -> None:
    """A mixture of two narrow bells, 0.3 N(-2, 0.1) + 0.7 N(1.5, 0.2) (densities), on
    [-4, 4]: mass 1 to 1e-8 (the tails outside are below 1e-80), both modes found."""

    def h(t: float) -> float:
        a = 0.3 * math.exp(-0.5 * ((t + 2.0) / 0.1) ** 2) / (0.1 * math.sqrt(2 * math.pi))
        b = 0.7 * math.exp(-0.5 * ((t - 1.5) / 0.2) ** 2) / (0.2 * math.sqrt(2 * math.pi))
        return math.log(a + b)

    q = adaptive_gauss_legendre(h, -4.0, 4.0)
    assert _mass(q.fine_log_weights) == pytest.approx(1.0, rel=1e-8)
    assert sorted(q.modes) == [pytest.approx(-2.0, abs=1e-5), pytest.approx(1.5, abs=1e-5)]
    w = np.exp(q.fine_log_weights)
    # the mixture's mean: 0.3 * -2 + 0.7 * 1.5 = 0.45
    assert float(np.sum(w * q.fine_nodes)) == pytest.approx(0.45, abs=1e-8)


def test_a_flat_topped_peak_is_located_and_integrated() -> None:
    """h = -((t - m) / s)^4: a peak no parabola fits, so the mode polish has to work for
    its precision; int exp(h) = 2 s Gamma(5/4) (the window holds the whole peak)."""
    m, s = 0.3137, 0.5
    q = adaptive_gauss_legendre(lambda t: -(((t - m) / s) ** 4), -2.0, 3.0)
    assert len(q.modes) == 1 and q.modes[0] == pytest.approx(m, abs=1e-6)
    assert _mass(q.fine_log_weights) == pytest.approx(2 * s * math.gamma(1.25), rel=1e-10)


def test_a_negligible_second_mode_never_hides_the_dominant_one() -> None:
    """Two bells whose heights differ by e^200, with the kernel shifted up by 7: the
    reported modes include the dominant one, and the mass is the dominant bell's,
    e^7 0.1 sqrt(2 pi)."""

    def h(t: float) -> float:
        return 7.0 + float(
            np.logaddexp(-0.5 * ((t + 2.0) / 0.1) ** 2, -200.0 - 0.5 * ((t - 2.0) / 0.1) ** 2)
        )

    q = adaptive_gauss_legendre(h, -4.0, 4.0)
    assert any(abs(m + 2.0) < 1e-6 for m in q.modes)
    exact = math.exp(7.0) * 0.1 * math.sqrt(2 * math.pi)
    assert _mass(q.fine_log_weights) == pytest.approx(exact, rel=1e-8)


def test_the_shift_changes_no_weight() -> None:
    """The shift only scales the masses compared when bisecting: the log weights are
    ln(GL weight) + h whatever it is, so the mass is the same integral."""
    h = _gaussian(0.0, 0.4)
    exact = 0.4 * math.sqrt(2 * math.pi) * (ndtr(2.0 / 0.4) - ndtr(-1.0 / 0.4))
    for shift in (None, 0.0, -3.0):
        q = adaptive_gauss_legendre(h, -1.0, 2.0, shift=shift)
        assert _mass(q.fine_log_weights) == pytest.approx(exact, rel=1e-8)


def test_a_discontinuous_kernel_reports_the_depth_limit() -> None:
    """exp(h) steps down from 1 to e^-0.3 at t = pi / 10 (too small a fall to be cut at):
    no polynomial rule resolves the jump, so some piece is still unresolved at the deepest
    bisection, and says so; the mass is still close to pi / 10 + (1 - pi / 10) e^-0.3."""
    jump = math.pi / 10
    h = lambda t: 0.0 if t < jump else -0.3  # noqa: E731
    q = adaptive_gauss_legendre(h, 0.0, 1.0)
    assert q.depth_limit_hit
    exact = jump + (1.0 - jump) * math.exp(-0.3)
    assert _mass(q.fine_log_weights) == pytest.approx(exact, abs=1e-2)


def test_a_mode_at_the_lower_end() -> None:
    """A decreasing kernel h = -3 t on [0, 1]: the mode is the lower end and the mass
    (1 - e^-3) / 3."""
    q = adaptive_gauss_legendre(lambda t: -3.0 * t, 0.0, 1.0)
    assert q.modes == (0.0,)
    assert _mass(q.fine_log_weights) == pytest.approx((1 - math.exp(-3.0)) / 3.0, rel=1e-12)
