"""Bayesian linear regression head with integrated residual scale (memory-model.md "Immediate
head").

A dense design solves the full P x P system per sigma node (O(P^3), the reference path);
a ``BlockDesign`` uses the block-arrowhead Schur-complement solver of ``arrowhead``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import numpy as np

from gigaevo.memory.v2.causal.arrowhead import (
    DENSE_MAX_SIZE,
    BlockDesign,
    BlockStatistics,
    as_block_design,
    block_posterior,
)
from gigaevo.memory.v2.causal.errors import DesignError
from gigaevo.memory.v2.causal.levels import LevelPencil
from gigaevo.memory.v2.causal.quadrature import (
    EDGE_FRACTION,
    QuadratureNodes,
    adaptive_gauss_legendre,
    planned_gauss_legendre,
)
from gigaevo.memory.v2.causal.spectral import (
    BlockTerms,
    DensePencil,
    NodeVariances,
    NoisePencil,
)
from gigaevo.memory.v2.causal.suffstats import FitStatistics

_LOG_2PI = math.log(2.0 * math.pi)
_MAX_OMEGA_GROUPS = 8


@dataclass(frozen=True)
class ConditionalPosterior:
    """Posterior of beta for a fixed residual sd sigma.

    Attributes:
        mean: m(sigma), shape (P,).
        cov: Sigma_beta(sigma) = Lambda^-1, shape (P, P).
        log_evidence: log p(y | sigma).
    """

    mean: np.ndarray
    cov: np.ndarray
    log_evidence: float

    @cached_property
    def _chol(self) -> np.ndarray:
        return np.linalg.cholesky(self.cov)

    def sample(self, xi: np.ndarray) -> np.ndarray:
        """mean + chol(cov) xi for standard normals xi of shape (S, P)."""
        return self.mean + xi @ self._chol.T

    def marginal_variance(self) -> np.ndarray:
        """diag(cov), shape (P,)."""
        return np.diag(self.cov).copy()


class NodeList(list):
    """The components of a dense pencil's nodes, with ``covs`` (K, P, P): the array whose
    slices their ``cov`` are (so it is not stacked again from them)."""

    covs: np.ndarray

    @classmethod
    def of(cls, means: np.ndarray, covs: np.ndarray, evidence: np.ndarray) -> NodeList:
        """The K nodes' ``ConditionalPosterior`` (row k of means (K, P), covs (K, P, P) and
        evidence (K,)): the fields K calls of the constructor set, each set as the frozen
        dataclass's ``__init__`` sets it, in one update (a fit makes about 125)."""
        new = object.__new__
        out = cls()
        for m, c, le in zip(means, covs, evidence.tolist(), strict=True):
            post = new(ConditionalPosterior)
            vars(post).update(mean=m, cov=c, log_evidence=le)
            out.append(post)
        out.covs = covs
        return out


def factor_nodes(posts: list[_Component], covs: np.ndarray | None = None) -> None:
    """Factor the dense nodes ``posts`` not factored yet (``ConditionalPosterior._chol``) in
    one batched LAPACK call instead of one call each: the batch factors each matrix as a
    call of its own does, so the factors, and the draws, are the same numbers. ``covs``:
    the posts' covariances already stacked (``NodeList.covs`` or rows of it, aligned with
    ``posts``): the ones to do are taken from it instead of stacked again."""
    at = [
        i
        for i, p in enumerate(posts)
        if isinstance(p, ConditionalPosterior) and "_chol" not in vars(p)
    ]
    if len(at) < 2:
        return
    todo = [p for p in (posts[i] for i in at) if isinstance(p, ConditionalPosterior)]
    if covs is None:
        covs = np.stack([p.cov for p in todo])
    elif len(todo) != len(posts):  # the covariances of the nodes to do, taken, not stacked
        covs = covs[at]
    chols = np.linalg.cholesky(covs)
    for post, chol in zip(todo, chols, strict=True):
        vars(post)["_chol"] = chol  # the cached property's value, as its first read sets it


@dataclass(frozen=True)
class FitHealth:
    """Health flags of the residual-scale integration (memory-model.md "Immediate head").

    Attributes:
        ok: all numerical checks pass.
        at_boundary: M+ >= 1e-4 (the data push sigma against the upper bound).
        mass_lower, mass_upper: M-, M+ (weight within 1 % of the span from either end).
        modes_converged, depth_limit_hit: mode-search and bisection outcomes.
        mass_error, variance_error, mean_shift: coarse-vs-fine relative errors.
    """

    ok: bool
    at_boundary: bool
    mass_lower: float
    mass_upper: float
    modes_converged: bool
    depth_limit_hit: bool
    mass_error: float
    variance_error: float
    mean_shift: float


