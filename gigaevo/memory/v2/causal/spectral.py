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

import functools
import itertools
import math
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from typing import Any

import numpy as np

from gigaevo.memory.v2.causal.arrowhead import (
    BlockPosterior,
    BlockStatistics,
    batched_cholesky,
    lower_inverse,
)

__all__ = [
    "BlockTerms",
    "DensePencil",
    "NodeVariances",
    "NoisePencil",
    "PencilNodes",
    "PencilPosterior",
    "batched_cholesky",
    "lower_inverse",
]

_LOG_2PI = math.log(2.0 * math.pi)


def forward_substitution(chol: np.ndarray, b: np.ndarray) -> np.ndarray:
    """L^-1 b for a stack of lower-triangular L (K, p, p) and b (K, p), (K, p): forward
    substitution vectorised over the stack (a loop over the p rows). For the Schur factors
    of a pencil's sigma nodes (p = P_s, K in the hundreds) several times cheaper than a
    general batched solve, which factors each L again (LU) in one LAPACK call per matrix;
    backward stable, so it agrees with that solve to rounding (``test_planned_fit``)."""
    return _substitution(chol.transpose(1, 2, 0), b, backward=False)  # [i, j, k] = L_k[i, j]


def back_substitution(chol: np.ndarray, z: np.ndarray) -> np.ndarray:
    """L^-T z for a stack of lower-triangular L (K, p, p) and z (K, p), (K, p): back
    substitution vectorised over the stack (``forward_substitution``)."""
    return _substitution(chol.transpose(2, 1, 0), z, backward=True)  # [i, j, k] = L_k[j, i]


def _substitution(lt: np.ndarray, b: np.ndarray, backward: bool) -> np.ndarray:
    """Solve the triangular systems lt[:, :, k] x_k = b_k (lower, or upper when
    ``backward``) row by row, every k at once."""
    lt = np.ascontiguousarray(lt)
    rhs = np.ascontiguousarray(b.T)
    out = np.empty_like(rhs)
    p = len(rhs)
    if not p:
        return out.T.copy()
    # the first row solved has nothing to subtract (rhs - 0 is rhs); every other row is
    # (rhs_i - sum_j L_ij x_j) / L_ii written into its row of ``out`` in place
    first = p - 1 if backward else 0
    np.divide(rhs[first], lt[first, first], out=out[first])
    for i in range(p - 2, -1, -1) if backward else range(1, p):
        done = slice(i + 1, p) if backward else slice(0, i)
        row = out[i]
        np.subtract(rhs[i], np.einsum("jk,jk->k", lt[i, done], out[done]), out=row)
        row /= lt[i, i]
    return out.T.copy()


@functools.cache
def _upper_indices(p: int) -> tuple[np.ndarray, np.ndarray]:
    """np.triu_indices(p), formed once per p (read only)."""
    rows, cols = np.triu_indices(p)
    rows.flags.writeable = cols.flags.writeable = False
    return rows, cols


@functools.cache
def _full_index(p: int) -> np.ndarray:
    """For each entry (i, j) of a p x p matrix (row-major), the position of (min(i, j),
    max(i, j)) among ``_upper_indices(p)``, formed once per p (read only)."""
    rows, cols = _upper_indices(p)
    at = np.empty((p, p), dtype=np.intp)
    at[rows, cols] = at[cols, rows] = np.arange(len(rows))
    out = at.reshape(-1)
    out.flags.writeable = False
    return out


def _symmetric(upper: np.ndarray, p: int) -> np.ndarray:
    """(K, p, p) symmetric matrices from their entries on and above the diagonal (K, .)
    (in the order of ``_upper_indices(p)``): one gather."""
    return np.take(upper, _full_index(p), axis=1).reshape(len(upper), p, p)


def _reciprocal_one_plus(x: np.ndarray) -> np.ndarray:
    """1 / (1 + x), formed in the memory of ``x`` (which it overwrites): the same numbers
    as the expression, without its two temporaries of x's size."""
    x += 1.0
    return np.divide(1.0, x, out=x)


def _columns(out: np.ndarray, start: int, blocks: int, width: int) -> np.ndarray:
    """The columns [start, start + blocks width) of a (K, .) array as a (K, blocks, width)
    view (for writing into; a reshape that cannot be a view raises instead of copying)."""
    view = out[:, start : start + blocks * width]
    return view.reshape(len(out), blocks, width, copy=False)


def _weighted_sum(weights: np.ndarray, part: np.ndarray) -> np.ndarray:
    """sum_k weights_k part[k], (part.shape[1:]): the product np.tensordot(weights, part,
    axes=1) forms ((1, K) x (K, .)), without its axis bookkeeping."""
    k = len(weights)
    return np.dot(weights.reshape(1, k), part.reshape(k, -1)).reshape(part.shape[1:])


CHUNK_BLOCKS = 32  # lineage blocks per chunk of the block sums, at least (``chunk_size``)


