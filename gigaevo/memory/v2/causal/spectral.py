"""Block-arrowhead posteriors at many residual scales at once, for one noise level (memory-model.md
"Immediate head").

When every row has the same omega, Lambda(sigma) = diag(1/v) + w H with w = 1/(sigma^2 +
omega^2) and H = X'X fixed. Each active lineage block is diagonalised once per fit,
V_l^1/2 H_l V_l^1/2 = Q_l diag(e_l) Q_l', so D_l(sigma)^-1 = V_l^1/2 Q_l diag(f) Q_l' V_l^1/2
with f = 1/(1 + w e_l). With R = rows q' V_l^1/2 G_l and s = Q_l' V_l^1/2 b_l (G, b the
unweighted cross-products), per sigma:

    S = diag(1/v_s) + w A - w^2 R' diag(f) R,     t = w b_s - w^2 R' (f * s)
    log|Lambda| = sum ln(1 + w e) - sum ln v_lineage + ln|S|
    b' Lambda^-1 b = w^2 sum f s^2 + t' S^-1 t

so the log evidence of K scales costs a few (K, B_act C, P_s) array operations instead of
K x B_act Cholesky factorisations. The factored ``BlockPosterior`` of the mixture nodes is
built in one batch at the end.
"""

from __future__ import annotations

import math

import numpy as np

from gigaevo.memory.v2.causal.arrowhead import BlockPosterior, BlockStatistics

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


