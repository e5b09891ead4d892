"""Block-arrowhead posteriors at many residual scales when rows have several omega levels.

With measurement levels omega_j^2 (the rows of one level sum to cross-products A_j,
D_{l,j}, G_{l,j}, b_j), Lambda(sigma) = diag(1/v) + sum_j w_j X_j'X_j with
w_j = 1/(sigma^2 + omega_j^2). The levels do not share one eigenbasis, so unlike the
one-level ``NoisePencil`` each scale factors its lineage blocks, but all K scales are
handled as one batch: D_l = diag(1/v_l) + sum_j w_j D_{l,j} for every (scale, block),
batched Cholesky factors and inverses, then the Schur complement
S = diag(1/v_s) + sum_j w_j A_j - sum_l G_l' D_l^-1 G_l and

    log|Lambda| = sum ln|D_l| + ln|S|,   b' Lambda^-1 b = sum |L_l^-1 b_l|^2 + t' S^-1 t,
    t = b_s - sum_l G_l' D_l^-1 b_l,

at O(K (entries + B_act) C P_s) array operations, the same as ``block_posterior`` node by
node but without a Python loop per node. Exact for any number of levels; with one level
per row (a standard error per evaluation) the entries grow with the rows.
"""

from __future__ import annotations

import math

import numpy as np

from gigaevo.memory.v2.causal.arrowhead import BlockPosterior
from gigaevo.memory.v2.causal.spectral import batched_cholesky, lower_inverse
from gigaevo.memory.v2.causal.suffstats import FitStatistics

_LOG_2PI = math.log(2.0 * math.pi)


