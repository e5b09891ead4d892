"""Block-arrowhead (Schur-complement) conditional posterior of the linear heads (memory-model.md
"Immediate head").

Each design row touches the shared blocks (width P_s) and at most one lineage block (width C),
so Lambda = diag(1/v) + X'WX is block-arrowhead. Per sigma node the cost is O(B C^3 + P_s^3)
instead of O(P^3); lineages without rows keep their prior block and cost nothing.

Column order matches ``DesignSpace``: shared block first, then the B lineage blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from gigaevo.memory.v2.causal.errors import DesignError
from gigaevo.memory.v2.causal.suffstats import FitStatistics

_LOG_2PI = math.log(2.0 * math.pi)


def _to_front(stack: np.ndarray) -> np.ndarray:
    """(..., C, C) -> contiguous (C, C, M): the per-entry vectors of the stacked matrices."""
    c = stack.shape[-1]
    return np.ascontiguousarray(stack.reshape(-1, c, c).transpose(1, 2, 0))


def _to_back(front: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.ascontiguousarray(front.transpose(2, 0, 1)).reshape(shape)


def batched_cholesky(stack: np.ndarray) -> np.ndarray:
    """Lower Cholesky factors of a stack of small SPD matrices (..., C, C).

    Vectorised over the stack (a loop over the C columns), much faster than
    ``numpy.linalg.cholesky`` on tens of thousands of tiny matrices.

    Raises:
        numpy.linalg.LinAlgError: a matrix is not positive definite.
    """
    c = stack.shape[-1]
    a = _to_front(stack)
    out = np.zeros_like(a)
    for j in range(c):
        pivot = a[j, j] - np.einsum("km,km->m", out[j, :j], out[j, :j])
        if not np.all(pivot > 0.0):
            raise np.linalg.LinAlgError("Matrix is not positive definite")
        out[j, j] = np.sqrt(pivot)
        if j + 1 < c:
            below = a[j + 1 :, j] - np.einsum("ikm,km->im", out[j + 1 :, :j], out[j, :j])
            out[j + 1 :, j] = below / out[j, j]
    return _to_back(out, stack.shape)


def lower_inverse(chol: np.ndarray) -> np.ndarray:
    """Inverses of a stack of lower-triangular matrices (..., C, C) by forward substitution.

    Vectorised over the stack (a loop over the C rows), much faster than
    ``numpy.linalg.inv`` on tens of thousands of tiny matrices.
    """
    c = chol.shape[-1]
    a = _to_front(chol)
    out = np.zeros_like(a)
    diag_inv = 1.0 / np.array([a[i, i] for i in range(c)])  # (C, M)
    for i in range(c):
        out[i, i] = diag_inv[i]
        if i:
            # row i of L^-1: -(L[i, :i] @ L^-1[:i, :i]) / L[i, i]
            row = np.einsum("km,kjm->jm", a[i, :i], out[:i, :i])
            out[i, :i] = -row * diag_inv[i]
    return _to_back(out, chol.shape)


@dataclass(frozen=True)
class BlockDesign:
    """Sparse view of a design matrix.

    Attributes:
        shared: (n, P_s) shared columns of every row.
        lineage: (n,) lineage block index of the row, -1 for none (control rows).
        lineage_part: (n, C) the row's lineage-block values (zeros when lineage = -1).
        n_lineages: B.
        products: optional (n, C C + C P_s) per-row products u u' and u s' (``row_products``),
            kept by a caller that fits the same rows again and again; ``block_gram`` then
            only weighs and sums them.
    """

    shared: np.ndarray
    lineage: np.ndarray
    lineage_part: np.ndarray
    n_lineages: int
    products: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> int:
        """P = P_s + B C."""
        return self.shared.shape[1] + self.n_lineages * self.lineage_part.shape[1]

    @classmethod
    def from_dense(cls, x: np.ndarray, shared_size: int, width: int) -> BlockDesign:
        """Split a dense (n, P) design; raises DesignError if a row touches two lineage blocks."""
        x = np.asarray(x, dtype=float)
        n_lin = (x.shape[1] - shared_size) // width
        blocks = x[:, shared_size:].reshape(len(x), n_lin, width)
        touched = np.any(blocks != 0.0, axis=2)
        if np.any(touched.sum(axis=1) > 1):
            raise DesignError("a design row touches more than one lineage block")
        lineage = np.where(touched.any(axis=1), touched.argmax(axis=1), -1)
        part = np.where(lineage[:, None] >= 0, blocks[np.arange(len(x)), lineage.clip(0)], 0.0)
        return cls(x[:, :shared_size].copy(), lineage, part, n_lin)

    def dot(self, vec: np.ndarray) -> np.ndarray:
        """X @ vec, shape (n,), for a (P,) vector."""
        ps, c = self.shared.shape[1], self.lineage_part.shape[1]
        out = self.shared @ vec[:ps]
        rows = self.lineage >= 0
        blocks = vec[ps:].reshape(self.n_lineages, c)
        out[rows] += np.sum(self.lineage_part[rows] * blocks[self.lineage[rows]], axis=1)
        return out

    def dot_draws(self, coef: np.ndarray) -> np.ndarray:
        """X @ coef' for S coefficient draws coef (S, P): shape (S, n), O(S n (P_s + C))."""
        ps, c = self.shared.shape[1], self.lineage_part.shape[1]
        out = coef[:, :ps] @ self.shared.T
        rows = np.flatnonzero(self.lineage >= 0)
        if len(rows):
            cols = ps + self.lineage[rows, None] * c + np.arange(c)  # (n_r, C)
            out[:, rows] += np.einsum("snc,nc->sn", coef[:, cols], self.lineage_part[rows])
        return out

    def take(self, rows: np.ndarray | list[int]) -> BlockDesign:
        """The design of the selected rows (in the given order)."""
        idx = np.asarray(rows, dtype=int)
        products = None if self.products is None else self.products[idx]
        return BlockDesign(
            self.shared[idx], self.lineage[idx], self.lineage_part[idx], self.n_lineages, products
        )

    def rdot(self, r: np.ndarray) -> np.ndarray:
        """X' r, shape (P,), for an (n,) vector."""
        c = self.lineage_part.shape[1]
        blocks = np.zeros((self.n_lineages, c))
        rows = self.lineage >= 0
        np.add.at(blocks, self.lineage[rows], self.lineage_part[rows] * r[rows, None])
        return np.concatenate([self.shared.T @ r, blocks.reshape(-1)])

    def active_positions(self) -> tuple[np.ndarray, np.ndarray]:
        """(active lineage ids (B_act,), each lineage's position among them (B,), -1 if none)."""
        active = np.unique(self.lineage[self.lineage >= 0])
        pos = np.full(self.n_lineages, -1)
        pos[active] = np.arange(len(active))
        return active, pos

    def to_dense(self) -> np.ndarray:
        """The (n, P) dense design."""
        n, c = self.lineage_part.shape
        out = np.zeros((n, self.size))
        out[:, : self.shared.shape[1]] = self.shared
        # one scatter into the flat array, not a Python loop per row (same values)
        rows = np.flatnonzero(self.lineage >= 0)
        start = rows * self.size + self.shared.shape[1] + self.lineage[rows] * c
        out.reshape(-1)[start[:, None] + np.arange(c)] = self.lineage_part[rows]
        return out