class _PendingShift(FitHealth):
    """A ``FitHealth`` whose ``mean_shift`` is formed when first read (then kept): ``_health``
    settles ``ok`` from an upper bound of it when the bound clears the gate, and a fit's
    consumers read only the flags. The value read is the one ``_mean_shift`` gives."""

    def __init__(self, flags: FitHealth, shift: Callable[[], float]) -> None:
        state = vars(self)
        state.update(vars(flags))
        del state["mean_shift"]
        state["_shift"] = shift

    def __getattr__(self, name: str) -> float:
        if name != "mean_shift":
            raise AttributeError(name)
        shift = vars(self).pop("_shift")
        value = shift()
        object.__setattr__(self, "mean_shift", value)
        return value

    def plain(self) -> FitHealth:
        """The ``FitHealth`` of these flags (the shift formed)."""
        return FitHealth(*(getattr(self, name) for name in FitHealth.__dataclass_fields__))

    def __reduce__(self) -> tuple[object, ...]:  # copied and pickled as its plain flags
        return (FitHealth, tuple(getattr(self, name) for name in FitHealth.__dataclass_fields__))

    def __eq__(self, other: object) -> bool:
        return self.plain() == (other.plain() if isinstance(other, _PendingShift) else other)

    def __hash__(self) -> int:
        return hash(self.plain())

    def __repr__(self) -> str:
        return repr(self.plain())