def chunk_size(n_lineages: int) -> int:
    """Lineage positions per chunk of a space of ``n_lineages`` lineages: at least
    ``CHUNK_BLOCKS``, and at most about 32 chunks, so that adding the chunks' sums stays a
    small share of a fit however large the bank."""
    return max(CHUNK_BLOCKS, -(-n_lineages // 32))


@dataclass(frozen=True, eq=False)
class ChunkSums:
    """One chunk's block sums for one batch of sigmas (``NoisePencil._block_sums``), with
    the eigen-terms they were formed from."""

    e: np.ndarray
    r: np.ndarray
    s: np.ndarray
    rr: np.ndarray
    fsr: np.ndarray
    fss: np.ndarray
    logdet: np.ndarray

    def holds(self, e: np.ndarray, r: np.ndarray, s: np.ndarray) -> bool:
        """Whether these sums are those of blocks with the eigen-terms (e, r, s)."""
        return np.array_equal(self.e, e) and np.array_equal(self.r, r) and np.array_equal(self.s, s)


@dataclass(frozen=True, eq=False)
class BlockEigen:
    """The eigen-terms of a pencil's active lineage blocks (per block: e clipped at 0,
    V^1/2 Q, R, the products r r' on and above the diagonal, s) with the inputs they were
    formed from (prior sds, unweighted C x C, C x P_s and C sums), block by block."""

    root: np.ndarray  # (A, C)
    gram_d: np.ndarray  # (A, C, C)
    gram_g: np.ndarray  # (A, C, P_s)
    bl: np.ndarray  # (A, C)
    e: np.ndarray  # (A, C)
    vq: np.ndarray  # (A, C, C)
    r: np.ndarray  # (A, C, P_s)
    rr: np.ndarray  # (A, C, P_s (P_s + 1) / 2)
    s: np.ndarray  # (A, C)
    formed: int = 0  # blocks decomposed for these terms (not taken as kept)

    @classmethod
    def of(
        cls,
        root: np.ndarray,
        gram_d: np.ndarray,
        gram_g: np.ndarray,
        bl: np.ndarray,
        last: BlockEigen | None = None,
    ) -> BlockEigen:
        """The terms of these blocks; a block equal to the bit, at the same position, to one
        of ``last`` (an earlier fit's) takes its terms, which are the numbers this forms for
        it (each block is decomposed and multiplied on its own), so only the blocks that
        moved are formed."""
        todo = np.arange(len(root))
        if last is not None and last.gram_g.shape == gram_g.shape:
            same = (
                np.all(last.gram_d == gram_d, axis=(1, 2))
                & np.all(last.gram_g == gram_g, axis=(1, 2))
                & np.all(last.bl == bl, axis=1)
                & np.all(last.root == root, axis=1)
            )
            todo = np.flatnonzero(~same)
        else:
            last = None
        if last is None or len(todo) == len(root):
            e, vq, r, rr, s = _eigen_terms(root, gram_d, gram_g, bl)
            return cls(root, gram_d, gram_g, bl, e, vq, r, rr, s, formed=len(root))
        # copied in their own memory layout: a product's rounding depends on its operands'
        # (r r' is column-major as ``_eigen_terms`` forms it)
        e, vq, r, rr, s = (
            np.copy(a, order="K") for a in (last.e, last.vq, last.r, last.rr, last.s)
        )
        if len(todo):
            formed = _eigen_terms(root[todo], gram_d[todo], gram_g[todo], bl[todo])
            e[todo], vq[todo], r[todo], rr[todo], s[todo] = formed
        return cls(root, gram_d, gram_g, bl, e, vq, r, rr, s, formed=len(todo))


def _eigen_terms(
    root: np.ndarray, gram_d: np.ndarray, gram_g: np.ndarray, bl: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(e, V^1/2 Q, R, r r' on and above the diagonal, s) of the blocks, (A, ...) each."""
    a, c, ps = gram_g.shape
    e, q = np.linalg.eigh(root[:, :, None] * gram_d * root[:, None, :])
    e = np.clip(e, 0.0, None)  # H_l is PSD: clip rounding negatives
    vq = root[:, :, None] * q  # V^1/2 Q, (A, C, C)
    r = np.einsum("aci,acp->aip", vq, gram_g).reshape(-1, ps)
    # the products r r' of each row on and above the diagonal only (S is symmetric): the
    # (K, N) x (N, .) product of every evaluation reads half the memory
    upper = _upper_indices(ps)
    rr = r[:, upper[0]] * r[:, upper[1]]
    s = np.einsum("aci,ac->ai", vq, bl)
    return e, vq, r.reshape(a, c, ps), rr.reshape(a, c, len(upper[0])), s


class BlockTerms:
    """A Gaussian head's per-chunk block sums kept from one fit to the next (memory-model.md
    "Incremental fits").

    A planned fit evaluates the same sigmas fit after fit, and a new row moves one lineage
    block: the chunks whose blocks did not move keep their sums. Kept per (omega^2 level,
    batch of sigmas), for the last ``keep`` batches (a planned fit's first evaluation; the
    bisection of its pieces in disagreement and an adaptive integration keep none,
    ``blr``); a chunk is reused only when its eigen-terms are equal to the bit, so a fit
    with these terms is the same numbers as a fit without them.
    """

    # the last pencil's blocks (``BlockEigen``), blocks decomposed for the pencils made with
    # these terms (the others' eigen-terms taken as kept), and their blocks (class defaults:
    # a BlockTerms pickled before it kept them reads these)
    eigen: BlockEigen | None = None
    blocks_formed = 0
    blocks = 0
    # the memory of the two temporary (K, A C) arrays of the means (``NoisePencil._means``),
    # kept for the next fit: at 1,000 cards a fresh one is a few MB whose page faults cost
    # about as much as the arithmetic on it (not pickled: ``__getstate__``)
    _scratch: tuple[np.ndarray, np.ndarray] | None = None

    def __init__(self, keep: int = 1) -> None:
        self.keep = keep
        self._batches: dict[bytes, dict[int, ChunkSums]] = {}
        self.formed = 0  # chunk sums formed
        self.reused = 0  # chunk sums taken as kept

    def chunks(self, level: float, sigmas: np.ndarray) -> dict[int, ChunkSums]:
        """The kept chunk sums of this level and batch of sigmas (to read and to fill)."""
        key = np.float64(level).tobytes() + np.asarray(sigmas, dtype=float).tobytes()
        out = self._batches.pop(key, None)
        if out is None:
            out = {}
            while len(self._batches) >= self.keep:
                del self._batches[next(iter(self._batches))]
        self._batches[key] = out  # the latest batch last
        return out

    def scratch(self, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """Two C-contiguous float arrays of ``shape`` in memory kept from the last call
        (their contents undefined): for temporaries that do not outlive the caller."""
        size = shape[0] * shape[1]
        if self._scratch is None or len(self._scratch[0]) < size:
            self._scratch = (np.empty(size), np.empty(size))
        return self._scratch[0][:size].reshape(shape), self._scratch[1][:size].reshape(shape)

    def __getstate__(self) -> dict[str, Any]:
        """The kept state without the scratch memory."""
        state = dict(vars(self))
        state.pop("_scratch", None)
        return state


class NoisePencil:
    """Conditional posteriors of a block-arrowhead head with a single noise level omega.

    Args:
        stats: sufficient statistics with exactly one omega level and at least one row.
        prior_var: diag(v), shape (P,).
    """

    def __init__(
        self, stats: BlockStatistics, prior_var: np.ndarray, terms: BlockTerms | None = None
    ) -> None:
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
        # each block's eigen-terms, those of the blocks that did not move since the
        # caller's last fit taken as kept (``BlockEigen``: the same numbers)
        eigen = BlockEigen.of(
            root,
            self._gram_d,
            self._gram_g,
            np.asarray(grp["bl"]),
            terms.eigen if terms is not None else None,
        )
        if terms is not None:
            terms.eigen = eigen
            terms.blocks_formed += eigen.formed
            terms.blocks += len(root)
        self._upper = _upper_indices(ps)
        self._e, self._vq = eigen.e.reshape(-1), eigen.vq
        self._r, self._s = eigen.r.reshape(-1, ps), eigen.s.reshape(-1)
        self._rr = eigen.rr.reshape(len(self._r), len(self._upper[0]))
        self._prior_prec_s = np.diag(1.0 / prior_var[:ps])
        self._logdet_prior_s = float(np.sum(np.log(prior_var[:ps])))
        # chol(S), sum f s^2, sum ln(1 + w e), z of the sigmas evaluated so far, batch by
        # batch, and sigma -> its row in them (the batches concatenated): see ``_schur``
        self._kept: dict[float, int] = {}
        self._batches: list[tuple[np.ndarray, ...]] = []
        self._flat: tuple[np.ndarray, ...] | None = None
        self.terms = terms
        # the owner of the means' scratch memory (kept when ``terms`` is dropped for the
        # evaluations of an adaptive integration or a bisection: ``blr``)
        self._memory = terms
        # the chunks of the active blocks (lineage position // ``chunk_size``): each one's
        # rows [lo, hi) of the (A C)-row arrays, in lineage order
        size = chunk_size(stats.n_lineages)
        chunk = self.active // size
        cut = np.flatnonzero(np.diff(chunk)) + 1
        starts = np.concatenate(([0], cut)).astype(int)
        self._chunk_ids: list[int] = chunk[starts].tolist() if len(chunk) else []
        edges = (np.concatenate((starts, [len(chunk)])) * c).tolist() if len(chunk) else [0]
        self._chunk_rows = list(pairwise(edges))

    def _f(self, w: np.ndarray) -> np.ndarray:
        """f = 1 / (1 + w e) per sigma and lineage eigen-direction, (K, A C)."""
        return _reciprocal_one_plus(np.multiply(w[:, None], self._e))

    def _block_sums(self, sigmas: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, ...]:
        """The sums over the active blocks of one batch of sigmas: (sum f r r' on and above
        the diagonal (K, P_s (P_s + 1) / 2), sum f s r (K, P_s), sum f s^2 (K,),
        sum ln(1 + w e) (K,)).

        Each chunk of blocks (``chunk_size``) is summed on its own and the chunks' sums are
        added in lineage order, so the totals are a function of the blocks alone. A chunk
        whose eigen-terms (e, R, s) and sigmas equal those kept in ``terms`` from an earlier
        fit takes its kept sums (the same numbers the same code gave then): a new row
        changes one block, and only its chunk is formed again (memory-model.md
        "Incremental fits").
        """
        k, ps = len(w), self.p_shared
        kept = self.terms.chunks(self.level, sigmas) if self.terms is not None else None
        sums: list[ChunkSums] = []
        for chunk, (lo, hi) in zip(self._chunk_ids, self._chunk_rows, strict=True):
            e, r, s_ = self._e[lo:hi], self._r[lo:hi], self._s[lo:hi]
            part = kept.get(chunk) if kept is not None else None
            if part is None or not part.holds(e, r, s_):
                we = np.multiply(w[:, None], e)
                logdet_part = np.sum(np.log1p(we), axis=1)
                f = _reciprocal_one_plus(we)  # w e formed once, f in its memory
                part = ChunkSums(
                    e, r, s_, f @ self._rr[lo:hi], (f * s_) @ r, f @ (s_ * s_), logdet_part
                )
                if kept is not None:
                    kept[chunk] = part
                    self.terms.formed += 1  # type: ignore[union-attr]
            elif self.terms is not None:
                self.terms.reused += 1
            sums.append(part)
        if len(sums) == 1:  # one chunk: its sums are the totals (read only from here on)
            return sums[0].rr, sums[0].fsr, sums[0].fss, sums[0].logdet
        rr, fsr = np.zeros((k, len(self._upper[0]))), np.zeros((k, ps))
        fss, logdet = np.zeros(k), np.zeros(k)
        for part in sums:  # added in lineage order
            rr += part.rr
            fsr += part.fsr
            fss += part.fss
            logdet += part.logdet
        return rr, fsr, fss, logdet

    def _schur(self, sigmas: np.ndarray) -> tuple[np.ndarray, ...]:
        """(w (K,), chol(S) (K, P_s, P_s), sum f s^2 (K,), sum ln(1 + w e) (K,),
        z = chol(S)^-1 t (K, P_s)) for K residual sds (t is read only through z).

        These are kept per sigma (``_kept``, P_s^2 + P_s + 2 numbers each, stored a batch
        at a time): the mixture's nodes are points the quadrature already evaluated, so
        building their posteriors forms neither the block sums nor z again (z: the log
        evidence's solve, also the first of the two solves of the means).
        """
        ps = self.p_shared
        w = 1.0 / (sigmas * sigmas + self.level)
        keys = sigmas.tolist()
        kept = self._kept
        if not kept:  # nothing kept: the batch as it is formed
            at = np.full(len(keys), -1)
        else:
            at = np.fromiter(map(kept.get, keys, itertools.repeat(-1)), int, len(keys))
        miss = np.flatnonzero(at < 0)
        if len(miss) == len(w):
            out = self._form(sigmas, w)
            self._keep(keys, out)
            return (w, *out)
        if self._flat is None:  # the kept batches as one (a single batch as it is)
            batches = self._batches
            self._flat = (
                batches[0]
                if len(batches) == 1
                else tuple(np.concatenate(a) for a in zip(*batches, strict=True))
            )
        flat_chol, flat_fss, flat_logdet, flat_z = self._flat
        if not len(miss):  # every sigma kept (a mixture's nodes): gathered
            return w, flat_chol[at], flat_fss[at], flat_logdet[at], flat_z[at]
        chol_s, z = np.empty((len(w), ps, ps)), np.empty((len(w), ps))
        fss, logdet = np.empty(len(w)), np.empty(len(w))
        hit = np.flatnonzero(at >= 0)
        rows = at[hit]
        chol_s[hit], z[hit] = flat_chol[rows], flat_z[rows]
        fss[hit], logdet[hit] = flat_fss[rows], flat_logdet[rows]
        formed = self._form(sigmas[miss], w[miss])
        chol_s[miss], fss[miss], logdet[miss], z[miss] = formed
        self._keep([keys[i] for i in miss.tolist()], formed)
        return w, chol_s, fss, logdet, z

    def _form(self, sigmas: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, ...]:
        """(chol(S), sum f s^2, sum ln(1 + w e), z = chol(S)^-1 t) of sigmas none of which
        is kept (t itself is read only through z)."""
        ps = self.p_shared
        rr, fsr, fss, logdet = self._block_sums(sigmas, w)
        # diag(1/v_s) + w A - w^2 sum f R R' (each product formed once, in place)
        s = w[:, None, None] * self._a
        s += self._prior_prec_s
        fr = _symmetric(rr, ps)
        fr *= (w * w)[:, None, None]
        s -= fr
        chol_s = np.linalg.cholesky(s)
        t = w[:, None] * self._bs - (w * w)[:, None] * fsr
        return chol_s, fss, logdet, forward_substitution(chol_s, t)

    def _keep(self, keys: list[float], formed: tuple[np.ndarray, ...]) -> None:
        """Keep one formed batch (``_form``) under its sigmas ``keys``."""
        start = sum(len(b[2]) for b in self._batches)
        self._batches.append(formed)
        self._flat = None
        self._kept.update(zip(keys, range(start, start + len(keys)), strict=True))

    def _log_evidence(
        self,
        sigmas: np.ndarray,
        w: np.ndarray,
        chol_s: np.ndarray,
        fss: np.ndarray,
        logdet_l: np.ndarray,
        z: np.ndarray,
    ) -> np.ndarray:
        quad = w * w * fss + np.sum(z * z, axis=1)
        logdet = logdet_l + 2.0 * np.sum(np.log(np.diagonal(chol_s, axis1=1, axis2=2)), axis=1)
        noise = self.n * np.log(sigmas * sigmas + self.level)
        return -0.5 * (
            self.n * _LOG_2PI + noise + logdet + self._logdet_prior_s + w * self._yty - quad
        )

    def log_evidence(self, sigmas: np.ndarray) -> np.ndarray:
        """log p(y | sigma) for residual sds of shape (K,), shape (K,)."""
        sigmas = np.asarray(sigmas, dtype=float)
        w, chol_s, fss, logdet, z = self._schur(sigmas)
        return self._log_evidence(sigmas, w, chol_s, fss, logdet, z)

    def _means(
        self,
        w: np.ndarray,
        f: np.ndarray,
        chol_s: np.ndarray,
        z: np.ndarray,
        moving_only: bool = False,
    ) -> np.ndarray:
        """Posterior means (K, P), or (K, len(``moving``)) on the moving columns only; z =
        chol(S)^-1 t (kept, ``_schur``), so m_s = chol(S)^-T z is the one solve left."""
        k, ps = len(w), self.p_shared
        m_s = back_substitution(chol_s, z)
        n_act, c = len(self.active), self.width
        # (f w) (s - m_s R'), (K, N), in the memory of m_s R', f w in a scratch array that
        # then takes the blocks' products: the same products as the expressions', in two
        # (K, N) arrays instead of six. Both in the memory kept on ``terms`` when there is
        # one (a fresh large array costs its page faults at every fit): the same numbers,
        # written into C-contiguous arrays as into fresh ones
        shape = (k, n_act * c)
        kept = self._memory.scratch(shape) if self._memory is not None else (None, None)
        proj = np.matmul(m_s, self._r.T, out=kept[0])
        np.subtract(self._s, proj, out=proj)
        scratch = np.multiply(f, w[:, None], out=kept[1])
        proj *= scratch
        # V^1/2 Q (.) per block, as one (K, C) x (C, C) product per block (not K A tiny ones)
        blocks = proj.reshape(k, n_act, c).transpose(1, 0, 2)  # (A, K, C)
        vq_t = self._vq.transpose(0, 2, 1)
        if moving_only:  # [m_s, the active blocks' columns]
            out = np.empty((k, ps + n_act * c))
            out[:, :ps] = m_s
            # the products written straight into their columns: each block's (K, C) result
            # is a row-major matrix of row stride len(moving), which the product writes as
            # it writes a contiguous one (the same numbers, without a strided copy)
            np.matmul(blocks, vq_t, out=_columns(out, ps, n_act, c).transpose(1, 0, 2))
            return out
        part = np.matmul(blocks, vq_t, out=scratch.reshape(n_act, k, c))
        part = part.transpose(1, 0, 2)  # (K, A, C)
        mean = np.zeros((k, len(self.prior_var)))
        mean[:, :ps] = m_s
        if n_act:
            mean[:, ps:].reshape(k, -1, c)[:, self.active] = part  # the active blocks' columns
        return mean

    def moving_means(self, sigmas: np.ndarray) -> np.ndarray:
        """``means`` on the ``moving`` columns only, (K, len(moving)): what a mixture that
        keeps no per-node means (the coarse rule of the health check) needs."""
        w, chol_s, _, _, z = self._schur(np.asarray(sigmas, dtype=float))
        return self._means(w, self._f(w), chol_s, z, moving_only=True)

    @cached_property
    def moving(self) -> np.ndarray:
        """The columns where the nodes' means can differ from the prior mean: the shared
        block and the active lineage blocks (every other column is 0 at every node)."""
        return np.concatenate((np.arange(self.p_shared), self.cols.reshape(-1))).astype(int)

    def means(self, sigmas: np.ndarray) -> np.ndarray:
        """Posterior means m(sigma) (centred targets), shape (K, P)."""
        w, chol_s, _, _, z = self._schur(np.asarray(sigmas, dtype=float))
        return self._means(w, self._f(w), chol_s, z)

    def posteriors(self, sigmas: np.ndarray) -> tuple[list[BlockPosterior], np.ndarray, np.ndarray]:
        """The factored conditional posteriors at K residual sds, their means and variances.

        Returns:
            (K ``PencilPosterior`` sharing one ``PencilNodes`` (their lineage-block factors
            formed when first read), means (K, P), marginal variances (K, P)).
        """
        posts, mean, lazy = self.lazy_posteriors(sigmas)
        return posts, mean, lazy.per_node()

    def lazy_posteriors(
        self, sigmas: np.ndarray
    ) -> tuple[list[BlockPosterior], np.ndarray, NodeVariances]:
        """``posteriors`` with the marginal variances left to a ``NodeVariances``: a mixture
        needs only their weighted sum, and its health check often only a bound of it."""
        sigmas = np.asarray(sigmas, dtype=float)
        w, chol_s, fss, logdet, z = self._schur(sigmas)
        log_ev = self._log_evidence(sigmas, w, chol_s, fss, logdet, z)
        f = self._f(w)
        mean = self._means(w, f, chol_s, z)
        inv_s = lower_inverse(chol_s)  # (K, P_s, P_s), S^-1 = inv_s' inv_s
        nodes = PencilNodes(self, w, f, inv_s)
        posts = PencilPosterior.of_nodes(mean, log_ev, chol_s, self.active, self.prior_var, nodes)
        return posts, mean, NodeVariances(self, w, f, inv_s)

    def node_pair(
        self, sigmas: np.ndarray, coarse: np.ndarray
    ) -> tuple[list[BlockPosterior], np.ndarray, NodeVariances, np.ndarray]:
        """``lazy_posteriors(sigmas)`` and ``moving_means(coarse)`` in one pass: the two
        sets of nodes (a mixture's fine and coarse rules, every sigma kept) are gathered,
        and their means formed, as one batch. The same numbers to rounding (a batched
        product's rounding depends on its row count), the log evidences, factors and
        variances of ``sigmas`` to the bit."""
        posts, mean, lazy, moving = self.node_pair_moving(sigmas, coarse)
        return posts, mean, lazy, moving[len(sigmas) :]

    def node_pair_moving(
        self, sigmas: np.ndarray, coarse: np.ndarray
    ) -> tuple[list[BlockPosterior], np.ndarray, NodeVariances, np.ndarray]:
        """``node_pair`` with the means on the ``moving`` columns of both sets of nodes,
        (len(sigmas) + len(coarse), len(moving)): the fine nodes' rows are the columns of
        their full means that a mixture weighs (``blr._moments``), without their gather."""
        k = len(sigmas)
        both = np.concatenate((np.asarray(sigmas, dtype=float), np.asarray(coarse, dtype=float)))
        w_all, chol_all, fss, logdet, z_all = self._schur(both)
        f_all = self._f(w_all)
        moving = self._means(w_all, f_all, chol_all, z_all, moving_only=True)
        w, f, chol_s = w_all[:k], f_all[:k], chol_all[:k]
        log_ev = self._log_evidence(both[:k], w, chol_s, fss[:k], logdet[:k], z_all[:k])
        mean = np.zeros((k, len(self.prior_var)))
        mean[:, self.moving] = moving[:k]
        inv_s = lower_inverse(chol_s)  # (K, P_s, P_s), S^-1 = inv_s' inv_s
        nodes = PencilNodes(self, w, f, inv_s)
        posts = PencilPosterior.of_nodes(mean, log_ev, chol_s, self.active, self.prior_var, nodes)
        return posts, mean, NodeVariances(self, w, f, inv_s), moving

    def _variances(self, w: np.ndarray, f: np.ndarray, inv_s: np.ndarray) -> np.ndarray:
        """diag(Lambda^-1) per sigma, (K, P) (``NodeVariances.per_node``)."""
        return NodeVariances(self, w, f, inv_s).per_node()


class NodeVariances:
    """The marginal variances diag(Lambda(sigma_k)^-1) of a pencil's K nodes, formed only as
    far as asked (memory-model.md "Immediate head", mixture moments).

    The mixture needs sum_k w_k diag(Lambda_k^-1) (``weighted``); its health check needs the
    largest |coarse - fine mean| / sd, for which a lower bound of the variance settles most
    columns: on a lineage block diag(Lambda_k^-1) = diag(D_l^-1) + diag(Y Y') >= diag(D_l^-1)
    (``weighted_lower``, exact on the shared and the prior blocks), and only the blocks whose
    bound could hold the largest ratio are formed exactly (``weighted_blocks``). Only the
    per-block arrays this needs are kept, not the pencil.
    """

    def __init__(self, pencil: NoisePencil, w: np.ndarray, f: np.ndarray, inv_s: np.ndarray):
        self.p_shared, self.width, self.active = pencil.p_shared, pencil.width, pencil.active
        self.cols, self.prior_var = pencil.cols, pencil.prior_var
        self._r, self._vq = pencil._r, pencil._vq
        self._w, self._f, self._inv_s = w, f, inv_s
        # the moving columns (``NoisePencil.moving``) and diag(H) on them
        self.moving = pencil.moving
        self._gram_diag = np.concatenate(
            (np.diagonal(pencil._a), np.diagonal(pencil._gram_d, axis1=1, axis2=2).reshape(-1))
        )

    def weighted_floor(self, weights: np.ndarray) -> np.ndarray:
        """A lower bound of ``weighted`` on the ``moving`` columns: per node
        diag(Lambda_k^-1)_i >= 1 / (Lambda_k)_ii (Lambda_k positive definite), with
        diag(Lambda_k) = 1/v + w_k diag(H): O(K len(moving)), no factor of Lambda_k."""
        precision = np.multiply(self._w[:, None], self._gram_diag)
        precision += 1.0 / self.prior_var[self.moving]
        return weights @ np.divide(1.0, precision, out=precision)  # in place: (K, M) once

    def per_node(self) -> np.ndarray:
        """diag(Lambda_k^-1) per node, (K, P).

        Shared block: diag(S^-1). Lineage block l: diag(D_l^-1) + diag(Y Y') with
        Y = T L_S^-T and T = D_l^-1 G_l = V^1/2 Q diag(w f) R_l.
        """
        k, ps, n_act = len(self._w), self.p_shared, len(self.active)
        var = np.tile(self.prior_var, (k, 1))
        var[:, :ps] = np.sum(self._inv_s * self._inv_s, axis=1)
        if not n_act:
            return var
        every = np.arange(n_act)
        var[:, self.cols] = self._block_diag_inverse(every) + self._block_yy(every)
        return var

    def _block_diag_inverse(self, pos: np.ndarray) -> np.ndarray:
        """diag(D_l^-1) of the active blocks at positions ``pos``, (K, len(pos), C)."""
        k, c = len(self._w), self.width
        fa = self._f.reshape(k, len(self.active), c)[:, pos].transpose(1, 0, 2)  # (len, K, C)
        vq2 = self._vq[pos] * self._vq[pos]
        return (fa @ vq2.transpose(0, 2, 1)).transpose(1, 0, 2)  # one product per block

    def _block_yy(self, pos: np.ndarray) -> np.ndarray:
        """diag(Y_l Y_l') of the active blocks at positions ``pos``, (K, len(pos), C)."""
        w, f, inv_s = self._w, self._f, self._inv_s
        k, ps, c, n_act = len(w), self.p_shared, self.width, len(self.active)
        if len(pos) == n_act:
            r, vq, g = self._r, self._vq, (w[:, None] * f).T
        else:
            r = self._r.reshape(n_act, c, ps)[pos].reshape(-1, ps)
            vq = self._vq[pos]
            g = (w[:, None] * f.reshape(k, n_act, c)[:, pos].reshape(k, -1)).T
        # R L_S^-T for every sigma as one product (column block k of ``stacked`` is
        # inv_s[k]'), kept with the sigmas inside each row so that every later step works
        # on contiguous (A, C, K P_s) blocks: Y_l = V_l^1/2 Q_l (w f R_l L_S^-T)
        stacked = inv_s.transpose(2, 0, 1).reshape(ps, k * ps)
        u = (r @ stacked).reshape(-1, k, ps)  # (N, K, P_s)
        u *= g[:, :, None]
        y = vq @ u.reshape(len(pos), c, k * ps)  # (A, C, K P_s)
        y *= y
        yy = (y.reshape(-1, ps) @ np.ones(ps)).reshape(len(pos), c, k)  # row sums, (A, C, K)
        return yy.transpose(2, 0, 1)

    def weighted(self, weights: np.ndarray) -> np.ndarray:
        """sum_k weights_k diag(Lambda_k^-1), (P,): the shared and active blocks weighed
        node by node; a prior block's variance is its prior variance at every node."""
        ps = self.p_shared
        out = np.array(self.prior_var, dtype=float)
        out[:ps] = weights @ np.sum(self._inv_s * self._inv_s, axis=1)
        if len(self.active):
            every = np.arange(len(self.active))
            part = self._block_diag_inverse(every) + self._block_yy(every)
            out[self.cols] = _weighted_sum(weights, part)
        return out

    def weighted_lower(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(a lower bound of ``weighted`` (P,), where it is exact (P,) bool)."""
        ps = self.p_shared
        out = np.array(self.prior_var, dtype=float)
        exact = np.ones(len(out), dtype=bool)
        out[:ps] = weights @ np.sum(self._inv_s * self._inv_s, axis=1)
        if len(self.active):
            d_inv = self._block_diag_inverse(np.arange(len(self.active)))  # (K, A, C)
            out[self.cols] = _weighted_sum(weights, d_inv)
            exact[self.cols] = False
        return out, exact

    def block_of_columns(self, cols: np.ndarray) -> np.ndarray:
        """Active-block positions of lineage columns ``cols`` (columns of ``pencil.cols``)."""
        return np.searchsorted(self.active, (cols - self.p_shared) // self.width)

    def block_columns(self, pos: np.ndarray) -> np.ndarray:
        """The columns of the active blocks at positions ``pos``, (len(pos), C)."""
        return self.cols[pos]

    def weighted_blocks(self, weights: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """sum_k weights_k diag(Lambda_k^-1) on the active blocks at ``pos``, (len(pos), C)."""
        part = self._block_diag_inverse(pos) + self._block_yy(pos)
        return _weighted_sum(weights, part)


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
        # cov_kij = sum_p vq_ip vq_jp shrink_kp. With more nodes than columns (the usual
        # fit) contracted as einsum("ip,kp,jp->kij", optimize=True) contracts it then (the
        # products vq_ip vq_jp, then one (P^2, P) x (P, K) product), without its path
        # search on every call: the same numbers
        p, k = vq.shape[0], len(s2)
        if k <= p:  # einsum contracts vq with shrink first here
            cov = np.einsum("ip,kp,jp->kij", vq, shrink, vq, optimize=True)
            return 0.5 * (cov + cov.transpose(0, 2, 1))
        pairs = vq[None, :, :] * vq[:, None, :]  # [i, j, p] = vq_jp vq_ip
        # the (P^2, K) product written into an array of its own in the memory layout of its
        # (K, P, P) transpose, the layout the symmetric part below takes from it
        cov = np.empty_like(np.empty((p, p, k)).transpose(2, 0, 1), order="K")
        both = cov.transpose(1, 2, 0)  # (P, P, K), C-contiguous
        np.matmul(pairs.reshape(p * p, -1), shrink.T, out=both.reshape(p * p, k))
        # rows (i, j) and (j, i) of ``pairs`` are the same numbers (a product commutes), and
        # the product forms them alike: cov is symmetric to the bit, and then its symmetric
        # part 0.5 (cov + cov') is cov itself, in the same memory layout. Checked (one
        # comparison, half the cost of the sum), else formed as before
        if np.array_equal(both, both.transpose(1, 0, 2)):
            return cov
        return 0.5 * (cov + cov.transpose(0, 2, 1))


# numpy sums fewer than this many terms of a contiguous axis to 0.0 left to right (its
# pairwise sum unrolls from 8): ``PencilNodes.part_terms`` adds such sums column by column
_SEQUENTIAL_SUM = 8


class PencilNodes:
    """The lineage-block factors of a pencil's K mixture nodes, computed when first asked.

    A projection needs D_l^-1 and T_l = D_l^-1 G_l of active blocks and nodes
    (``inverse_blocks``, ``block_at``), which the eigenbasis of the pencil gives at once:
    D_l^-1 = V^1/2 Q diag(f) Q' V^1/2 and T_l = V^1/2 Q diag(w f) R_l (same matrices as
    through the Cholesky factors, to rounding). A decision's draws need of them only, per
    card alone in its block, u' D_l^-1 u and u T_l (``part_terms``), formed from the
    eigenbasis without either matrix. The Cholesky factors L_l, L_l^-1 and l21 (``factors``)
    are formed only when a consumer asks a node for them (dense covariances, blocks shared
    by several cards).
    Only the per-block arrays the two need are kept, not the pencil.
    """

    def __init__(self, pencil: NoisePencil, w: np.ndarray, f: np.ndarray, inv_s: np.ndarray):
        self.w, self.f, self.inv_s = w, f, inv_s
        self.p_shared, self.width, self.active = pencil.p_shared, pencil.width, pencil.active
        # the nodes' own fields as arrays, set by ``PencilPosterior.of_nodes``
        self.node_fields: _NodeFields | None = None
        self.cols = pencil.cols if len(pencil.active) else pencil.active
        self._gram_d, self._gram_g = pencil._gram_d, pencil._gram_g
        self._block_prior = pencil.prior_var[pencil.cols] if len(pencil.active) else None
        n_act, c, ps = len(pencil.active), pencil.width, pencil.p_shared
        self._vq = pencil._vq
        self._r = pencil._r.reshape(n_act, c, ps)

    @cached_property
    def factors(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(chol_d, L^-1, L^-1 G) per node: (K, A, C, C), (K, A, C, C), (K, A, C, P_s)."""
        c = self.width
        d = self.w[:, None, None, None] * self._gram_d
        idx = np.arange(c)
        if self._block_prior is not None:
            d[..., idx, idx] += 1.0 / self._block_prior
        chol_d = batched_cholesky(d)
        inv_d = lower_inverse(chol_d)
        lg = (inv_d @ self._gram_g) * self.w[:, None, None, None]
        return chol_d, inv_d, lg

    @cached_property
    def inverse_blocks(self) -> tuple[np.ndarray, np.ndarray]:
        """(D_l^-1 (K, A, C, C), T_l = D_l^-1 G_l (K, A, C, P_s)) per node and active block."""
        k, n_act, c = len(self.w), len(self.active), self.width
        fa = self.f.reshape(k, n_act, 1, c)
        vqf = self._vq * fa  # (K, A, C, C): V^1/2 Q diag(f)
        d_inv = vqf @ self._vq.transpose(0, 2, 1)
        t = (vqf @ self._r) * self.w[:, None, None, None]
        return d_inv, t

    def block_at(self, at: int) -> tuple[np.ndarray, np.ndarray]:
        """(D_l^-1 (K, C, C), T_l (K, C, P_s)) of the active block at position ``at``, every
        node (a retirement or summary projection of one card): that block alone, O(K C^3)."""
        full = self.__dict__.get("inverse_blocks")
        if full is not None:
            return full[0][:, at], full[1][:, at]
        k, c = len(self.w), self.width
        vqf = self._vq[at] * self.f.reshape(k, len(self.active), c)[:, at, None, :]  # (K, C, C)
        return vqf @ self._vq[at].T, (vqf @ self._r[at]) * self.w[:, None, None]

    def part_terms(
        self, nodes: np.ndarray, u: np.ndarray, pos: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """For one block part u (C,) on the active blocks at positions ``pos``, per node of
        ``nodes``: (u' D_l^-1 u (n, len(pos)), u T_l (n, len(pos), P_s)), without D_l^-1 or
        T_l. With g_l = (V_l^1/2 Q_l)' u (the same for every node): u' D_l^-1 u =
        sum_i f_i g_i^2 and u T_l = w (f * g_l) R_l, O(n len(pos) C P_s) for every node at
        once instead of the blocks' C x C and C x P_s matrices per node. ``nodes`` and
        ``pos`` are in [0, K) and [0, A) (they index rows of f as one (K A, C) array, so a
        negative one does not wrap within its own axis)."""
        c, k, n_act = self.width, len(self.w), len(self.active)
        g = u @ self._vq[pos]  # (len(pos), C)
        # f of each (node, card): its C values are one row of f as a (K A, C) array, taken
        # into a C-order (n, len(pos), C) array by one ``take`` (the values the two-index
        # gather [np.ix_(nodes, pos)] gives, without its cost per C-value piece)
        rows = (nodes * n_act)[:, None] + pos
        fg = np.take(self.f.reshape(k * n_act, c), rows, axis=0)
        fg *= g  # (n, len(pos), C)
        if c < _SEQUENTIAL_SUM:
            # np.sum(fg * g, axis=2) adds fewer than 8 terms to 0.0 left to right: the same
            # sums column by column (0.0 + x is x + 0.0, signed zeros included), without a
            # reduction's cost per (node, card)
            terms = fg * g
            quad = np.add(terms[..., 0], 0.0)
            for i in range(1, c):
                quad += terms[..., i]
        else:
            quad = np.sum(fg * g, axis=2)
        # one product per card (len(pos), n, P_s), scaled while contiguous (each row by the
        # nodes' w, each repeated P_s times: the products w * (u T_l) of the node-major
        # view), then viewed node-major
        shift = np.matmul(fg.transpose(1, 0, 2), self._r[pos])
        shift.reshape(len(pos), len(nodes) * shift.shape[2])[...] *= np.repeat(
            self.w[nodes], shift.shape[2]
        )
        return quad, shift.transpose(1, 0, 2)


@dataclass(frozen=True, eq=False)
class _NodeFields:
    """The fields of a pencil's K node posteriors, as arrays (``PencilPosterior.of_nodes``):
    means (K, P), log evidences (K,), Schur factors (K, P_s, P_s), and the shared active
    blocks and prior sds."""

    mean: np.ndarray
    log_evidence: np.ndarray
    chol_s: np.ndarray
    active: np.ndarray
    prior_sd: np.ndarray


_LAZY_FIELDS = frozenset(("mean", "log_evidence", "chol_s", "active", "prior_sd", "width"))


class PencilPosterior(BlockPosterior):
    """A ``BlockPosterior`` of a pencil's node whose lineage-block factors (``chol_d``,
    ``l21``, the inverse factors) come from its ``PencilNodes`` when first read."""

    nodes: PencilNodes
    index: int

    def __init__(
        self,
        mean: np.ndarray,
        log_evidence: float,
        chol_s: np.ndarray,
        active: np.ndarray,
        prior_sd: np.ndarray,
        nodes: PencilNodes,
        index: int,
    ) -> None:
        # the frozen fields set as object.__setattr__ sets them, in one call (a fit makes
        # one per mixture node)
        vars(self).update(
            mean=mean, log_evidence=log_evidence, chol_s=chol_s, active=active,
            prior_sd=prior_sd, width=nodes.width, nodes=nodes, index=index,
        )  # fmt: skip

    @classmethod
    def of_nodes(
        cls,
        mean: np.ndarray,
        log_evidence: np.ndarray,
        chol_s: np.ndarray,
        active: np.ndarray,
        prior_var: np.ndarray,
        nodes: PencilNodes,
    ) -> list[BlockPosterior]:
        """The K posteriors of a pencil's nodes (row k of ``mean``, ``log_evidence``,
        ``chol_s``), with the values K calls of the constructor give them. A fit makes
        about 125 and a decision reads the fields of a few: each holds only its nodes and
        index, and a field is taken from the arrays kept on ``nodes`` when first read
        (``__getattr__``), then kept."""
        nodes.node_fields = _NodeFields(mean, log_evidence, chol_s, active, np.sqrt(prior_var))
        new = object.__new__
        out: list[BlockPosterior] = []
        for i in range(len(mean)):
            post = new(cls)
            state = vars(post)
            state["nodes"], state["index"] = nodes, i
            out.append(post)
        return out

    def __getattr__(self, name: str) -> Any:
        """A field ``of_nodes`` left to its first read (then kept, as the constructor keeps
        it): only names missing from the instance and its class come here."""
        if name not in _LAZY_FIELDS:
            raise AttributeError(name)
        state = vars(self)
        fields = state["nodes"].node_fields
        i = state["index"]
        if name == "mean":
            value: Any = fields.mean[i]
        elif name == "log_evidence":
            value = float(fields.log_evidence[i])
        elif name == "chol_s":
            value = fields.chol_s[i]
        elif name == "width":
            value = state["nodes"].width
        else:
            value = getattr(fields, name)
        state[name] = value
        return value

    @property
    def chol_d(self) -> np.ndarray:
        return self.nodes.factors[0][self.index]

    @property
    def l21(self) -> np.ndarray:
        return self.nodes.factors[2][self.index].transpose(0, 2, 1)  # (A, P_s, C) = G' L^-T

    @property
    def precomputed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        _, inv_d, lg = self.nodes.factors
        i, ps = self.index, self.nodes.p_shared
        flat = lg[i].transpose(2, 0, 1).reshape(ps, -1)  # l21 as (P_s, A C)
        return self.nodes.inv_s[i], inv_d[i].transpose(0, 2, 1), flat, self.nodes.cols
