"""Behaviour descriptor specs: one axis of a MAP-Elites grid, as a problem or a config declares it.

The grid itself (adaptive ranges, re-binning) lives in ``gigaevo.evolution``;
this module only holds the validated declaration, so that ``problem.yaml``
can be checked when the problem is loaded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import KW_ONLY, asdict, dataclass, fields
from typing import Any

from gigaevo.programs.features import FEATURES

SOURCES = ("metric", "feature")
SCALES = ("linear", "log")
DEFAULT_BINS = 10


@dataclass(frozen=True)
class Descriptor:
    """One axis of the behaviour space: a named value cut into ``bins`` equal bins.

    Bins are equal-width over the value (``scale="linear"``) or its logarithm
    (``scale="log"``).

    - **Fixed** (``adaptive=False``): the bins cover ``[low, high]``; values
      outside are clipped into the first or last bin, so a program's cell
      never moves.
    - **Adaptive** (``adaptive=True``): the range starts at ``[low, high]``
      when both are given, else around the first value seen, and doubles
      towards any value that falls outside it; bins then merge in pairs (the
      grid is re-drawn, see ``gigaevo.evolution.BehaviourSpace``). ``bins``
      must be even. A ``floor`` (``ceiling``) is a value the range never
      extends below (above): values beyond it share the edge bin, and without
      ``low``/``high`` the range starts at the floor with the first value in
      its middle (a metric that cannot be negative wastes no bins on
      negative values).

    Attributes:
        name: a metric the validator reports (``source="metric"``) or a key
            of ``FEATURES`` (``source="feature"``).
        bins: number of bins, at least 1 (even and at least 2 when adaptive).
        low, high: bounds of a fixed axis; the starting range of an adaptive
            one (optional); ``low`` must be > 0 on a log scale.
        source: ``"metric"`` or ``"feature"``.
        scale: ``"linear"`` or ``"log"``.
        adaptive: whether the range grows with the values seen.
        floor, ceiling: limits of an adaptive range (optional).

    Raises:
        ValueError: on an unknown source, scale or feature name, missing,
            non-finite or unordered bounds, a bad bin count, or ``low <= 0``
            on a log scale.
    """

    name: str
    _: KW_ONLY
    low: float | None = None
    high: float | None = None
    bins: int = DEFAULT_BINS
    source: str = "metric"
    scale: str = "linear"
    adaptive: bool = False
    floor: float | None = None
    ceiling: float | None = None

    def __post_init__(self) -> None:
        where = f"descriptor {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"{where}: name must be a non-empty string")
        if self.source not in SOURCES:
            raise ValueError(f"{where}: source must be one of {SOURCES}")
        if self.scale not in SCALES:
            raise ValueError(f"{where}: scale must be one of {SCALES}")
        if self.source == "feature" and self.name not in FEATURES:
            raise ValueError(f"{where}: unknown feature; known: {sorted(FEATURES)}")
        if not isinstance(self.adaptive, bool):
            raise ValueError(f"{where}: adaptive must be true or false")
        if isinstance(self.bins, bool) or int(self.bins) != self.bins or self.bins < 1:
            raise ValueError(f"{where}: bins must be an integer >= 1")
        if self.adaptive and self.bins % 2:
            raise ValueError(f"{where}: an adaptive axis needs an even number of bins")
        self._check_bounds(where)

    def _check_bounds(self, where: str) -> None:
        self._check_limits(where)
        given = (self.low is not None, self.high is not None)
        if given == (False, False) and self.adaptive:
            return
        if given != (True, True):
            need = "give both low and high or neither" if self.adaptive else "need low and high"
            raise ValueError(f"{where}: {need}")
        low, high = float(self.low), float(self.high)  # type: ignore[arg-type]
        if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
            raise ValueError(f"{where}: need finite low < high")
        if self.scale == "log" and low <= 0:
            raise ValueError(f"{where}: low must be > 0 on a log scale")

    def _check_limits(self, where: str) -> None:
        limits = [v for v in (self.floor, self.ceiling) if v is not None]
        if limits and not self.adaptive:
            raise ValueError(f"{where}: floor and ceiling apply to adaptive axes only")
        if not all(math.isfinite(v) for v in limits):
            raise ValueError(f"{where}: floor and ceiling must be finite")
        if self.scale == "log" and any(v <= 0 for v in limits):
            raise ValueError(f"{where}: floor and ceiling must be > 0 on a log scale")
        if self.floor is not None and self.ceiling is not None and self.floor >= self.ceiling:
            raise ValueError(f"{where}: need floor < ceiling")

    @classmethod
    def from_mapping(cls, item: Mapping[str, Any]) -> Descriptor:
        """Build from a plain mapping with the field names as keys.

        Raises:
            ValueError: on an unknown key, a missing name, or any check above.
        """
        allowed = {f.name for f in fields(cls)} - {"_"}
        unknown = sorted(set(item) - allowed)
        if unknown:
            raise ValueError(f"unknown descriptor keys {unknown}; allowed: {sorted(allowed)}")
        if "name" not in item:
            raise ValueError("a descriptor needs a name")
        return cls(**dict(item))

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form accepted by :meth:`from_mapping`."""
        return asdict(self)

    def transform(self, value: float) -> float | None:
        """The value on the axis's scale (``log`` or as is); None when it has no place there."""
        if not math.isfinite(value):
            return None
        if self.scale == "log":
            return math.log(value) if value > 0 else None
        return float(value)

    def unit(self, value: float) -> float:
        """``value`` mapped into [0, 1] over ``[low, high]``; unplaceable -> 0.0 (fixed axes)."""
        t = self.transform(value)
        if t is None or self.low is None or self.high is None:
            return 0.0
        lo, hi = self.transform(self.low), self.transform(self.high)
        assert lo is not None and hi is not None  # checked at construction
        return min(1.0, max(0.0, (t - lo) / (hi - lo)))

    def bin(self, value: float) -> int:
        """Bin index over ``[low, high]`` in ``[0, bins - 1]``; ``high`` falls in the last bin."""
        if self.transform(value) is None:
            return 0
        return min(int(self.unit(value) * self.bins), int(self.bins) - 1)

    def raw_value(self, program_code: str, metrics: Mapping[str, float]) -> float:
        """The descriptor's value for a program; NaN when its metric is missing."""
        if self.source == "feature":
            return FEATURES[self.name](program_code)
        value = metrics.get(self.name)
        return float(value) if value is not None else math.nan