class _Statistics:
    """Sufficient statistics of centred data, grouped by distinct omega when few."""

    @classmethod
    def from_fit(cls, fit: FitStatistics) -> _Statistics:
        """Grouped statistics from kept sums (``suffstats``): one Gram per omega^2 level."""
        out = cls.__new__(cls)
        out.n, out.grouped, out.levels = fit.n, True, fit.levels
        out.counts = np.array([g.count for g in fit.groups])
        dense = [fit.dense(g) for g in fit.groups]
        out.xtx, out.xty = [d[0] for d in dense], [d[1] for d in dense]
        out.yty = [g.yty for g in fit.groups]
        return out

    def __init__(self, x: np.ndarray, y: np.ndarray, omega: np.ndarray) -> None:
        self.n = len(y)
        self.omega2 = omega**2
        levels = np.unique(self.omega2)
        self.grouped = len(levels) <= _MAX_OMEGA_GROUPS
        self.x, self.y = x, y
        self.levels = levels
        self.counts = np.array([np.sum(self.omega2 == lv) for lv in levels])
        masks = [self.omega2 == lv for lv in levels]
        self.xtx = [x[m].T @ x[m] for m in masks]
        self.xty = [x[m].T @ y[m] for m in masks]
        self.yty = [float(y[m] @ y[m]) for m in masks]

    def weighted(self, sigma2: float) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(X'WX, X'Wy, y'Wy, sum ln(sigma^2 + omega^2))."""
        if self.grouped:
            w = 1.0 / (sigma2 + self.levels)
            xwx = np.zeros_like(self.xtx[0]) if self.xtx else np.zeros((0, 0))
            xwy = np.zeros_like(self.xty[0]) if self.xty else np.zeros(0)
            for wi, a, b in zip(w, self.xtx, self.xty, strict=True):
                xwx = xwx + wi * a
                xwy = xwy + wi * b
            ywy = float(np.dot(w, self.yty))
            return xwx, xwy, ywy, float(np.dot(self.counts, np.log(sigma2 + self.levels)))
        wr = 1.0 / (sigma2 + self.omega2)
        return (
            self.x.T @ (wr[:, None] * self.x),
            self.x.T @ (wr * self.y),
            float(np.dot(wr * self.y, self.y)),
            float(np.sum(np.log(sigma2 + self.omega2))),
        )


def _conditional(stats: _Statistics, prior_var: np.ndarray, sigma: float) -> ConditionalPosterior:
    from scipy.linalg import cho_factor, cho_solve

    p = len(prior_var)
    xwx, xwy, ywy, logdet_noise = stats.weighted(sigma * sigma)
    lam = np.diag(1.0 / prior_var)
    if stats.n:
        lam = lam + xwx
        b = xwy
    else:
        b = np.zeros(p)
    factor = cho_factor(lam, lower=True)
    m = cho_solve(factor, b)
    logdet_lam = 2.0 * float(np.sum(np.log(np.diag(factor[0]))))
    log_ev = -0.5 * (
        stats.n * _LOG_2PI
        + logdet_noise
        + logdet_lam
        + float(np.sum(np.log(prior_var)))
        + ywy
        - float(m @ b)
    )
    return ConditionalPosterior(m, cho_solve(factor, np.eye(p)), log_ev)


def conditional_posterior(
    x: np.ndarray,
    y: np.ndarray,
    sigma: float,
    prior_var: np.ndarray,
    prior_mean: np.ndarray | None = None,
    omega: np.ndarray | None = None,
) -> ConditionalPosterior:
    """m(sigma), Sigma_beta(sigma) and log p(y | sigma) for design x (n, P) and targets y (n,)."""
    x, y, omega, mu0 = _check(x, y, prior_var, prior_mean, omega)
    post = _conditional(_Statistics(x, y - x @ mu0, omega), prior_var, sigma)
    return ConditionalPosterior(post.mean + mu0, post.cov, post.log_evidence)


def _check(
    x: np.ndarray,
    y: np.ndarray,
    prior_var: np.ndarray,
    prior_mean: np.ndarray | None,
    omega: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    p = len(prior_var)
    x = np.asarray(x, dtype=float).reshape(-1, p)
    y = np.asarray(y, dtype=float).reshape(-1)
    omega = np.zeros(len(y)) if omega is None else np.asarray(omega, dtype=float).reshape(-1)
    mu0 = np.zeros(p) if prior_mean is None else np.asarray(prior_mean, dtype=float)
    if len(x) != len(y) or len(omega) != len(y) or mu0.shape != (p,):
        raise DesignError("design, targets, omega and prior mean have inconsistent shapes")
    if np.any(prior_var <= 0) or not np.all(np.isfinite(x)) or not np.all(np.isfinite(y)):
        raise DesignError("prior variances must be positive and data finite")
    return x, y, omega, mu0


class BayesianLinearHead:
    """Gaussian linear head y ~ N(z'beta, sigma^2 + omega^2), sigma integrated out.

    Args:
        prior_variance: diag(v), shape (P,).
        prior_mean: mu_0, shape (P,) (zeros when None).
        residual_sd_bounds: truncation [sigma_min, sigma_max] of the residual sd.
        residual_sd_median: prior median of sigma (log-normal).
        residual_log_sd: prior sd of ln sigma.
        block_layout: (P_s, C) of the block-arrowhead design layout; with it a dense design
            wider than ``DENSE_MAX_SIZE`` columns is fitted on the Schur-complement path.

    Learned attributes (after ``fit``): ``log_sd_nodes_`` (K,), ``weights_`` (K,),
    ``component_means_`` (K, P), ``coef_mean_`` (P,), ``coef_var_`` (P,) marginal posterior
    variances, ``coef_cov_`` (P, P; dense designs only, else None), ``residual_variance_``
    (posterior mean of sigma^2), ``log_marginal_``, ``health_``, ``quadrature_`` (the
    residual-scale nodes and accepted pieces: a plan for a later fit) and ``planned_``
    (whether a given plan was used).
    """

    def __init__(
        self,
        prior_variance: np.ndarray,
        prior_mean: np.ndarray | None = None,
        residual_sd_bounds: tuple[float, float] = (0.01, 5.0),
        residual_sd_median: float = 0.20,
        residual_log_sd: float = 0.75,
        block_layout: tuple[int, int] | None = None,
    ) -> None:
        self.prior_variance = prior_variance
        self.prior_mean = prior_mean
        self.residual_sd_bounds = residual_sd_bounds
        self.residual_sd_median = residual_sd_median
        self.residual_log_sd = residual_log_sd
        self.block_layout = block_layout

    def fit(
        self, x: np.ndarray | BlockDesign, y: np.ndarray, omega: np.ndarray | None = None
    ) -> BayesianLinearHead:
        """Fit on a design (dense (n, P) or ``BlockDesign``), targets y (n,), omega (n,).

        A ``BlockDesign`` uses the Schur-complement solver (memory-model.md "Immediate head");
        so does a dense design wider than ``DENSE_MAX_SIZE`` when ``block_layout`` is set.
        """
        prior_var = np.asarray(self.prior_variance, dtype=float)
        x = as_block_design(x, self.block_layout, len(prior_var))
        return self._integrate(self._solver(x, y, omega, prior_var))

    def fit_statistics(
        self,
        stats: FitStatistics,
        plan: QuadratureNodes | None = None,
        terms: BlockTerms | None = None,
    ) -> BayesianLinearHead:
        """Fit on kept sufficient statistics (``suffstats``) instead of a design: the same
        posterior as ``fit`` on the rows they sum (memory-model.md "Immediate head"),
        without touching the rows.

        ``plan``: the residual-scale integration of an earlier fit (its ``quadrature_``):
        its accepted pieces are used when the 8- and 16-node rules still agree on each of
        them, or on the bisection of the few in disagreement (``planned_gauss_legendre``),
        and the fit is healthy (``planned_`` True), else the integration is adaptive
        (memory-model.md "Incremental fits").

        Wider than ``DENSE_MAX_SIZE`` columns (or with ``block_layout`` set and wide) the
        block-arrowhead solvers are used, else the dense ones, as ``fit`` chooses.

        ``terms``: a one-level block fit's per-chunk block sums kept from the caller's
        earlier fits (``BlockTerms``): the chunks whose blocks did not move are not formed
        again; the fit is the same numbers as without them.
        """
        prior_var = np.asarray(self.prior_variance, dtype=float)
        if stats.size != len(prior_var):
            raise DesignError("statistics and prior have inconsistent shapes")
        if np.any(prior_var <= 0):
            raise DesignError("prior variances must be positive and data finite")
        mu0 = _prior_mean(self.prior_mean, len(prior_var))
        centred = stats.centred(mu0)
        solver: _NodeSolver | _PencilSolver | _DenseSolver
        if len(prior_var) > DENSE_MAX_SIZE:
            if len(centred.levels) == 1:  # one level: every sigma in one eigenbasis
                one = NoisePencil(BlockStatistics.from_fit(centred), prior_var, terms)
                solver = _PencilSolver(one, mu0)
            else:
                solver = _PencilSolver(LevelPencil(centred, prior_var), mu0)
        elif len(centred.levels) == 1:
            group = centred.groups[0]
            xtx, xty = centred.dense(group)
            level = float(centred.levels[0])
            pencil = DensePencil.from_gram(xtx, xty, group.yty, group.count, level, prior_var)
            solver = _DenseSolver(pencil, mu0)
        else:
            grouped = _Statistics.from_fit(centred)
            solver = _NodeSolver(lambda tau: _conditional(grouped, prior_var, math.exp(tau)), mu0)
        return self._integrate(solver, plan)

    def _integrate(
        self,
        solver: _NodeSolver | _PencilSolver | _DenseSolver,
        plan: QuadratureNodes | None = None,
    ) -> BayesianLinearHead:
        """Integrate the residual scale over ``solver``'s conditional posteriors
        (memory-model.md "Immediate head", residual scale): on the pieces of ``plan`` when
        they still resolve the kernel and the fit is healthy, else adaptively."""
        lo, hi = (math.log(b) for b in self.residual_sd_bounds)
        if not hi > lo:
            raise DesignError("residual sd bounds must satisfy 0 < low < high")
        center, scale = math.log(self.residual_sd_median), self.residual_log_sd

        def kernel(tau: float) -> float:
            return solver.log_evidence(tau) - 0.5 * ((tau - center) / scale) ** 2

        batch = None
        if solver.log_evidence_batch is not None:
            evidence = solver.log_evidence_batch

            def batch(taus: np.ndarray) -> np.ndarray:
                return evidence(taus) - 0.5 * ((taus - center) / scale) ** 2

        nodes = None
        if plan is not None:
            # the plan's evaluation keeps its block sums; the few sigmas of a bisection of
            # pieces in disagreement are formed without them
            pencil = solver if batch is not None and isinstance(solver, _PencilSolver) else None
            nodes = planned_gauss_legendre(
                kernel,
                plan.pieces,
                plan.modes,
                plan.modes_converged,
                h_batch=batch,
                on_refine=pencil.drop_terms if pencil is not None else None,
            )
        self.planned_ = nodes is not None
        if nodes is None:
            if isinstance(solver, _PencilSolver):  # its batches do not come again: not kept
                solver.drop_terms()
            nodes = adaptive_gauss_legendre(kernel, lo, hi, h_batch=batch)
        self.quadrature_ = nodes
        fine, coarse = _mixtures(nodes, solver)
        self.log_sd_nodes_, self.weights_ = fine.taus, fine.weights
        self.component_means_ = fine.means
        self._components = fine.components
        self._fine = fine
        self.coef_mean_ = fine.mean
        self.residual_variance_ = fine.sigma2
        self.log_marginal_ = fine.log_mass
        self.health_ = _health(fine, coarse, nodes.modes_converged, nodes.depth_limit_hit, lo, hi)
        if self.planned_ and not self.health_.ok:
            return self._integrate(solver)  # the plan no longer serves: adaptive
        return self

    def _solver(
        self,
        x: np.ndarray | BlockDesign,
        y: np.ndarray,
        omega: np.ndarray | None,
        prior_var: np.ndarray,
    ) -> _NodeSolver | _PencilSolver | _DenseSolver:
        if isinstance(x, BlockDesign):
            yc, om = _check_block(x, y, omega, prior_var)
            mu0 = _prior_mean(self.prior_mean, len(prior_var))
            block_stats = BlockStatistics(x, yc - x.dot(mu0), om)
            if len(block_stats.levels) == 1:  # one noise level: all sigmas in one pencil
                return _PencilSolver(NoisePencil(block_stats, prior_var), mu0)

            def solve(tau: float) -> _Component:
                return block_posterior(block_stats, prior_var, math.exp(tau))
        else:
            xd, yd, om, mu0 = _check(x, y, prior_var, self.prior_mean, omega)
            yc = yd - xd @ mu0
            if len(om) and np.all(om == om[0]):  # one noise level: every sigma in one pencil
                return _DenseSolver(DensePencil(xd, yc, float(om[0]) ** 2, prior_var), mu0)
            stats = _Statistics(xd, yc, om)

            def solve(tau: float) -> _Component:
                return _conditional(stats, prior_var, math.exp(tau))

        return _NodeSolver(solve, mu0)

    @property
    def coef_var_(self) -> np.ndarray:
        """Marginal posterior variances of the mixture (P,), formed when first read."""
        var = self._fine.var
        assert var is not None  # the fine mixture is always built in full
        return var

    @property
    def components_(self) -> tuple[_Component, ...]:
        """The sigma-node conditional posteriors of the mixture, aligned with ``weights_``.

        Their ``mean`` excludes the prior mean; ``component_means_`` includes it.
        """
        return tuple(self._components)

    @property
    def coef_cov_(self) -> np.ndarray | None:
        """The mixture's coefficient covariance (P, P; dense designs only, else None),
        formed when first read."""
        return self._fine.cov

    @property
    def node_covariances_(self) -> np.ndarray | None:
        """(K, P, P): the dense nodes' covariances as one array (their ``cov`` are its
        slices), or None when the nodes do not keep one (``NodeList``)."""
        comps = self._components
        return comps.covs if isinstance(comps, NodeList) else None

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n coefficient draws, shape (n, P): node k with probability w_k, then N(m_k, Sigma_k)."""
        ks = rng.choice(len(self.weights_), size=n, p=self.weights_)
        xi = rng.standard_normal((n, self.component_means_.shape[1]))
        out = np.empty_like(xi)
        # the draws of each node, in draw order (a stable sort groups them once instead of
        # one mask over all n draws per node)
        order = np.argsort(ks, kind="stable")
        nodes, starts = np.unique(ks[order], return_index=True)
        comps = self._components
        visited = [comps[k] for k in nodes.tolist()]
        covs = None
        if isinstance(comps, NodeList):
            covs = comps.covs if len(nodes) == len(comps) else comps.covs[nodes]
        factor_nodes(visited, covs)
        if not all(isinstance(p, ConditionalPosterior) for p in visited):
            for k, rows in zip(nodes.tolist(), np.split(order, starts[1:]), strict=True):
                out[rows] = self._components[k].sample(xi[rows]) + (
                    self.component_means_[k] - self._components[k].mean
                )
            return out
        # dense nodes: per node one product of its draws (contiguous, in draw order, as
        # xi[rows] is) with its factor; the sums (m_k + xi L_k') + (mu_k - m_k) of every
        # draw at once, the same numbers as node by node
        grouped = xi[order]
        ends = np.r_[starts[1:], n]
        for p, a, b in zip(visited, starts.tolist(), ends.tolist(), strict=True):
            assert isinstance(p, ConditionalPosterior)
            grouped[a:b] = grouped[a:b] @ p._chol.T
        node_of = np.repeat(np.arange(len(nodes)), ends - starts)
        centred = np.array([p.mean for p in visited])
        grouped += centred[node_of]
        grouped += (self.component_means_[nodes] - centred)[node_of]
        out[order] = grouped
        return out


def _prior_mean(prior_mean: np.ndarray | None, p: int) -> np.ndarray:
    mu0 = np.zeros(p) if prior_mean is None else np.asarray(prior_mean, dtype=float)
    if mu0.shape != (p,):
        raise DesignError("prior mean must have shape (P,)")
    return mu0


def _check_block(
    x: BlockDesign, y: np.ndarray, omega: np.ndarray | None, prior_var: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y, dtype=float).reshape(-1)
    om = np.zeros(len(y)) if omega is None else np.asarray(omega, dtype=float).reshape(-1)
    if x.size != len(prior_var) or len(x.lineage) != len(y) or len(om) != len(y):
        raise DesignError("block design, targets, omega and prior have inconsistent shapes")
    if np.any(prior_var <= 0) or not np.all(np.isfinite(y)):
        raise DesignError("prior variances must be positive and data finite")
    return y, om


class _Component(Protocol):
    """A conditional posterior for one sigma node (dense or block-arrowhead)."""

    @property
    def mean(self) -> np.ndarray: ...

    @property
    def log_evidence(self) -> float: ...

    def sample(self, xi: np.ndarray) -> np.ndarray: ...

    def marginal_variance(self) -> np.ndarray: ...


class _NodeSolver:
    """Conditional posteriors one sigma node at a time (dense, or several noise levels)."""

    log_evidence_batch = None

    def __init__(self, solve: Callable[[float], _Component], mu0: np.ndarray) -> None:
        self._solve, self.mu0 = solve, mu0
        self._cache: dict[float, _Component] = {}

    def posterior_at(self, tau: float) -> _Component:
        if tau not in self._cache:
            self._cache[tau] = self._solve(tau)
        return self._cache[tau]

    def log_evidence(self, tau: float) -> float:
        return self.posterior_at(tau).log_evidence

    def nodes(
        self, taus: np.ndarray, full: bool
    ) -> tuple[list[_Component], np.ndarray, np.ndarray | None]:
        """(components, centred means (K, P), marginal variances (K, P) when ``full``)."""
        posts = [self.posterior_at(float(t)) for t in taus]
        means = np.array([p.mean for p in posts])
        var = np.array([p.marginal_variance() for p in posts]) if full else None
        return posts, means, var


class _BatchEvidence:
    """The log evidence of a pencil (any sigma, or a batch of them at once)."""

    _pencil: NoisePencil | LevelPencil | DensePencil

    def log_evidence(self, tau: float) -> float:
        return float(self._pencil.log_evidence(np.array([math.exp(tau)]))[0])

    def log_evidence_batch(self, taus: np.ndarray) -> np.ndarray:
        return self._pencil.log_evidence(np.exp(taus))


class _PencilSolver(_BatchEvidence):
    """All sigma nodes of a block design at once: a ``NoisePencil`` (one noise level) or a
    ``LevelPencil`` (several)."""

    def __init__(self, pencil: NoisePencil | LevelPencil, mu0: np.ndarray) -> None:
        self._pencil, self.mu0 = pencil, mu0
        self._block = pencil
        # the columns where node means can move (one noise level), None: all of them
        self.moving = pencil.moving if isinstance(pencil, NoisePencil) else None

    def drop_terms(self) -> None:
        """Keep no block sums of the evaluations to come (an adaptive integration's)."""
        if isinstance(self._block, NoisePencil):
            self._block.terms = None

    def nodes(
        self, taus: np.ndarray, full: bool
    ) -> tuple[list[_Component], np.ndarray, np.ndarray | NodeVariances | None]:
        """(components, centred means (K, P), marginal variances (K, P) when ``full``: for
        one noise level a ``NodeVariances``, formed as far as the mixture asks)."""
        if not full:
            if isinstance(self._block, NoisePencil):  # (K, len(moving)): see ``_moments``
                return [], self._block.moving_means(np.exp(taus)), None
            return [], self._block.means(np.exp(taus)), None
        if isinstance(self._block, NoisePencil):
            posts, means, lazy = self._block.lazy_posteriors(np.exp(taus))
            return list(posts), means, lazy
        posts, means, var = self._block.posteriors(np.exp(taus))
        return list(posts), means, var


class _DenseSolver(_BatchEvidence):
    """All sigma nodes of a dense design with one noise level through a ``DensePencil``."""

    def __init__(self, pencil: DensePencil, mu0: np.ndarray) -> None:
        self._pencil, self.mu0 = pencil, mu0
        self._dense = pencil

    def nodes(
        self, taus: np.ndarray, full: bool
    ) -> tuple[list[_Component], np.ndarray, np.ndarray | None]:
        """(components, centred means (K, P), marginal variances (K, P) when ``full``)."""
        sigmas = np.exp(taus)
        means = self._dense.means(sigmas)
        if not full:
            return [], means, None
        covs = self._dense.covariances(sigmas)
        evidence = self._dense.log_evidence(sigmas)
        posts = NodeList.of(means, covs, evidence)
        return posts, means, np.diagonal(covs, axis1=1, axis2=2).copy()


@dataclass(frozen=True)
class _Mixture:
    """The sigma mixture; ``var`` = sum_k w_k var_k + sum_k w_k (m_k - mean)^2, formed from
    ``node_var`` when first read (None unless built in full). ``means`` are the node means
    (K, P); a mixture not built in full on a one-level pencil keeps only their moving
    columns (``NoisePencil.moving``)."""

    taus: np.ndarray
    weights: np.ndarray
    components: list[_Component]
    means: np.ndarray
    mean: np.ndarray
    node_var: np.ndarray | NodeVariances | None
    spread: np.ndarray  # sum_k w_k (m_k - mean)^2, (P,)
    # (the nodes' covariances (K, P, P), the deviations m_k - mean (K, P)) of a dense
    # mixture built in full, for ``cov``; None otherwise
    cov_terms: tuple[np.ndarray, np.ndarray] | None
    sigma2: float
    log_mass: float

    @cached_property
    def cov(self) -> np.ndarray | None:
        """sum_k w_k Sigma_k + sum_k w_k (m_k - mean)(m_k - mean)' (dense, built in full;
        else None), formed when first read: a decision reads only the nodes."""
        if self.cov_terms is None:
            return None
        covs, dev = self.cov_terms
        w = self.weights
        return np.einsum("k,kij->ij", w, covs) + (dev.T * w) @ dev

    @cached_property
    def var(self) -> np.ndarray | None:
        if self.node_var is None:
            return None
        if isinstance(self.node_var, NodeVariances):
            return self.node_var.weighted(self.weights) + self.spread
        return self.weights @ self.node_var + self.spread


def _node_weights(taus: np.ndarray, log_w: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(the nodes kept, in order of tau; their normalised weights; the log mass): weights
    below 1e-12 of the largest dropped."""
    top = float(np.max(log_w))
    w = np.exp(log_w - top)
    log_mass = top + math.log(float(np.sum(w)))
    keep = w >= 1e-12 * float(np.max(w))
    order = np.argsort(taus[keep])
    taus, w = taus[keep][order], w[keep][order]
    return taus, w / np.sum(w), log_mass


def _mixtures(
    nodes: QuadratureNodes, solver: _NodeSolver | _PencilSolver | _DenseSolver
) -> tuple[_Mixture, _Mixture]:
    """The fine (16-node) sigma mixture, built in full, and the coarse (8-node) one of the
    health check (no variances). On a one-level pencil both sets of nodes are formed in one
    batch (``NoisePencil.node_pair``)."""
    fine = _node_weights(nodes.fine_nodes, nodes.fine_log_weights)
    coarse = _node_weights(nodes.coarse_nodes, nodes.coarse_log_weights)
    pencil = solver._block if isinstance(solver, _PencilSolver) else None
    if isinstance(pencil, NoisePencil):
        posts, means, lazy, moving = pencil.node_pair_moving(np.exp(fine[0]), np.exp(coarse[0]))
        k = len(fine[0])
        return (
            _moments(*fine, solver, list(posts), means, lazy, True, moving[:k]),
            _moments(*coarse, solver, [], moving[k:], None, False),
        )
    return (
        _moments(*fine, solver, *solver.nodes(fine[0], True), True),
        _moments(*coarse, solver, *solver.nodes(coarse[0], False), False),
    )


def _moments(
    taus: np.ndarray,
    w: np.ndarray,
    log_mass: float,
    solver: _NodeSolver | _PencilSolver | _DenseSolver,
    posts: list[_Component],
    centred: np.ndarray,
    node_var: np.ndarray | NodeVariances | None,
    full: bool,
    moving_means: np.ndarray | None = None,
) -> _Mixture:
    """The mixture of kept nodes ``taus`` with weights ``w`` from the solver's components,
    centred means and (when ``full``) marginal variances of those nodes. ``moving_means``:
    the centred means on the solver's moving columns, (K, len(moving)), when the caller
    has them (``NoisePencil.node_pair_moving``): taken instead of gathering those columns."""
    mu0 = solver.mu0
    shifted = bool(np.any(mu0))
    moving = getattr(solver, "moving", None)
    cov_terms = None
    if moving is None:
        means = centred + mu0 if shifted else centred
        mean = w @ means
        dev = means - mean
        if full and all(isinstance(p, ConditionalPosterior) for p in posts):
            covs = (
                posts.covs if isinstance(posts, NodeList) else np.array([p.cov for p in posts])  # type: ignore[attr-defined]
            )
            cov_terms = (covs, dev)
        spread = w @ dev**2
    else:
        # a column outside ``moving`` holds mu0 at every node: its mixture mean is mu0 and
        # its spread 0, so only the moving columns are weighed. The solver gives the means
        # on the moving columns only when no per-node means are kept (``full`` False); then
        # ``means`` holds those columns.
        narrow = centred.shape[1] == len(moving)
        # (a gather of columns is column-major: the weighted sums below are formed on it;
        # given, the same numbers are copied into that layout, from contiguous rows)
        if narrow:
            sub = centred
        elif moving_means is not None:
            sub = np.array(moving_means, order="F")
        else:
            sub = centred[:, moving]
        if shifted:
            sub = sub + mu0[moving]
        means = sub if not full else (centred + mu0 if shifted else centred)
        mean = np.array(mu0, dtype=float)
        mean[moving] = w @ sub
        # the deviations and their squares in the memory of ``sub`` when it is a gather
        # no one else holds (a full mixture's: its ``means`` are the full rows), else anew
        own = full and not narrow and not shifted
        dev = np.subtract(sub, mean[moving], out=sub if own else None)
        dev *= dev
        spread = np.zeros(len(mean))
        spread[moving] = w @ dev
    sigma2 = float(w @ np.exp(2.0 * taus))
    return _Mixture(taus, w, posts, means, mean, node_var, spread, cov_terms, sigma2, log_mass)


def _shift_bound(fine: _Mixture, coarse: _Mixture, gate: float = 1e-3) -> float | None:
    """An upper bound of ``_mean_shift`` from a lower bound of the variances, or None
    without one (the maximum is formed then). First the cheap one (``weighted_floor``: the
    coarse and fine means differ only on the moving columns), then, when it exceeds
    ``gate``, the tighter one of ``NodeVariances.weighted_lower``."""
    nv = fine.node_var
    diff = np.abs(coarse.mean - fine.mean)
    if not len(diff) or not isinstance(nv, NodeVariances):
        return None
    floor, moving = nv.weighted_floor(fine.weights), nv.moving
    rest = np.delete(diff, moving)
    if not np.any(rest):  # NaN or a shift outside the moving columns: not settled here
        bound = float(np.max(diff[moving] / np.sqrt(floor + fine.spread[moving])))
        if bound <= gate:
            return bound
    low, _ = nv.weighted_lower(fine.weights)
    return float(np.max(diff / np.sqrt(low + fine.spread)))  # NaN: not a bound


def _mean_shift(fine: _Mixture, coarse: _Mixture) -> float:
    """max_i |coarse mean_i - fine mean_i| / sd_i, sd from the fine mixture.

    With a ``NodeVariances`` the variances of most lineage blocks are not formed: a lower
    bound of each variance gives an upper bound of each ratio; the largest exact ratio on the
    columns where the bound is exact (shared and prior blocks) is a floor, and only the
    blocks holding a column whose bound exceeds that floor are formed exactly. Every column
    left out has a ratio at most its bound, at most the floor: the maximum is exact.
    """
    diff = np.abs(coarse.mean - fine.mean)
    if not len(diff):
        return 0.0
    nv = fine.node_var
    if not isinstance(nv, NodeVariances) or not np.all(np.isfinite(diff)):
        assert fine.var is not None  # the fine mixture is always built in full
        return float(np.max(diff / np.sqrt(fine.var)))
    low, exact = nv.weighted_lower(fine.weights)
    bound = diff / np.sqrt(low + fine.spread)
    floor = float(np.max(bound[exact]))  # the shared block is always exact
    late = np.flatnonzero(~exact & ~(bound <= floor))  # a NaN bound is formed exactly
    if len(late):
        pos = np.unique(nv.block_of_columns(late))
        cols = nv.block_columns(pos)  # (len(pos), C)
        var = nv.weighted_blocks(fine.weights, pos) + fine.spread[cols]
        floor = float(np.max(np.concatenate(([floor], (diff[cols] / np.sqrt(var)).ravel()))))
    return floor


def _health(
    fine: _Mixture, coarse: _Mixture, converged: bool, depth_hit: bool, lo: float, hi: float
) -> FitHealth:
    edge = EDGE_FRACTION * (hi - lo)
    m_lo = float(np.sum(fine.weights[fine.taus <= lo + edge]))
    m_hi = float(np.sum(fine.weights[fine.taus >= hi - edge]))
    mass_err = abs(math.expm1(coarse.log_mass - fine.log_mass))
    var_err = abs(coarse.sigma2 - fine.sigma2) / fine.sigma2
    rest = converged and not depth_hit and mass_err <= 1e-5 and var_err <= 1e-3
    # the shift's exact maximum forms the variances of the lineage blocks its bound cannot
    # settle; when the other checks fail, or the bound already clears the gate, ``ok`` does
    # not depend on it, and it is formed only if read (the same value)
    bound = _shift_bound(fine, coarse) if rest else None
    shift = None if not rest or (bound is not None and bound <= 1e-3) else _mean_shift(fine, coarse)
    health = FitHealth(
        ok=bool(rest and (shift is None or shift <= 1e-3)),
        at_boundary=m_hi >= 1e-4,
        mass_lower=m_lo,
        mass_upper=m_hi,
        modes_converged=converged,
        depth_limit_hit=depth_hit,
        mass_error=mass_err,
        variance_error=var_err,
        mean_shift=math.nan if shift is None else shift,
    )
    if shift is None:
        return _PendingShift(health, lambda: _mean_shift(fine, coarse))
    return health
