"""The Monte Carlo part of memory-model.md "Viability": the heads a retirement sweep draws
worlds from, a card's worlds in one (context, RAG state), the count of worlds that are safe
and useful, and that count's Wilson bound. ``gigaevo.memory.v2.causal.retirement`` judges a
card with them (eligibility, the safety integral, the verdict). Pure and I/O-free.

Viability needs only the linear predictors z_0'theta and z_1'theta of each head in each
world, so the draws are taken from their exact joint law: for a Gaussian-mixture head
(immediate, delayed-lineage) pick node k with probability w_k, then the bivariate normal
(z_0, z_1)'N(m_k, Sigma_k); for the Laplace invalidity head N(S gamma-hat, S Sigma_gamma S').
This is the distribution of the projected coherent world draws at O(P_s + C) cost per card
instead of O(P) (P grows with the bank). A head's worlds are ``MixtureProjector.draw``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gigaevo.memory.v2.causal.blr import BayesianLinearHead
from gigaevo.memory.v2.causal.features import DesignSpace
from gigaevo.memory.v2.causal.invalidity import LogisticLaplaceHead
from gigaevo.memory.v2.causal.projection import MixtureProjector, card_columns, chol2x2


def wilson_upper(k: int, n: int, z: float = 1.96) -> float:
    """Wilson score upper bound of a binomial proportion k / n (memory-model.md "Viability")."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    p, z2 = k / n, z * z
    top = p + z2 / (2 * n) + z * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    return min(1.0, top / (1.0 + z2 / n))


@dataclass
class RetirementHeads:
    """Heads fitted on one evidence version; ``lineage`` is None while inactive (no rows)."""

    space: DesignSpace
    immediate: BayesianLinearHead
    invalidity: LogisticLaplaceHead
    lineage: BayesianLinearHead | None = None
    _projectors: dict[int, MixtureProjector] = field(default_factory=dict, repr=False)
    _levels: dict[str, tuple[float, LogisticLaplaceHead] | None] = field(
        default_factory=dict, repr=False
    )

    def projector(self, head: BayesianLinearHead) -> MixtureProjector:
        key = id(head)
        if key not in self._projectors:
            self._projectors[key] = MixtureProjector(head, self.space)
        return self._projectors[key]

    def other_level(self, lineage: str) -> tuple[float, LogisticLaplaceHead] | None:
        """(posterior probability, invalidity head) of the shift level of ``lineage`` that the
        invalidity head did not choose (memory-model.md "Card shift levels"); None with one
        level. The head picks a card's level by approximate posterior odds, so the other
        level can keep up to about half of the posterior mass; a verdict weighs both, each
        by its Laplace evidence."""
        inv = self.invalidity
        levels = inv.shift_levels
        if levels is None or not inv.ok_:
            return None
        if lineage not in self._levels:
            from scipy.special import expit

            column = self.space.lineage_slice(lineage).start
            wide = bool(np.isin(column, inv.wide_columns_))
            other = inv.with_level(column, not wide)
            if not other.ok_:
                self._levels[lineage] = (1.0, other)  # fail-keep: evaluate says why
            else:  # Laplace evidence of each level at its own MAP, times the prior odds
                prior = math.log(levels.weight / (1.0 - levels.weight))
                odds = (-prior if wide else prior) + other.log_evidence() - inv.log_evidence()
                self._levels[lineage] = (float(expit(odds)), other)
        return self._levels[lineage]

    def safety_moments(
        self, lineage: str, z0: np.ndarray, z1: np.ndarray, head: LogisticLaplaceHead | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(eta-bar (2,), Sigma_eta (2, 2)) of the invalidity head (or ``head``) at the arm rows
        z0, z1.

        A dense fit keeps Sigma_gamma: slice it on the card's columns (O((P_s + C)^2));
        a block fit solves with its factored precision.
        """
        inv = self.invalidity if head is None else head
        if inv.coef_cov_ is None:
            return inv.linear_predictor(z0, z1)
        cols = card_columns(self.space, lineage)
        s = np.vstack([z0, z1])[:, cols]
        return s @ inv.coef_[cols], s @ inv.coef_cov_[np.ix_(cols, cols)] @ s.T

    def world_values(
        self,
        lineage: str,
        z0: np.ndarray,
        z1: np.ndarray,
        bounds: tuple[float, float],
        n: int,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """n worlds' values (z_0'beta, z_1'beta) of the immediate head plus the positive part
        of the delayed-lineage head's (when active), clipped to the gain bounds (G-, G+),
        shape (n, 2); the immediate head's draws first, from ``rng``."""
        v = self.projector(self.immediate).draw(lineage, z0, z1, n, rng)  # own arrays: in place
        if self.lineage is not None:
            delayed = self.projector(self.lineage).draw(lineage, z0, z1, n, rng)
            v += np.maximum(0.0, delayed, out=delayed)
        return np.clip(v, *bounds, out=v)


def invalid_logits(
    mean: np.ndarray, cov: np.ndarray, n: int, rng: np.random.Generator
) -> np.ndarray:
    """n draws of the two arms' invalidity logits from N(mean (2,), cov (2, 2)), (n, 2)."""
    return mean + rng.standard_normal((n, 2)) @ chol2x2(cov[None])[0].T


def useful_worlds(
    v: np.ndarray, eta: np.ndarray, lo: float, theta: float, delta: float
) -> int | None:
    """#{worlds: p_1 - p_0 <= delta and Delta > theta} for clipped values v and invalid
    logits eta (each (n, 2)); None when a prediction is not finite."""
    from scipy.special import expit

    p = expit(eta)
    q = 1.0 - p  # q = (1 - p) v + p lo, the same products and sum, without temporaries
    q *= v
    q += p * lo
    if not np.isfinite(q).all():  # a NaN p (the only non-finite expit) makes its q NaN
        return None
    useful = (p[:, 1] - p[:, 0] <= delta) & (q[:, 1] - q[:, 0] > theta)
    return int(np.count_nonzero(useful))