DENSE_MAX_SIZE = 64


def as_block_design(
    x: np.ndarray | BlockDesign, layout: tuple[int, int] | None, size: int
) -> np.ndarray | BlockDesign:
    """``x`` split into a ``BlockDesign`` when a layout (P_s, C) is known and P > DENSE_MAX_SIZE.

    Small designs stay dense: the dense path is cheap there and is the reference whose
    posterior draws earlier runs were made with.
    """
    if layout is None or isinstance(x, BlockDesign) or size <= DENSE_MAX_SIZE:
        return x
    return BlockDesign.from_dense(np.asarray(x, dtype=float).reshape(-1, size), *layout)


class BlockStatistics:
    """Sufficient statistics of centred targets, grouped by distinct omega^2 (memory-model.md
    "Immediate head")."""

    def __init__(self, design: BlockDesign, y: np.ndarray, omega: np.ndarray) -> None:
        self.n = len(y)
        self.p_shared = design.shared.shape[1]
        self.width = design.lineage_part.shape[1]
        self.n_lineages = design.n_lineages
        self.active, pos = design.active_positions()
        omega2 = np.asarray(omega, dtype=float) ** 2
        self.levels = np.unique(omega2)
        self.groups = [
            self._group(design, y, omega2 == lv, pos, len(self.active)) for lv in self.levels
        ]

    @classmethod
    def from_fit(cls, fit: FitStatistics) -> BlockStatistics:
        """The same statistics from incrementally kept sums (``suffstats``), no design."""
        out = cls.__new__(cls)
        out.n, out.p_shared, out.width = fit.n, fit.p_shared, fit.width
        out.n_lineages, out.active, out.levels = fit.n_lineages, fit.active, fit.levels
        out.groups = []
        for g in fit.groups:
            d, gg, bl = g.dense_blocks(len(fit.active))
            group: dict[str, np.ndarray | float] = {"count": float(g.count), "yty": g.yty}
            group.update(a=g.a, d=d, g=gg, bs=g.bs, bl=bl)
            out.groups.append(group)
        return out

    @staticmethod
    def _group(
        design: BlockDesign, y: np.ndarray, mask: np.ndarray, pos: np.ndarray, n_act: int
    ) -> dict[str, np.ndarray | float]:
        gram = block_gram(design, mask.astype(float), pos, n_act, y)
        yy = y[mask]
        return {"count": float(mask.sum()), "yty": float(yy @ yy), **gram}