class LevelPencil:
    """Conditional posteriors of a block-arrowhead head whose rows have several omega levels.

    Each level keeps only the blocks its rows touch (entries); a scale's lineage blocks are
    the weighted sum of their entries, formed for K scales at once by one sparse product,
    so the cost follows the (level, block) entries and not levels x blocks.

    Args:
        stats: sufficient statistics grouped by omega^2 level (``suffstats``).
        prior_var: diag(v), shape (P,).
    """

    def __init__(self, stats: FitStatistics, prior_var: np.ndarray) -> None:
        from scipy.sparse import csr_matrix

        ps, c = stats.p_shared, stats.width
        self.p_shared, self.width, self.n = ps, c, stats.n
        self.levels = np.asarray(stats.levels, dtype=float)
        self.active = stats.active
        self.prior_var = prior_var
        self.cols = (ps + self.active[:, None] * c + np.arange(c)).astype(int)
        groups = stats.groups
        self._count = np.array([float(g.count) for g in groups])
        self._yty = np.array([g.yty for g in groups])
        # (L, P_s^2) and (L, P_s); L = 0 for a wide head before its first row
        self._a = np.array([g.a for g in groups], dtype=float).reshape(len(groups), ps * ps)
        self._bs = np.array([g.bs for g in groups], dtype=float).reshape(len(groups), ps)
        # (level, block) entries: which level, which active block, and [D | G | b_l] flat
        self._level = np.concatenate(
            [np.zeros(0, dtype=int)] + [np.full(len(g.at), j) for j, g in enumerate(groups)]
        )
        self._at = np.concatenate([np.zeros(0, dtype=int)] + [g.at for g in groups]).astype(int)
        self._entries = np.concatenate(
            [np.zeros((0, c * c + c * ps + c))]
            + [
                np.concatenate(
                    [g.d.reshape(len(g.at), c * c), g.g.reshape(len(g.at), c * ps), g.bl], axis=1
                )
                for g in groups
            ]
        )
        n_e = len(self._at)
        self._member = csr_matrix(
            (np.ones(n_e), (self._at, np.arange(n_e))), (len(self.active), n_e)
        )
        self._prior_prec_s = np.diag(1.0 / prior_var[:ps])
        self._prior_prec_l = 1.0 / prior_var[self.cols]  # (A, C)
        self._logdet_prior = float(np.sum(np.log(prior_var[:ps])))
        self._logdet_prior += float(np.sum(np.log(prior_var[self.cols])))

    def _factors(self, sigmas: np.ndarray) -> dict[str, np.ndarray]:
        """Per scale: lineage factors, L^-1 G, L^-1 b, chol(S), t and the noise terms."""
        s2 = sigmas * sigmas
        w = 1.0 / (s2[:, None] + self.levels[None, :])  # (K, L)
        k, ps, c, n_act = len(sigmas), self.p_shared, self.width, len(self.active)
        # each scale's blocks: its weighted entries summed into their blocks (one sparse product)
        weights = w[:, self._level]  # (K, entries)
        blocks = np.stack([self._member @ (self._entries * wk[:, None]) for wk in weights])
        d = blocks[..., : c * c].reshape(k, n_act, c, c)
        g = blocks[..., c * c : c * c + c * ps].reshape(k, n_act, c, ps)
        bl = blocks[..., c * c + c * ps :]
        idx = np.arange(c)
        d[..., idx, idx] += self._prior_prec_l
        chol_d = batched_cholesky(d) if n_act else d
        inv_d = lower_inverse(chol_d) if n_act else d
        lg = inv_d @ g  # (K, A, C, P_s)
        lb = (inv_d @ bl[..., None])[..., 0]  # (K, A, C)
        flat = lg.reshape(k, n_act * c, ps)
        s = self._prior_prec_s + (w @ self._a).reshape(k, ps, ps)
        s -= flat.transpose(0, 2, 1) @ flat
        t = w @ self._bs - (flat.transpose(0, 2, 1) @ lb.reshape(k, -1, 1))[..., 0]
        return {
            "w": w,
            "chol_d": chol_d,
            "inv_d": inv_d,
            "lg": lg,
            "lb": lb,
            "chol_s": np.linalg.cholesky(s),
            "t": t,
            "noise": np.log(s2[:, None] + self.levels[None, :]) @ self._count,
            "ywy": w @ self._yty,
        }

    def _log_evidence(self, f: dict[str, np.ndarray]) -> np.ndarray:
        z = np.linalg.solve(f["chol_s"], f["t"][:, :, None])[:, :, 0]
        quad = f["ywy"] - np.sum(f["lb"] ** 2, axis=(1, 2)) - np.sum(z * z, axis=1)
        logdet = 2.0 * np.sum(np.log(np.diagonal(f["chol_s"], axis1=1, axis2=2)), axis=1)
        if len(self.active):
            logdet += 2.0 * np.sum(np.log(np.diagonal(f["chol_d"], axis1=2, axis2=3)), axis=(1, 2))
        return -0.5 * (self.n * _LOG_2PI + f["noise"] + logdet + self._logdet_prior + quad)

    def log_evidence(self, sigmas: np.ndarray) -> np.ndarray:
        """log p(y | sigma) for residual sds of shape (K,), shape (K,)."""
        return self._log_evidence(self._factors(np.asarray(sigmas, dtype=float)))

    def _means(self, f: dict[str, np.ndarray]) -> np.ndarray:
        chol_s = f["chol_s"]
        m_s = np.linalg.solve(chol_s.transpose(0, 2, 1), np.linalg.solve(chol_s, f["t"][..., None]))
        m_s = m_s[..., 0]  # (K, P_s)
        mean = np.zeros((len(m_s), len(self.prior_var)))
        mean[:, : self.p_shared] = m_s
        if len(self.active):  # m_l = L^-T (L^-1 b_l - L^-1 G_l m_s)
            rhs = f["lb"] - np.einsum("kacp,kp->kac", f["lg"], m_s)
            inv_t = f["inv_d"].transpose(0, 1, 3, 2)
            mean[:, self.cols] = (inv_t @ rhs[..., None])[..., 0]
        return mean

    def means(self, sigmas: np.ndarray) -> np.ndarray:
        """Posterior means m(sigma) (centred targets), shape (K, P)."""
        return self._means(self._factors(np.asarray(sigmas, dtype=float)))

    def posteriors(self, sigmas: np.ndarray) -> tuple[list[BlockPosterior], np.ndarray, np.ndarray]:
        """The factored conditional posteriors at K residual sds, their means and variances
        (as ``NoisePencil.posteriors``)."""
        f = self._factors(np.asarray(sigmas, dtype=float))
        log_ev, mean = self._log_evidence(f), self._means(f)
        inv_s = lower_inverse(f["chol_s"])  # S^-1 = inv_s' inv_s
        k, ps, c = len(mean), self.p_shared, self.width
        var = np.tile(self.prior_var, (k, 1))
        var[:, :ps] = np.sum(inv_s * inv_s, axis=1)
        prior_sd = np.sqrt(self.prior_var)
        cols = self.cols if len(self.active) else self.active
        lg, inv_d = f["lg"], f["inv_d"]
        if len(self.active):
            # diag(D^-1) + diag(T S^-1 T') with T = L^-T (L^-1 G)
            inv_t = inv_d.transpose(0, 1, 3, 2)
            t_mat = inv_t @ lg  # (K, A, C, P_s)
            y = np.einsum("kacp,kqp->kacq", t_mat, inv_s)
            var[:, self.cols] = np.sum(inv_d * inv_d, axis=2) + np.sum(y * y, axis=3)
        posts = []
        for i in range(k):
            l21 = lg[i].transpose(0, 2, 1)  # (A, P_s, C) = G' L^-T
            flat = lg[i].transpose(2, 0, 1).reshape(ps, -1)
            factors = (inv_s[i], inv_d[i].transpose(0, 2, 1), flat, cols)
            node = (mean[i], float(log_ev[i]), f["chol_d"][i], l21, f["chol_s"][i], self.active)
            posts.append(BlockPosterior(*node, prior_sd, c, factors))
        return posts, mean, var
