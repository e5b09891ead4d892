"""The fixed rules' bookkeeping (distinct rows, one scratch array, the step check) gives the
floats of the plain formulation bit for bit (memory-model.md "Invalidity head and chance
constraint")."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import ndtr

from gigaevo.memory.v2.causal import chance


def _cards(seed: int, n: int, shared: bool) -> tuple[np.ndarray, np.ndarray]:
    """n well-posed cards around a decision's state; ``shared``: one control arm."""
    rng = np.random.default_rng(seed)
    m0 = np.full(n, -2.4) if shared else rng.normal(-2.4, 0.5, n)
    means = np.column_stack([m0, rng.normal(-2.5, 1.0, n)])
    s00 = np.full(n, 0.02) if shared else rng.uniform(0.005, 0.1, n)
    s11 = rng.uniform(0.02, 2.0, n)
    s01 = rng.uniform(-0.9, 0.9, n) * np.sqrt(s00 * s11)
    covs = np.stack([np.column_stack([s00, s01]), np.column_stack([s01, s11])], axis=1)
    return means, covs


def _plain_fast(
    means: np.ndarray, covs: np.ndarray, delta: float, tolerance: float, shared: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fixed rules written out with fresh arrays and np.diff (the reference)."""
    m0, m1 = means[:, 0], means[:, 1]
    sd0 = np.sqrt(covs[:, 0, 0])
    zeta = covs[:, 0, 1] / sd0
    vs = np.sqrt(covs[:, 1, 1] - zeta * zeta)
    c0, c_sd = (m0[:1], sd0[:1]) if shared else (m0, sd0)
    phis = []
    for t in (chance._FINE_T, chance._COARSE_T):
        lam = chance._control_logit(t, c0, c_sd, delta) - m1[:, None]
        lam -= zeta[:, None] * t[None, :]
        lam /= vs[:, None]
        phis.append(ndtr(lam))
    fine, coarse = phis[0] @ chance._FINE_W, phis[1] @ chance._COARSE_W
    step = np.max(np.abs(np.diff(phis[0], axis=1)), axis=1)
    gap = np.abs(fine - coarse)
    ok = np.isfinite(fine) & (gap <= tolerance / 100.0) & (step <= chance.MAX_STEP)
    return fine, gap + chance._TAIL, ok


@pytest.mark.parametrize("shared", [True, False])
def test_the_fixed_rules_are_the_plain_formulation_bit_for_bit(shared: bool) -> None:
    for seed, n in enumerate((300, 7, 1, 300, 1200, 45)):
        means, covs = _cards(seed, n, shared)
        for delta in (0.10, 1e-7):
            got = chance._fast(means, covs, delta, 1e-8, shared)
            want = _plain_fast(means, covs, delta, 1e-8, shared)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, w)


def test_the_largest_step_ignores_the_rows_neighbours() -> None:
    """The flattened pass compares only neighbours within a row, even when one row ends far
    from where the next begins; NaN still poisons its own row."""
    rng = np.random.default_rng(3)
    for k in (2, 3, 320):
        phi = rng.uniform(0.0, 1.0, (9, k)) * 1e-3
        phi[::2] += 0.99  # the rows alternate between near 0 and near 1
        phi[4, k // 2] = np.nan
        work = np.full(phi.size, 7.0)
        got = chance._largest_step(phi, work)
        with np.errstate(invalid="ignore"):
            want = np.max(np.abs(np.diff(phi, axis=1)), axis=1)
        np.testing.assert_array_equal(got, want)
        assert np.isnan(got[4]) and np.all(got[::2][np.arange(5) != 2] < 1e-3)


def test_distinct_rows_are_numpys_unique_bit_for_bit() -> None:
    """Rows in np.unique's order, with its bits, and the same inverse: with duplicates and
    infinities (the lexsort), and with NaN or rows told apart only by the sign of a zero
    (np.unique itself: which of the two it keeps is its sort's choice)."""
    rng = np.random.default_rng(8)
    rows = rng.normal(size=(50, 6)).round(1)
    rows[::7, 2] = np.inf
    rows[3, 0] = -np.inf
    rows[10:20, :3] = rows[0, :3]  # ties on the leading keys
    rows = np.concatenate([rows, rows[::3], rows[5:9]])[rng.permutation(71)]
    odd = rows.copy()
    odd[[2, 40], 1] = np.nan
    zeros = np.tile(rows[0], (40, 1))
    zeros[:, 4] = np.where(rng.random(40) < 0.5, -0.0, 0.0)
    zeros = np.concatenate([zeros, rows])[rng.permutation(111)]
    for packed in (rows, odd, zeros):
        unique, inverse = chance._distinct_rows(packed)
        want_u, want_inv = np.unique(packed, axis=0, return_inverse=True)
        np.testing.assert_array_equal(unique.view(np.uint64), want_u.view(np.uint64))
        np.testing.assert_array_equal(inverse, np.asarray(want_inv).reshape(-1))
        assert unique.flags.c_contiguous and inverse.dtype == np.intp
    assert len(chance._distinct_rows(rows)[0]) < len(rows)
