"""The world draws' faster arrangements give the numbers of the plain ones, bit for bit
(memory-model.md "Viability" draws): ``PencilNodes.part_terms`` taking f by rows, and a
one-node head's worlds left in their drawn order."""

from __future__ import annotations

import numpy as np

from gigaevo.memory.v2.causal import BayesianLinearHead, DesignSpace, LogisticLaplaceHead
from gigaevo.memory.v2.causal.projection import CardLayout, block_stack, block_worlds
from gigaevo.memory.v2.causal.selection import CandidateCard, card_rows
from gigaevo.memory.v2.causal.spectral import PencilNodes
from tests.memory.causal.test_world_fast_paths import _heads as fast_path_heads


def _heads(space: DesignSpace, seed: int) -> tuple[BayesianLinearHead, LogisticLaplaceHead]:
    """An immediate head (one pencil's nodes) and an invalidity head (one node) fitted on
    200 rows, the treated ones on lineages L00..L05 (the world fast paths' heads)."""
    imm, inv, _ = fast_path_heads(space, seed)
    return imm, inv


def _plain_part_terms(
    pencil: PencilNodes, nodes: np.ndarray, u: np.ndarray, pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The terms as first written: a two-index gather of f, u' D_l^-1 u added column by
    column to 0.0, u T_l scaled on its node-major view."""
    k, a, c = len(pencil.w), len(pencil.active), pencil.width
    g = u @ pencil._vq[pos]
    fg = pencil.f.reshape(k, a, c)[np.ix_(nodes, pos)] * g
    quad = np.zeros(fg.shape[:2])
    for i in range(c):
        quad += fg[..., i] * g[:, i]
    shift = np.matmul(fg.transpose(1, 0, 2), pencil._r[pos])
    shift *= pencil.w[nodes][None, :, None]
    return quad, shift.transpose(1, 0, 2)


def test_part_terms_by_rows_equal_the_two_index_gather() -> None:
    """f taken as rows of a (K A, C) view, the quadratic form from one product and the
    shift scaled row by row: the same bits (signs of zeros included) as the plain terms,
    for visited nodes in any order with repeats, repeated blocks, one card, and a block
    part with zeros (zero terms)."""
    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    imm, _ = _heads(space, 12)
    pencil = imm.components_[0].nodes
    assert isinstance(pencil, PencilNodes)
    k, a, c = len(pencil.w), len(pencil.active), pencil.width
    rng = np.random.default_rng(21)
    cases = (
        (np.arange(k), np.arange(a)),
        (rng.integers(0, k, size=9), rng.integers(0, a, size=17)),
        (np.array([3, 0, 3]), np.array([a - 1])),
    )
    for nodes, pos in cases:
        for u in (rng.normal(size=c), np.r_[0.0, -0.0, rng.normal(size=c - 2)]):
            got = pencil.part_terms(nodes, u, pos)
            want = _plain_part_terms(pencil, nodes, u, pos)
            for x, y in zip(got, want, strict=True):
                assert x.shape == y.shape
                np.testing.assert_array_equal(x, y)
                assert np.array_equal(np.signbit(x), np.signbit(y))


def test_one_node_head_keeps_the_worlds_in_their_drawn_order() -> None:
    """A one-node head (the invalidity head) visits one node: its worlds are not gathered
    back, and world i is still the i-th draw: beta_s = m_s + xi_s L_S^-1' row by row, from
    the normals drawn first (no node is drawn), and eta_0 = beta_s z_0."""
    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    _, inv = _heads(space, 13)
    stack = block_stack(inv)
    assert stack is not None and len(stack.weights) == 1
    ctx = np.r_[1.0, 0.4, -0.1, 0.3]
    cards = [CandidateCard(f"k{i}", space.lineages[i], "insight") for i in (0, 1, 2, 9, 3)]
    z0, z1 = space.row(ctx, 0), card_rows(space, ctx, cards)
    n, ps = 300, space.shared_size
    for rows in (z1, card_rows(space, ctx, cards[:1] * 3 + cards[1:])):  # shared blocks too
        eta0, eta1, beta_s = block_worlds(
            stack, z0, rows, n, np.random.default_rng(6), CardLayout.of(rows)
        )
        xi_s = np.random.default_rng(6).standard_normal((n, ps))
        want = np.empty((n, ps))
        np.add(stack.means[[0], :ps], xi_s @ stack.inv_s[0], out=want)
        np.testing.assert_array_equal(beta_s, want)
        np.testing.assert_array_equal(eta0, want @ z0[:ps])
        assert eta1.shape == (n, len(rows.lineage)) and np.all(np.isfinite(eta1))
