"""A node pair's block products are written straight into their moving columns
(``NoisePencil._means(moving_only=True)``): a (K, C) product per block into a row-major
matrix of row stride len(moving). These are the numbers of the same products into
contiguous memory, to the bit (so the means, and every draw from them, are as before).
"""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal.arrowhead import BlockStatistics
from gigaevo.memory.v2.causal.spectral import BlockTerms, NoisePencil
from tests.memory.causal.test_planned_fit import _twenty_cards


def _pencil(seed: int, terms: BlockTerms | None) -> NoisePencil:
    space, view = _twenty_cards(seed)
    return NoisePencil(BlockStatistics.from_fit(view), space.utility_prior_variance(), terms)


@pytest.mark.parametrize("k", [1, 2, 7, 40, 301])
@pytest.mark.parametrize(("blocks", "width"), [(1, 1), (3, 2), (17, 5), (64, 4)])
def test_a_product_into_strided_columns_is_the_contiguous_product(
    k: int, blocks: int, width: int
) -> None:
    """(A, K, C) x (A, C, C) written into the (K, A C) columns of a wider row-major array
    (row stride P_s + A C) equals the product into contiguous memory, to the bit."""
    rng = np.random.default_rng(k * 100 + blocks)
    ps = 11
    lhs = rng.standard_normal((k, blocks * width)).reshape(k, blocks, width).transpose(1, 0, 2)
    rhs = rng.standard_normal((blocks, width, width)).transpose(0, 2, 1)
    fresh = np.matmul(lhs, rhs, out=np.empty((blocks, k, width)))
    wide = np.full((k, ps + blocks * width), np.nan)
    view = wide[:, ps:].reshape(k, blocks, width).transpose(1, 0, 2)
    np.matmul(lhs, rhs, out=view)
    assert np.array_equal(wide[:, ps:].reshape(k, blocks, width), fresh.transpose(1, 0, 2))
    assert np.all(np.isnan(wide[:, :ps]))


@pytest.mark.parametrize("seed", [3, 8])
def test_moving_means_are_the_full_means_on_their_columns(seed: int) -> None:
    """The moving columns written in place (``_means(moving_only=True)``) are the full
    means' columns (formed in contiguous memory, then scattered) to the bit."""
    sigmas = np.exp(np.linspace(-3.0, 0.5, 37))
    for terms in (None, BlockTerms()):
        pencil = _pencil(seed, terms)
        w, chol_s, _, _, z = pencil._schur(sigmas)
        f = pencil._f(w)
        full = pencil._means(w, f, chol_s, z)
        moving = pencil._means(w, f, chol_s, z, moving_only=True)
        assert np.array_equal(moving, full[:, pencil.moving])
        # and a node pair's coarse means are these rows of its batch
        w2, chol2, _, _, z2 = pencil._schur(sigmas[::-1])
        both = pencil._means(w2, pencil._f(w2), chol2, z2, moving_only=True)
        _, _, _, coarse = pencil.node_pair(sigmas[::-1][:20], sigmas[::-1][20:])
        assert np.array_equal(coarse, both[20:])
