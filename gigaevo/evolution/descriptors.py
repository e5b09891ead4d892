"""Behaviour descriptors and the behaviour space that maps a program to its MAP-Elites cell."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, asdict, dataclass, fields
from typing import Any

SOURCES = ("metric", "feature")
SCALES = ("linear", "log")


def code_length(code: str) -> float:
    """Number of characters of ``code``."""
    return float(len(code))


def n_lines(code: str) -> float:
    """Number of lines of ``code`` that hold more than whitespace."""
    return float(sum(1 for line in code.splitlines() if line.strip()))


def n_statements(code: str) -> float:
    """Number of AST statements (at any depth) in ``code``; 0 when it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return 0.0
    return float(sum(1 for node in ast.walk(tree) if isinstance(node, ast.stmt)))


FEATURES: dict[str, Callable[[str], float]] = {
    "code_length": code_length,
    "n_lines": n_lines,
    "n_statements": n_statements,
}
"""Program features computed from the code alone, by name (``source="feature"``)."""


@dataclass(frozen=True)
class Descriptor:
    """One axis of the behaviour space: a named value cut into ``bins`` equal bins.

    The bins are equal-width over ``[low, high]`` (``scale="linear"``) or over
    ``[log low, log high]`` (``scale="log"``); values outside are clipped into
    the first or last bin. The transform uses the declared bounds only, never
    live data, so a program's cell never moves as the run goes on.

    Attributes:
        name: a metric the validator reports (``source="metric"``) or a key
            of :data:`FEATURES` (``source="feature"``).
        low: lower bound of the axis; must be > 0 for ``scale="log"``.
        high: upper bound, strictly above ``low``.
        bins: number of bins, at least 1.
        source: ``"metric"`` or ``"feature"``.
        scale: ``"linear"`` or ``"log"``.

    Raises:
        ValueError: on an unknown source, scale or feature name, non-finite or
            unordered bounds, ``bins < 1`` or ``low <= 0`` on a log scale.
    """

    name: str
    _: KW_ONLY
    low: float
    high: float
    bins: int
    source: str = "metric"
    scale: str = "linear"

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"descriptor {self.name!r}: source must be one of {SOURCES}")
        if self.scale not in SCALES:
            raise ValueError(f"descriptor {self.name!r}: scale must be one of {SCALES}")
        if self.source == "feature" and self.name not in FEATURES:
            raise ValueError(
                f"descriptor {self.name!r}: unknown feature; known: {sorted(FEATURES)}"
            )
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low >= self.high:
            raise ValueError(f"descriptor {self.name!r}: need finite low < high")
        if self.scale == "log" and self.low <= 0:
            raise ValueError(f"descriptor {self.name!r}: low must be > 0 on a log scale")
        if int(self.bins) != self.bins or self.bins < 1:
            raise ValueError(f"descriptor {self.name!r}: bins must be an integer >= 1")

    def unit(self, value: float) -> float:
        """``value`` mapped into [0, 1] over the declared bounds; non-finite -> 0.0."""
        if not math.isfinite(value):
            return 0.0
        if self.scale == "log":
            if value <= 0:
                return 0.0
            lo, hi, v = math.log(self.low), math.log(self.high), math.log(value)
        else:
            lo, hi, v = self.low, self.high, value
        return min(1.0, max(0.0, (v - lo) / (hi - lo)))

    def bin(self, value: float) -> int:
        """Bin index in ``[0, bins - 1]``; ``high`` falls in the last bin, non-finite in 0."""
        if not math.isfinite(value):
            return 0
        return min(int(self.unit(value) * self.bins), int(self.bins) - 1)

    def raw_value(self, program_code: str, metrics: Mapping[str, float]) -> float:
        """The descriptor's value for a program; NaN when its metric is missing."""
        if self.source == "feature":
            return FEATURES[self.name](program_code)
        value = metrics.get(self.name)
        return float(value) if value is not None else math.nan


class BehaviourSpace:
    """The grid of MAP-Elites cells: one :class:`Descriptor` per axis.

    ``shape`` is ``(d.bins for d in descriptors)``; a cell is a tuple of one
    bin index per axis. A space with no descriptors has a single cell ``()``.

    Raises:
        ValueError: when two descriptors share a name.
    """

    def __init__(self, descriptors: Sequence[Descriptor]) -> None:
        names = [d.name for d in descriptors]
        if len(set(names)) != len(names):
            raise ValueError(f"descriptor names must be unique, got {names}")
        self.descriptors: tuple[Descriptor, ...] = tuple(descriptors)

    @classmethod
    def from_dicts(cls, items: Sequence[Mapping[str, Any]]) -> BehaviourSpace:
        """Build from plain mappings with the :class:`Descriptor` fields as keys.

        Raises:
            ValueError: on an unknown key or a missing required field.
        """
        allowed = {f.name for f in fields(Descriptor)}
        descriptors = []
        for item in items:
            kwargs = dict(item)
            unknown = sorted(set(kwargs) - allowed)
            if unknown:
                raise ValueError(f"unknown descriptor keys {unknown}; allowed: {sorted(allowed)}")
            missing = sorted({"name", "low", "high", "bins"} - set(kwargs))
            if missing:
                raise ValueError(f"descriptor {kwargs.get('name')!r} misses keys {missing}")
            descriptors.append(Descriptor(**kwargs))
        return cls(descriptors)

    def to_dicts(self) -> list[dict[str, Any]]:
        """Plain-dict form accepted by :meth:`from_dicts`."""
        return [asdict(d) for d in self.descriptors]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d.bins) for d in self.descriptors)

    @property
    def n_cells(self) -> int:
        return math.prod(self.shape)

    def cell(self, program_code: str, metrics: Mapping[str, float]) -> tuple[int, ...]:
        """The program's cell; an axis whose metric is missing or non-finite gets bin 0."""
        return tuple(d.bin(d.raw_value(program_code, metrics)) for d in self.descriptors)

    def coordinates(self, program_code: str, metrics: Mapping[str, float]) -> tuple[float, ...]:
        """The program's unit coordinates, one value in [0, 1] per axis."""
        return tuple(d.unit(d.raw_value(program_code, metrics)) for d in self.descriptors)

    def contains(self, cell: Sequence[int]) -> bool:
        """True when ``cell`` has one in-range bin index per axis."""
        return len(cell) == len(self.shape) and all(
            0 <= c < n for c, n in zip(cell, self.shape, strict=True)
        )

    def __repr__(self) -> str:
        return f"BehaviourSpace({list(self.descriptors)!r})"
