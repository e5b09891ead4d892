"""The dense nodes' covariances kept stacked (``NodeList.covs``, not stacked again from the
nodes), and a block design made dense in one scatter: the same numbers as the ``np.stack``
and the per-row loop they replace (issue 16)."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal import BayesianLinearHead, DesignSpace
from gigaevo.memory.v2.causal.arrowhead import BlockDesign
from gigaevo.memory.v2.causal.blr import ConditionalPosterior, NodeList, factor_nodes


def _loop_dense(design: BlockDesign) -> np.ndarray:
    """The per-row loop ``BlockDesign.to_dense`` ran before (the reference)."""
    n, c = design.lineage_part.shape
    out = np.zeros((n, design.size))
    out[:, : design.shared.shape[1]] = design.shared
    for i in np.flatnonzero(design.lineage >= 0):
        start = design.shared.shape[1] + design.lineage[i] * c
        out[i, start : start + c] = design.lineage_part[i]
    return out


@pytest.mark.parametrize("seed", range(5))
def test_to_dense_equals_the_row_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, ps, c, b = int(rng.integers(0, 300)), int(rng.integers(1, 9)), 4, 7
    lineage = rng.integers(-1, b, n)
    part = rng.standard_normal((n, c))
    part[lineage < 0] = 0.0
    design = BlockDesign(rng.standard_normal((n, ps)), lineage, part, b, None)
    dense = design.to_dense()
    np.testing.assert_array_equal(dense, _loop_dense(design))
    assert dense.shape == (n, ps + b * c)


def test_kept_covariances_give_the_same_factors_and_draws() -> None:
    """A dense head's nodes keep their covariances stacked; factoring from that array, and the
    head's draws, equal those from nodes holding copies (the np.stack path)."""
    rng = np.random.default_rng(11)
    space = DesignSpace(3, ("a", "b"), kind_contrast=False)
    x = np.array([space.row(np.r_[1.0, rng.uniform(-1, 1, 2)], int(rng.uniform() < 0.5),
                            "ab"[int(rng.integers(0, 2))]) for _ in range(80)])  # fmt: skip
    y = 0.2 * x[:, 3] + 0.1 * rng.standard_normal(80)
    head = BayesianLinearHead(np.full(space.size, 1.0)).fit(x, y, np.zeros(80))
    nodes = head._components  # the fine mixture's nodes
    assert isinstance(nodes, NodeList) and len(nodes) > 1
    np.testing.assert_array_equal(nodes.covs, np.stack([p.cov for p in nodes]))
    assert all(p.cov.base is nodes.covs for p in nodes)  # slices of it, not copies
    copies = [ConditionalPosterior(p.mean, p.cov.copy(), p.log_evidence) for p in nodes]
    draws = head.sample(400, np.random.default_rng(5))  # factors all drawn nodes at once
    factor_nodes(copies)
    for a, b in zip(nodes, copies, strict=True):
        if "_chol" in vars(a):
            np.testing.assert_array_equal(vars(a)["_chol"], vars(b)["_chol"])
    twin = BayesianLinearHead(np.full(space.size, 1.0)).fit(x, y, np.zeros(80))
    # the same head, its nodes holding copies in a plain list (the np.stack path)
    twin._components = [
        ConditionalPosterior(p.mean, p.cov.copy(), p.log_evidence) for p in twin._components
    ]
    np.testing.assert_array_equal(twin.sample(400, np.random.default_rng(5)), draws)
