"""Exact joint law of a card's two arm predictors under a fitted head (memory-model.md "Viability"
draws).

Retirement needs, in each posterior world, only z_0'theta and z_1'theta of each head at one
context. For a Gaussian-mixture head (immediate, delayed-lineage) that pair is a mixture of
bivariate normals; ``MixtureProjector`` computes the node means and covariances on the card's
columns (shared blocks plus its lineage block) from a dense node (a slice) or a
block-arrowhead node (its Schur factors), so the cost does not grow with the bank.
"""

from __future__ import annotations

import operator
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

import numpy as np

from gigaevo.memory.v2.causal.arrowhead import BlockDesign, BlockPosterior
from gigaevo.memory.v2.causal.blr import BayesianLinearHead, ConditionalPosterior
from gigaevo.memory.v2.causal.errors import DesignError
from gigaevo.memory.v2.causal.features import DesignSpace
from gigaevo.memory.v2.causal.invalidity import LogisticLaplaceHead
from gigaevo.memory.v2.causal.spectral import PencilNodes, PencilPosterior

# Lineages whose covariance blocks a projector keeps (the most recently used ones).
LINEAGE_CACHE = 64


def card_columns(space: DesignSpace, lineage: str) -> np.ndarray:
    """The shared columns and the lineage block of ``lineage``: all a card's rows touch."""
    s = space.lineage_slice(lineage)
    return np.concatenate((np.arange(space.shared_size), np.arange(s.start, s.stop)))


def chol2x2(covs: np.ndarray) -> np.ndarray:
    """Lower Cholesky factors of a stack of symmetric PSD 2 x 2 matrices, shape (K, 2, 2).

    Raises:
        numpy.linalg.LinAlgError: a matrix is not positive semi-definite (beyond rounding).
    """
    c00, c01, c11 = covs[:, 0, 0], 0.5 * (covs[:, 0, 1] + covs[:, 1, 0]), covs[:, 1, 1]
    scale = np.maximum(np.maximum(np.abs(c00), np.abs(c11)), 1e-300)
    det = c00 * c11 - c01 * c01
    if (
        np.any(c00 < -1e-12 * scale)
        or np.any(c11 < -1e-12 * scale)
        or np.any(det < -1e-9 * scale * scale)
    ):
        raise np.linalg.LinAlgError("covariance is not positive semi-definite")
    a = np.sqrt(np.clip(c00, 0.0, None))
    b = np.divide(c01, a, out=np.zeros_like(c01), where=a > 0)
    d = np.sqrt(np.clip(c11 - b * b, 0.0, None))
    out = np.zeros_like(covs)
    out[:, 0, 0], out[:, 1, 0], out[:, 1, 1] = a, b, d
    return out


# checks mixture weights for ``node_cdf``; its draws are never read (a draw of no node reads
# no random number), so one generator serves every fit and thread (``choice`` takes its lock)
_WEIGHT_CHECK = np.random.Generator(np.random.PCG64(0))


def node_cdf(weights: np.ndarray) -> np.ndarray:
    """cumsum(p) / its last value of mixture weights p (K,), as ``Generator.choice`` forms it,
    for ``choose_nodes``; p checked once by ``choice`` itself (a draw of no node), so weights
    it refuses raise its own ``ValueError`` here."""
    p = np.asarray(weights, dtype=float)
    _WEIGHT_CHECK.choice(len(p), size=0, p=p)
    cdf = p.cumsum()
    cdf /= cdf[-1]
    return cdf


def choose_nodes(rng: np.random.Generator, cdf: np.ndarray, n: int) -> np.ndarray:
    """``rng.choice(K, size=n, p=p)`` from p's ``node_cdf``: the same uniforms (``rng.random(n)``)
    searched in the same cdf, so the same nodes, without checking and summing p again."""
    return np.searchsorted(cdf, rng.random(n), side="right")


NODE_BINS = 4096  # bins of a ``NodeTable`` (a power of two: u * NODE_BINS is exact)


class NodeTable:
    """``np.searchsorted(cdf, u, side="right")`` for uniforms u in [0, 1) through a table.

    A binary search per uniform is branchy: 4,096 unsorted uniforms in the cdf of 136 nodes
    cost about 0.2 ms. The table splits [0, 1) into ``NODE_BINS`` equal bins; a uniform u lies
    in bin b = floor(u * NODE_BINS), and its node (the number of cdf values <= u) is the
    count at b's left edge when no cdf value falls inside the bin. Only the uniforms of the
    at most K bins that hold a cdf value are searched. The same nodes, exactly.
    """

    def __init__(self, cdf: np.ndarray) -> None:
        self.cdf = cdf
        edges = np.arange(NODE_BINS + 1) / NODE_BINS
        self.first = np.searchsorted(cdf, edges[:-1], side="right")  # #{cdf <= b / M}
        below = np.searchsorted(cdf, edges[1:], side="left")  # #{cdf < (b + 1) / M}
        self.split = self.first != below  # a cdf value inside the bin

    def nodes(self, u: np.ndarray) -> np.ndarray:
        """The node of each uniform u (n,): ``np.searchsorted(cdf, u, side="right")``."""
        bins = (u * NODE_BINS).astype(np.intp)
        ks = self.first.take(bins)
        open_ = np.flatnonzero(self.split.take(bins))
        if len(open_):
            ks[open_] = np.searchsorted(self.cdf, u.take(open_), side="right")
        return ks


