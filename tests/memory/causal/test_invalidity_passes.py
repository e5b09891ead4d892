"""The invalidity head's passes over its rows (issue 16): the treated rows indexed once per fit
give the very numbers of ``BlockDesign.dot`` / ``rdot`` / ``block_gram``, and the kept
likelihood at a point is the value a fresh pass computes, bit for bit."""

from __future__ import annotations

import numpy as np

from gigaevo.memory.v2.causal import LogisticLaplaceHead
from gigaevo.memory.v2.causal.arrowhead import BlockDesign, block_gram, row_products
from gigaevo.memory.v2.causal.invalidity import _TreatedRows

PS, C, B = 9, 4, 40


def _design(n: int, seed: int, products: bool) -> BlockDesign:
    rng = np.random.default_rng(seed)
    shared = rng.normal(size=(n, PS))
    lineage = np.where(rng.random(n) < 0.4, -1, rng.integers(0, B, size=n))
    part = np.where(lineage[:, None] >= 0, rng.normal(size=(n, C)), 0.0)
    prods = row_products(shared, part) if products else None
    return BlockDesign(shared, lineage, part, B, prods)


def test_the_indexed_passes_are_the_block_designs_bit_for_bit() -> None:
    for seed in range(10):
        x = _design(3000 + 17 * seed, seed, products=seed % 2 == 0)
        rows = _TreatedRows(x)
        rng = np.random.default_rng(100 + seed)
        g, r = rng.normal(size=PS + B * C), rng.normal(size=len(x.lineage))
        assert np.array_equal(rows.dot(g), x.dot(g))
        assert np.array_equal(rows.rdot(r), x.rdot(r))
        w = rng.random(len(x.lineage))
        w[rng.random(len(w)) < 0.05] = 0.0  # rows of weight 0 drop out of the sums
        active, pos = x.active_positions()
        blocks, act, width = rows.gram(w)
        want = block_gram(x, w, pos, len(active))
        assert width == C and np.array_equal(act, active)
        for key in ("a", "d", "g"):
            assert np.array_equal(blocks[key], want[key])
        w2 = rng.random(len(x.lineage))  # the pattern kept from the first call, new weights
        blocks, _, _ = rows.gram(w2)
        want = block_gram(x, w2, pos, len(active))
        for key in ("a", "d", "g"):
            assert np.array_equal(blocks[key], want[key])


def test_the_kept_likelihood_is_a_fresh_pass() -> None:
    x = _design(2500, 7, products=True)
    rng = np.random.default_rng(8)
    d = (rng.random(len(x.lineage)) < 0.2).astype(float)
    mu, v = np.full(x.size, -1.0), np.full(x.size, 0.5)
    head = LogisticLaplaceHead(mu, v, (PS, C)).fit(x, d, start=mu)
    assert head.ok_
    g = head.coef_ + 1e-3 * rng.normal(size=x.size)
    kept = head._objective(g), head._objective(g)  # the second from the kept pass
    head._lik = None
    fresh = head._objective(g)
    for value, grad in kept:
        assert value == fresh[0] and np.array_equal(grad, fresh[1])
    # against the plain formula on the dense design (to rounding: another summation order)
    from scipy.special import expit

    xd = x.to_dense()
    eta = xd @ g
    j = np.sum(np.logaddexp(0.0, eta) - d * eta) + 0.5 * np.sum((g - mu) ** 2 / v)
    np.testing.assert_allclose(fresh[0], j, rtol=1e-12)
    np.testing.assert_allclose(fresh[1], xd.T @ (expit(eta) - d) + (g - mu) / v, atol=1e-9)


def test_the_prefix_paths_newton_takes_a_step_below_the_objectives_rounding() -> None:
    """Near the MAP a Newton step's decrease g'F^-1 g is below J's rounding (|J| ~ 3e4 on
    50,000 rows): J's comparison alone may halve such a step to nothing, one pass each.
    With ``rounding`` (the prefix path) the step is taken when it lowers |grad|_inf: from
    starts 1e-10 off the MAP, the gradient target in one step, at the same MAP."""
    from gigaevo.memory.v2.causal.invalidity import GRADIENT_TARGET

    rng = np.random.default_rng(3)
    n, p = 50_000, 6
    x = np.column_stack([np.ones(n), rng.normal(size=(n, p - 1))])
    d = (rng.random(n) < 0.3).astype(float)
    head = LogisticLaplaceHead(np.zeros(p), np.full(p, 4.0)).fit(x, d)
    assert head.ok_ and abs(head._objective(head.coef_)[0]) > 1e4
    sd = np.sqrt(np.diag(head.coef_cov_))
    objective, passes = head._objective, [0]

    def counted(g: np.ndarray) -> tuple[float, np.ndarray]:
        passes[0] += 1
        return objective(g)

    head._objective = counted  # type: ignore[method-assign]
    for seed in range(12):
        start = head.coef_ + 2e-10 * np.random.default_rng(seed).normal(size=p)
        passes[0] = 0
        g = head._newton(start, rounding=True)
        assert passes[0] <= 3  # the start's pass, at most two steps
        assert float(np.max(np.abs(objective(g)[1]))) <= GRADIENT_TARGET
        assert np.all(np.abs(g - head.coef_) <= 1e-6 * sd)