class NoisePencil:
    """Conditional posteriors of a block-arrowhead head with a single noise level omega.

    Args:
        stats: sufficient statistics with exactly one omega level and at least one row.
        prior_var: diag(v), shape (P,).
    """

    def __init__(self, stats: BlockStatistics, prior_var: np.ndarray) -> None:
        if len(stats.levels) != 1:
            raise ValueError("the noise pencil needs exactly one omega level")
        grp = stats.groups[0]
        ps, c = stats.p_shared, stats.width
        self.p_shared, self.width, self.n = ps, c, stats.n
        self.level = float(stats.levels[0])
        self.active = stats.active
        self.prior_var = prior_var
        self.cols = (ps + self.active[:, None] * c + np.arange(c)).astype(int)
        self._gram_d, self._gram_g = np.asarray(grp["d"]), np.asarray(grp["g"])
        self._a = np.asarray(grp["a"])
        self._bs = np.asarray(grp["bs"])
        self._yty = float(grp["yty"])
        root = np.sqrt(prior_var[self.cols])  # (A, C)
        e, q = np.linalg.eigh(root[:, :, None] * self._gram_d * root[:, None, :])
        self._e = np.clip(e, 0.0, None).reshape(-1)  # H_l is PSD: clip rounding negatives
        self._vq = root[:, :, None] * q  # V^1/2 Q, (A, C, C)
        self._r = np.einsum("aci,acp->aip", self._vq, self._gram_g).reshape(-1, ps)
        self._rr = (self._r[:, :, None] * self._r[:, None, :]).reshape(len(self._r), ps * ps)
        self._s = np.einsum("aci,ac->ai", self._vq, np.asarray(grp["bl"])).reshape(-1)
        self._prior_prec_s = np.diag(1.0 / prior_var[:ps])
        self._logdet_prior_s = float(np.sum(np.log(prior_var[:ps])))

    def _schur(self, sigmas: np.ndarray) -> tuple[np.ndarray, ...]:
        """(w (K,), f (K, N), chol(S) (K, P_s, P_s), t (K, P_s)) for K residual sds."""
        ps = self.p_shared
        w = 1.0 / (sigmas * sigmas + self.level)
        f = 1.0 / (1.0 + w[:, None] * self._e)
        s = (
            self._prior_prec_s
            + w[:, None, None] * self._a
            - (w * w)[:, None, None] * (f @ self._rr).reshape(-1, ps, ps)
        )
        t = w[:, None] * self._bs - (w * w)[:, None] * ((f * self._s) @ self._r)
        return w, f, np.linalg.cholesky(s), t

    def _log_evidence(
        self, sigmas: np.ndarray, w: np.ndarray, f: np.ndarray, chol_s: np.ndarray, t: np.ndarray
    ) -> np.ndarray:
        z = np.linalg.solve(chol_s, t[:, :, None])[:, :, 0]
        quad = w * w * (f @ (self._s * self._s)) + np.sum(z * z, axis=1)
        logdet = np.sum(np.log1p(w[:, None] * self._e), axis=1)
        logdet += 2.0 * np.sum(np.log(np.diagonal(chol_s, axis1=1, axis2=2)), axis=1)
        noise = self.n * np.log(sigmas * sigmas + self.level)
        return -0.5 * (
            self.n * _LOG_2PI + noise + logdet + self._logdet_prior_s + w * self._yty - quad
        )

    def log_evidence(self, sigmas: np.ndarray) -> np.ndarray:
        """log p(y | sigma) for residual sds of shape (K,), shape (K,)."""
        sigmas = np.asarray(sigmas, dtype=float)
        return self._log_evidence(sigmas, *self._schur(sigmas))

    def _means(self, w: np.ndarray, f: np.ndarray, chol_s: np.ndarray, t: np.ndarray) -> np.ndarray:
        k, ps = len(w), self.p_shared
        m_s = np.linalg.solve(chol_s.transpose(0, 2, 1), np.linalg.solve(chol_s, t[:, :, None]))
        m_s = m_s[:, :, 0]
        proj = f * w[:, None] * (self._s - m_s @ self._r.T)  # (K, N)
        mean = np.zeros((k, len(self.prior_var)))
        mean[:, :ps] = m_s
        if len(self.active):
            blocks = proj.reshape(k, len(self.active), self.width)
            mean[:, self.cols] = np.einsum("aci,kai->kac", self._vq, blocks)
        return mean

    def means(self, sigmas: np.ndarray) -> np.ndarray:
        """Posterior means m(sigma) (centred targets), shape (K, P)."""
        return self._means(*self._schur(np.asarray(sigmas, dtype=float)))

    def posteriors(self, sigmas: np.ndarray) -> tuple[list[BlockPosterior], np.ndarray, np.ndarray]:
        """The factored conditional posteriors at K residual sds, their means and variances.

        Returns:
            (K ``BlockPosterior`` with their inverse factors precomputed, means (K, P),
            marginal variances (K, P)).
        """
        sigmas = np.asarray(sigmas, dtype=float)
        w, f, chol_s, t = self._schur(sigmas)
        log_ev = self._log_evidence(sigmas, w, f, chol_s, t)
        mean = self._means(w, f, chol_s, t)
        inv_s = lower_inverse(chol_s)  # (K, P_s, P_s), S^-1 = inv_s' inv_s
        var = self._variances(w, f, inv_s)
        chol_d, inv_d, lg = self._block_factors(w)
        ps, c = self.p_shared, self.width
        prior_sd = np.sqrt(self.prior_var)
        cols = self.cols if len(self.active) else self.active
        posts = []
        for i in range(len(w)):
            l21 = lg[i].transpose(0, 2, 1)  # (A, P_s, C) = G' L^-T
            flat = lg[i].transpose(2, 0, 1).reshape(ps, -1)  # l21 as (P_s, A C)
            factors = (inv_s[i], inv_d[i].transpose(0, 2, 1), flat, cols)
            node = (mean[i], float(log_ev[i]), chol_d[i], l21, chol_s[i], self.active)
            posts.append(BlockPosterior(*node, prior_sd, c, factors))
        return posts, mean, var

    def _variances(self, w: np.ndarray, f: np.ndarray, inv_s: np.ndarray) -> np.ndarray:
        """diag(Lambda^-1) per sigma, (K, P).

        Shared block: diag(S^-1). Lineage block l: diag(D_l^-1) + diag(Y Y') with
        Y = T L_S^-T and T = D_l^-1 G_l = V^1/2 Q diag(w f) R_l.
        """
        k, ps, c, n_act = len(w), self.p_shared, self.width, len(self.active)
        var = np.tile(self.prior_var, (k, 1))
        var[:, :ps] = np.sum(inv_s * inv_s, axis=1)
        if not n_act:
            return var
        fa = f.reshape(k, n_act, c, 1)
        d_inv = ((self._vq * self._vq) @ fa)[..., 0]  # (K, A, C): diag(D^-1)
        # R L_S^-T for every sigma as one product (column block k of ``stacked`` is
        # inv_s[k]'), kept with the sigmas inside each row so that every later step works
        # on contiguous (A, C, K P_s) blocks: Y_l = V_l^1/2 Q_l (w f R_l L_S^-T)
        stacked = inv_s.transpose(2, 0, 1).reshape(ps, k * ps)
        u = (self._r @ stacked).reshape(-1, k, ps)  # (N, K, P_s)
        u *= (w[:, None] * f).T[:, :, None]
        y = self._vq @ u.reshape(n_act, c, k * ps)  # (A, C, K P_s)
        y *= y
        yy = (y.reshape(-1, ps) @ np.ones(ps)).reshape(n_act, c, k)  # row sums, (A, C, K)
        var[:, self.cols] = d_inv + yy.transpose(2, 0, 1)
        return var

    def _block_factors(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(chol_d, L^-1, L^-1 G) per sigma: (K, A, C, C), (K, A, C, C), (K, A, C, P_s).

        D_l = diag(1/v_l) + w H_l is formed as in ``block_posterior``; G_l = w G~_l, and
        l21 = (L^-1 G)'.
        """
        c = self.width
        d = w[:, None, None, None] * self._gram_d
        idx = np.arange(c)
        d[..., idx, idx] += 1.0 / self.prior_var[self.cols]
        chol_d = batched_cholesky(d)
        inv_d = lower_inverse(chol_d)
        lg = (inv_d @ self._gram_g) * w[:, None, None, None]
        return chol_d, inv_d, lg


class DensePencil:
    """Dense posteriors at many residual scales at once, for one noise level (memory-model.md
    "Immediate head").

    With Lambda(sigma) = diag(1/v) + X'X / s2, s2 = sigma^2 + omega^2, and the whitened
    Gram V^1/2 X'X V^1/2 = Q diag(e) Q' (one eigen-decomposition per fit), per sigma:

        log|Lambda| + sum ln v = sum ln(1 + e / s2)
        m = V^1/2 Q (g / (s2 + e)),  g = Q' V^1/2 X'y;   m'b = sum g^2 / (s2 (s2 + e))
        Lambda^-1 = V^1/2 Q diag(s2 / (s2 + e)) Q' V^1/2

    so the log evidence costs O(P) per scale instead of a P x P Cholesky factorisation.
    The data are centred on the prior mean by the caller, as for ``_conditional``.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, omega2: float, prior_var: np.ndarray) -> None:
        root_v = np.sqrt(prior_var)
        gram = (x * root_v).T @ (x * root_v)
        self._setup(gram, root_v * (x.T @ y), float(y @ y), len(y), omega2, prior_var)

    @classmethod
    def from_gram(
        cls,
        xtx: np.ndarray,
        xty: np.ndarray,
        yty: float,
        n: int,
        omega2: float,
        prior_var: np.ndarray,
    ) -> DensePencil:
        """The pencil of kept cross-products X'X, X'y, y'y of n rows (``suffstats``)."""
        out = cls.__new__(cls)
        root_v = np.sqrt(prior_var)
        out._setup(root_v[:, None] * xtx * root_v[None, :], root_v * xty, yty, n, omega2, prior_var)
        return out

    def _setup(
        self,
        gram: np.ndarray,
        scaled_xty: np.ndarray,
        yty: float,
        n: int,
        omega2: float,
        prior_var: np.ndarray,
    ) -> None:
        """gram = V^1/2 X'X V^1/2 and scaled_xty = V^1/2 X'y."""
        self.n = n
        self.omega2 = float(omega2)
        self.root_v = np.sqrt(prior_var)
        self.e, self.q = np.linalg.eigh(0.5 * (gram + gram.T))
        self.e = np.clip(self.e, 0.0, None)  # a PSD Gram: rounding below zero is noise
        self.g = self.q.T @ scaled_xty
        self.yty = float(yty)

    def log_evidence(self, sigmas: np.ndarray) -> np.ndarray:
        """log p(y | sigma) for each sigma, shape (K,)."""
        s2 = np.asarray(sigmas, dtype=float) ** 2 + self.omega2
        col = s2[:, None]
        logdet = np.sum(np.log1p(self.e[None, :] / col), axis=1)
        quad = self.yty / s2 - np.sum(self.g**2 / (col * (col + self.e[None, :])), axis=1)
        return -0.5 * (self.n * (_LOG_2PI + np.log(s2)) + logdet + quad)

    def means(self, sigmas: np.ndarray) -> np.ndarray:
        """m(sigma) (centred), shape (K, P)."""
        s2 = np.asarray(sigmas, dtype=float) ** 2 + self.omega2
        return (self.g[None, :] / (s2[:, None] + self.e[None, :])) @ self.q.T * self.root_v

    def covariances(self, sigmas: np.ndarray) -> np.ndarray:
        """Lambda(sigma)^-1 for each sigma, shape (K, P, P)."""
        s2 = np.asarray(sigmas, dtype=float) ** 2 + self.omega2
        vq = self.root_v[:, None] * self.q  # V^1/2 Q
        shrink = s2[:, None] / (s2[:, None] + self.e[None, :])  # (K, P)
        cov = np.einsum("ip,kp,jp->kij", vq, shrink, vq, optimize=True)
        return 0.5 * (cov + cov.transpose(0, 2, 1))
