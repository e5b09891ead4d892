"""Measurement noise of a problem's primary metric (``problem.yaml``'s ``noise`` key).

A problem says how precisely one evaluation measures its primary metric, so that the
causal memory can weigh each outcome by its known measurement sd (memory-model.md
"Rows and eligibility": omega_i = se / R with a known standard error, 0 for a
deterministic evaluation, the configured
``memory.posterior_config.unknown_measurement_sd`` when nothing is known):

- ``deterministic``: evaluating the same program twice gives the same number (the
  built-in problems). Variation between children still exists and is learned as the
  heads' residual sd; nothing is *known* about it beforehand.
- ``constant``: every evaluation has the standard error ``se`` (metric units).
- ``metric``: the validator returns the standard error of each evaluation under the
  name ``metric`` (e.g. a mean over random instances and its standard error).
- ``estimate``: the framework evaluates each initial program ``repeats`` times at
  start-up and uses the pooled within-program sd as a constant standard error (kept in
  the run's store, so a resumed run uses the same figure).
- ``unknown``: nothing is declared (the default when the key is absent).

Plain data and pure functions only; the start-up estimation, which needs an evaluator,
lives in ``gigaevo.pipeline.noise``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

NoiseKind = Literal["deterministic", "constant", "metric", "estimate", "unknown"]
NOISE_KINDS: tuple[str, ...] = ("deterministic", "constant", "metric", "estimate", "unknown")
DEFAULT_REPEATS = 5
_KEYS = {
    "deterministic": frozenset({"kind"}),
    "constant": frozenset({"kind", "se"}),
    "metric": frozenset({"kind", "metric"}),
    "estimate": frozenset({"kind", "repeats"}),
    "unknown": frozenset({"kind"}),
}


@dataclass(frozen=True)
class MeasurementNoise:
    """How noisy one evaluation of the primary metric is (see the module docstring).

    Attributes:
        kind: one of ``NOISE_KINDS``.
        se: the standard error in metric units (``constant``; ``estimate`` once estimated).
        metric: the validator's name for the standard error (``metric``).
        repeats: evaluations of each initial program at start-up (``estimate``).
    """

    kind: NoiseKind = "unknown"
    se: float | None = None
    metric: str | None = None
    repeats: int = DEFAULT_REPEATS

    def __post_init__(self) -> None:
        if self.kind not in NOISE_KINDS:
            raise ValueError(f"noise.kind must be one of {list(NOISE_KINDS)}, got {self.kind!r}")
        if self.se is not None and not (math.isfinite(self.se) and self.se >= 0):
            raise ValueError(f"noise.se must be a finite number >= 0, got {self.se}")
        if self.kind == "constant" and self.se is None:
            raise ValueError("noise.kind=constant needs noise.se (metric units)")
        if self.kind == "metric" and not self.metric:
            raise ValueError("noise.kind=metric needs noise.metric (the validator's key)")
        if self.repeats < 2:
            raise ValueError(f"noise.repeats must be >= 2, got {self.repeats}")

    def with_estimate(self, se: float) -> MeasurementNoise:
        """This ``estimate`` declaration with its start-up figure filled in."""
        return MeasurementNoise("estimate", se=se, repeats=self.repeats)

    def measurement(self, metrics: Mapping[str, float]) -> tuple[float | None, str | None]:
        """(standard error in metric units or None, measurement kind) of one evaluation.

        The kind is ``deterministic`` or ``scalar`` (memory-model.md "Rows and
        eligibility"); (None, None) says nothing is known. A ``metric`` declaration whose
        value is missing, non-finite or negative in ``metrics`` gives (None, None) too: that
        outcome's noise is unknown.
        """
        if self.kind == "deterministic":
            return 0.0, "deterministic"
        if self.kind == "metric":
            value = metrics.get(self.metric or "")
            if value is None or not math.isfinite(value) or value < 0:
                return None, None
            return float(value), "scalar"
        if self.se is None:  # unknown, or an estimate not made yet
            return None, None
        return self.se, "scalar"

    def result_fields(self, metrics: Mapping[str, float]) -> dict[str, Any]:
        """``se`` and ``measurement`` of a ``MutationResult`` for a child with ``metrics``."""
        se, kind = self.measurement(metrics)
        return {"se": se, "measurement": kind}

    def describe(self) -> str:
        """One line for logs and docs."""
        if self.kind == "constant":
            return f"constant standard error {self.se:g}"
        if self.kind == "metric":
            return f"standard error reported by the validator as {self.metric!r}"
        if self.kind == "estimate":
            told = "not estimated yet" if self.se is None else f"estimated {self.se:.6g}"
            return f"standard error from {self.repeats} evaluations per initial program ({told})"
        return self.kind


def parse_noise(raw: object, primary: str) -> MeasurementNoise:
    """The ``noise`` value of ``problem.yaml``: a kind name, or a mapping with ``kind``.

    Raises:
        ValueError: one line naming the bad ``noise.*`` key or value.
    """
    if raw is None:
        return MeasurementNoise()
    if isinstance(raw, str):
        raw = {"kind": raw}
    if not isinstance(raw, dict):
        raise ValueError(f"noise must be one of {list(NOISE_KINDS)} or a mapping with 'kind'")
    kind = raw.get("kind")
    if kind not in NOISE_KINDS:
        raise ValueError(f"noise.kind must be one of {list(NOISE_KINDS)}, got {kind!r}")
    unknown = sorted(str(k) for k in raw if k not in _KEYS[kind])
    if unknown:
        allowed = ", ".join(sorted(_KEYS[kind]))
        raise ValueError(f"unknown key noise.{unknown[0]} for kind {kind} (allowed: {allowed})")
    se = raw.get("se")
    if se is not None and (isinstance(se, bool) or not isinstance(se, int | float)):
        raise ValueError("noise.se must be a number (the standard error, metric units)")
    metric = raw.get("metric")
    if metric is not None and (not isinstance(metric, str) or not metric.strip()):
        raise ValueError("noise.metric must be the name of a metric the validator returns")
    if metric is not None and metric.strip() == primary:
        raise ValueError("noise.metric must name the standard error, not the primary metric")
    repeats = raw.get("repeats", DEFAULT_REPEATS)
    if isinstance(repeats, bool) or not isinstance(repeats, int):
        raise ValueError("noise.repeats must be an integer >= 2")
    return MeasurementNoise(
        kind,
        se=None if se is None else float(se),
        metric=metric and metric.strip(),
        repeats=repeats,
    )


def pooled_standard_error(samples: Sequence[Sequence[float]]) -> float:
    """Pooled within-program sd of repeated evaluations (one sequence per program).

    sqrt(sum over programs of sum (f - mean)^2 / sum over programs of (n - 1)); programs
    with fewer than two values add nothing.

    Raises:
        ValueError: no program has two values, or a value is not finite.
    """
    ss, dof = 0.0, 0
    for values in samples:
        v = [float(x) for x in values]
        if not all(math.isfinite(x) for x in v):
            raise ValueError("repeated evaluations must be finite")
        if len(v) < 2:
            continue
        mean = math.fsum(v) / len(v)
        ss += math.fsum((x - mean) ** 2 for x in v)
        dof += len(v) - 1
    if dof == 0:
        raise ValueError("estimating the standard error needs a program evaluated twice")
    return math.sqrt(ss / dof)