def row_products(shared: np.ndarray, part: np.ndarray) -> np.ndarray:
    """Per-row products (u u' and u s', flattened): (n, C C + C P_s) for ``BlockDesign``."""
    n, c, ps = len(part), part.shape[1], shared.shape[1]
    uu = (part[:, :, None] * part[:, None, :]).reshape(n, c * c)
    us = (part[:, :, None] * shared[:, None, :]).reshape(n, c * ps)
    return np.concatenate([uu, us], axis=1)


def block_gram(
    design: BlockDesign,
    weights: np.ndarray,
    pos: np.ndarray,
    n_act: int,
    y: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Weighted blocks of X'WX (and X'Wy): a (P_s, P_s), d (B_act, C, C), g (B_act, C, P_s).

    Args:
        weights: (n,) row weights; pos: (B,) position of each lineage among the active ones.
        y: optional (n,) targets for bs (P_s,) and bl (B_act, C).
    """
    from scipy.sparse import csr_matrix

    s, lin, part = design.shared, design.lineage, design.lineage_part
    c, ps = part.shape[1], s.shape[1]
    ws = s * weights[:, None]
    rows = np.flatnonzero((lin >= 0) & (weights != 0.0))
    products = design.products
    if products is None:
        products = row_products(s[rows], part[rows])
        cols = np.arange(len(rows))
    else:
        cols = rows
    # weighted per-block sums as one sparse (B_act x n) product
    member = csr_matrix((weights[rows], (pos[lin[rows]], cols)), shape=(n_act, len(products)))
    summed = np.asarray(member @ products)
    out = {
        "a": ws.T @ s,
        "d": summed[:, : c * c].reshape(n_act, c, c),
        "g": summed[:, c * c :].reshape(n_act, c, ps),
    }
    if y is not None:
        bl = np.zeros((n_act, c))
        np.add.at(bl, pos[lin[rows]], part[rows] * (weights[rows] * y[rows])[:, None])
        out["bs"], out["bl"] = ws.T @ y, bl
    return out


@dataclass(frozen=True)
class BlockPosterior:
    """Conditional posterior N(mean, Lambda^-1) for one sigma, kept in factored form.

    Attributes:
        mean: (P,) posterior mean.
        log_evidence: log p(y | sigma).
        chol_d: (B_act, C, C) Cholesky factors of the active lineage blocks D_l.
        l21: (B_act, P_s, C) = G_l' L_l^-T; chol_s: (P_s, P_s) Cholesky factor of the Schur
            complement S = A - sum_l G_l' D_l^-1 G_l.
        active: (B_act,) active lineage indices; prior_sd: (P,) prior sds (inactive blocks).
        precomputed: ``inverse_factors`` when the builder already has them, else None.
    """

    mean: np.ndarray
    log_evidence: float
    chol_d: np.ndarray
    l21: np.ndarray
    chol_s: np.ndarray
    active: np.ndarray
    prior_sd: np.ndarray
    width: int
    precomputed: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = field(
        default=None, repr=False, compare=False
    )

    def sample(self, xi: np.ndarray) -> np.ndarray:
        """Draws mean + Lambda^-1/2 xi for standard normals xi of shape (S, P)."""
        ps, c = self.chol_s.shape[0], self.width
        inv_s, inv_d, l21_flat, cols = self.inverse_factors
        out = xi * self.prior_sd  # inactive lineage blocks keep their prior
        x_s = xi[:, :ps] @ inv_s  # (L_S^-T xi_s')' = xi_s L_S^-1
        out[:, :ps] = x_s
        if len(self.active):
            n, k = len(xi), len(self.active)
            rhs = xi[:, cols] - (x_s @ l21_flat).reshape(n, k, c)  # (S, B_act, C)
            # L_l^-T rhs per block, as one batched matmul over the blocks
            out[:, cols] = np.matmul(inv_d, rhs.transpose(1, 2, 0)).transpose(2, 0, 1)
        return self.mean + out

    @property
    def inverse_factors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(L_S^-1, L_l^-T per active block, l21 as (P_s, B_act C), lineage columns), cached."""
        if self.precomputed is not None:
            return self.precomputed
        return self._inverse_factors

    @cached_property
    def _inverse_factors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(L_S^-1, L_l^-T per active block, l21 as (P_s, B_act C), lineage columns).

        Computed once per fitted sigma node and reused by every draw of a cached fit.
        """
        if self.precomputed is not None:
            return self.precomputed
        ps = self.chol_s.shape[0]
        if not len(self.active):
            return np.linalg.inv(self.chol_s), self.chol_d, np.zeros((ps, 0)), self.active
        inv_d = np.linalg.inv(self.chol_d).transpose(0, 2, 1)
        l21_flat = self.l21.transpose(1, 0, 2).reshape(ps, -1)
        return np.linalg.inv(self.chol_s), inv_d, l21_flat, self.lineage_columns

    @property
    def lineage_columns(self) -> np.ndarray:
        """(B_act, C) column indices of the active lineage blocks."""
        ps, c = self.chol_s.shape[0], self.width
        return (ps + self.active[:, None] * c + np.arange(c)).astype(int)

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        """Lambda^-1 rhs for rhs of shape (P,) (Schur complement, then back-substitution).

        With the inverse factors at hand (``factor_blocks`` forms them) by products with
        them (``apply_inverse``): one batched LAPACK solve per tiny block costs more.
        """
        if self.precomputed is not None:
            return self.apply_inverse(rhs)
        ps = self.chol_s.shape[0]
        out = rhs * self.prior_sd**2
        cols = self.lineage_columns
        u = np.linalg.solve(self.chol_d, rhs[cols][..., None])[..., 0]  # L_l^-1 b_l
        m_s = np.linalg.solve(
            self.chol_s.T,
            np.linalg.solve(self.chol_s, rhs[:ps] - np.einsum("kpc,kc->p", self.l21, u)),
        )
        m_l = np.linalg.solve(
            self.chol_d.transpose(0, 2, 1), (u - np.einsum("kpc,p->kc", self.l21, m_s))[..., None]
        )
        out[:ps] = m_s
        out[cols] = m_l[..., 0]
        return out

    def apply_inverse(self, rhs: np.ndarray) -> np.ndarray:
        """Lambda^-1 rhs for rhs of shape (P,) by products with the cached inverse factors.

        Same value as ``solve`` up to rounding, without per-call triangular solves: for
        operators applied many times (the Lanczos iterations of a condition number).
        """
        inv_s, inv_dt, l21_flat, cols = self.inverse_factors
        ps = self.chol_s.shape[0]
        out = rhs * self.prior_sd**2
        if not len(self.active):
            out[:ps] = inv_s.T @ (inv_s @ rhs[:ps])
            return out
        a = np.matmul(rhs[cols][:, None, :], inv_dt)[:, 0, :]  # L_l^-1 b_l, as rows
        a_s = inv_s @ (rhs[:ps] - l21_flat @ a.reshape(-1))
        x_s = inv_s.T @ a_s
        back = a - (x_s @ l21_flat).reshape(a.shape)
        out[:ps] = x_s
        out[cols] = np.matmul(inv_dt, back[..., None])[..., 0]
        return out

    def apply_inverse_rows(self, rows: np.ndarray) -> np.ndarray:
        """Lambda^-1 rows' for rows (J, P), as columns (P, J): each entry the very value
        ``solve`` gives, with ``apply_inverse``'s products taken over the lineage blocks
        some row touches only (each block's slice keeping its strides, so the same call per
        block; without the inverse factors, ``solve`` row by row).

        An untouched block's rhs is 0, so its part of L^-1 rhs is 0 (``apply_inverse`` forms
        +-0 there) and the sums over every block that follow are the same. ``rows @`` the
        result is ``rows @ solve(...)`` (a row is 0 off its touched columns). A card's two
        arm rows touch the shared columns and one lineage block: this skips the two products
        over every active block of a full solve (about 40 % of a linear predictor at 1,000
        cards).
        """
        if self.precomputed is None:
            return np.column_stack([self.solve(r) for r in rows])
        inv_s, inv_dt, l21_flat, cols = self.precomputed
        ps, c = self.chol_s.shape[0], self.width
        out = np.zeros((len(self.mean), len(rows)))
        blocks = np.unique(np.flatnonzero((rows[:, ps:] != 0).any(axis=0)) // c)
        lineage = ps + blocks[:, None] * c + np.arange(c)  # touched lineage columns, per block
        out[lineage] = (rows[:, lineage] * self.prior_sd[lineage] ** 2).transpose(1, 2, 0)
        if not len(self.active):
            for j, rhs in enumerate(rows):
                out[:ps, j] = inv_s.T @ (inv_s @ rhs[:ps])
            return out
        at = [k for b in blocks for k in np.flatnonzero(self.active == b)]  # touched, active
        for j, rhs in enumerate(rows):
            a = np.zeros((len(self.active), c))
            for k in at:
                a[k : k + 1] = np.matmul(rhs[cols[k : k + 1]][:, None, :], inv_dt[k : k + 1])[:, 0]
            x_s = inv_s.T @ (inv_s @ (rhs[:ps] - l21_flat @ a.reshape(-1)))
            back = a - (x_s @ l21_flat).reshape(a.shape)
            out[:ps, j] = x_s
            for k in at:
                out[cols[k], j] = np.matmul(inv_dt[k : k + 1], back[k : k + 1, :, None])[0, :, 0]
        return out

    def marginal_variance(self) -> np.ndarray:
        """diag(Lambda^-1), shape (P,)."""
        return marginal_variance(self)

    def dense_cov(self) -> np.ndarray:
        """Lambda^-1 as a dense (P, P) matrix (for tests and small problems)."""
        p = len(self.mean)
        lam_chol = np.zeros((p, p))
        ps, c = self.chol_s.shape[0], self.width
        order = np.r_[[ps + lin * c + i for lin in self.active for i in range(c)], np.arange(ps)]
        order = order.astype(int)
        n_act = len(self.active) * c
        for k in range(len(self.active)):
            lam_chol[k * c : (k + 1) * c, k * c : (k + 1) * c] = self.chol_d[k]
            lam_chol[n_act:p, k * c : (k + 1) * c][:ps] = self.l21[k]
        lam_chol[n_act : n_act + ps, n_act : n_act + ps] = self.chol_s
        cov = np.diag(self.prior_sd**2)
        inv_l = np.linalg.inv(lam_chol[: n_act + ps, : n_act + ps])
        sub = inv_l.T @ inv_l
        cov[np.ix_(order, order)] = sub
        return cov


def factor_blocks(
    a: np.ndarray,
    d: np.ndarray,
    g: np.ndarray,
    prior_var: np.ndarray,
    active: np.ndarray,
    width: int,
) -> BlockPosterior:
    """Factor Lambda = diag(1/v) + blocks (a, d, g from ``block_gram``); mean left at zero.

    Raises:
        numpy.linalg.LinAlgError: Lambda is not positive definite.
    """
    ps = a.shape[0]
    cols = (ps + active[:, None] * width + np.arange(width)).astype(int)
    d = d.copy()
    d[:, np.arange(width), np.arange(width)] += 1.0 / prior_var[cols]
    chol_d = batched_cholesky(d)  # tiny blocks: vectorised over them, not one LAPACK call each
    inv_d = lower_inverse(chol_d)
    lg = inv_d @ g  # (B_act, C, P_s) = L^-1 G
    l21 = lg.transpose(0, 2, 1)  # (B_act, P_s, C) = G' L^-T
    chol_s = np.linalg.cholesky(
        a + np.diag(1.0 / prior_var[:ps]) - np.einsum("kpc,kqc->pq", l21, l21)
    )
    zero = np.zeros(len(prior_var))
    flat = lg.transpose(2, 0, 1).reshape(ps, -1)  # l21 as (P_s, B_act C)
    factors = (np.linalg.inv(chol_s), inv_d.transpose(0, 2, 1), flat, cols)
    return BlockPosterior(
        zero, 0.0, chol_d, l21, chol_s, active, np.sqrt(prior_var), width, factors
    )


def block_posterior(stats: BlockStatistics, prior_var: np.ndarray, sigma: float) -> BlockPosterior:
    """m(sigma), factored Lambda and log p(y | sigma) via the Schur complement (centred y)."""
    ps, c = stats.p_shared, stats.width
    n_act = len(stats.active)
    w = 1.0 / (sigma * sigma + stats.levels)
    a, d, g = np.zeros((ps, ps)), np.zeros((n_act, c, c)), np.zeros((n_act, c, ps))
    b = np.zeros(len(prior_var))
    cols = (ps + stats.active[:, None] * c + np.arange(c)).astype(int)
    ywy, logdet_noise = 0.0, 0.0
    for wi, lv, grp in zip(w, stats.levels, stats.groups, strict=True):
        a = a + wi * grp["a"]
        d = d + wi * grp["d"]
        g = g + wi * grp["g"]
        b[:ps] += wi * grp["bs"]
        b[cols] += wi * grp["bl"]
        ywy += wi * float(grp["yty"])
        logdet_noise += float(grp["count"]) * math.log(sigma * sigma + lv)
    post = factor_blocks(a, d, g, prior_var, stats.active, c)
    mean = post.solve(b)
    logdet_lam = 2.0 * float(np.sum(np.log(np.diagonal(post.chol_d, axis1=1, axis2=2))))
    logdet_lam += 2.0 * float(np.sum(np.log(np.diag(post.chol_s))))
    logdet_prior = float(np.sum(np.log(prior_var[:ps]))) + float(np.sum(np.log(prior_var[cols])))
    quad = ywy - float(mean @ b)
    log_ev = -0.5 * (stats.n * _LOG_2PI + logdet_noise + logdet_lam + logdet_prior + quad)
    return replace(post, mean=mean, log_evidence=log_ev)


def arm_quadratics(
    post: BlockPosterior, z0: np.ndarray, z1: np.ndarray | BlockDesign
) -> tuple[float, np.ndarray, np.ndarray]:
    """(z0' L^-1 z0, z0' L^-1 z1_j, z1_j' L^-1 z1_j) for Lambda = L (factored in ``post``).

    z0 (P,) is a control row (shared part only); each row of z1 (J, P) has a shared part and
    at most one lineage block. With h = L_l^-1 u, k = l21_l h (so k = G_l' D_l^-1 u) the forms
    are a'a, a'b and b'b + h'h for a = L_S^-1 s_0, b = L_S^-1 (s_1 - k); an inactive block
    keeps its prior (k = 0, h'h = sum v u^2). O(J (P_s^2 + C^2)) instead of O(J P^2).
    Rows outside that shape are solved one by one.
    """
    ps, c = post.chol_s.shape[0], post.width
    n_lin = (len(post.prior_sd) - ps) // c
    if not isinstance(z1, BlockDesign):
        touched = np.any(z1[:, ps:].reshape(len(z1), n_lin, c) != 0.0, axis=2)
        if np.any(z0[ps:] != 0.0) or np.any(touched.sum(axis=1) > 1):
            s0 = post.solve(z0)
            quad = np.array([row @ post.solve(row) for row in z1])
            return float(z0 @ s0), z1 @ s0, quad
        z1 = BlockDesign.from_dense(z1, ps, c)
    elif np.any(z0[ps:] != 0.0):
        raise DesignError("the control row must not touch a lineage block")
    j = len(z1.lineage)
    has = z1.lineage >= 0
    block = np.where(has, z1.lineage, 0)
    u = z1.lineage_part * has[:, None]
    where = np.full(n_lin, -1)
    where[post.active] = np.arange(len(post.active))
    pos = np.where(has, where[block], -1)
    act = pos >= 0
    k = np.zeros((j, ps))
    hh = np.zeros(j)
    if np.any(act):
        h = np.linalg.solve(post.chol_d[pos[act]], u[act][..., None])[..., 0]
        k[act] = np.einsum("jpc,jc->jp", post.l21[pos[act]], h)
        hh[act] = np.sum(h * h, axis=1)
    cold = has & ~act
    cols = ps + block[cold, None] * c + np.arange(c)
    hh[cold] = np.sum(post.prior_sd[cols] ** 2 * u[cold] ** 2, axis=1)
    a = np.linalg.solve(post.chol_s, z0[:ps])
    b = np.linalg.solve(post.chol_s, (z1.shared - k).T)
    return float(a @ a), a @ b, np.sum(b * b, axis=0) + hh


def marginal_variance(post: BlockPosterior) -> np.ndarray:
    """diag(Lambda^-1), shape (P,), without forming the dense inverse.

    Shared block: diag(S^-1). Lineage block l: diag(D_l^-1 + D_l^-1 G_l S^-1 G_l' D_l^-1),
    where D_l^-1 G_l = L_l^-T l21_l' because l21_l = G_l' L_l^-T.
    """
    ps, c = post.chol_s.shape[0], post.width
    var = post.prior_sd**2
    inv_ls = np.linalg.inv(post.chol_s)  # S^-1 = inv_ls' inv_ls
    var[:ps] = np.sum(inv_ls**2, axis=0)
    if len(post.active):
        inv_ld = np.linalg.inv(post.chol_d)  # (B_act, C, C), D^-1 = inv_ld' inv_ld
        t = np.einsum("kji,kpj,qp->kiq", inv_ld, post.l21, inv_ls, optimize=True)
        block_var = np.sum(inv_ld**2, axis=1) + np.sum(t**2, axis=2)  # (B_act, C)
        cols = (ps + post.active[:, None] * c + np.arange(c)).astype(int)
        var[cols] = block_var
    return var


@dataclass(frozen=True)
class BlockHessian:
    """X' diag(w) X of rows that each touch the shared block and at most one lineage block,
    in block-arrowhead form (memory-model.md "The prefix in Laplace form"): the shared block
    a (P_s, P_s), and for each lineage in ``lineages`` its own block d (C, C) and its cross
    block g (C, P_s) with the shared columns. Two lineage blocks never meet (no row touches
    both), so these are all its nonzero entries.

    ``h @ r`` and ``h - other`` are the dense matrix's product and difference, so a
    ``Quadratic`` holds either form through one code path.

    Attributes:
        a: (P_s, P_s). lineages: (K,) sorted lineage indices. d: (K, C, C). g: (K, C, P_s).
        size: P of the space.
    """

    a: np.ndarray
    lineages: np.ndarray
    d: np.ndarray
    g: np.ndarray
    size: int

    @classmethod
    def of_gram(
        cls, gram: tuple[dict[str, np.ndarray], np.ndarray, int], size: int
    ) -> BlockHessian:
        """From ``block_gram``'s blocks and their active lineages (copies)."""
        blocks, active, _ = gram
        return cls(
            blocks["a"].copy(), np.asarray(active, dtype=int).copy(), blocks["d"].copy(),
            blocks["g"].copy(), size,
        )  # fmt: skip

    @classmethod
    def of_dense(cls, hess: np.ndarray, shared_size: int, width: int) -> BlockHessian:
        """The blocks of a dense X'WX with this layout (its cross-lineage entries are 0)."""
        ps, c = shared_size, width
        n_lin = (len(hess) - ps) // c
        lin = hess[ps:, ps:].reshape(n_lin, c, n_lin, c)
        idx = np.arange(n_lin)
        d = lin[idx, :, idx, :]  # (B, C, C)
        g = hess[ps:, :ps].reshape(n_lin, c, ps)
        keep = np.flatnonzero(np.any(d != 0.0, axis=(1, 2)) | np.any(g != 0.0, axis=(1, 2)))
        return cls(hess[:ps, :ps].copy(), keep, d[keep].copy(), g[keep].copy(), len(hess))

    @cached_property
    def _columns(self) -> np.ndarray:
        """Each lineage's columns in the space, (K, C) (made once: a Newton run asks for
        H r at every point it tries)."""
        ps, c = self.a.shape[0], self.d.shape[1]
        return (ps + self.lineages[:, None] * c + np.arange(c)).astype(int)

    def __matmul__(self, r: np.ndarray) -> np.ndarray:
        """H r for r of shape (P,)."""
        ps = self.a.shape[0]
        out = np.zeros(self.size)
        out[:ps] = self.a @ r[:ps]
        if len(self.lineages):
            cols = self._columns
            r_l = r[cols]  # (K, C)
            out[:ps] += np.einsum("kcp,kc->p", self.g, r_l)
            out[cols] = np.einsum("kij,kj->ki", self.d, r_l) + self.g @ r[:ps]
        return out

    def to_dense(self) -> np.ndarray:
        """The (P, P) matrix."""
        ps = self.a.shape[0]
        out = np.zeros((self.size, self.size))
        out[:ps, :ps] = self.a
        if len(self.lineages):
            c = self.d.shape[1]
            cols = (ps + self.lineages[:, None] * c + np.arange(c)).astype(int)
            for k, col in enumerate(cols):
                out[np.ix_(col, col)] = self.d[k]
                out[col, :ps] = self.g[k]
                out[:ps, col] = self.g[k].T
        return out

    def __sub__(self, other: BlockHessian) -> BlockHessian:
        """H - other, on the union of their lineages."""
        lineages, d, g = _combined(self, other, -1.0)
        return BlockHessian(self.a - other.a, lineages, d, g, self.size)

    def mapped(self, blocks: np.ndarray, size: int) -> BlockHessian:
        """The same blocks in another space: lineage j -> ``blocks[j]``, P = ``size`` (the
        shared block kept)."""
        target = np.asarray(blocks, dtype=int)[self.lineages]
        order = np.argsort(target, kind="stable")
        return BlockHessian(self.a, target[order], self.d[order], self.g[order], size)

    def added_to(
        self, gram: tuple[dict[str, np.ndarray], np.ndarray, int]
    ) -> tuple[dict[str, np.ndarray], np.ndarray, int]:
        """``block_gram``'s (blocks, active, C) of some rows plus this H, on the union of
        their active lineages (the form ``factor_blocks`` takes)."""
        blocks, active, c = gram
        rows = BlockHessian(blocks["a"], np.asarray(active, dtype=int), blocks["d"], blocks["g"],
                            self.size)  # fmt: skip
        lineages, d, g = _combined(self, rows, 1.0)  # the few rows' blocks into H's many
        return {"a": blocks["a"] + self.a, "d": d, "g": g}, lineages, c


def _combined(
    x: BlockHessian, y: BlockHessian, sign: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lineages, d, g) of x + sign * y on the union of their lineages (x's blocks copied
    once, y's added where they fall: a card's one block costs O(K C (C + P_s)), not more)."""
    if np.array_equal(x.lineages, y.lineages):
        return x.lineages, x.d + sign * y.d, x.g + sign * y.g
    lineages = np.union1d(x.lineages, y.lineages).astype(int)
    ps, c = x.a.shape[0], x.d.shape[1]
    d = np.zeros((len(lineages), c, c))
    g = np.zeros((len(lineages), c, ps))
    at = np.searchsorted(lineages, x.lineages)
    d[at], g[at] = x.d, x.g
    at = np.searchsorted(lineages, y.lineages)
    d[at] += sign * y.d
    g[at] += sign * y.g
    return lineages, d, g