class MixtureProjector:
    """Exact joint law of (z_0'beta, z_1'beta) under a fitted Gaussian-mixture head.

    z_0 and z_1 touch only the shared columns and one lineage block, so each node needs the
    covariance on those P_s + C columns: a slice of a dense node, or from the Schur factors
    of a block-arrowhead node (S^-1 is computed once per node and reused for every card).
    Covariances are cached per lineage, so the contexts and RAG states of a card share them;
    the cache keeps the ``LINEAGE_CACHE`` lineages used last (one entry is K (P_s + C)^2
    numbers, about 150 KiB at 1,000 cards, and a fit kept for many decisions summarises a
    new card at almost every one: unbounded, it held every card's block).
    """

    def __init__(self, head: BayesianLinearHead, space: DesignSpace) -> None:
        self.space = space
        self.weights = np.asarray(head.weights_, dtype=float)
        self.means = np.asarray(head.component_means_, dtype=float)
        self.components: tuple[Any, ...] = head.components_
        self._pencil = _pencil_nodes(self.components)  # the nodes are fixed: checked once
        # (K, P, P): the dense nodes' covariances in one array, or None
        self._stacked: np.ndarray | None = getattr(head, "node_covariances_", None)
        # lineage -> (K, P_s+C, P_s+C) covariances, or for one pencil's nodes its blocks'
        # (D_l^-1 (K, C, C), T_l (K, C, P_s)), or its prior variances (C,) when it has no rows
        self._blocks: OrderedDict[str, Any] = OrderedDict()
        self._shared_inv: np.ndarray | None = None  # (K, P_s, P_s): S^-1 of block nodes

    def _covs(self, lineage: str, cols: np.ndarray) -> np.ndarray:
        """Covariances of every node on ``cols`` (the card's columns), cached per lineage."""
        if lineage in self._blocks:
            self._blocks.move_to_end(lineage)
            return self._blocks[lineage]
        if self._pencil is not None:
            covs = self._pencil_covs(lineage)
        elif all(isinstance(p, BlockPosterior) for p in self.components):
            covs = self._block_covs(lineage)
        elif all(isinstance(p, ConditionalPosterior) for p in self.components):
            stacked = self._stacked  # the nodes' covariances in one array: one gather
            if stacked is not None:
                covs = stacked[np.ix_(np.arange(len(stacked)), cols, cols)]
            else:
                block = np.ix_(cols, cols)  # one index for every node (not one per node)
                covs = np.array([p.cov[block] for p in self.components])
        else:
            raise TypeError("unsupported posterior components")
        self._blocks[lineage] = covs
        while len(self._blocks) > LINEAGE_CACHE:
            self._blocks.popitem(last=False)
        return covs

    def _block_covs(self, lineage: str) -> np.ndarray:
        """Covariance on (shared, lineage block) from each node's Schur factors, vectorised.

        Shared: S^-1. Block l (rows): D^-1 + T S^-1 T', cross -T S^-1, with T = D^-1 G =
        L^-T l21'. A lineage without rows in a node keeps its prior block.
        """
        posts = self.components
        ps, c = posts[0].chol_s.shape[0], posts[0].width
        if self._shared_inv is None:
            inv_ls = np.linalg.inv(np.array([p.chol_s for p in posts]))
            self._shared_inv = inv_ls.transpose(0, 2, 1) @ inv_ls
        s_inv = self._shared_inv
        block = (self.space.lineage_slice(lineage).start - ps) // c
        out = np.zeros((len(posts), ps + c, ps + c))
        out[:, :ps, :ps] = s_inv
        prior = posts[0].prior_sd[ps + block * c : ps + (block + 1) * c] ** 2
        out[:, ps:, ps:] = np.diag(prior)
        # position of the block among each node's (sorted) active blocks, -1 when absent
        at = [int(np.searchsorted(p.active, block)) for p in posts]
        where = [
            i if i < len(p.active) and p.active[i] == block else -1
            for i, p in zip(at, posts, strict=True)
        ]
        hit = [k for k, i in enumerate(where) if i >= 0]
        if hit:
            chol = np.array([posts[k].chol_d[where[k]] for k in hit])
            l21 = np.array([posts[k].l21[where[k]] for k in hit])
            inv_l = np.linalg.inv(chol)  # (A, C, C)
            t = inv_l.transpose(0, 2, 1) @ l21.transpose(0, 2, 1)  # (A, C, P_s)
            ts = t @ s_inv[hit]
            out[hit, ps:, :ps] = -ts
            out[hit, :ps, ps:] = -ts.transpose(0, 2, 1)
            out[hit, ps:, ps:] = inv_l.transpose(0, 2, 1) @ inv_l + ts @ t.transpose(0, 2, 1)
        return out

    def _pencil_covs(self, lineage: str) -> np.ndarray:
        """``_block_covs`` for the nodes of one pencil (``PencilNodes``): D_l^-1 and
        T = D_l^-1 G_l come from its eigenbasis, no Cholesky factor of any block."""
        nodes = self._pencil
        assert nodes is not None
        ps, c = nodes.p_shared, nodes.width
        if self._shared_inv is None:  # S^-1 per node, once for every card
            self._shared_inv = nodes.inv_s.transpose(0, 2, 1) @ nodes.inv_s
        s_inv = self._shared_inv
        block = (self.space.lineage_slice(lineage).start - ps) // c
        out = np.zeros((len(self.components), ps + c, ps + c))
        out[:, :ps, :ps] = s_inv
        at = int(np.searchsorted(nodes.active, block))
        if at < len(nodes.active) and nodes.active[at] == block:
            d_inv, t = (a[:, at] for a in nodes.inverse_blocks)  # (K, C, C), (K, C, P_s)
            ts = t @ s_inv
            out[:, ps:, :ps] = -ts
            out[:, :ps, ps:] = -ts.transpose(0, 2, 1)
            out[:, ps:, ps:] = d_inv + ts @ t.transpose(0, 2, 1)
        else:  # a lineage without rows keeps its prior block
            prior = self.components[0].prior_sd[ps + block * c : ps + (block + 1) * c] ** 2
            out[:, ps:, ps:] = np.diag(prior)
        return out

    def _pencil_blocks(self, lineage: str, nodes: PencilNodes) -> Any:
        """The lineage's (D_l^-1, T_l) of every node, or its prior variances when it has no
        rows, cached per lineage as ``_covs`` is."""
        if lineage in self._blocks:
            self._blocks.move_to_end(lineage)
            return self._blocks[lineage]
        ps, c = nodes.p_shared, nodes.width
        block = (self.space.lineage_slice(lineage).start - ps) // c
        at = int(np.searchsorted(nodes.active, block))
        if at < len(nodes.active) and nodes.active[at] == block:
            out: Any = nodes.block_at(at)  # (K, C, C), (K, C, P_s)
        else:  # a lineage without rows keeps its prior block
            out = self.components[0].prior_sd[ps + block * c : ps + (block + 1) * c] ** 2
        self._blocks[lineage] = out
        while len(self._blocks) > LINEAGE_CACHE:
            self._blocks.popitem(last=False)
        return out

    def moments(
        self, lineage: str, z0: np.ndarray, z1: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per node: means (K, 2) and covariances (K, 2, 2) of (z_0'beta, z_1'beta).

        For one pencil's nodes the 2 x 2 forms come without the (P_s + C)^2 covariance:
        with s = [a, b] on (shared, lineage block) columns, s Sigma_k s' =
        (a - b T_l) S^-1 (a - b T_l)' + b D_l^-1 b' (Sigma_k's blocks: S^-1, -S^-1 T_l',
        D_l^-1 + T_l S^-1 T_l').
        """
        cols = card_columns(self.space, lineage)
        rows = np.vstack([z0, z1])
        s = rows[:, cols]
        if np.count_nonzero(rows) != np.count_nonzero(s):  # a nonzero outside ``cols``
            raise ValueError("design rows touch columns outside the card's blocks")
        means = self.means[:, cols] @ s.T
        nodes = self._pencil
        if nodes is None:
            covs = s @ (self._covs(lineage, cols) @ s.T)  # (K, 2, 2): s Sigma_k s'
            return means, covs
        ps = nodes.p_shared
        a, b = s[:, :ps], s[:, ps:]
        part = self._pencil_blocks(lineage, nodes)
        if isinstance(part, tuple):
            d_inv, t = part
            e = a - b @ t  # (K, 2, P_s)
            covs = (b @ d_inv) @ b.T
        else:
            e = np.broadcast_to(a, (len(nodes.w), *a.shape))
            covs = np.broadcast_to((b * part) @ b.T, (len(nodes.w), 2, 2))
        g = nodes.inv_s @ e.transpose(0, 2, 1)  # L_S^-1 e', S^-1 = L_S^-T L_S^-1
        return means, covs + g.transpose(0, 2, 1) @ g

    @cached_property
    def node_cdf(self) -> np.ndarray:
        """``node_cdf`` of the node weights (the draws' nodes), formed at the first draw."""
        return node_cdf(self.weights)

    @cached_property
    def node_table(self) -> NodeTable:
        """The draws' nodes found through a table (``NodeTable``), formed at the first draw."""
        return NodeTable(self.node_cdf)

    def draw(
        self, lineage: str, z0: np.ndarray, z1: np.ndarray, n: int, rng: np.random.Generator
    ) -> np.ndarray:
        """n joint draws of (z_0'beta, z_1'beta), shape (n, 2).

        Node k with probability w_k (``rng.choice(K, size=n, p=weights)``'s uniforms and
        nodes), then the node's mean plus its 2x2 root times two normals; the per-node values
        are gathered by ``take`` (several times faster than fancy indexing, the same values).
        """
        means, covs = self.moments(lineage, z0, z1)
        ks = self.node_table.nodes(rng.random(n))
        xi = rng.standard_normal((n, 2))
        roots = chol2x2(covs)  # lower: (r00, 0; r10, r11)
        out = np.empty((n, 2))
        out[:, 0] = means[:, 0].take(ks) + roots[:, 0, 0].take(ks) * xi[:, 0]
        out[:, 1] = means[:, 1].take(ks) + (
            roots[:, 1, 0].take(ks) * xi[:, 0] + roots[:, 1, 1].take(ks) * xi[:, 1]
        )
        return out


def draw_arm_pairs(
    means: np.ndarray, covs: np.ndarray, n: int, rng: np.random.Generator
) -> np.ndarray:
    """n draws of one Gaussian pair with mean (2,) and covariance (2, 2), shape (n, 2)."""
    root = chol2x2(np.asarray(covs, dtype=float)[None])[0]
    return np.asarray(means, dtype=float) + rng.standard_normal((n, 2)) @ root.T


@dataclass(frozen=True)
class BlockStack:
    """Stacked per-node factors of a block-arrowhead head, built once per fit.

    Every decision of a cached fit projects the same nodes on new rows; stacking the factors
    (and the products that do not depend on the rows) once turns the per-decision work into
    a few batched contractions instead of gathering K x A small matrices each time.

    Attributes:
        components: the nodes' factored posteriors (same active set); means: (K, P) node
            means (prior mean included); weights: (K,) node probabilities.
        inv_s: (K, P_s, P_s) L_S^-1 per node.
        coupling: (C, K P_s A) l21_l L_l^-1 per node and active block, C-major: for a block
            part u, (u @ coupling).reshape(K, P_s, A)[k, :, l] = l21_l a with a = L_l^-1 u
            (one matrix-vector product for every node).
        gram: (K, A, C, C) L_l^-T L_l^-1, so |a|^2 = u' gram u.

    A stack of one pencil's nodes (``from_pencil``) forms ``gram`` and ``coupling`` only when
    read; the draws read neither (``part_terms``).
    """

    components: tuple[BlockPosterior, ...]
    means: np.ndarray
    weights: np.ndarray
    inv_s: np.ndarray
    factors: tuple[np.ndarray, np.ndarray] | PencilNodes  # (coupling, gram) or the pencil's

    @cached_property
    def node_cdf(self) -> np.ndarray:
        """``node_cdf`` of the node probabilities (the worlds' node draws)."""
        return node_cdf(self.weights)

    @cached_property
    def coupling(self) -> np.ndarray:
        if not isinstance(self.factors, PencilNodes):
            return self.factors[0]
        nodes = self.factors
        if not len(nodes.active):
            return np.zeros((nodes.width, 0))
        t = nodes.inverse_blocks[1]  # (K, A, C, P_s)
        return np.ascontiguousarray(t.transpose(2, 0, 3, 1)).reshape(nodes.width, -1)

    @cached_property
    def gram(self) -> np.ndarray:
        if not isinstance(self.factors, PencilNodes):
            return self.factors[1]
        nodes = self.factors
        if not len(nodes.active):
            return np.zeros((len(self.components), 0, nodes.width, nodes.width))
        return nodes.inverse_blocks[0]

    @cached_property
    def steady(self) -> np.ndarray:
        """(B,) per lineage block: -1 unless the block has no rows and the same mean in
        every node (then its posterior is its prior, independent of every other block, in
        every node), else the number of its (mean, prior sd) among such blocks."""
        post0 = self.components[0]
        ps, c = post0.chol_s.shape[0], post0.width
        n_lin = (self.means.shape[1] - ps) // c
        lin = self.means[:, ps:]
        if len(lin) == 1 or isinstance(self.factors, PencilNodes):
            # one node; or one pencil's nodes, whose means outside the shared and active
            # blocks are the prior mean in every node (``NoisePencil._means`` leaves them
            # at 0 and the head adds one prior mean to every node): row 0 against itself
            # (NaN unequal, as below), without the two passes over K x P means
            same = (lin[0] == lin[0]).reshape(n_lin, c).all(1)
        else:
            # equal in every node: largest == smallest (NaN unequal, -0.0 == 0.0, as ==),
            # two reductions over the rows instead of a (K - 1, P) comparison
            same = (lin.max(axis=0) == lin.min(axis=0)).reshape(n_lin, c).all(1)
        same[post0.active] = False
        out = np.full(n_lin, -1)
        at = np.flatnonzero(same)
        if len(at):
            mean = self.means[0, ps:].reshape(n_lin, c)[at]
            out[at] = row_groups(np.hstack([mean, post0.prior_sd[ps:].reshape(n_lin, c)[at]]))
        return out

    def part_terms(
        self, nodes: np.ndarray, u: np.ndarray, pos: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """For one block part u (C,) on the active blocks at positions ``pos``, per node of
        ``nodes``: (sd^2 = u' D_l^-1 u (n, len(pos)), the shift l21_l a = u T_l
        (n, len(pos), P_s)); a pencil's come from its eigenbasis (``PencilNodes.part_terms``),
        other stacks' from ``gram`` and ``coupling``."""
        if isinstance(self.factors, PencilNodes):
            return self.factors.part_terms(nodes, u, pos)
        k, c, ps = len(self.weights), self.gram.shape[-1], self.inv_s.shape[1]
        gram = self.gram[np.ix_(nodes, pos)]  # (n, len(pos), C, C)
        quad = (gram @ u) @ u
        t = self.coupling.reshape(c, k, ps, -1)[:, nodes][..., pos]  # (C, n, P_s, len(pos))
        return quad, np.einsum("c,cnpl->nlp", u, t)

    @classmethod
    def build(
        cls, components: Sequence[BlockPosterior], means: np.ndarray, weights: np.ndarray
    ) -> BlockStack:
        nodes = _pencil_nodes(components)
        if nodes is not None:
            return cls.from_pencil(components, nodes, means, weights)
        post0 = components[0]
        c = post0.width
        if any(not np.array_equal(p.active, post0.active) for p in components):
            raise DesignError("mixture nodes must share their active lineage blocks")
        inv_s = np.array([p.inverse_factors[0] for p in components])
        inv_dt = np.array([p.inverse_factors[1] for p in components])  # (K, A, C, C) L^-T
        l21 = np.array([p.l21 for p in components])  # (K, A, P_s, C)
        if len(post0.active):
            coupling = np.einsum("kapc,kadc->dkpa", l21, inv_dt, optimize=True).reshape(c, -1)
            gram = inv_dt @ inv_dt.transpose(0, 1, 3, 2)
        else:
            coupling = np.zeros((c, 0))
            gram = np.zeros((len(components), 0, c, c))
        return cls(
            tuple(components), np.asarray(means, dtype=float), np.asarray(weights, dtype=float),
            inv_s, (coupling, gram),
        )  # fmt: skip

    @classmethod
    def from_pencil(
        cls,
        components: Sequence[BlockPosterior],
        nodes: PencilNodes,
        means: np.ndarray,
        weights: np.ndarray,
    ) -> BlockStack:
        """The stack of one pencil's nodes: ``gram`` is D_l^-1 and the coupling T_l' (T_l =
        D_l^-1 G_l), both from the pencil's eigenbasis (``PencilNodes.inverse_blocks``),
        the same matrices as ``build`` forms from the Cholesky factors, to rounding; both
        formed when first read. The draws form neither: ``part_terms`` gives the per-card
        numbers they need from the eigenbasis."""
        return cls(
            tuple(components), np.asarray(means, dtype=float), np.asarray(weights, dtype=float),
            nodes.inv_s, nodes,
        )  # fmt: skip


def _pencil_nodes(components: Sequence[Any]) -> PencilNodes | None:
    """The ``PencilNodes`` of ``components`` when they are exactly its nodes, in order."""
    if not components or not isinstance(components[0], PencilPosterior):
        return None
    nodes = components[0].nodes
    if len(components) != len(nodes.w) or any(
        not isinstance(p, PencilPosterior) or p.nodes is not nodes or p.index != i
        for i, p in enumerate(components)
    ):
        return None
    return nodes


def block_arm_latents(
    stack: BlockStack,
    z0: np.ndarray,
    z1: BlockDesign,
    n: int,
    rng: np.random.Generator,
    layout: CardLayout | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """n coherent world draws of (z_0'theta (n,), z_1j'theta (n, J)) (``block_worlds``)."""
    eta0, eta1, _ = block_worlds(stack, z0, z1, n, rng, layout)
    return eta0, eta1


@dataclass(frozen=True)
class CardLayout:
    """How the rows z1 fall in lineage blocks: the same for every head of a decision, so
    ``world_draws`` finds it once and every head's ``block_worlds`` reads it.

    Attributes:
        blocks: the touched blocks, ascending; card_slot: each card's position among them
            (-1: no lineage block); single / multi: the cards alone in their block / sharing
            one; vec_blocks: the slots of the shared blocks; u_single, block_single: the
            single cards' block parts and blocks; groups, group_of: the distinct block parts
            and each single card's (``_distinct_rows``).
    """

    blocks: np.ndarray
    card_slot: np.ndarray
    single: np.ndarray
    multi: np.ndarray
    vec_blocks: np.ndarray
    u_single: np.ndarray
    block_single: np.ndarray
    groups: np.ndarray
    group_of: np.ndarray

    @classmethod
    def of(cls, z1: BlockDesign) -> CardLayout:
        lin = z1.lineage
        has = lin >= 0
        blocks, slot, per_block = np.unique(lin[has], return_inverse=True, return_counts=True)
        card_slot = np.full(len(lin), -1)
        card_slot[has] = slot
        one = np.zeros(len(lin), dtype=bool)
        one[has] = per_block[slot] == 1
        single = np.flatnonzero(one)  # cards alone in their block: one scalar each
        multi = np.flatnonzero(has & ~one)  # cards sharing a block: C-vector draws
        u_single = z1.lineage_part[single]
        groups, group_of = _distinct_rows(u_single)
        return cls(
            blocks, card_slot, single, multi, np.unique(card_slot[multi]), u_single,
            blocks[card_slot[single]], groups, group_of,
        )  # fmt: skip


# cards from which ``block_worlds`` adds each node's centre and noise inside its node loop
# (measured: 385 cards gain, 39 cards lose about 5 % of a select)
PER_NODE_ADDS = 128


def block_worlds(
    stack: BlockStack,
    z0: np.ndarray,
    z1: BlockDesign,
    n: int,
    rng: np.random.Generator,
    layout: CardLayout | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n coherent world draws of (z_0'theta (n,), z_1j'theta (n, J)) for a block-arrowhead head.

    Exactly the law of full coefficient draws (node k with probability w_k, then
    theta = m_k + L_k^-T xi, Lambda_k = L_k L_k') projected on the rows, without drawing the
    P columns. Per world the shared block is drawn once (d_s = L_S^-T xi_s, used by every
    card); a lineage block l is, given it, N(m_l - L_l^-T l21_l' d_s, D_l^-1) and independent
    of the other blocks. A block touched by one card enters only through u'theta_l, so that
    card needs one scalar: u'theta_l = u'm_l - (l21_l a)'d_s + |a| xi with a = L_l^-1 u (a
    block without rows keeps its prior: l21 = 0, |a|^2 = sum v u^2). Blocks touched by several
    cards are drawn as C-vectors. O(n (P_s^2 + J P_s)) instead of O(n P); the per-node factors
    come stacked (``BlockStack``, built once per fit) so a decision does not gather them.

    Args:
        stack: the head's stacked nodes (``block_stack``: factored posteriors sharing one
            active set, node means with the prior mean included, node probabilities).
        z0: (P,) control row (shared columns only); z1: the cards' treated rows.

    Returns:
        (z_0'theta (n,), z_1j'theta (n, J), the worlds' shared coefficients (n, P_s)).
    """
    posts, means, weights = stack.components, stack.means, stack.weights
    post0 = posts[0]
    ps, c = post0.chol_s.shape[0], post0.width
    active = post0.active
    if np.any(z0[ps:] != 0.0):
        raise DesignError("the control row must not touch a lineage block")
    k_nodes = len(weights)
    ks = choose_nodes(rng, stack.node_cdf, n) if k_nodes > 1 else np.zeros(n, dtype=int)
    lin = z1.lineage
    where = np.full(z1.n_lineages, -1)
    where[active] = np.arange(len(active))
    lay = layout if layout is not None else CardLayout.of(z1)
    blocks, card_slot, single, multi = lay.blocks, lay.card_slot, lay.single, lay.multi
    vec_blocks, u_single, block_single = lay.vec_blocks, lay.u_single, lay.block_single
    col = ps + blocks[:, None] * c + np.arange(c)  # (touched blocks, C) columns
    pos_single = where[block_single]
    hot = pos_single >= 0
    cols_single = col[card_slot[single]]
    prior_sd_single = np.sqrt(np.sum(post0.prior_sd[cols_single] ** 2 * u_single**2, axis=1))
    pos_vec = where[blocks[vec_blocks]]
    xi_s = rng.standard_normal((n, ps))
    xi_1 = rng.standard_normal((n, len(single)))
    xi_v = rng.standard_normal((n, len(vec_blocks), c))
    visits = np.bincount(ks, minlength=k_nodes)
    nodes = np.flatnonzero(visits)  # the visited nodes, ascending (``np.unique``'s)
    counts = visits[nodes]
    order = np.argsort(ks, kind="stable")  # worlds grouped by node: contiguous slices
    bounds = np.concatenate(([0], np.cumsum(counts)))  # (np.r_ parses its index: slower)
    n_nodes = len(nodes)  # only the nodes the worlds visit are projected (row i: node nodes[i])
    # per visited node, for the cards alone in their block: centre u'm_l, shift l21_l a,
    # sd |a|; the block parts u take a few distinct values (kind and RAG state), so each
    # distinct u is contracted with the cards' blocks of every visited node at once
    groups, group_of = lay.groups, lay.group_of
    slope = None  # s_1j - shift_j per visited node, when every card is alone in its block
    if len(groups) == 1 and len(single) == len(lin) and bool(np.any(hot)):
        # the usual bank: one block part, every card alone in its block and (almost) every
        # one with rows; the terms are taken for every card at once, each card's alone (a
        # card's terms do not depend on the others taken with it), the slope from them in
        # one subtraction (C order: each node's slope is one matrix of the products below)
        u = groups[0]
        centre = _block_centres(means, nodes, cols_single, u)
        quad, part = stack.part_terms(nodes, u, np.maximum(pos_single, 0))  # cold: block 0's
        sd = np.sqrt(quad)
        shared_t = np.ascontiguousarray(z1.shared.T)
        slope = np.empty((n_nodes, ps, len(lin)))
        # the shifts put node-major by one transposing copy, then subtracted in place:
        # the same differences as subtracting the transposed view, in about two thirds of
        # the time (a copy's strided loop is cheaper than a ufunc's)
        np.copyto(slope, part.transpose(0, 2, 1))
        np.subtract(shared_t, slope, out=slope)
        cold = np.flatnonzero(~hot)
        if len(cold):  # a card without rows keeps its prior: sd, zero shift (s_1j - 0 = s_1j)
            sd[:, cold] = prior_sd_single[cold]
            slope[:, :, cold] = shared_t[:, cold]
    else:
        centre = np.empty((n_nodes, len(single)))
        sd = np.repeat(prior_sd_single[None, :], n_nodes, axis=0)  # prior where no rows
        shift = np.zeros((n_nodes, ps, len(single)))  # l21_l a only on the cards with rows
        for g, u in enumerate(groups):
            idx = np.flatnonzero(group_of == g)
            centre[:, idx] = _block_centres(means, nodes, cols_single[idx], u)
            idx_hot = idx[hot[idx]]
            if len(idx_hot):
                quad, part = stack.part_terms(nodes, u, pos_single[idx_hot])
                sd[:, idx_hot] = np.sqrt(quad)
                shift[:, :, idx_hot] = part.transpose(0, 2, 1)

    # worlds are handled grouped by node (contiguous slices; the xi are iid, so they can be
    # used in that order) and put back in the order of ks (world order[i] is slice row i)
    back = np.empty(n, dtype=int)
    back[order] = np.arange(n)
    # one visited node (a one-node head: the invalidity head): its slice is every world in
    # order (a stable sort of equal keys), so the gathers below would only copy
    regroup = n_nodes > 1
    beta_s = np.empty((n, ps))
    eta1 = np.empty((n, len(lin)))
    if len(single) == len(lin):  # every card alone in its block (the usual bank): per node,
        # z_1j'theta = z_1j's m_s + u'm_l + d_s'(s_1j - shift_j) + |a_j| xi_j
        if slope is None:
            shared_t = np.ascontiguousarray(z1.shared.T)
            slope = np.subtract(shared_t, shift, out=shift)  # s_1j - shift_j per visited node
        base = means[nodes, :ps] @ shared_t + centre  # (visited nodes, J)
        # per node the two products (each world's d_s, then its d_s'(s_1j - shift_j)),
        # written in place; then each world's node centre and noise are added, on a wide
        # bank to the node's slice while it is in cache, on a narrow one to every world at
        # once after the loop (three calls a node cost more than the gathers there): the
        # same operations in the same order on each value either way
        # (``np.dot`` of two C-order matrices into a C-order ``out`` makes the BLAS call
        # ``np.matmul`` makes, with less overhead a call: two calls per visited node)
        ds = np.empty((n, ps))
        inv_s = stack.inv_s
        spans = zip(nodes.tolist(), bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
        per_node = len(lin) >= PER_NODE_ADDS
        for i, (node, start, stop) in enumerate(spans):
            d, e = ds[start:stop], eta1[start:stop]
            np.dot(xi_s[start:stop], inv_s[node], out=d)  # L_S^-T xi_s in row form
            np.dot(d, slope[i], out=e)  # (worlds of node k, J)
            if per_node:
                x = xi_1[start:stop]
                e += base[i]
                x *= sd[i]
                e += x
        node_of = np.repeat(np.arange(n_nodes), counts)  # the node of each slice row
        np.add(means[nodes, :ps][node_of], ds, out=beta_s)
        if not per_node:
            eta1 += base[node_of]
            xi_1 *= sd[node_of]
            eta1 += xi_1
        if regroup:
            eta1 = eta1[back]  # the worlds' own order
    else:
        lift = np.empty((n, len(single)))  # lineage-block part of z_1j'theta, single cards
        beta_v = np.empty((n, len(vec_blocks), c))
        for i, k in enumerate(nodes):
            sl = slice(bounds[i], bounds[i + 1])
            post, mean = posts[k], means[k]
            ds = xi_s[sl] @ stack.inv_s[k]
            beta_s[sl] = mean[:ps] + ds
            lift[sl] = centre[i] + xi_1[sl] * sd[i] - ds @ shift[i]
            if len(vec_blocks):
                beta_v[sl] = _vector_blocks(post, mean, ds, xi_v[sl], col[vec_blocks], pos_vec)
        eta1[:] = beta_s @ z1.shared.T
        eta1[:, single] += lift
        which = np.searchsorted(vec_blocks, card_slot[multi])
        eta1[:, multi] += np.einsum("njc,jc->nj", beta_v[:, which], z1.lineage_part[multi])
        eta1 = eta1[back]
    if regroup:
        beta_s = beta_s[back]
    return beta_s @ z0[:ps], eta1, beta_s


def _block_centres(
    means: np.ndarray, nodes: np.ndarray, cols: np.ndarray, u: np.ndarray
) -> np.ndarray:
    """u'm_l per node of ``nodes`` (n,) and card (its block's columns, a row of ``cols``
    (J, C)) from the node means (K, P): (n, J). The blocks are gathered by one flat
    ``take`` into a C-order (n, J, C) array, the array a two-index gather of the (K, B, C)
    block view makes (so the same product and the same floats), without that gather's
    cost per C-value piece (~10 ns: 0.3 ms a head at 71 nodes x 385 cards)."""
    at = nodes[:, None] * means.shape[1] + cols.reshape(-1)
    return means.reshape(-1).take(at).reshape(len(nodes), *cols.shape) @ u


def row_groups(key: np.ndarray, few: int = 8) -> np.ndarray:
    """Group number of each row of ``key`` (equal rows, equal numbers): by comparison with
    each distinct row while there are at most ``few`` of them (the usual case), else by
    sorting."""
    group = np.full(len(key), -1)
    for g in range(few):
        left = np.flatnonzero(group < 0)
        if not len(left):
            return group
        group[left[np.all(key[left] == key[left[0]], axis=1)]] = g
    return np.asarray(np.unique(key, axis=0, return_inverse=True)[1]).reshape(-1)


def _distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows, index of each row's distinct row); one comparison when all are equal."""
    if len(rows) and np.array_equal(rows, np.broadcast_to(rows[0], rows.shape)):
        return rows[:1], np.zeros(len(rows), dtype=int)
    groups, group_of = np.unique(rows, axis=0, return_inverse=True)
    return groups, group_of.reshape(-1)


def _vector_blocks(
    post: BlockPosterior,
    mean: np.ndarray,
    ds: np.ndarray,
    xi: np.ndarray,
    cols: np.ndarray,
    pos: np.ndarray,
) -> np.ndarray:
    """Draws (n_k, V, C) of the lineage blocks shared by several cards, given d_s of the worlds.

    ``cols`` (V, C) are the blocks' columns, ``pos`` their positions among the node's active
    blocks (-1: no rows, the prior block). Active: m_l + L_l^-T (xi - l21_l' d_s).
    """
    ps, c = ds.shape[1], post.width
    part = mean[cols] + xi * post.prior_sd[cols]
    hot = pos >= 0
    if np.any(hot):
        pv = pos[hot]
        move = (ds @ post.l21[pv].transpose(1, 0, 2).reshape(ps, -1)).reshape(len(ds), len(pv), c)
        rhs = (xi[:, hot] - move).transpose(1, 2, 0)  # (A, C, n_k)
        draw = np.matmul(post.inverse_factors[1][pv], rhs).transpose(2, 0, 1)
        part[:, hot] = mean[cols[hot]] + draw
    return part


T = TypeVar("T")

# head -> (identity key of its fitted factors, stack); entries go with the head
_STACKS: weakref.WeakKeyDictionary[Any, tuple[tuple[object, ...], BlockStack]] = (
    weakref.WeakKeyDictionary()
)

_PROJECTORS: weakref.WeakKeyDictionary[Any, tuple[tuple[object, ...], MixtureProjector]] = (
    weakref.WeakKeyDictionary()
)


def _rows_dot(z: np.ndarray | BlockDesign, coef: np.ndarray) -> np.ndarray:
    return z.dot_draws(coef) if isinstance(z, BlockDesign) else coef @ np.atleast_2d(z).T


def block_stack(head: BayesianLinearHead | LogisticLaplaceHead) -> BlockStack | None:
    """The head's stacked block-arrowhead factors, built once per fit (None: not block form).

    Cached per head object and keyed by the identity of its fitted factors, so a refit of the
    same object (new factors) rebuilds the stack.
    """
    if isinstance(head, LogisticLaplaceHead):
        factor = head.block_factor
        if factor is None:
            return None
        key: tuple[object, ...] = (factor, head.coef_)
        parts: tuple[Sequence[BlockPosterior], np.ndarray, np.ndarray] = (
            (factor,),
            head.coef_[None, :],
            np.ones(1),
        )
    else:
        components = head.components_
        key = (*components, head.component_means_, head.weights_)
        cached = _cached(_STACKS, head, key)  # a stack is kept only for block nodes
        if cached is not None:
            return cached
        if not components or not all(isinstance(p, BlockPosterior) for p in components):
            return None
        posts = tuple(p for p in components if isinstance(p, BlockPosterior))
        parts = (posts, head.component_means_, np.asarray(head.weights_, dtype=float))
    return _per_fit(_STACKS, head, key, lambda: BlockStack.build(*parts))


def projector(head: BayesianLinearHead, space: DesignSpace) -> MixtureProjector:
    """The head's ``MixtureProjector`` on ``space``, built once per fit and reused."""
    key: tuple[object, ...] = (*head.components_, head.component_means_, head.weights_, space)
    return _per_fit(_PROJECTORS, head, key, lambda: MixtureProjector(head, space))


def _cached(
    cache: weakref.WeakKeyDictionary[Any, tuple[tuple[object, ...], T]],
    head: Any,
    key: tuple[object, ...],
) -> T | None:
    """``cache[head]``'s value while ``key`` holds the very same objects, else None."""
    cached = cache.get(head)
    if cached is not None and len(cached[0]) == len(key) and all(map(operator.is_, cached[0], key)):
        return cached[1]
    return None


def _per_fit(
    cache: weakref.WeakKeyDictionary[Any, tuple[tuple[object, ...], T]],
    head: Any,
    key: tuple[object, ...],
    build: Callable[[], T],
) -> T:
    """``cache[head]``'s value while ``key`` holds the very same objects, else a new build."""
    cached = _cached(cache, head, key)
    if cached is not None:
        return cached
    value = build()
    cache[head] = (key, value)
    return value


def head_worlds(
    head: BayesianLinearHead | LogisticLaplaceHead,
    z0: np.ndarray,
    z1: BlockDesign,
    n: int,
    rng: np.random.Generator,
    layout: CardLayout | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``head_latents`` of a block-arrowhead head, with the worlds' shared coefficients
    (n, P_s) (``block_worlds``; ``layout``: z1's ``CardLayout`` when already found)."""
    stack = block_stack(head)
    if stack is None:
        raise DesignError("world draws with shared coefficients need a block-arrowhead head")
    return block_worlds(stack, z0, z1, n, rng, layout)


def head_latents(
    head: BayesianLinearHead | LogisticLaplaceHead,
    z0: np.ndarray,
    z1: np.ndarray | BlockDesign,
    n: int,
    rng: np.random.Generator,
    layout: CardLayout | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """n posterior world draws of (z_0'theta (n,), z_1j'theta (n, J)) of a fitted head.

    A block-arrowhead fit with block rows draws only what the rows touch
    (``block_arm_latents`` on the head's cached ``block_stack``; ``layout``: z1's
    ``CardLayout`` when already found); a dense fit (at most ``DENSE_MAX_SIZE`` columns,
    cheap) draws full coefficient vectors, the reference path.
    """
    if isinstance(z1, BlockDesign):
        stack = block_stack(head)
        if stack is not None:
            return block_arm_latents(stack, z0, z1, n, rng, layout)
    coef = head.sample(n, rng)
    if isinstance(head, LogisticLaplaceHead):
        return coef @ z0, _rows_dot(z1, coef)
    return _rows_dot(z0[None, :], coef)[:, 0], _rows_dot(z1, coef)
