"""The behaviour space: maps a program's descriptor values to its MAP-Elites cell.

Fixed axes cut a declared range into equal bins. Adaptive axes start narrow
(around the first value seen, or at a declared range) and double towards any
value that falls outside, which merges their bins in pairs. Each value is
first placed on a fixed fine grid of the axis (integer *fine index*); a bin
is a block of ``2**level`` fine cells starting at ``offset``. Growth changes
only ``offset`` and ``level``, in whole blocks, so it is exact integer
arithmetic: after a growth, every new bin is the union of two old bins, and
the best elite of the two keeps the merged cell (see ``MapElitesArchive.rebin``).
Nothing here depends on the order of floating-point operations across runs:
the same values in the same order give the same grid, also after a resume
(the axis state is saved with the archives).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gigaevo.problems.descriptors import SCALES, SOURCES, Descriptor
from gigaevo.programs.features import FEATURES, code_length, n_lines, n_statements

__all__ = [
    "FEATURES",
    "SCALES",
    "SOURCES",
    "BehaviourSpace",
    "Descriptor",
    "code_length",
    "n_lines",
    "n_statements",
]

# Starting bin width of an adaptive axis declared without a range, in the axis's
# units: 2 % of the first value on a linear scale (a tiny width when it is 0),
# 0.02 in natural-log units (about 2 % per bin) on a log scale. The range then
# doubles as values spread, so this sets only how fine the grid can ever be.
RELATIVE_STEP = 0.02
ZERO_STEP = 1e-9
_FINE_LIMIT = 2**62  # fine indices are clamped here: a huge value cannot loop forever
_LOG_MAX = math.log(1.7976931348623157e308)


@dataclass
class AxisGrid:
    """The live range of one adaptive axis, in fine cells of width ``step``.

    Fine index ``f`` of a transformed value ``t``: ``floor((t - origin) / step)``.
    The range covers fine cells ``[offset, offset + bins * 2**level)``; bin
    ``(f - offset) >> level``. ``origin`` is None until the first value.
    ``floor`` and ``ceiling`` (transformed) stop the growth on their side.
    """

    bins: int
    origin: float | None = None
    step: float = 1.0
    offset: int = 0
    level: int = 0
    floor: float | None = None
    ceiling: float | None = None

    @property
    def span(self) -> int:
        """Fine cells covered by the range."""
        return self.bins << self.level

    def fine(self, t: float) -> int:
        assert self.origin is not None
        x = (t - self.origin) / self.step
        if not math.isfinite(x):
            return _FINE_LIMIT if x > 0 else -_FINE_LIMIT
        return max(-_FINE_LIMIT, min(_FINE_LIMIT, math.floor(x)))

    def start(self, t: float, scale: str) -> None:
        """Place the range around the first value ``t`` (from the floor or ceiling if any)."""
        relative = abs(t) * RELATIVE_STEP if scale == "linear" else RELATIVE_STEP
        default = relative if relative > 0 else ZERO_STEP
        self.offset, self.level = 0, 0
        if self.floor is not None:
            width = 2 * (t - self.floor) if t > self.floor else 0.0
            self.step = width / self.bins if width > 0 else default
            self.origin = self.floor
        elif self.ceiling is not None:
            width = 2 * (self.ceiling - t) if t < self.ceiling else 0.0
            self.step = width / self.bins if width > 0 else default
            self.origin = self.ceiling - self.step * self.bins
        else:
            self.step = default
            self.origin = t - self.step * (self.bins // 2)

    def _may_grow(self, edge: float, limit: float | None, below: bool) -> bool:
        if limit is None:
            return True
        slack = self.step * 1e-6  # the edge sits on the limit up to rounding
        return edge > limit + slack if below else edge < limit - slack

    def grow_to(self, f: int) -> bool:
        """Double the range towards fine index ``f`` until it is inside or at a limit.

        Returns True when it grew.
        """
        assert self.origin is not None
        grew = False
        while f < self.offset and self._may_grow(self._edge(self.offset), self.floor, True):
            self.offset -= self.span
            self.level += 1
            grew = True
        while f >= self.offset + self.span and self._may_grow(
            self._edge(self.offset + self.span), self.ceiling, False
        ):
            self.level += 1
            grew = True
        return grew

    def _edge(self, fine: int) -> float:
        assert self.origin is not None
        return self.origin + fine * self.step

    def bin(self, t: float) -> int:
        f = min(max(self.fine(t), self.offset), self.offset + self.span - 1)
        return (f - self.offset) >> self.level

    def unit(self, t: float) -> float:
        assert self.origin is not None
        lo = self.origin + self.offset * self.step
        return min(1.0, max(0.0, (t - lo) / (self.span * self.step)))

    def bounds(self, inverse_log: bool) -> tuple[float, float] | None:
        """The range in the descriptor's own units, or None before the first value."""
        if self.origin is None:
            return None
        lo = self.origin + self.offset * self.step
        hi = lo + self.span * self.step
        return (_exp(lo), _exp(hi)) if inverse_log else (lo, hi)

    def to_dict(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "step": self.step,
            "offset": self.offset,
            "level": self.level,
        }

    def load(self, d: Mapping[str, Any]) -> None:
        origin = d.get("origin")
        self.origin = None if origin is None else float(origin)
        self.step = float(d["step"])
        self.offset = int(d["offset"])
        self.level = int(d["level"])
        if not (self.step > 0 and math.isfinite(self.step)) or self.level < 0:
            raise ValueError(f"bad adaptive axis state {dict(d)}")


