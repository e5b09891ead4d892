"""Context features, gains and design rows (memory-model.md "Rows and eligibility" and "Context
features" and "Immediate head").

Everything here is pure arithmetic on plain values: no archive, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from gigaevo.memory.v2.causal.errors import DesignError, GainOutOfBoundsError

GAIN_TOLERANCE = 1e-9
UNKNOWN_MEASUREMENT_SD = 0.15
PROGRESS_LOG_SCALE = 100.0

KIND_CONTRAST = {"insight": -0.5, "program": 0.5}
RAG_CONTRAST = {"applicable": 0.5, "not_applicable": -0.5, "unassessed": 0.0}


@dataclass(frozen=True)
class RewardDefinition:
    """Declared metric bounds and direction of one task (memory-model.md "Rows and eligibility").

    Attributes:
        lower: declared lower bound ``l`` of the primary metric.
        upper: declared upper bound ``u``; ``u - l`` must be positive.
        higher_is_better: metric direction.
    """

    lower: float
    upper: float
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lower) and math.isfinite(self.upper)):
            raise ValueError("metric bounds must be finite")
        if self.upper - self.lower <= 0:
            raise ValueError(f"metric range must be positive, got [{self.lower}, {self.upper}]")

    @property
    def range(self) -> float:
        """R = u - l."""
        return self.upper - self.lower

    def raw_gain(self, parent: float, child: float) -> float:
        """Direction-oriented raw gain g (positive = better)."""
        return child - parent if self.higher_is_better else parent - child

    def feasible_interval(self, parent: float) -> tuple[float, float]:
        """Normalised feasible gain interval (G-, G+) of a parent with metric ``parent``."""
        r = self.range
        if self.higher_is_better:
            return (self.lower - parent) / r, (self.upper - parent) / r
        return (parent - self.upper) / r, (parent - self.lower) / r

    def normalise_gain(self, parent: float, raw_gain: float) -> float:
        """y = g / R, validated against [G-, G+] up to 1e-9, then clamped.

        Raises:
            GainOutOfBoundsError: the gain lies outside the feasible interval (terminal rejected).
        """
        if not math.isfinite(raw_gain):
            raise GainOutOfBoundsError(f"gain {raw_gain} is not finite")
        lo, hi = self.feasible_interval(parent)
        y = raw_gain / self.range
        if y < lo - GAIN_TOLERANCE or y > hi + GAIN_TOLERANCE:
            raise GainOutOfBoundsError(f"normalised gain {y} outside feasible [{lo}, {hi}]")
        return min(max(y, lo), hi)

    def normalised_parent(self, parent: float) -> float:
        """f~ = clip((f_p - l)/R, 0, 1), flipped to 1 - f~ for lower-is-better metrics."""
        f = min(max((parent - self.lower) / self.range, 0.0), 1.0)
        return f if self.higher_is_better else 1.0 - f


def measurement_sd(
    range_: float,
    se: float | None = None,
    deterministic: bool = False,
    unknown: float = UNKNOWN_MEASUREMENT_SD,
) -> float:
    """Known measurement sd omega_i of a row in normalised units (memory-model.md "Rows and
    eligibility").

    ``unknown`` is omega when the standard error is not known.
    """
    if deterministic:
        return 0.0
    if se is None:
        return unknown
    if se < 0 or not math.isfinite(se):
        raise ValueError(f"standard error must be finite and >= 0, got {se}")
    return se / range_


def progress_feature(t: float, scale: float = PROGRESS_LOG_SCALE) -> float:
    """pi(t) = ln(1 + t) / ln(1 + t + scale); t is the parent iteration index (>= 0)."""
    if t < 0:
        raise ValueError("iteration index must be >= 0")
    if not scale > 0:
        raise ValueError(f"progress log scale must be > 0, got {scale}")
    return math.log1p(t) / math.log1p(t + scale)


def behaviour_transform(
    value: float, low: float, high: float, scale: Literal["linear", "log"] = "linear"
) -> float:
    """Fixed transform of a behaviour value into [0, 1] over the declared domain [low, high].

    Uses the declared domain bounds, never live archive bounds, so rebinning cannot move it.
    """
    if high <= low:
        raise ValueError("behaviour domain must have high > low")
    if scale == "log":
        if low <= 0:
            raise ValueError("log behaviour transform needs low > 0")
        b = (math.log(max(value, low)) - math.log(low)) / (math.log(high) - math.log(low))
    else:
        b = (value - low) / (high - low)
    return min(max(b, 0.0), 1.0)


BehaviourTransform = Literal["declared", "none"]


def behaviour_features(coordinates: Sequence[float], transform: BehaviourTransform) -> list[float]:
    """b_k of the context from the engine's declared-domain unit coordinates.

    ``declared`` keeps each axis's unit coordinate (clipped into [0, 1]: the archive's fixed
    linear or log transform over its declared bounds); ``none`` drops the axes (K = 0).
    """
    if transform == "none":
        return []
    if transform != "declared":
        raise ValueError(f"unknown behaviour transform {transform!r}")
    return [min(max(float(c), 0.0), 1.0) for c in coordinates]


def context_features(
    reward: RewardDefinition,
    parent: float,
    iteration: float,
    behaviour: Sequence[float],
    progress_scale: float = PROGRESS_LOG_SCALE,
) -> np.ndarray:
    """x = [1, 2 f~ - 1, pi(t), 2 b_1 - 1, ..., 2 b_K - 1] (memory-model.md "Context features").

    Args:
        behaviour: transformed behaviour values b_k in [0, 1], length K.

    Returns:
        Array of shape (C,), C = 3 + K.
    """
    b = np.asarray(behaviour, dtype=float)
    if b.ndim != 1 or np.any(b < 0) or np.any(b > 1) or not np.all(np.isfinite(b)):
        raise DesignError("behaviour values must be a 1-D sequence in [0, 1]")
    head = [
        1.0,
        2.0 * reward.normalised_parent(parent) - 1.0,
        progress_feature(iteration, progress_scale),
    ]
    return np.concatenate([np.asarray(head), 2.0 * b - 1.0])


@dataclass(frozen=True)
class DesignSpace:
    """Column layout of the design rows z_a of one fit (memory-model.md "Immediate head").

    z_a = [x ; a (x ; kappa_j ; r ; 1_l(j) (x) x / sqrt(C))], P = 2C + [kappa] + [r] + B C.

    Attributes:
        n_context: C, the context width.
        lineages: the B lineage ids of the fitted space, in column order.
        kind_contrast: include the card-kind contrast column kappa.
        rag_contrast: include the RAG-label contrast column r.
    """

    n_context: int
    lineages: tuple[str, ...] = ()
    kind_contrast: bool = True
    rag_contrast: bool = False
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.n_context < 1:
            raise DesignError("context width must be >= 1")
        if len(set(self.lineages)) != len(self.lineages):
            raise DesignError("lineage ids must be unique")
        object.__setattr__(self, "_index", {k: i for i, k in enumerate(self.lineages)})

    @property
    def shared_size(self) -> int:
        """P_s = 2C + [kappa] + [r]: baseline block, shared effect block and contrasts."""
        return 2 * self.n_context + int(self.kind_contrast) + int(self.rag_contrast)

    @property
    def size(self) -> int:
        """P = P_s + B C."""
        return self.shared_size + len(self.lineages) * self.n_context

    def lineage_position(self, lineage: str) -> int:
        """Index of ``lineage``'s block among the lineage blocks (0 .. B - 1)."""
        try:
            return self._index[lineage]
        except KeyError:
            raise DesignError(f"lineage {lineage!r} is not in the fitted space") from None

    def lineage_slice(self, lineage: str) -> slice:
        """Columns of the lineage block of ``lineage``."""
        start = self.shared_size + self.lineage_position(lineage) * self.n_context
        return slice(start, start + self.n_context)

    def row(
        self,
        x: np.ndarray,
        arm: int,
        lineage: str | None = None,
        kind: str | None = None,
        rag: str | None = None,
    ) -> np.ndarray:
        """Design row z_a of shape (P,) for context x (C,), arm a in {0, 1}."""
        c = self.n_context
        x = np.asarray(x, dtype=float)
        if x.shape != (c,):
            raise DesignError(f"context must have shape ({c},), got {x.shape}")
        if arm not in (0, 1):
            raise DesignError("arm must be 0 or 1")
        z = np.zeros(self.size)
        z[:c] = x
        if arm == 0:
            return z
        if lineage is None:
            raise DesignError("a treated row needs its card lineage")
        z[c : 2 * c] = x
        col = 2 * c
        if self.kind_contrast:
            if kind not in KIND_CONTRAST:
                raise DesignError(f"unknown card kind {kind!r}")
            z[col] = KIND_CONTRAST[kind]
            col += 1
        if self.rag_contrast:
            z[col] = RAG_CONTRAST[rag or "unassessed"]
        z[self.lineage_slice(lineage)] = x / math.sqrt(c)
        return z

    def block_values(self, baseline: float, shared: float, lineage: float) -> np.ndarray:
        """Per-column vector (P,) with one value for the baseline, shared-effect and lineage blocks.

        The contrasts take the shared-effect value (memory-model.md "Immediate head" and
        "Invalidity head and chance constraint").
        """
        v = np.full(self.size, lineage, dtype=float)
        v[: self.n_context] = baseline
        v[self.n_context : self.shared_size] = shared
        return v

    def utility_prior_variance(
        self,
        baseline_sd: float = 0.75,
        shared_sd: float = 0.35,
        lineage_sd: float = 0.25,
        *,
        lineage_intercept_sd: float | None = None,
    ) -> np.ndarray:
        """diag(v) of the immediate (and delayed-lineage) prior, shape (P,).

        Defaults 0.75^2 (baseline) / 0.35^2 (shared effect, contrasts) / 0.25^2 (lineage blocks).
        ``lineage_intercept_sd``, when given, is the sd of a card's own average shift of the
        gain (its lineage block's intercept column, which carries 1/sqrt(C), gets variance
        C * lineage_intercept_sd^2); ``lineage_sd`` then holds for the context slopes only.
        """
        var = self.block_values(baseline_sd**2, shared_sd**2, lineage_sd**2)
        self._set_lineage_intercepts(var, lineage_intercept_sd)
        return var

    def _set_lineage_intercepts(self, var: np.ndarray, sd: float | None) -> None:
        """Give every lineage block's intercept column variance C * sd^2 (None: unchanged)."""
        if sd is not None:
            var[self.shared_size :: self.n_context] = self.n_context * sd**2

    def invalidity_prior(
        self,
        base_rate: float = 0.05,
        baseline_sd: float = 0.15,
        shared_sd: float = 0.20,
        lineage_sd: float = 0.60,
        *,
        baseline_intercept_sd: float | None = None,
        lineage_intercept_sd: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(mu_gamma, v_gamma) of the invalidity head (memory-model.md "Invalidity head and chance
        constraint"), each of shape (P,).

        mu_gamma is logit(base_rate) on the baseline intercept and 0 elsewhere. The block
        sds are that page's; two optional sds loosen only the levels, leaving the context
        slopes at their block's sd:

        - ``baseline_intercept_sd``: sd of the baseline intercept (the problem's own invalid
          logit around logit(base_rate));
        - ``lineage_intercept_sd``: sd of a card's own shift of the invalid logit. Its
          lineage block's intercept column carries x_0 / sqrt(C) = 1 / sqrt(C), so that
          column's variance is C * lineage_intercept_sd^2.
        """
        if not 0.0 < base_rate < 1.0:
            raise ValueError(f"invalid base rate must lie in (0, 1), got {base_rate}")
        mean = np.zeros(self.size)
        mean[0] = math.log(base_rate / (1.0 - base_rate))
        var = self.block_values(baseline_sd**2, shared_sd**2, lineage_sd**2)
        if baseline_intercept_sd is not None:
            var[0] = baseline_intercept_sd**2
        self._set_lineage_intercepts(var, lineage_intercept_sd)
        return mean, var
