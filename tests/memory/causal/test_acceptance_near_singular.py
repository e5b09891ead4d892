"""The careful chance-constraint integral when eta_1 is almost a function of eta_0
(memory-model.md "Invalidity head and chance constraint": P_acc is the integral minus its
error bound, so it is conservative, or the card fails closed).

With varsigma / sqrt(Sigma_11) small (but above the 1e-5 that counts as singular) the inner
Phi is nearly a step at each root of the gap. The truth here splits [-10, 10] at the exact
roots of the gap (found by bracketing on a 20,001-point grid) and integrates each piece
adaptively; in the step limit it is the normal mass of {t : gap(t) > 0}.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, optimize
from scipy.special import expit, ndtr

from gigaevo.memory.v2.causal import acceptance_probability


def _truth(mean: tuple[float, float], cov: np.ndarray, delta: float) -> float:
    m0, m1 = mean
    sd0 = math.sqrt(cov[0, 0])
    zeta = cov[0, 1] / sd0
    vs = math.sqrt(cov[1, 1] - zeta * zeta)

    def gap(t: float) -> float:
        p = expit(m0 + sd0 * t) + delta
        return (math.inf if p >= 1.0 else math.log(p / (1.0 - p))) - m1 - zeta * t

    grid = np.linspace(-10.0, 10.0, 20001)
    g = np.array([gap(t) for t in grid])
    cuts = []
    for i in range(len(grid) - 1):
        a, b = g[i], g[i + 1]
        if np.isfinite(a) and np.isfinite(b) and np.sign(a) != np.sign(b):
            cuts.append(optimize.brentq(gap, grid[i], grid[i + 1], xtol=1e-15))
        elif np.isfinite(a) != np.isfinite(b):
            cuts.append(0.5 * (grid[i] + grid[i + 1]))

    def f(t: float) -> float:
        gt = gap(t)
        return (
            math.exp(-0.5 * t * t)
            / math.sqrt(2 * math.pi)
            * (1.0 if gt == math.inf else ndtr(gt / vs))
        )

    edges = [-10.0, *sorted(cuts), 10.0]
    total = 0.0
    for a, b in itertools.pairwise(edges):
        sub = np.linspace(a, b, 5)
        for c, d in itertools.pairwise(sub):
            total += integrate.quad(f, c, d, epsabs=1e-14, epsrel=1e-13, limit=500)[0]
    return total


MEANS = [(-2.0, -1.0), (-0.5, 0.2), (1.0, 2.2)]


def _check(ratio: float) -> None:
    for mean in MEANS:
        rho = math.sqrt(1.0 - ratio * ratio)  # varsigma / sd_1 = ratio
        cov = np.array([[1.0, rho], [rho, 1.0]])
        acc = acceptance_probability(np.array(mean), cov, delta=0.10)
        if acc.failed:  # failing closed is allowed
            assert acc.probability == 0.0
            continue
        truth = _truth(mean, cov, 0.10)
        assert acc.error <= 1e-8
        # conservative and within the certified error
        assert truth - 2 * acc.error - 1e-9 <= acc.probability <= truth + 1e-9, (mean, truth, acc)


@pytest.mark.parametrize("ratio", [1e-1, 1e-2])
def test_a_nearly_degenerate_law_is_integrated_to_its_certified_error(ratio: float) -> None:
    _check(ratio)


@pytest.mark.xfail(
    strict=True,
    reason="bug found in session 7 (issue 19), not fixed: at varsigma/sd_1 = 1e-3 the careful "
    "integral at mean (-2, -1) returns 0.2797931 with an error bound of 8e-11 where the truth "
    "is 0.2795383 (2.5e-4 too high: not conservative), and 1.2e-5 too high at 2e-5 and 5e-5. "
    "The inner Phi is a step of width ~varsigma at each root of the gap; the adaptive rule "
    "(absolute target 1e-10) puts no node inside it and its error estimate does not see it. "
    "Refining the breakpoints to the exact roots does not cure 1e-3 (the step then sits at an "
    "interval's end, still without a node); graded breakpoints around each root would",
)
@pytest.mark.parametrize("ratio", [1e-3, 5e-5, 2e-5])
def test_a_near_step_inner_law_is_integrated_to_its_certified_error(ratio: float) -> None:
    _check(ratio)


@pytest.mark.parametrize(
    ("mean", "cov", "cap"),
    [
        ((-1.0, -2.0), ((0.3, 0.1), (0.1, 0.4)), 0.05),
        ((0.5, -3.5), ((1.0, -0.3), (-0.3, 0.6)), 0.08),
        ((-2.0, -2.9), ((0.2, 0.0), (0.0, 2.0)), 0.09),
    ],
)
def test_the_reported_probability_is_the_integral_minus_its_error(mean, cov, cap) -> None:
    """A cap below delta makes the boundary constant (lambda >= logit(delta) > logit(cap)), so
    the integral has a closed form, Phi((logit(cap) - m1) / sqrt(Sigma_11)) (up to the 1e-23
    outside [-10, 10]): the reported P_acc lies below it by at most twice the reported
    error, and never above it."""
    acc = acceptance_probability(np.array(mean), np.array(cov), delta=0.10, absolute_cap=cap)
    exact = float(ndtr((math.log(cap / (1 - cap)) - mean[1]) / math.sqrt(cov[1][1])))
    assert not acc.failed and 0.0 < acc.error <= 1e-8
    assert exact - 2 * acc.error - 1e-15 <= acc.probability <= exact + 1e-15