class BehaviourSpace:
    """The grid of MAP-Elites cells: one :class:`Descriptor` per axis.

    ``shape`` is ``(d.bins for d in descriptors)``; a cell is a tuple of one
    bin index per axis. A space with no descriptors has a single cell ``()``.
    A program's descriptor values (``values``) are fixed; its cell
    (``cell_of``) moves only when an adaptive axis grows (``observe``), and
    ``version`` counts those growths.

    Raises:
        ValueError: when two descriptors share a name.
    """

    def __init__(self, descriptors: Sequence[Descriptor]) -> None:
        names = [d.name for d in descriptors]
        if len(set(names)) != len(names):
            raise ValueError(f"descriptor names must be unique, got {names}")
        self.descriptors: tuple[Descriptor, ...] = tuple(descriptors)
        self._grids: dict[int, AxisGrid] = {}
        for i, d in enumerate(self.descriptors):
            if d.adaptive:
                self._grids[i] = _initial_grid(d)
        self.version = 0

    @classmethod
    def from_dicts(cls, items: Sequence[Mapping[str, Any]]) -> BehaviourSpace:
        """Build from plain mappings with the :class:`Descriptor` fields as keys.

        Raises:
            ValueError: on an unknown key, a missing field or a bad value.
        """
        return cls([Descriptor.from_mapping(item) for item in items])

    def to_dicts(self) -> list[dict[str, Any]]:
        """Plain-dict form accepted by :meth:`from_dicts` (the declaration, not the live range)."""
        return [d.to_dict() for d in self.descriptors]

    @property
    def adaptive(self) -> bool:
        """True when some axis grows with the values seen."""
        return bool(self._grids)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d.bins) for d in self.descriptors)

    @property
    def n_cells(self) -> int:
        return math.prod(self.shape)

    # -- values and cells --------------------------------------------------------
    def values(self, program_code: str, metrics: Mapping[str, float]) -> tuple[float, ...]:
        """The program's raw descriptor values, one per axis (NaN for a missing metric)."""
        return tuple(d.raw_value(program_code, metrics) for d in self.descriptors)

    def cell_of(self, values: Sequence[float]) -> tuple[int, ...]:
        """The cell of ``values`` on the current grid; an unplaceable value gets bin 0."""
        self._check_rank(values)
        cell = []
        for i, (d, v) in enumerate(zip(self.descriptors, values, strict=True)):
            grid, t = self._grids.get(i), d.transform(v)
            if grid is None:
                cell.append(d.bin(v))
            elif t is None or grid.origin is None:
                cell.append(0)
            else:
                cell.append(grid.bin(t))
        return tuple(cell)

    def unit_of(self, values: Sequence[float]) -> tuple[float, ...]:
        """``values`` as coordinates in [0, 1] over the current ranges."""
        self._check_rank(values)
        out = []
        for i, (d, v) in enumerate(zip(self.descriptors, values, strict=True)):
            grid, t = self._grids.get(i), d.transform(v)
            if grid is None:
                out.append(d.unit(v))
            else:
                out.append(0.0 if t is None or grid.origin is None else grid.unit(t))
        return tuple(out)

    def cell(self, program_code: str, metrics: Mapping[str, float]) -> tuple[int, ...]:
        """The program's cell on the current grid (missing or non-finite metric: bin 0)."""
        return self.cell_of(self.values(program_code, metrics))

    def coordinates(self, program_code: str, metrics: Mapping[str, float]) -> tuple[float, ...]:
        """The program's unit coordinates, one value in [0, 1] per axis."""
        return self.unit_of(self.values(program_code, metrics))

    def observe(self, values: Sequence[float]) -> bool:
        """Grow the adaptive axes to hold ``values``; True when the grid changed (re-bin)."""
        self._check_rank(values)
        changed = False
        for i, grid in self._grids.items():
            d = self.descriptors[i]
            t = d.transform(values[i])
            if t is None:
                continue
            if grid.origin is None:
                grid.start(t, d.scale)
                changed = True
            changed = grid.grow_to(grid.fine(t)) or changed
        if changed:
            self.version += 1
        return changed

    def contains(self, cell: Sequence[int]) -> bool:
        """True when ``cell`` has one in-range bin index per axis."""
        return len(cell) == len(self.shape) and all(
            0 <= c < n for c, n in zip(cell, self.shape, strict=True)
        )

    def ranges(self) -> list[dict[str, Any]]:
        """Per axis: name, scale, bins, adaptive and the current ``[low, high]`` (None if unset)."""
        out = []
        for i, d in enumerate(self.descriptors):
            grid = self._grids.get(i)
            bounds = (d.low, d.high) if grid is None else grid.bounds(d.scale == "log")
            out.append(
                {
                    "name": d.name,
                    "scale": d.scale,
                    "bins": d.bins,
                    "adaptive": d.adaptive,
                    "low": None if bounds is None else bounds[0],
                    "high": None if bounds is None else bounds[1],
                }
            )
        return out

    # -- checkpoint --------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The live ranges of the adaptive axes (JSON-friendly, exact) and the count of grid
        changes so far (``version``)."""
        axes = {self.descriptors[i].name: g.to_dict() for i, g in self._grids.items()}
        return {"axes": axes, "version": self.version}

    def load_state(self, d: Mapping[str, Any]) -> None:
        """Restore ranges saved by :meth:`state_dict` (axes it does not name start afresh).

        Raises:
            ValueError: a saved axis is not an adaptive axis of this space, or is malformed.
        """
        axes = dict(d.get("axes", {}))
        index = {self.descriptors[i].name: i for i in self._grids}
        unknown = sorted(set(axes) - set(index))
        if unknown:
            raise ValueError(f"saved ranges for {unknown}, which are not adaptive axes here")
        for i in self._grids:
            self._grids[i] = _initial_grid(self.descriptors[i])
        for name, state in axes.items():
            self._grids[index[name]].load(state)
        # the saved count, so a resumed run numbers its re-drawings (the ``rebin`` events) as
        # the uninterrupted run did; a state saved without it counts the load as one change
        self.version = int(d["version"]) if "version" in d else self.version + 1

    def _check_rank(self, values: Sequence[float]) -> None:
        if len(values) != len(self.descriptors):
            raise ValueError(f"{len(values)} values for {len(self.descriptors)} descriptors")

    def __repr__(self) -> str:
        return f"BehaviourSpace({list(self.descriptors)!r})"


def _exp(t: float) -> float:
    """``exp(t)`` saturated at the largest finite float: a log axis that doubled past
    ``log(max float)`` (values near 0 stretch it) still reports a JSON-safe range."""
    return math.exp(min(t, _LOG_MAX))


def _initial_grid(d: Descriptor) -> AxisGrid:
    grid = AxisGrid(
        bins=int(d.bins),
        floor=None if d.floor is None else d.transform(d.floor),
        ceiling=None if d.ceiling is None else d.transform(d.ceiling),
    )
    if d.low is not None and d.high is not None:
        lo, hi = d.transform(d.low), d.transform(d.high)
        assert lo is not None and hi is not None  # checked by Descriptor
        grid.origin, grid.step = lo, (hi - lo) / d.bins
    return grid
