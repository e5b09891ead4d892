"""The dense nodes' covariances stacked without a copy, and a block design made dense in one
scatter: the same numbers as ``np.stack`` and the per-row loop they replace (issue 16)."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal import BayesianLinearHead, DesignSpace
from gigaevo.memory.v2.causal.arrowhead import BlockDesign
from gigaevo.memory.v2.causal.blr import ConditionalPosterior, factor_nodes, stacked


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


def test_stacked_is_the_base_or_a_copy_with_the_same_numbers() -> None:
    rng = np.random.default_rng(3)
    base = rng.standard_normal((6, 5, 5))
    assert stacked(list(base)) is base  # whole slices in order: no copy
    for mats in (
        [base[4], base[1], base[1]],  # a subset, reordered, repeated
        list(base[2:5]),  # slices of a view (their base is the owner)
        [base[0].T, base[1]],  # not C-contiguous: np.stack
        [base[0][:3, :3], base[1][:3, :3]],  # not whole slices
        [base[0].copy(), base[1]],  # another owner
        [rng.standard_normal((5, 5)) for _ in range(3)],
    ):
        got = stacked(mats)
        want = np.stack(mats)
        np.testing.assert_array_equal(got, want)
        assert got.flags.c_contiguous and got.shape == want.shape


def test_factor_nodes_and_draws_are_the_same_bits_as_with_a_copy() -> None:
    """A dense head's draws (nodes factored from the kept covariances) equal those made from
    nodes holding copies of them (the np.stack path)."""
    rng = np.random.default_rng(11)
    space = DesignSpace(3, ("a", "b"), kind_contrast=False)
    x = np.array([space.row(np.r_[1.0, rng.uniform(-1, 1, 2)], int(rng.uniform() < 0.5),
                            "ab"[int(rng.integers(0, 2))]) for _ in range(80)])  # fmt: skip
    y = 0.2 * x[:, 3] + 0.1 * rng.standard_normal(80)
    prior = np.full(space.size, 1.0)
    head = BayesianLinearHead(prior).fit(x, y, np.zeros(80))
    nodes = list(head.components_)
    assert len(nodes) > 1 and all(isinstance(p, ConditionalPosterior) for p in nodes)
    base = nodes[0].cov.base  # the nodes' covariances are slices of one array: no np.stack
    assert base is not None and base.ndim == 3 and all(p.cov.base is base for p in nodes)
    np.testing.assert_array_equal(stacked([p.cov for p in nodes]), np.stack([p.cov for p in nodes]))
    copies = [ConditionalPosterior(p.mean, p.cov.copy(), p.log_evidence) for p in nodes]
    factor_nodes(nodes)
    factor_nodes(copies)
    for a, b in zip(nodes, copies, strict=True):
        np.testing.assert_array_equal(vars(a)["_chol"], vars(b)["_chol"])
