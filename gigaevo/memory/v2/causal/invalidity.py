"""Invalidity head (logistic MAP + Laplace) and the chance constraint (memory-model.md "Invalidity
head and chance constraint")."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

import numpy as np

from gigaevo.memory.v2.causal.arrowhead import (
    BlockDesign,
    BlockHessian,
    BlockPosterior,
    arm_quadratics,
    as_block_design,
    block_gram,
    factor_blocks,
)
from gigaevo.memory.v2.causal.errors import DesignError

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

GRADIENT_TOLERANCE = 1e-5
GRADIENT_TARGET = 1e-6
MAX_CONDITION = 1e12
NEWTON_STEPS = 50
CHORD_RATE = 0.25  # a kept Fisher factor serves while each step cuts |grad| 4-fold
# a Newton step whose predicted decrease g'F^-1 g is below this share of |J| (16 ulps) is
# judged by |grad| on the prefix path: J's rounding hides the decrease (``_newton``)
ROUNDING_LEVEL = 16.0 * float(np.finfo(float).eps)


@dataclass(frozen=True)
class ShiftLevels:
    """Two-level prior on each card's own shift of the invalid logit (memory-model.md
    "Invalidity head and chance constraint", "Card shift levels").

    Most cards leave the invalid rate alone, a few raise (or lower) it a lot: the shift's
    prior is the narrow level of the block (the prior variance the head is built with) with
    probability 1 - ``weight`` and ``wide_variance`` with probability ``weight``. After the
    MAP under the narrow level, each card whose own rows favour the wide level (posterior
    odds > 1, from the 1-D Gaussian likelihood implied by its narrow marginal posterior) gets
    the wide level, and the head is refitted from that MAP.

    Attributes:
        columns: the lineage blocks' intercept columns (a card's own average shift).
        wide_variance: variance of the wide level on those columns (C * sd^2: the column
            carries 1/sqrt(C)).
        weight: prior probability of the wide level, in (0, 1).
    """

    columns: np.ndarray
    wide_variance: float
    weight: float

    def wide(self, mean: np.ndarray, variance: np.ndarray, prior: tuple[np.ndarray, np.ndarray]
             ) -> np.ndarray:  # fmt: skip
        """The columns whose posterior odds favour the wide level.

        Args:
            mean, variance: narrow-level posterior mean and marginal variance of ``columns``.
            prior: (mean, variance) of the narrow level on ``columns``.
        """
        mu0, v_narrow = prior
        precision = 1.0 / variance - 1.0 / v_narrow  # the rows' own information
        informed = precision > 1e-9
        lam = np.where(informed, precision, 1.0)
        centre = (mean / variance - mu0 / v_narrow) / lam - mu0

        def log_evidence(v: np.ndarray | float) -> np.ndarray:
            total = v + 1.0 / lam
            return -0.5 * (np.log(total) + centre * centre / total)

        odds = (
            math.log(self.weight / (1.0 - self.weight))
            + log_evidence(self.wide_variance)
            - log_evidence(v_narrow)
        )
        return self.columns[informed & (odds > 0.0)]


def card_shift_levels(
    shared_size: int, size: int, width: int, wide_sd: float | None, weight: float
) -> ShiftLevels | None:
    """``ShiftLevels`` of a design layout (P_s, P, C); None for a single level (no wide sd, or
    a weight of 1: every card gets the wide level as its only prior)."""
    if wide_sd is None or weight >= 1.0 or size <= shared_size:
        return None
    return ShiftLevels(np.arange(shared_size, size, width), width * wide_sd**2, weight)


def shift_variance(post: BlockPosterior, columns: np.ndarray) -> np.ndarray:
    """diag(F^-1) on ``columns``, each the first column of its lineage block (the shift
    columns): what ``arrowhead.marginal_variance`` gives there (the same expression, to
    rounding), from the inverse factors ``factor_blocks`` made, without the other P - B
    variances, their two inversions and einsum's contraction search on every fit.

    A block with rows: (D^-1)_00 + |L_S^-1 G' D^-1 e_0|^2 with D^-1 e_0 = L^-T L^-1 e_0,
    G' L^-T = l21, so G' D^-1 e_0 = l21 (L^-1)[:, 0]; a block without rows: its prior.
    """
    ps, c = post.chol_s.shape[0], post.width
    variance = post.prior_sd[columns] ** 2
    if not len(post.active):
        return variance
    inv_s, inv_dt, _, _ = post.inverse_factors  # L_S^-1; (L^-1)' per active block
    where = np.full((len(post.prior_sd) - ps) // c, -1)
    where[post.active] = np.arange(len(post.active))
    at = where[(np.asarray(columns, dtype=int) - ps) // c]
    has = at >= 0
    first = inv_dt[at[has], 0, :]  # (L^-1)[:, 0] of each block: (K', C)
    u = np.einsum("kpj,kj->kp", post.l21[at[has]], first)  # G' D^-1 e_0, (K', P_s)
    t = u @ inv_s.T
    variance[has] = np.sum(first * first, axis=1) + np.sum(t * t, axis=1)
    return variance


def _pairs(zr: np.ndarray) -> np.ndarray:
    """The rows' products z_a z_b, a <= b: (k (k + 1) / 2, n), pairs in ``np.triu_indices(k)``
    order, each pair's products over the rows contiguous (one gather and one product of long
    rows; the broadcast z z', (n, k, k), ran inner loops of k and cost more than the matrix
    product it enters)."""
    upper, lower = np.triu_indices(zr.shape[1])
    zt = np.ascontiguousarray(zr.T)
    return zt[upper] * zt[lower]


def _cube(weighted: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """sum_i c_i z_i (x) z_i (x) z_i, (k, k, k), from the rows' c_i z_i (n, k) and their
    ``_pairs`` (transposed): one product (k, n) @ (n, k (k + 1) / 2), each (b, c) column put
    at [:, b, c] and [:, c, b].

    The full product against every z_b z_c (session 16's form) took twice the columns,
    each (c, b) the very numbers of its (b, c) twin; a column of a matrix product does not
    depend on the other columns beside it, so the triangle gives the same bits (checked
    against that form on a real run's near anchors, and in ``test_invalidity_cubic``)."""
    k = weighted.shape[1]
    half = weighted.T @ pairs.T
    upper, lower = np.triu_indices(k)
    out = np.empty((k, k, k))
    out[:, upper, lower] = half
    out[:, lower, upper] = half
    return out


@dataclass(frozen=True)
class Cubic:
    """The third-order term of a sum of logistic losses around a point (memory-model.md "The
    prefix in Laplace form"): T[r, r, r] / 6, T = sum_i c_i x_i (x) x_i (x) x_i with
    c_i = p_i (1 - p_i) (1 - 2 p_i) at the point, kept per row group (the control rows, and
    each lineage's rows): K_g = sum_{i in g} c_i z_i (x) z_i (x) z_i, z_i = (s_i, u_i) its
    shared part and lineage part, (P_s + C)^3 numbers a group. Its Hessian along r,
    T[r] = sum_i c_i (x_i'r) x_i x_i', comes in block-arrowhead form.

    Attributes:
        shared_size: P_s. width: C. control: (q, q, q), q = P_s + C. lineages: (K,) sorted.
        blocks: (K, q, q, q). size: P of the space.
        control_gram: (P_s + 1, P_s + 1) [sum_i |f_i| s_i s_i', sum_i w_i] over the control
            rows, w_i = p_i (1 - p_i) and f_i = w_i (1 - 6 w_i) (the loss's second and fourth
            derivatives) at the point (the weight sum at [-1, -1], zeros elsewhere in the
            trailing row and column); lineage_gram: (K, q + 1, q + 1) the same of each
            lineage's rows (``truncation``).
    """

    shared_size: int
    width: int
    control: np.ndarray
    lineages: np.ndarray
    blocks: np.ndarray
    size: int
    control_gram: np.ndarray
    lineage_gram: np.ndarray

    @classmethod
    def of_rows(
        cls, x: BlockDesign, at: np.ndarray, outers: dict[int, np.ndarray] | None = None
    ) -> Cubic:
        """The third-order term of rows ``x`` at ``at``: one pass and one product per group.

        ``outers``: each group's products z_ia z_ib, a <= b (``_pairs``, keyed by its
        lineage, -1 for the control rows), kept by the caller across calls on designs whose
        groups are the same rows in the same order (one design, and that design without
        whole groups: a near anchor's rows expanded at several levels). They depend on the
        rows only, not on ``at``: each is made once and the same array enters every product.
        """
        from scipy.special import expit

        p = expit(x.dot(at))
        w = p * (1.0 - p)
        c = w * (1.0 - 2.0 * p)
        ps, width = x.shared.shape[1], x.lineage_part.shape[1]
        q = ps + width
        z = np.concatenate([x.shared, x.lineage_part], axis=1)
        order = np.argsort(x.lineage, kind="stable")
        groups, starts = np.unique(x.lineage[order], return_index=True)
        ends = np.r_[starts[1:], len(order)]

        def summed(rows: np.ndarray, k: int, group: int) -> np.ndarray:
            """sum_i c_i z_i z_i z_i over ``rows``, z's first ``k`` columns (``_cube``)."""
            zr = z[rows, :k]
            pairs = None if outers is None else outers.get(group)
            if pairs is None or pairs.shape != (k * (k + 1) // 2, len(rows)):
                pairs = _pairs(zr)
                if outers is not None:
                    outers[group] = pairs
            return _cube(c[rows, None] * zr, pairs)

        fourth = np.abs(w * (1.0 - 6.0 * w))

        def weighed(rows: np.ndarray, k: int) -> np.ndarray:
            """[sum_i |f_i| z_i z_i', sum_i w_i] over ``rows``, z's first ``k`` columns."""
            zr = z[rows, :k]
            out = np.zeros((k + 1, k + 1))
            out[:k, :k] = (fourth[rows, None] * zr).T @ zr
            out[k, k] = np.sum(w[rows])
            return out

        control = np.zeros((q, q, q))
        control_gram = np.zeros((ps + 1, ps + 1))
        lineages, blocks, grams = [], [], []
        for group, lo, hi in zip(groups.tolist(), starts.tolist(), ends.tolist(), strict=True):
            if group < 0:  # control rows: their lineage part is zero, only the shared cube
                control[:ps, :ps, :ps] = summed(order[lo:hi], ps, group)
                control_gram = weighed(order[lo:hi], ps)
            else:
                lineages.append(group)
                blocks.append(summed(order[lo:hi], q, group))
                grams.append(weighed(order[lo:hi], q))
        stacked = np.stack(blocks) if blocks else np.zeros((0, q, q, q))
        gram = np.stack(grams) if grams else np.zeros((0, q + 1, q + 1))
        return cls(ps, width, control, np.array(lineages, dtype=int), stacked, x.size,
                   control_gram, gram)  # fmt: skip

    def mapped(self, blocks: np.ndarray, size: int) -> Cubic:
        """The same groups in another space: lineage j -> ``blocks[j]``, P = ``size``."""
        target = np.asarray(blocks, dtype=int)[self.lineages]
        order = np.argsort(target, kind="stable")
        return Cubic(self.shared_size, self.width, self.control, target[order],
                     self.blocks[order], size, self.control_gram,
                     self.lineage_gram[order])  # fmt: skip

    def without(self, lineages: list[int]) -> Cubic:
        """The same term without the groups of ``lineages`` (their rows left out: each
        group's sum is its own rows' only)."""
        keep = ~np.isin(self.lineages, lineages)
        return Cubic(self.shared_size, self.width, self.control, self.lineages[keep],
                     self.blocks[keep], self.size, self.control_gram,
                     self.lineage_gram[keep])  # fmt: skip

    def truncation(self, r: np.ndarray) -> tuple[float, np.ndarray]:
        """The share of each group's curvature that the fourth-order term the expansion
        leaves out would add at r: sum_i |f_i| (x_i'r)^2 / (2 sum_i w_i) (a row's curvature
        at r is w_i + c_i x_i'r + f_i (x_i'r)^2 / 2 + ...; O(K q^2), no pass over the rows):
        (the control rows', each lineage's (K,), in ``lineages``' order; 0 for a group
        without weight)."""
        ps = self.shared_size

        def share(gram: np.ndarray, rho: np.ndarray) -> np.ndarray:
            k = rho.shape[-1]
            side = np.matmul(rho[..., None, :], gram[..., :k, :k])[..., 0, :]
            square = np.sum(side * rho, axis=-1)
            weight = gram[..., k, k]
            return 0.5 * np.maximum(square, 0.0) / np.where(weight > 0.0, weight, 1.0)

        control = float(share(self.control_gram, r[:ps]))
        if not len(self.lineages):
            return control, np.zeros(0)
        _, rho = self._per_group(r)
        return control, share(self.lineage_gram, rho)

    @cached_property
    def _columns(self) -> np.ndarray:
        """Each lineage's columns in the space, (K, C) (made once: ``along`` runs at every
        point Newton tries)."""
        ps, width = self.shared_size, self.width
        return (ps + self.lineages[:, None] * width + np.arange(width)).astype(int)

    @cached_property
    def _shared_cube(self) -> np.ndarray:
        """The control rows' (P_s, P_s, P_s) cube, contiguous: the copy a reshape of the slice
        made on every call, made once (the same numbers in the same layout)."""
        ps = self.shared_size
        return np.ascontiguousarray(self.control[:ps, :ps, :ps])

    def _per_group(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(each lineage's columns (K, C); r on each group's (shared, card) columns (K, q))."""
        ps, cols = self.shared_size, self._columns
        rho = np.empty((len(cols), ps + self.width))
        rho[:, :ps] = r[:ps]
        rho[:, ps:] = r[cols]
        return cols, rho

    def along(self, r: np.ndarray) -> np.ndarray:
        """T[r, r] = sum_i c_i (x_i'r)^2 x_i, (P,): Q's gradient's term, without making T[r]
        (a Newton step's line search asks for many gradients and one Hessian)."""
        ps, width = self.shared_size, self.width
        q = ps + width
        rs = r[:ps]
        out = np.zeros(self.size)
        out[:ps] = (rs[:, None] * rs[None, :]).reshape(-1) @ self._shared_cube.reshape(-1, ps)
        if len(self.lineages):
            cols, rho = self._per_group(r)
            pairs = (rho[:, :, None] * rho[:, None, :]).reshape(-1, 1, q * q)
            m = np.matmul(pairs, self.blocks.reshape(-1, q * q, q)).reshape(-1, q)
            out[:ps] += m[:, :ps].sum(axis=0)
            out[cols] = m[:, ps:]
        return out

    def hessian(self, r: np.ndarray) -> BlockHessian:
        """T[r] = sum_i c_i (x_i'r) x_i x_i' in block-arrowhead form."""
        ps, width = self.shared_size, self.width
        q = ps + width
        a = (r[:ps] @ self._shared_cube.reshape(ps, ps * ps)).reshape(ps, ps)
        _, rho = self._per_group(r)
        m = np.matmul(rho[:, None, :], self.blocks.reshape(-1, q, q * q)).reshape(-1, q, q)
        a = a + m[:, :ps, :ps].sum(axis=0)
        return BlockHessian(a, self.lineages, m[:, ps:, ps:], m[:, ps:, :ps], self.size)


@dataclass(frozen=True)
class Quadratic:
    """A sum of logistic losses to second order around ``point`` (memory-model.md "Invalidity
    head and chance constraint", "The prefix in Laplace form"): value + grad'r + r'H r / 2,
    r = gamma - point, plus ``cubic``'s T[r, r, r] / 6 when it has one. The prior is not in
    it.

    Attributes:
        point: the expansion point, (P,).
        value: sum log(1 + e^eta) - d eta at ``point``.
        grad: X'(expit(eta) - d) at ``point``, (P,).
        hess: X' diag(p (1 - p)) X at ``point``: (P, P) for a dense design, a
            ``BlockHessian`` for a ``BlockDesign`` (the same matrix in block-arrowhead form).
    """

    point: np.ndarray
    value: float
    grad: np.ndarray
    hess: np.ndarray | BlockHessian
    cubic: Cubic | None = None  # the third-order term (``laplace_prefix``), or none

    @classmethod
    def of_rows(cls, x: np.ndarray | BlockDesign, d: np.ndarray, at: np.ndarray) -> Quadratic:
        """The logistic loss of rows ``x`` (dense, or a ``BlockDesign``: the Hessian in block
        form) with 0/1 indicators ``d`` to second order at ``at``: one pass over the rows."""
        from scipy.special import expit

        eta = x.dot(at) if isinstance(x, BlockDesign) else x @ at
        p = expit(eta)
        w = p * (1.0 - p)
        value = float(np.sum(np.logaddexp(0.0, eta) - d * eta))
        if isinstance(x, BlockDesign):
            active, pos = x.active_positions()
            gram = (block_gram(x, w, pos, len(active)), active, x.lineage_part.shape[1])
            return cls(at, value, x.rdot(p - d), BlockHessian.of_gram(gram, x.size))
        return cls(at, value, x.T @ (p - d), x.T @ (w[:, None] * x))

    def at(self, g: np.ndarray) -> tuple[float, np.ndarray]:
        """(value, gradient) of the expansion at g (with its third-order term, if any)."""
        r = g - self.point
        hr = self.hess @ r
        value, grad = self.value + float(self.grad @ r) + 0.5 * float(r @ hr), self.grad + hr
        if self.cubic is not None:
            mr = self.cubic.along(r)
            value, grad = value + float(r @ mr) / 6.0, grad + 0.5 * mr
        return value, grad

    def cubic_hessian(self, g: np.ndarray) -> BlockHessian | None:
        """The third-order term's part of the Hessian at g (None: no such term)."""
        return None if self.cubic is None else self.cubic.hessian(g - self.point)

    def minus(self, other: Quadratic) -> Quadratic:
        """This expansion without ``other``'s rows (an expansion at the same point, in the
        same form; neither with a third-order term)."""
        assert self.cubic is None and other.cubic is None
        hess = self.hess - other.hess  # same form: dense, or blocks (``BlockHessian.__sub__``)
        return Quadratic(self.point, self.value - other.value, self.grad - other.grad, hess)


class PrefixRows(Protocol):
    """The rows of a ``laplace_prefix`` fit: the rows fitted exactly and the quadratic that
    stands for the others (``headrows.InvalidityFitter``)."""

    def terms(
        self, exact: frozenset[int]
    ) -> tuple[np.ndarray | BlockDesign, np.ndarray, Quadratic]:
        """(design of the rows fitted exactly: dense, or a ``BlockDesign`` on a wide design
        with the quadratic's Hessian in block form; their 0/1 indicators; the quadratic of
        the other rows) with the lineage blocks ``exact`` at the wide level and the others
        at the narrow one."""
        ...

    def chord(self, exact: frozenset[int]) -> Chord | None:
        """The factored F of the other rows' own fit at the same levels (its MAP is the
        quadratic's point) and its columns' places in the fit: the first Newton steps' F
        (None: none; ``terms`` of the same levels is asked first)."""
        ...


class LogisticLaplaceHead:
    """D ~ Bernoulli(expit(z'gamma)), gamma ~ N(mu, diag(v)); MAP + Laplace posterior.

    Args:
        prior_mean: mu_gamma, shape (P,).
        prior_variance: v_gamma, shape (P,).
        block_layout: (P_s, C) of the design layout; with it a dense design wider than
            ``DENSE_MAX_SIZE`` columns is fitted in block-arrowhead form.
        shift_levels: two-level prior on each card's own shift (``prior_variance`` holds the
            narrow level on those columns), or None for the single Gaussian prior.

    Learned attributes: ``coef_`` (gamma-hat, (P,)), ``coef_cov_`` (Sigma_gamma = F^-1, (P, P);
    None for a ``BlockDesign`` fit, whose F stays factored), ``ok_`` (fit succeeded; False is
    fail-closed), ``failure_`` (reason or ""), ``gradient_norm_``, ``condition_`` (cond(F); on the
    block path an upper bound on it when that bound already passes the 1e12 gate),
    ``wide_columns_`` (the shift columns given the wide level).
    ``log_evidence()``: the Laplace approximation of log p(D) under the head's prior.
    """

    def __init__(
        self,
        prior_mean: np.ndarray,
        prior_variance: np.ndarray,
        block_layout: tuple[int, int] | None = None,
        shift_levels: ShiftLevels | None = None,
    ) -> None:
        self.prior_mean = prior_mean
        self.prior_variance = prior_variance
        self.block_layout = block_layout
        self.shift_levels = shift_levels
        self._gram: tuple[bytes, object] | None = None  # (g's bits, X'WX at g)
        # (g's bits, eta = X g, the likelihood's value and gradient at g): see ``_likelihood``
        self._lik: tuple[bytes, np.ndarray, np.float64, np.ndarray] | None = None
        # ``fit_prefix``: the rows' source, the quadratic standing for the rows not in the
        # design, and the lineage blocks whose rows are all in the design
        self._prefix: PrefixRows | None = None
        self._quad: Quadratic | None = None
        self._exact: frozenset[int] = frozenset()
        # ``fit_prefix``: its narrow fit's quadratic and MAP (``narrow_error``)
        self._narrow: tuple[Quadratic | None, np.ndarray] = (None, np.zeros(0))
        self._wide_move: Callable[[np.ndarray], np.ndarray | None] | None = None  # ``fit``
        self._wide_chord: Callable[[np.ndarray], Chord | None] | None = None  # ``fit``

    def _xdot(self, g: np.ndarray) -> np.ndarray:
        if isinstance(self._x, BlockDesign):
            return self._rows.dot(g)
        return self._x @ g

    def _xtdot(self, r: np.ndarray) -> np.ndarray:
        if isinstance(self._x, BlockDesign):
            return self._rows.rdot(r)
        return self._x.T @ r

    def _likelihood(self, g: np.ndarray) -> tuple[np.ndarray, np.float64, np.ndarray]:
        """(eta = X g, sum log(1 + e^eta) - d eta, X'(expit(eta) - d)) at g.

        The prior does not enter: the last one is kept by g's bits, so the objective at a
        point already evaluated (the final check of a Newton run, the wide-level refit's
        start, the Fisher information there) costs no pass over the rows. Each entry is
        the very value the pass gives (the same operations in the same order)."""
        from scipy.special import expit

        key = g.tobytes()
        kept = self._lik
        if kept is None or kept[0] != key:
            eta = self._xdot(g)
            value = np.sum(np.logaddexp(0.0, eta) - self._d * eta)
            grad = self._xtdot(expit(eta) - self._d)
            if self._quad is not None:  # ``fit_prefix``: the rows the quadratic stands for
                q_value, q_grad = self._quad.at(g)
                value, grad = value + q_value, grad + q_grad
            kept = self._lik = (key, eta, value, grad)
        return kept[1], kept[2], kept[3]

    def _objective(self, g: np.ndarray) -> tuple[float, np.ndarray]:
        _, value, grad = self._likelihood(g)
        r = g - self._mu
        j = float(value + 0.5 * np.sum(r * r / self._v))
        return j, grad + r / self._v

    def _gram_at(self, g: np.ndarray) -> object:
        """X'WX at g (with the quadratic's Hessian in a ``fit_prefix``), kept by g's bits."""
        from scipy.special import expit

        key = g.tobytes()
        if self._gram is None or self._gram[0] != key:
            p = expit(self._likelihood(g)[0])
            w = p * (1.0 - p)
            if isinstance(self._x, BlockDesign):
                gram = self._rows.gram(w)
                if self._quad is not None:  # merged before factoring: one arrowhead
                    assert isinstance(self._quad.hess, BlockHessian)
                    gram = self._quad.hess.added_to(gram)
                    third = self._third_at(g)
                    if third is not None:
                        gram = third.added_to(gram)
                data: object = gram
            else:
                dense = self._x.T @ (w[:, None] * self._x)
                if self._quad is not None:
                    assert isinstance(self._quad.hess, np.ndarray)
                    dense = dense + self._quad.hess
                    third = self._third_at(g)
                    if third is not None:
                        dense = dense + third.to_dense()
                data = dense
            self._gram = (key, data)
        return self._gram[1]

    def _third_at(self, g: np.ndarray) -> BlockHessian | None:
        """The expansion's third-order Hessian term at g (made with the Fisher information
        only: the line search's points need just ``Cubic.along``)."""
        assert self._quad is not None
        return self._quad.cubic_hessian(g)

    def _fisher(self, g: np.ndarray) -> _Precision:
        """F at g, factored. X'WX depends on g only, not on the prior: the last one is kept
        (by g's bits), so refactoring at the same g with other prior variances (the
        wide-level refit's first step) reuses it."""
        data = self._gram_at(g)
        if isinstance(self._x, BlockDesign):
            assert isinstance(data, tuple)
            return _BlockPrecision(data, self._v)
        assert isinstance(data, np.ndarray)
        return _DensePrecision(np.diag(1.0 / self._v) + data)

    def fit(
        self,
        x: np.ndarray | BlockDesign,
        d: np.ndarray,
        start: np.ndarray | None = None,
        wide_move: Callable[[np.ndarray], np.ndarray | None] | None = None,
        chord: Chord | None = None,
        wide_chord: Callable[[np.ndarray], Chord | None] | None = None,
    ) -> LogisticLaplaceHead:
        """Fit on a design (dense (n, P) or ``BlockDesign``) and invalid indicators d (n,).

        From the prior mean: quasi-Newton, then Newton if the gradient is not yet at its
        target. From ``start`` (a nearby mode, e.g. the MAP on most of the same rows):
        Newton steps only, to the same gradient target.

        ``wide_move(columns)``: how far the MAP of related rows (the anchor's) moves when the
        shift ``columns`` go wide, (P,), or None; the wide-level refit then starts from the
        narrow MAP moved by it, when that start has the lower objective (``_widen``).

        ``chord``: the factored F of a fit of related rows (the near anchor's, at its MAP)
        and the map of its columns into this fit's, the first Newton steps' F from ``start``
        (``_MappedPrecision``; refactored here once a step cuts |grad| less than 4-fold);
        ``wide_chord(columns)``: the same for the wide-level refit with ``columns`` wide.
        """
        from scipy.optimize import minimize

        self._mu = np.asarray(self.prior_mean, dtype=float)
        self._v = np.asarray(self.prior_variance, dtype=float)
        x = as_block_design(x, self.block_layout, len(self._mu))
        self._x = x if isinstance(x, BlockDesign) else np.asarray(x, dtype=float)
        if isinstance(self._x, np.ndarray):
            self._x = self._x.reshape(-1, len(self._mu))
        self._d = np.asarray(d, dtype=float).reshape(-1)
        self._gram = self._lik = self._quad = self._prefix = None
        self._wide_move = wide_move
        self._wide_chord = wide_chord
        if isinstance(self._x, BlockDesign):
            self._rows = _TreatedRows(self._x)
        n = len(self._x.lineage) if isinstance(self._x, BlockDesign) else len(self._x)
        if len(self._d) != n or not np.all(np.isin(self._d, (0.0, 1.0))):
            raise DesignError("invalid indicators must be 0/1 and match the design rows")
        gamma = self._mu.copy()
        if n and start is not None:
            gamma = self._newton(np.asarray(start, dtype=float).copy(), self._mapped(chord))
        elif n:
            res = minimize(
                self._objective, gamma, jac=True, method="L-BFGS-B",
                options={"gtol": GRADIENT_TARGET, "maxiter": 1000},
            )  # fmt: skip
            gamma = res.x
            if float(np.max(np.abs(self._objective(gamma)[1]))) > GRADIENT_TARGET:
                gamma = self._newton(gamma)
        self._finish(gamma)
        self.wide_columns_ = np.zeros(0, dtype=int)
        if n and self.ok_ and self.shift_levels is not None:
            self._widen(gamma)
        return self

    def fit_prefix(
        self, rows: PrefixRows, start: np.ndarray, exact: frozenset[int] = frozenset()
    ) -> LogisticLaplaceHead:
        """Fit with the rows before the near anchor in Laplace form (``invalidity_fit:
        laplace_prefix``; memory-model.md "The prefix in Laplace form").

        J(gamma) = prior + Q(gamma) + the logistic loss of the rows fitted exactly, Q the
        third-order expansion of the other rows' loss at their own MAP under the same shift
        levels. Newton steps from ``start`` (the first with ``rows.chord``'s F) pass over the
        rows fitted exactly only; the Laplace precision is diag(1/v) + Q's Hessian (with
        its third-order term's T[r]) + their Fisher information, the log evidence takes Q's
        value. ``exact``: the lineage blocks
        at the wide level (``rows.terms`` expands at the MAP with them wide); the wide-level
        refit and ``with_level`` ask for the blocks of their own levels. On a wide design
        the rows come as a ``BlockDesign`` and Q's Hessian in block form, merged into their
        block Gram before the arrowhead is factored.
        """
        self._mu = np.asarray(self.prior_mean, dtype=float)
        self._v = np.asarray(self.prior_variance, dtype=float)
        self._prefix = rows
        self._load(exact)
        chord = self._mapped(rows.chord(exact))
        gamma = self._newton(np.asarray(start, dtype=float).copy(), chord, rounding=True)
        self._finish(gamma)
        self.wide_columns_ = np.zeros(0, dtype=int)
        self._narrow = (self._quad, gamma)
        if self.ok_ and self.shift_levels is not None:
            self._widen(gamma)
        return self

    def narrow_error(self) -> float:
        """The largest ``expansion_error`` of a ``fit_prefix`` head's narrow fit, at its MAP
        (the fit that chose its levels; 0 without a third-order term)."""
        quad, gamma = self._narrow
        if quad is None or quad.cubic is None:
            return 0.0
        control, lineages = quad.cubic.truncation(gamma - quad.point)
        return max(control, float(np.max(lineages, initial=0.0)))

    def refit_prefix(self, rows: PrefixRows) -> LogisticLaplaceHead:
        """This ``fit_prefix`` head's fit on ``rows`` (the same rows, more of them fitted
        exactly) at its levels: Newton from its MAP, the first steps with ``rows.chord``'s
        F. Its levels were chosen by its narrow fit (``narrow_error``: that fit's own
        truncation)."""
        self._require_ok()
        head = LogisticLaplaceHead(self.prior_mean, self.prior_variance, self.block_layout,
                                   self.shift_levels)  # fmt: skip
        head._mu, head._v, head._prefix = self._mu, self._v, rows
        head._load(self._exact)
        chord = head._mapped(rows.chord(self._exact))
        head._finish(head._newton(self.coef_.copy(), chord, rounding=True))
        head.wide_columns_, head._narrow = self.wide_columns_, self._narrow
        return head

    def _load(self, exact: frozenset[int]) -> None:
        """Take the rows fitted exactly and the quadratic of the others from ``_prefix``."""
        assert self._prefix is not None
        x, d, quad = self._prefix.terms(exact)
        if isinstance(x, BlockDesign):
            self._x, self._rows = x, _TreatedRows(x)
            n = len(x.lineage)
        else:
            self._x = np.asarray(x, dtype=float).reshape(-1, len(self._mu))
            n = len(self._x)
        self._d = np.asarray(d, dtype=float).reshape(-1)
        if len(self._d) != n or not np.all((self._d == 0.0) | (self._d == 1.0)):
            raise DesignError("invalid indicators must be 0/1 and match the design rows")
        self._quad, self._exact = quad, exact
        self._gram = self._lik = None

    def _blocks(self, columns: np.ndarray) -> frozenset[int]:
        """The lineage blocks of lineage columns (the block layout's)."""
        if self.block_layout is None:
            raise DesignError("a laplace_prefix fit needs the block layout")
        ps, width = self.block_layout
        return frozenset(int(b) for b in (np.asarray(columns, dtype=int) - ps) // width)

    def expansion_error(self) -> tuple[float, np.ndarray, np.ndarray]:
        """A ``fit_prefix`` head's truncation: the share of each expanded row group's
        curvature that the fourth-order term would add at the MAP (``Cubic.truncation``,
        r = gamma-hat - gamma_m): (the control rows', the lineage blocks with expanded rows
        (K,), theirs (K,)); zeros for a fit without a third-order term. One rare event on a
        wide card with many rows but little information moves its shift far enough for it
        to matter (a real run: 0.4 logit, 1.7 % of that card's curvature, 1 % in a
        variance)."""
        self._require_ok()
        if self._quad is None or self._quad.cubic is None:
            return 0.0, np.zeros(0, dtype=int), np.zeros(0)
        cubic = self._quad.cubic
        control, lineages = cubic.truncation(self.coef_ - self._quad.point)
        return control, cubic.lineages, lineages

    def expansion(self) -> Quadratic:
        """The rows' loss to second order at the MAP (the prior not included): its value,
        gradient X'(p - d) and Fisher information X'WX, as the fit computed them (the near
        anchor of a ``laplace_prefix`` fit; in block form on a ``BlockDesign``)."""
        self._require_ok()
        _, value, grad = self._likelihood(self.coef_)
        hess = self._gram_at(self.coef_)  # X'WX at the MAP: kept by the fit (no pass)
        if isinstance(self._x, BlockDesign):
            assert isinstance(hess, tuple) and self._quad is None
            block = BlockHessian.of_gram(hess, len(self.coef_))
            return Quadratic(self.coef_.copy(), float(value), grad.copy(), block)
        assert isinstance(hess, np.ndarray)
        return Quadratic(self.coef_.copy(), float(value), grad.copy(), hess.copy())

    def _finish(self, gamma: np.ndarray) -> None:
        self.coef_ = gamma
        self.gradient_norm_ = float(np.max(np.abs(self._objective(gamma)[1])))
        self._set_posterior(gamma)

    def _widen(self, gamma: np.ndarray) -> None:
        """Give the wide level to the cards whose rows favour it, refit from the MAP."""
        levels = self.shift_levels
        assert levels is not None
        cols = levels.columns
        if isinstance(self._precision, _BlockPrecision):
            variance = shift_variance(self._precision.factor, cols)
        else:
            assert self.coef_cov_ is not None
            variance = np.diag(self.coef_cov_)[cols]
        wide = levels.wide(gamma[cols], variance, (self._mu[cols], self._v[cols]))
        if not len(wide):
            return
        self._v = self._v.copy()
        self._v[wide] = levels.wide_variance
        start = gamma.copy()
        if self._prefix is not None:  # the rows at these levels (``PrefixRows.terms``)
            assert self._quad is not None
            narrow = self._quad.point
            self._load(self._exact | self._blocks(wide))
            assert self._quad is not None
            # start where the prefix rows' own MAP moved when these cards went wide (the
            # expansion points of the two level sets): Newton then takes the few steps it
            # takes from a nearby start, not a long walk of the wide cards' shifts; a
            # function of rows, near anchor and levels, the same MAP to the gradient target
            start += self._quad.point - narrow
        elif self._wide_move is not None:
            move = self._wide_move(wide)
            if move is not None:
                start = self._moved_start(start, move)
        chord = None
        if self._prefix is not None:
            chord = self._mapped(self._prefix.chord(self._exact))
        elif self._wide_chord is not None:
            chord = self._mapped(self._wide_chord(wide))
        self._finish(self._newton(start, chord, rounding=self._prefix is not None))
        self.wide_columns_ = wide

    def _mapped(self, chord: Chord | None) -> _Solver | None:
        """A ``Chord`` as this fit's first Newton steps' F, under its current prior variances."""
        if chord is None:
            return None
        return _MappedPrecision(chord[0], chord[1], self._v)

    @property
    def precision(self) -> _Precision:
        """The factored Laplace precision F at the MAP (a ``Chord`` of related fits)."""
        self._require_ok()
        return self._precision

    def _moved_start(self, narrow: np.ndarray, move: np.ndarray) -> np.ndarray:
        """The wide-level refit's start: the narrow MAP moved by ``move`` (where the anchor
        rows' own MAP went when these cards went wide: near the wide MAP, so Newton takes the
        few steps of a fit from a nearby start instead of walking the wide cards' shifts over
        several logits), unless the objective under the wide levels is lower at the narrow
        MAP itself. Both objectives cost no pass over the rows the moved start's Newton does
        not make anyway (the narrow MAP's likelihood is kept), and the choice is a function
        of the rows and the anchor."""
        moved = narrow + move
        if not np.all(np.isfinite(moved)):
            return narrow
        at_narrow = self._objective(narrow)[0]  # the kept likelihood: no pass
        return moved if self._objective(moved)[0] <= at_narrow else narrow  # kept for Newton

    def with_level(self, column: int, wide: bool) -> LogisticLaplaceHead:
        """This head refitted with the shift ``column`` at the wide (or narrow) level and every
        other column at its level here: the other component of one card's two-level
        posterior (retirement weighs both; memory-model.md "Card shift levels"). Newton
        steps from this MAP, on the same rows."""
        self._require_ok()
        levels = self.shift_levels
        if levels is None:
            raise DesignError("a head without shift levels has one level")
        variance = self._v.copy()
        variance[column] = levels.wide_variance if wide else self.prior_variance[column]
        head = LogisticLaplaceHead(self.prior_mean, variance, self.block_layout)
        if self._prefix is not None:  # the same rows; the wide cards' fitted exactly
            block = self._blocks(np.array([column]))
            exact = self._exact | block if wide else self._exact - block
            return head.fit_prefix(self._prefix, self.coef_, exact)
        return head.fit(self._x, self._d, start=self.coef_)

    def log_evidence(self) -> float:
        """Laplace approximation of log p(D) under this head's prior:
        -J(gamma-hat) - 1/2 ln|diag(v) F| (columns no row touches contribute 0)."""
        self._require_ok()
        return -self._objective(self.coef_)[0] - 0.5 * self._precision.log_det(self._v)

    def _set_posterior(self, gamma: np.ndarray) -> None:
        self.failure_ = ""
        self.condition_ = math.inf
        self.coef_cov_: np.ndarray | None = None
        try:
            self._precision = self._fisher(gamma)
            self.condition_ = self._precision.condition()
        except np.linalg.LinAlgError as err:
            self.failure_ = f"Fisher information not positive definite ({err})"
        if self.failure_:
            pass
        elif not math.isfinite(self.gradient_norm_) or self.gradient_norm_ > GRADIENT_TOLERANCE:
            self.failure_ = f"MAP not converged (|grad|_inf = {self.gradient_norm_:.3g})"
        elif not self.condition_ <= MAX_CONDITION:
            self.failure_ = f"Fisher information ill-conditioned (cond = {self.condition_:.3g})"
        self.ok_ = not self.failure_
        if self.ok_ and isinstance(self._precision, _DensePrecision):
            self.coef_cov_ = self._precision.covariance()

    def _newton(
        self, gamma: np.ndarray, chord: _Solver | None = None, rounding: bool = False
    ) -> np.ndarray:
        """Newton steps with halving line search until ``GRADIENT_TARGET``.

        The factored Fisher information is reused for the next step (a chord step, still a
        descent direction: F is positive definite) while each step cuts |grad|_inf by at
        least ``CHORD_RATE``, and refactored at the current point otherwise, so a fit
        from a nearby start factors F about twice instead of once per step. The path is
        a function of the start and the rows only (the same bits on every replay). ``chord``:
        the first steps' F instead of F at ``gamma`` (kept on the same rule).

        ``rounding`` (the prefix path, ``fit_prefix``): a step whose predicted decrease
        g'F^-1 g is below ``ROUNDING_LEVEL`` |J| is also taken when it lowers |grad|_inf,
        whatever J's last bits say. Near the MAP (|grad|_inf ~ 1e-6) that decrease is below
        J's rounding, and J's comparison alone halved such steps up to 27 times, one pass
        each, often to keep the point where it was (a real run's late fits: 40 % of their
        objective passes). The exact path keeps J's comparison alone (its bits).
        """
        value, grad = self._objective(gamma)
        norm = float(np.max(np.abs(grad)))
        precision: _Solver | None = chord
        for _ in range(NEWTON_STEPS):
            if norm <= GRADIENT_TARGET:
                break
            if precision is None:
                precision = self._fisher(gamma)
            step = precision.solve(grad)
            flat = rounding and float(grad @ step) <= ROUNDING_LEVEL * max(1.0, abs(value))
            t = 1.0
            while t > 1e-8:
                cand_value, cand_grad = self._objective(gamma - t * step)
                if cand_value <= value:
                    break
                if flat and float(np.max(np.abs(cand_grad))) < norm:
                    break
                t *= 0.5
            gamma, value, grad = gamma - t * step, cand_value, cand_grad
            cut = float(np.max(np.abs(grad)))
            if cut > CHORD_RATE * norm:  # slow: F at the new point for the next step
                precision = None
            norm = cut
        return gamma

    def _require_ok(self) -> None:
        if not self.ok_:
            raise DesignError(f"invalidity head failed: {self.failure_}")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n draws gamma = gamma-hat + chol(Sigma_gamma) xi, shape (n, P)."""
        self._require_ok()
        xi = rng.standard_normal((n, len(self.coef_)))
        return self.coef_ + self._precision.noise(xi)

    @property
    def block_factor(self) -> BlockPosterior | None:
        """The factored Laplace precision of a ``BlockDesign`` fit (mean zero), else None."""
        self._require_ok()
        return self._precision.factor if isinstance(self._precision, _BlockPrecision) else None

    def linear_predictor(self, z0: np.ndarray, z1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(eta-bar (2,), Sigma_eta (2, 2)) for the arm rows z0, z1 (each (P,))."""
        self._require_ok()
        s = np.vstack([z0, z1])
        if isinstance(self._precision, _BlockPrecision):  # F^-1 s' where s is not 0 only
            return s @ self.coef_, s @ self._precision.solve_touched(s)
        sigma_s = np.column_stack([self._precision.solve(z0), self._precision.solve(z1)])
        return s @ self.coef_, s @ sigma_s

    def linear_predictors(
        self, z0: np.ndarray, z1: np.ndarray | BlockDesign
    ) -> tuple[np.ndarray, np.ndarray]:
        """``linear_predictor`` of many cards at once: (means (J, 2), covariances (J, 2, 2)).

        Args:
            z0: (P,) control row shared by every card.
            z1: (J, P) treated rows, dense or as a ``BlockDesign``.
        """
        self._require_ok()
        if isinstance(z1, BlockDesign):
            eta1 = z1.dot(self.coef_)
        else:
            z1 = np.asarray(z1, dtype=float).reshape(-1, len(self.coef_))
            eta1 = z1 @ self.coef_
        means = np.column_stack([np.full(len(eta1), z0 @ self.coef_), eta1])
        v00, v01, v11 = self._precision.arm_quadratics(np.asarray(z0, dtype=float), z1)
        covs = np.empty((len(eta1), 2, 2))
        covs[:, 0, 0], covs[:, 0, 1], covs[:, 1, 0], covs[:, 1, 1] = v00, v01, v01, v11
        return means, covs


class _TreatedRows:
    """X g and X' r of a ``BlockDesign`` with its treated rows (lineage >= 0) indexed once per
    fit instead of masked on every pass; the same numbers as ``BlockDesign.dot`` / ``rdot``
    (the same products summed in the same order: ``np.bincount`` adds in row order, as
    ``np.add.at`` did; X g's lineage part adds each row's C products from zero left to
    right, as the row sum and then a CSR product did, one vectorised column at a time: a
    late prefix fit's few rows paid more for building the CSR matrix than for its product)."""

    def __init__(self, design: BlockDesign) -> None:
        self.design = design
        self.rows = np.flatnonzero(design.lineage >= 0)
        self.part = design.lineage_part[self.rows]
        self.lineage = design.lineage[self.rows]
        c = design.lineage_part.shape[1]
        self.bins = (self.lineage[:, None] * c + np.arange(c)).reshape(-1)
        self.cells = self.bins.reshape(-1, c)  # each treated row's lineage columns (past P_s)
        self.ps, self.c = design.shared.shape[1], c
        self.active, self.pos = design.active_positions()
        # the weighted block sums' sparse (B_act x n) pattern, each block's rows in row order
        at = self.pos[self.lineage]
        self.members = self.rows[np.argsort(at, kind="stable")]
        indptr = np.concatenate([[0], np.cumsum(np.bincount(at, minlength=len(self.active)))])
        # int32 indices, as scipy stores them anyway (it checks and converts int64 ones)
        self.members32, self.indptr32 = self.members.astype(np.int32), indptr.astype(np.int32)
        self._member: csr_matrix | None = None  # that pattern as a matrix (``gram``)

    def gram(self, w: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray, int]:
        """X'diag(w)X in blocks, its active blocks and C: the numbers of ``block_gram``.

        The sparse pattern of the per-block sums is built once per fit, as a matrix at the
        first call and given each call's weights after (the same matrix: one sparse
        construction a fit, not one a Fisher information); ``block_gram`` builds it on every
        call, leaving out rows of weight 0, which add nothing here (each block sums w u u'
        and w u s' in row order from zero either way)."""
        from scipy.sparse import csr_matrix

        design, c, ps = self.design, self.c, self.ps
        products = design.products
        if products is None:
            return block_gram(design, w, self.pos, len(self.active)), self.active, c
        s = design.shared
        ws = s * w[:, None]
        member = self._member
        if member is None:
            shape = (len(self.active), len(products))
            member = csr_matrix((w[self.members], self.members32, self.indptr32), shape=shape)
            self._member = member
        else:
            member.data = w[self.members]
        summed = np.asarray(member @ products)
        blocks = {
            "a": ws.T @ s,
            "d": summed[:, : c * c].reshape(-1, c, c),
            "g": summed[:, c * c :].reshape(-1, c, ps),
        }
        return blocks, self.active, c

    def dot(self, vec: np.ndarray) -> np.ndarray:
        out = self.design.shared @ vec[: self.ps]
        coef = vec[self.ps :][self.cells]  # (n_treated, C): each row's block coefficients
        summed = np.zeros(len(self.rows))
        for j in range(self.c):  # from zero, left to right (the CSR product's order)
            summed += self.part[:, j] * coef[:, j]
        out[self.rows] += summed
        return out

    def rdot(self, r: np.ndarray) -> np.ndarray:
        size = self.design.n_lineages * self.c
        terms = (self.part * r[self.rows, None]).reshape(-1)
        blocks = np.bincount(self.bins, weights=terms, minlength=size)
        return np.concatenate([self.design.shared.T @ r, blocks])


class _Solver(Protocol):
    """F in a form Newton's steps can solve with (all ``_newton`` asks of it)."""

    def solve(self, rhs: np.ndarray) -> np.ndarray: ...


class _Precision(_Solver, Protocol):
    """The Laplace precision F in some factored form."""

    def arm_quadratics(
        self, z0: np.ndarray, z1: np.ndarray | BlockDesign
    ) -> tuple[float, np.ndarray, np.ndarray]: ...

    def noise(self, xi: np.ndarray) -> np.ndarray: ...

    def condition(self) -> float: ...

    def log_det(self, prior_var: np.ndarray) -> float: ...


# a related fit's factored F and its columns' places in this fit (its column j -> ours [j])
Precision = _Precision
Chord = tuple[Precision, np.ndarray]


class _MappedPrecision:
    """Newton's F from a related fit (``LogisticLaplaceHead.fit``'s ``chord``): its factored F
    on the columns it maps to, diag(1/v) (the prior alone) on the others. Positive definite,
    so a step with it is a descent direction (a ``_Solver``: Newton's steps only)."""

    def __init__(self, inner: _Solver, columns: np.ndarray, prior_var: np.ndarray) -> None:
        self.inner, self.columns, self.prior_var = inner, columns, prior_var

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        out = rhs * self.prior_var
        out[self.columns] = self.inner.solve(rhs[self.columns])
        return out


class _DensePrecision:
    def __init__(self, fisher: np.ndarray) -> None:
        self.fisher = fisher
        self._chol = np.linalg.cholesky(fisher)  # raises LinAlgError when not PD

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        return np.linalg.solve(self._chol.T, np.linalg.solve(self._chol, rhs))

    def arm_quadratics(
        self, z0: np.ndarray, z1: np.ndarray | BlockDesign
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """(z0'F^-1 z0, z0'F^-1 z1_j, z1_j'F^-1 z1_j) via one triangular solve."""
        from scipy.linalg import solve_triangular

        if isinstance(z1, BlockDesign):
            z1 = z1.to_dense()
        w = solve_triangular(self._chol, np.column_stack([z0, z1.T]), lower=True)
        return float(w[:, 0] @ w[:, 0]), w[:, 0] @ w[:, 1:], np.sum(w[:, 1:] ** 2, axis=0)

    def noise(self, xi: np.ndarray) -> np.ndarray:
        # F^-1 = L^-T L^-1, so L^-T xi has covariance F^-1
        return np.linalg.solve(self._chol.T, xi.T).T

    def condition(self) -> float:
        return float(np.linalg.cond(self.fisher))

    def log_det(self, prior_var: np.ndarray) -> float:
        """ln|diag(v) F|."""
        return 2.0 * float(np.sum(np.log(np.diag(self._chol)))) + float(np.sum(np.log(prior_var)))

    def covariance(self) -> np.ndarray:
        inv_l = np.linalg.inv(self._chol)
        return inv_l.T @ inv_l


class _BlockPrecision:
    """F = diag(1/v) + X' diag(w) X kept in block-arrowhead form (memory-model.md "Immediate
    head")."""

    def __init__(
        self, gram: tuple[dict[str, np.ndarray], np.ndarray, int], prior_var: np.ndarray
    ) -> None:
        blocks, active, width = gram
        self._factor = factor_blocks(
            blocks["a"], blocks["d"], blocks["g"], prior_var, active, width
        )
        self._gram, self._v = blocks, prior_var

    @property
    def factor(self) -> BlockPosterior:
        return self._factor

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        return self._factor.solve(rhs)

    def solve_touched(self, rows: np.ndarray) -> np.ndarray:
        """F^-1 rows' (rows (J, P)), (P, J), each entry the value ``solve`` gives
        (``BlockPosterior.apply_inverse_rows``: products over the touched blocks alone)."""
        return self._factor.apply_inverse_rows(rows)

    def noise(self, xi: np.ndarray) -> np.ndarray:
        return self._factor.sample(xi)

    def log_det(self, prior_var: np.ndarray) -> float:
        """ln|diag(v) F| over the shared and active lineage columns (a block no row touches
        has F = diag(1/v) there: it adds 0)."""
        f = self._factor
        ps = f.chol_s.shape[0]
        logdet = 2.0 * float(np.sum(np.log(np.diagonal(f.chol_d, axis1=1, axis2=2))))
        logdet += 2.0 * float(np.sum(np.log(np.diag(f.chol_s))))
        cols = np.r_[np.arange(ps), f.lineage_columns.reshape(-1)].astype(int)
        return logdet + float(np.sum(np.log(prior_var[cols])))

    def arm_quadratics(
        self, z0: np.ndarray, z1: np.ndarray | BlockDesign
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """Quadratic forms of F^-1 for rows with a shared part and at most one lineage block."""
        return arm_quadratics(self._factor, z0, z1)

    def condition(self) -> float:
        """cond(F), or a rigorous upper bound on it when that bound already clears the gate.

        F = diag(1/v) + X'WX with X'WX positive semi-definite, so lambda_min(F) >= min(1/v),
        and lambda_max(F) is at most the largest absolute row sum (Gershgorin): their ratio
        bounds cond(F) from above in O(B_act C P_s). Only when it exceeds ``MAX_CONDITION``
        is cond(F) = lambda_max(F) * lambda_max(F^-1) computed, each by Lanczos.
        """
        bound = self._row_sum_bound() * float(np.max(self._v))
        if bound <= MAX_CONDITION:
            return bound
        return self._lanczos_condition()

    def _row_sum_bound(self) -> float:
        """max_i sum_j |F_ij| over the shared rows, the active lineage rows and the rest."""
        a, d, g = self._gram["a"], self._gram["d"], self._gram["g"]
        ps = a.shape[0]
        inv_v = 1.0 / self._v
        shared = inv_v[:ps] + np.abs(a).sum(axis=1) + np.abs(g).sum(axis=(0, 1))
        top = float(np.max(shared, initial=0.0))
        if len(self._factor.active):
            cols = self._factor.lineage_columns
            rows = inv_v[cols] + np.abs(d).sum(axis=2) + np.abs(g).sum(axis=2)
            top = max(top, float(np.max(rows)))
        return max(top, float(np.max(inv_v)))  # rows of blocks without data: 1/v

    def _lanczos_condition(self) -> float:
        """cond(F) = lambda_max(F) * lambda_max(F^-1), each by Lanczos on the block operator."""
        p, ps = len(self._v), self._factor.chol_s.shape[0]
        cols = self._factor.lineage_columns
        a, d, g = self._gram["a"], self._gram["d"], self._gram["g"]

        def forward(v: np.ndarray) -> np.ndarray:
            # F v from the blocks of X'WX (a, d, g) instead of two passes over the rows
            out = v / self._v
            v_s, v_l = v[:ps], v[cols]
            out[:ps] += a @ v_s + np.einsum("kcp,kc->p", g, v_l)
            out[cols] += np.einsum("kcj,kj->kc", d, v_l) + g @ v_s
            return out

        top = _largest_eigenvalue(forward, p)
        inv_top = _largest_eigenvalue(self._factor.apply_inverse, p)
        return top * inv_top


def _largest_eigenvalue(matvec: Callable[[np.ndarray], np.ndarray], p: int) -> float:
    """Largest eigenvalue of a symmetric operator by Lanczos (the block path: p > 64)."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    op = LinearOperator((p, p), matvec=lambda v: matvec(np.asarray(v).reshape(-1)), dtype=float)
    return float(eigsh(op, k=1, which="LA", tol=1e-6, return_eigenvectors=False)[0])


@dataclass(frozen=True)
class Acceptance:
    """Chance-constraint result for one card.

    Attributes:
        probability: conservative P_acc (integral minus its error bound; 0 when failed).
        error: absolute error bound of the integral (tail included).
        failed: singular, non-finite or over-tolerance (P_acc forced to 0).
    """

    probability: float
    error: float
    failed: bool

    def admitted(self, alpha: float = 0.10) -> bool:
        """Admit iff P_acc > alpha."""
        return self.probability > alpha


_SQRT2 = math.sqrt(2.0)
# the careful integral's graded breakpoints around a steep root (see _breakpoints)
_STEP_WIDTH = 0.25
_GRADED = (1.0, 4.0, 16.0)
_Gap = Callable[[np.ndarray | float], np.ndarray]
_MERGE = 1e-10  # breakpoints closer than this are one (QUADPACK chokes on empty pieces)
_SATURATED = 8.5  # Phi(-8.5) ~ 1e-17: the inner cdf is 0 or 1 to double precision
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _scalar_boundary(eta0: float, delta: float) -> float:
    """lambda_delta(eta0) = logit(expit(eta0) + delta), +inf when expit(eta0) + delta >= 1."""
    if eta0 >= 0:
        p = 1.0 / (1.0 + math.exp(-eta0))
    else:
        e = math.exp(eta0)
        p = e / (1.0 + e)
    p += delta
    return math.inf if p >= 1.0 else math.log(p / (1.0 - p))


def _boundary(eta0: np.ndarray | float, delta: float, cap: float | None) -> np.ndarray:
    from scipy.special import expit, logit

    p = expit(np.asarray(eta0, dtype=float)) + delta
    lam = np.where(p < 1.0, logit(np.minimum(p, 1.0 - 1e-300)), np.inf)
    return np.minimum(lam, logit(cap)) if cap is not None else lam


def acceptance_probability(
    eta_mean: np.ndarray,
    eta_cov: np.ndarray,
    delta: float = 0.10,
    tolerance: float = 1e-8,
    absolute_cap: float | None = None,
) -> Acceptance:
    """P(p_1 - p_0 <= delta) for (eta_0, eta_1) ~ N(eta_mean, eta_cov) (memory-model.md "Invalidity
    head and chance constraint").

    Args:
        eta_mean: (2,) mean of (z_0'gamma, z_1'gamma).
        eta_cov: (2, 2) covariance.
        absolute_cap: optional c_abs of the "credible joint safe" mode.
    """
    from scipy.integrate import quad
    from scipy.special import ndtr

    m0, m1 = (float(v) for v in eta_mean)
    c = np.asarray(eta_cov, dtype=float)
    if not (np.all(np.isfinite(c)) and math.isfinite(m0) and math.isfinite(m1)):
        return Acceptance(0.0, math.inf, True)
    s00, s11 = float(c[0, 0]), float(c[1, 1])
    if s00 <= 0.0 or s11 <= 0.0:
        return Acceptance(0.0, math.inf, True)
    zeta = float(c[0, 1]) / math.sqrt(s00)
    varsigma2 = s11 - zeta * zeta
    if varsigma2 <= 0.0 or math.sqrt(varsigma2 / s11) < 1e-5:
        return Acceptance(0.0, math.inf, True)
    vs = math.sqrt(varsigma2)

    def gap(t: np.ndarray | float) -> np.ndarray:
        return (
            _boundary(m0 + math.sqrt(s00) * np.asarray(t), delta, absolute_cap)
            - m1
            - zeta * np.asarray(t)
        )

    sd0 = math.sqrt(s00)
    cap = math.inf if absolute_cap is None else math.log(absolute_cap / (1.0 - absolute_cap))

    def integrand(t: float) -> float:
        # scalar math on purpose: quad calls this hundreds of times per card
        g = min(_scalar_boundary(m0 + sd0 * t, delta), cap) - m1 - zeta * t
        tail = 1.0 if g == math.inf else 0.5 * math.erfc(-g / (vs * _SQRT2))
        return math.exp(-0.5 * t * t) * _INV_SQRT_2PI * tail

    points = _breakpoints(gap, vs)
    # full_output: quad reports an abnormal end (round-off, the subdivision limit) in its
    # return value (a 4th item) instead of a warning; such an integral fails closed
    out = quad(
        integrand,
        -10.0,
        10.0,
        points=points or None,
        epsabs=tolerance / 100.0,
        epsrel=0.0,
        limit=400,
        full_output=1,
    )
    value, err, abnormal = out[0], float(out[1]) + 2.0 * float(ndtr(-10.0)), len(out) > 3
    if abnormal or not (math.isfinite(value) and err <= tolerance):
        return Acceptance(0.0, err, True)
    return Acceptance(max(0.0, float(value) - err), err, False)


def _breakpoints(gap: _Gap, varsigma: float) -> list[float]:
    """Breakpoints of the careful integral: each sign change of the gap on an 801-point grid
    (its root), each end of the region where the gap is infinite, and graded points where the
    inner cdf Phi(gap / varsigma) moves on a scale below ``_STEP_WIDTH``.

    Without graded points a step of the inner cdf narrower than the rule's node spacing is
    integrated as if it were not there, with a tiny error estimate (memory-model.md
    "Invalidity head and chance constraint"). Two such places: a root r of the gap, where
    the step has width w = varsigma / |gap'(r)| (the root is then found to a thousandth of w
    and points added at r +- w * ``_GRADED``); and a turning point e of the gap near zero
    (|gap(e)| within ``_SATURATED`` varsigma, or of the other sign than the grid sees: two
    roots inside one cell), where the cdf moves on the scale u = sqrt(2 varsigma / |gap''(e)|)
    (points at e and e +- u * ``_GRADED``, and each root beside it treated as above with
    its width at most u).
    """
    grid = np.linspace(-10.0, 10.0, 801)
    g = gap(grid)
    finite = np.isfinite(g)
    pts: list[float] = []
    for i in range(800):
        if finite[i] != finite[i + 1]:
            pts.append(float(0.5 * (grid[i] + grid[i + 1])))
            if finite[i] and g[i] < 0.0:  # the gap crosses zero on its way up to +inf
                pts.extend(_graded_root(gap, float(grid[i]), float(grid[i + 1]), varsigma))
        elif finite[i] and np.sign(g[i]) != np.sign(g[i + 1]):
            a, b = float(grid[i]), float(grid[i + 1])
            slope = float(g[i + 1] - g[i]) / (b - a)
            root = a - float(g[i]) / slope
            width = varsigma / abs(slope)
            if width < _STEP_WIDTH:
                pts.extend(_graded_root(gap, a, b, varsigma, width))
            else:
                pts.append(root)
    h = float(grid[1] - grid[0])
    with np.errstate(invalid="ignore"):
        d = np.diff(g)
        turning = np.flatnonzero((d[:-1] * d[1:] < 0.0) & finite[:-2] & finite[1:-1] & finite[2:])
        curvature = np.abs(d[1:] - d[:-1]) / (h * h)
    for k in (turning + 1).tolist():
        c = float(curvature[k - 1])
        if c > 0.0 and 2.0 * varsigma / c < _STEP_WIDTH**2:
            pts.extend(_graded_turning(gap, float(grid[k - 1]), float(grid[k + 1]), varsigma))
    kept: list[float] = []
    for p in sorted(p for p in pts if -10.0 < p < 10.0):
        if not kept or p - kept[-1] > _MERGE:  # one root seen from two cells: one point
            kept.append(p)
    return kept


def _graded_root(
    gap: _Gap,
    a: float,
    b: float,
    varsigma: float,
    width: float = math.inf,
) -> list[float]:
    """The root r of the gap in [a, b] (a sign change; +inf counts as positive) and, when the
    step there, varsigma / |gap'(r)| (at most ``width``), is below ``_STEP_WIDTH``, the points
    r +- step * _GRADED."""
    from scipy.optimize import brentq

    def f(t: float) -> float:
        return min(float(gap(t)), 1e300)

    xtol = 1e-3 * width if math.isfinite(width) else 1e-12
    root = float(brentq(f, a, b, xtol=xtol))
    h = 1e-7 * (b - a)
    slope = abs(f(root + h) - f(root - h)) / (2.0 * h)
    step = min(width, varsigma / slope) if slope > 0.0 else width
    if not step < _STEP_WIDTH:
        return [root]
    return [root, *(root + side * step * k for k in _GRADED for side in (-1.0, 1.0))]


def _graded_turning(gap: _Gap, a: float, b: float, varsigma: float) -> list[float]:
    """Graded points around the turning point of the gap inside [a, b] (see _breakpoints)."""
    from scipy.optimize import minimize_scalar

    f = lambda t: float(gap(t))  # noqa: E731
    sign = 1.0 if f(0.5 * (a + b)) <= min(f(a), f(b)) else -1.0  # minimum or maximum
    e = float(
        minimize_scalar(
            lambda t: sign * f(t), bounds=(a, b), method="bounded", options={"xatol": 1e-9}
        ).x
    )
    ge = f(e)
    same_side = np.sign(ge) == np.sign(f(a)) == np.sign(f(b))
    if same_side and abs(ge) > _SATURATED * varsigma:
        return []
    step = 1e-2 * (b - a)
    c = abs(f(e + step) - 2.0 * ge + f(e - step)) / (step * step)
    u = math.sqrt(2.0 * varsigma / c) if c > 0.0 else _STEP_WIDTH
    pts = [e, *(e + side * u * k for k in _GRADED for side in (-1.0, 1.0))]
    for lo, hi in ((a, e), (e, b)):
        if np.sign(f(lo)) != np.sign(f(hi)):
            pts.extend(_graded_root(gap, lo, hi, varsigma, u))
    return pts
