"""The MAP-Elites archive: at most one elite per behaviour cell, optionally capacity-bounded."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from gigaevo.problems.spec import MetricsSpec

AddStatus = Literal["new_cell", "improved", "rejected"]


@dataclass(frozen=True)
class Elite:
    """A program holding a cell: its id, fitness (primary metric), cell and descriptor values.

    ``values`` (one raw value per axis) let the archive re-draw its grid when
    an adaptive axis grows; they are empty for elites placed by cell alone.
    """

    program_id: str
    fitness: float
    cell: tuple[int, ...]
    values: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "program_id": self.program_id,
            "fitness": self.fitness,
            "cell": list(self.cell),
        }
        if self.values:
            d["values"] = list(self.values)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Elite:
        return cls(
            str(d["program_id"]),
            float(d["fitness"]),
            tuple(int(c) for c in d["cell"]),
            tuple(float(v) for v in d.get("values", ())),
        )


@dataclass(frozen=True)
class AddResult:
    """What :meth:`MapElitesArchive.try_add` did.

    Attributes:
        status: ``"new_cell"`` (took an empty cell), ``"improved"`` (replaced
            a worse incumbent) or ``"rejected"`` (the archive is unchanged).
        replaced: id of the incumbent displaced from the same cell, if any.
        evicted: ids removed from other cells to respect the capacity.
        cell: the cell the program was offered for (informative: not compared).
    """

    status: AddStatus
    replaced: str | None = None
    evicted: tuple[str, ...] = ()
    cell: tuple[int, ...] | None = field(default=None, compare=False)

    @property
    def accepted(self) -> bool:
        return self.status != "rejected"


def rank_elites(elites: Iterable[Elite], metrics: MetricsSpec) -> list[Elite]:
    """Elites best first by direction-aware fitness; equal fitness -> smaller id first."""
    return sorted(elites, key=lambda e: (-metrics.oriented(e.fitness), e.program_id))


class MapElitesArchive:
    """One elite per cell, compared on the primary metric in its declared direction.

    Rules, all deterministic:

    - An empty cell takes any candidate with a non-NaN fitness.
    - An occupied cell is taken only by *strictly* better fitness
      (``metrics.better``); on a tie the incumbent stays.
    - With a ``capacity``, the archive keeps at most that many elites. When it
      is full, a candidate for an empty cell enters only if it is strictly
      better than the worst elite, which it evicts (among equally worst
      elites, the larger id goes); otherwise it is rejected. So a full archive
      always holds the best ``capacity`` elites seen in distinct cells, and a
      program that was just added is never the one evicted.
    - A program id already in the archive is rejected (adding is idempotent),
      as is a NaN fitness.

    Args:
        metrics: the problem's metrics spec (direction of the primary metric).
        capacity: maximum number of elites, or None for no limit.

    Raises:
        ValueError: when ``capacity`` is not None and below 1.
    """

    def __init__(self, metrics: MetricsSpec, capacity: int | None = None) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be None or >= 1, got {capacity}")
        self.metrics = metrics
        self.capacity = capacity
        self._by_cell: dict[tuple[int, ...], Elite] = {}
        self._cell_of: dict[str, tuple[int, ...]] = {}

    def try_add(
        self,
        program_id: str,
        fitness: float,
        cell: tuple[int, ...],
        values: tuple[float, ...] = (),
    ) -> AddResult:
        """Offer a program for ``cell``; see the class docstring for the rules."""
        cell = tuple(int(c) for c in cell)
        if program_id in self._cell_of or math.isnan(fitness):
            return AddResult("rejected", cell=cell)
        candidate = Elite(program_id, float(fitness), cell, tuple(values))
        incumbent = self._by_cell.get(cell)
        if incumbent is not None:
            if not self.metrics.better(candidate.fitness, incumbent.fitness):
                return AddResult("rejected", cell=cell)
            self._drop(incumbent)
            self._put(candidate)
            return AddResult("improved", replaced=incumbent.program_id, cell=cell)
        evicted: tuple[str, ...] = ()
        if self.capacity is not None and len(self._by_cell) >= self.capacity:
            worst = self.worst()
            assert worst is not None  # capacity >= 1, so a full archive is not empty
            if not self.metrics.better(candidate.fitness, worst.fitness):
                return AddResult("rejected", cell=cell)
            self._drop(worst)
            evicted = (worst.program_id,)
        self._put(candidate)
        return AddResult("new_cell", evicted=evicted, cell=cell)

    def rebin(self, cell_of: Callable[[Elite], tuple[int, ...]]) -> list[Elite]:
        """Move every elite to ``cell_of(elite)``; return the elites that lost their cell.

        Elites are placed best first (ties: smaller id), so where several land
        in one cell the best keeps it, as it would have if the new grid had
        been used from the start. The archive only shrinks, so the capacity holds.
        """
        ranked = self.ranked()
        self._by_cell.clear()
        self._cell_of.clear()
        dropped = []
        for elite in ranked:
            moved = replace(elite, cell=tuple(int(c) for c in cell_of(elite)))
            if moved.cell in self._by_cell:
                dropped.append(elite)
            else:
                self._put(moved)
        return dropped

    def remove(self, program_id: str) -> Elite:
        """Take ``program_id`` out of the archive and return its elite.

        Raises:
            KeyError: when the archive does not hold ``program_id``.
        """
        elite = self._by_cell[self._cell_of[program_id]]
        self._drop(elite)
        return elite

    def elites(self) -> list[Elite]:
        """All elites, sorted by cell."""
        return [self._by_cell[c] for c in sorted(self._by_cell)]

    def ranked(self) -> list[Elite]:
        """All elites, best first (ties: smaller id first)."""
        return rank_elites(self._by_cell.values(), self.metrics)

    def best(self) -> Elite | None:
        """The best elite (ties: smaller id), or None when empty."""
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def worst(self) -> Elite | None:
        """The worst elite (ties: larger id), or None when empty."""
        ranked = self.ranked()
        return ranked[-1] if ranked else None

    def get(self, program_id: str) -> Elite | None:
        """The elite of ``program_id``, or None when not held."""
        cell = self._cell_of.get(program_id)
        return self._by_cell[cell] if cell is not None else None

    def at(self, cell: tuple[int, ...]) -> Elite | None:
        """The elite holding ``cell``, or None when the cell is empty."""
        return self._by_cell.get(tuple(int(c) for c in cell))

    def __len__(self) -> int:
        return len(self._by_cell)

    def __contains__(self, program_id: object) -> bool:
        return program_id in self._cell_of

    def __iter__(self) -> Iterator[Elite]:
        return iter(self.elites())

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly state: the capacity and the elites sorted by cell."""
        return {"capacity": self.capacity, "elites": [e.to_dict() for e in self.elites()]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], metrics: MetricsSpec) -> MapElitesArchive:
        """Rebuild an archive saved with :meth:`to_dict`.

        Raises:
            ValueError: when two elites share a cell or an id, or there are
                more elites than the capacity.
        """
        archive = cls(metrics, capacity=d.get("capacity"))
        for item in d.get("elites", ()):
            elite = Elite.from_dict(item)
            if elite.cell in archive._by_cell or elite.program_id in archive._cell_of:
                raise ValueError(f"duplicate cell or id in archive state: {elite}")
            archive._put(elite)
        if archive.capacity is not None and len(archive) > archive.capacity:
            raise ValueError(f"{len(archive)} elites exceed capacity {archive.capacity}")
        return archive

    def _put(self, elite: Elite) -> None:
        self._by_cell[elite.cell] = elite
        self._cell_of[elite.program_id] = elite.cell

    def _drop(self, elite: Elite) -> None:
        del self._by_cell[elite.cell]
        del self._cell_of[elite.program_id]
