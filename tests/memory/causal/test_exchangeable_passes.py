"""The gain draws' rejection passes of exchangeable cards read the stream in a fixed order
(memory-model.md "Exchangeable cards"): per pass, xi_L of every candidate, the floor
candidates' uniforms, then the thresholded candidates' choice, inverse-CDF and coin
uniforms, each member's candidates side by side. However a pass forms its candidates (all
at once, or a member's later ones only when its earlier ones were rejected) and however
often it evaluates the laws' CDF terms (per member or once per key), the draws are the
ones of the plain per-candidate pass below, bit for bit, and the stream is left where it
leaves it.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import ndtr, ndtri

from gigaevo.memory.v2.causal import gainlaw
from gigaevo.memory.v2.causal.exchangeable import (
    MAX_PROPOSALS,
    PROPOSALS,
    ExchangeableCards,
    _draw_gains,
    _end_cdf,
)


def _plain_draws(
    s_i: float,
    s_l: float,
    centre: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """The rejection passes candidate by candidate, each kind of random number in one call,
    every candidate formed (the reference order)."""
    sigma = np.hypot(s_i, s_l)
    out, todo = np.empty(len(lo)), np.arange(len(lo))
    for _ in range(MAX_PROPOSALS):
        if not len(todo):
            return out
        rows = np.repeat(todo, PROPOSALS)
        a, b, c = lo[rows], hi[rows], centre[rows]
        xi_l = rng.standard_normal(len(rows))
        floor = np.isneginf(a)
        xi_i = np.empty(len(rows))
        u = 1.0 - rng.random(int(floor.sum()))
        upper = np.isposinf(b[floor])  # the form of (-inf, hi / s_i]
        span = np.where(upper, ndtr(-a[floor]), ndtr(b[floor] / s_i))
        qa = np.where(upper, ndtr(-b[floor] / s_i), 0.0)
        xi_i[floor] = np.where(upper, -1.0, 1.0) * ndtri(qa + u * (span - qa))
        up = ~floor
        a_up, c_up = a[up], c[up]
        q1, q2 = ndtr(-a_up / s_i), ndtr((c_up - a_up) / sigma)
        first = rng.random(int(up.sum())) * (q1 + q2) < q1
        z = -ndtri((1.0 - rng.random(len(first))) * np.where(first, q1, q2))
        other = xi_l[up]
        xi_i[up] = np.where(first, z, (s_i * z - s_l * other) / sigma)
        xi_l[up] = np.where(first, other, (s_l * z + s_i * other) / sigma)
        lifted = s_i * xi_i[up] + c_up + s_l * xi_l[up]
        keep = np.ones(len(rows), dtype=bool)
        in_both = (s_i * xi_i[up] > a_up) & (lifted > a_up)
        keep[up] = ~in_both | (rng.random(len(first)) < 0.5)
        w = s_i * xi_i + np.maximum(c + s_l * xi_l, 0.0)
        keep &= (w > a) & (w <= b)
        keep_of, w_of = keep.reshape(-1, PROPOSALS), w.reshape(-1, PROPOSALS)
        got = keep_of.any(axis=1)
        out[todo[got]] = w_of[got, keep_of[got].argmax(axis=1)]
        todo = todo[~got]
    raise RuntimeError("rejected too often")


def _shell_like(m: int, rng: np.random.Generator):
    """m members of 40 worlds in cells of 6 edges each: (world, lo, hi, key)."""
    s_i, s_l = 0.21, 0.13
    centre = rng.normal(-0.05, 0.05, 40)
    z = -ndtri(np.array([0.4, 0.2, 0.05, 0.01, 0.002]))
    inner = np.maximum(s_i * z, centre[:, None] + np.hypot(s_i, s_l) * z)
    edges = np.column_stack([np.full(40, -np.inf), inner, np.full(40, np.inf)])
    world = rng.integers(0, 40, m)
    cell = np.minimum(rng.geometric(0.45, m) - 1, 5)
    key = world * 7 + cell
    return centre, s_i, s_l, world, edges.reshape(-1)[key], edges.reshape(-1)[key + 1], key


@pytest.mark.parametrize("m", [1, 7, 300, 5000])
@pytest.mark.parametrize("lazy", [1, 10**9])
def test_passes_draw_the_plain_candidates_bit_for_bit(
    m: int, lazy: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small and large groups (every group lazy, none lazy), floor and thresholded members
    mixed, keys shared by many members or not given: the plain passes' draws and stream."""
    monkeypatch.setattr(gainlaw, "LAZY_MEMBERS", lazy)
    centre, s_i, s_l, world, lo, hi, key = _shell_like(m, np.random.default_rng(m))
    cards = ExchangeableCards(np.arange(2), (centre, centre, centre), (s_i, 0.3, s_l))
    if m >= 300:  # floor members, thresholded ones, and cells unbounded above
        assert np.any(np.isneginf(lo)) and np.any(np.isposinf(hi)) and not np.all(np.isneginf(lo))
    for k in (key, None):
        want_rng, rng = np.random.default_rng(5), np.random.default_rng(5)
        want = _plain_draws(s_i, s_l, centre[world], lo, hi, want_rng)
        np.testing.assert_array_equal(_draw_gains(cards, world, lo, hi, rng, key=k), want)
        assert rng.random() == want_rng.random()  # the stream left at the same place


def test_gains_without_the_lineage_head_per_key_are_the_per_member_draws() -> None:
    """Without the lineage head W = s_i xi_i, one truncated-normal draw per member: its
    CDF terms once per key give the same draws as per member."""
    centre, s_i, _, world, lo, hi, key = _shell_like(2000, np.random.default_rng(3))
    cards = ExchangeableCards(np.arange(2), (centre, centre), (s_i, 0.3))
    a = _draw_gains(cards, world, lo, hi, np.random.default_rng(9), key=key)
    b = _draw_gains(cards, world, lo, hi, np.random.default_rng(9))
    np.testing.assert_array_equal(a, b)
    assert np.all((a > lo) & (a <= hi))
    assert len(_draw_gains(cards, world[:0], lo[:0], hi[:0], np.random.default_rng(9))) == 0


def test_end_cdf_is_ndtr() -> None:
    """Zeros exactly where every end is -inf (ndtr(-inf) = 0), ndtr otherwise (NaN too)."""
    for x in (np.full(5, -np.inf), np.r_[-np.inf, -1.0, 0.3], np.r_[-np.inf, np.nan], np.empty(0)):
        got = _end_cdf(x)
        assert got.shape == x.shape
        np.testing.assert_array_equal(got, ndtr(x))
    assert np.all(ndtr(np.full(3, -np.inf)) == 0.0)
