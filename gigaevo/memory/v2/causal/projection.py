"""Exact joint law of a card's two arm predictors under a fitted head (MODEL 8.3 draws).

Retirement needs, in each posterior world, only z_0'theta and z_1'theta of each head at one
context. For a Gaussian-mixture head (immediate, delayed-lineage) that pair is a mixture of
bivariate normals; ``MixtureProjector`` computes the node means and covariances on the card's
columns (shared blocks plus its lineage block) from a dense node (a slice) or a
block-arrowhead node (its Schur factors), so the cost does not grow with the bank.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gigaevo.memory.v2.causal.arrowhead import BlockPosterior
from gigaevo.memory.v2.causal.blr import BayesianLinearHead, ConditionalPosterior
from gigaevo.memory.v2.causal.features import DesignSpace


def card_columns(space: DesignSpace, lineage: str) -> np.ndarray:
    """The shared columns and the lineage block of ``lineage``: all a card's rows touch."""
    s = space.lineage_slice(lineage)
    return np.r_[np.arange(space.shared_size), np.arange(s.start, s.stop)]


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


class MixtureProjector:
    """Exact joint law of (z_0'beta, z_1'beta) under a fitted Gaussian-mixture head.

    z_0 and z_1 touch only the shared columns and one lineage block, so each node needs the
    covariance on those P_s + C columns: a slice of a dense node, or from the Schur factors
    of a block-arrowhead node (S^-1 is computed once per node and reused for every card).
    Covariances are cached per lineage, so the contexts and RAG states of a card share them.
    """

    def __init__(self, head: BayesianLinearHead, space: DesignSpace) -> None:
        self.space = space
        self.weights = np.asarray(head.weights_, dtype=float)
        self.means = np.asarray(head.component_means_, dtype=float)
        self.components: tuple[Any, ...] = head.components_
        self._blocks: dict[str, np.ndarray] = {}  # lineage -> (K, P_s + C, P_s + C)
        self._shared_inv: np.ndarray | None = None  # (K, P_s, P_s): S^-1 of block nodes
        self._positions: list[dict[int, int]] = []  # per node: lineage block -> active index

    def _covs(self, lineage: str, cols: np.ndarray) -> np.ndarray:
        """Covariances of every node on ``cols`` (the card's columns), cached per lineage."""
        if lineage not in self._blocks:
            if all(isinstance(p, BlockPosterior) for p in self.components):
                self._blocks[lineage] = self._block_covs(lineage)
            elif all(isinstance(p, ConditionalPosterior) for p in self.components):
                self._blocks[lineage] = np.array(
                    [p.cov[np.ix_(cols, cols)] for p in self.components]
                )
            else:
                raise TypeError("unsupported posterior components")
        return self._blocks[lineage]

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
            self._positions = [{int(b): i for i, b in enumerate(p.active)} for p in posts]
        s_inv = self._shared_inv
        block = (self.space.lineage_slice(lineage).start - ps) // c
        out = np.zeros((len(posts), ps + c, ps + c))
        out[:, :ps, :ps] = s_inv
        prior = posts[0].prior_sd[ps + block * c : ps + (block + 1) * c] ** 2
        out[:, ps:, ps:] = np.diag(prior)
        hit = [k for k, pos in enumerate(self._positions) if block in pos]
        if hit:
            chol = np.array([posts[k].chol_d[self._positions[k][block]] for k in hit])
            l21 = np.array([posts[k].l21[self._positions[k][block]] for k in hit])
            inv_l = np.linalg.inv(chol)  # (A, C, C)
            t = inv_l.transpose(0, 2, 1) @ l21.transpose(0, 2, 1)  # (A, C, P_s)
            ts = t @ s_inv[hit]
            out[hit, ps:, :ps] = -ts
            out[hit, :ps, ps:] = -ts.transpose(0, 2, 1)
            out[hit, ps:, ps:] = inv_l.transpose(0, 2, 1) @ inv_l + ts @ t.transpose(0, 2, 1)
        return out

    def moments(
        self, lineage: str, z0: np.ndarray, z1: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per node: means (K, 2) and covariances (K, 2, 2) of (z_0'beta, z_1'beta)."""
        cols = card_columns(self.space, lineage)
        rows = np.vstack([z0, z1])
        if np.any(np.delete(rows, cols, axis=1) != 0.0):
            raise ValueError("design rows touch columns outside the card's blocks")
        s = rows[:, cols]
        means = self.means[:, cols] @ s.T
        covs = np.einsum("ip,kpq,jq->kij", s, self._covs(lineage, cols), s, optimize=True)
        return means, covs

    def draw(
        self, lineage: str, z0: np.ndarray, z1: np.ndarray, n: int, rng: np.random.Generator
    ) -> np.ndarray:
        """n joint draws of (z_0'beta, z_1'beta), shape (n, 2)."""
        means, covs = self.moments(lineage, z0, z1)
        ks = rng.choice(len(self.weights), size=n, p=self.weights)
        xi = rng.standard_normal((n, 2))
        roots = chol2x2(covs)
        return means[ks] + np.einsum("nij,nj->ni", roots[ks], xi)
