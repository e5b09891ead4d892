"""The island model: one MAP-Elites archive per island over a shared behaviour space."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gigaevo.evolution.archive import AddResult, Elite, MapElitesArchive, rank_elites
from gigaevo.evolution.descriptors import BehaviourSpace
from gigaevo.problems.spec import MetricsSpec


@dataclass(frozen=True)
class Rebin:
    """One re-drawing of the grid: the space's version after it, and the elites that merged away.

    ``dropped`` holds ``(island, elite)`` pairs: each lost its cell to a better
    elite that landed in the same merged cell.
    """

    version: int
    dropped: tuple[tuple[int, Elite], ...]


class IslandModel:
    """``n_islands`` independent archives; programs move between them only by migration.

    Programs are offered with their descriptor values (``add(..., values=)``):
    when a value makes an adaptive axis grow, every island's archive is
    re-drawn on the new grid (:meth:`MapElitesArchive.rebin`) before the
    offer, and the re-drawing is queued for :meth:`take_rebins`. A space
    with fixed axes only also accepts a cell alone.

    Args:
        n_islands: number of islands, at least 1.
        space: the behaviour space every island's cells belong to.
        metrics: the problem's metrics spec.
        capacity_per_island: elite limit of each island's archive (None: no limit).

    Raises:
        ValueError: when ``n_islands < 1`` or the capacity is below 1.
    """

    def __init__(
        self,
        n_islands: int,
        space: BehaviourSpace,
        metrics: MetricsSpec,
        capacity_per_island: int | None = None,
    ) -> None:
        if n_islands < 1:
            raise ValueError(f"n_islands must be >= 1, got {n_islands}")
        self.n_islands = n_islands
        self.space = space
        self.metrics = metrics
        self.capacity_per_island = capacity_per_island
        self._archives = [MapElitesArchive(metrics, capacity_per_island) for _ in range(n_islands)]
        self._rebins: list[Rebin] = []
        self._versions = [0] * n_islands  # see versions()

    def archive(self, island: int) -> MapElitesArchive:
        """The archive of ``island``.

        Raises:
            IndexError: when ``island`` is not in ``[0, n_islands)``.
        """
        if not 0 <= island < self.n_islands:
            raise IndexError(f"island {island} not in [0, {self.n_islands})")
        return self._archives[island]

    def add(
        self,
        island: int,
        program_id: str,
        fitness: float,
        cell: tuple[int, ...] | None = None,
        *,
        values: Sequence[float] | None = None,
    ) -> AddResult:
        """Offer a program to one island's archive (rules of :class:`MapElitesArchive`).

        Give its descriptor ``values`` (the cell is then computed on the grid,
        grown first if they fall outside an adaptive range), or, on a space
        without adaptive axes, its ``cell``.

        Raises:
            IndexError: on a bad island index.
            ValueError: when ``cell`` is not a cell of the behaviour space, the
                values do not match its axes, or an adaptive space gets no values.
        """
        archive = self.archive(island)
        if values is not None:
            kept = tuple(float(v) for v in values)
            if self.space.observe(kept):
                self._rebin()
            cell = self.space.cell_of(kept)
            result = archive.try_add(program_id, fitness, cell, kept)
        else:
            if cell is None or self.space.adaptive:
                raise ValueError(
                    "an adaptive behaviour space needs the program's descriptor values"
                )
            if not self.space.contains(cell):
                raise ValueError(f"cell {cell} is not in a space of shape {self.space.shape}")
            result = archive.try_add(program_id, fitness, cell)
        if result.accepted:
            self._versions[island] += 1
        return result

    def _rebin(self) -> None:
        def cell_of(elite: Elite) -> tuple[int, ...]:
            if len(elite.values) != len(self.space.descriptors):
                raise ValueError(f"elite {elite.program_id} has no descriptor values to re-bin")
            return self.space.cell_of(elite.values)

        dropped = []
        for i, archive in enumerate(self._archives):
            dropped += [(i, e) for e in archive.rebin(cell_of)]
        self._rebins.append(Rebin(self.space.version, tuple(dropped)))
        self._versions = [v + 1 for v in self._versions]

    def take_rebins(self) -> list[Rebin]:
        """The re-drawings since the last call (oldest first), then forget them."""
        rebins, self._rebins = self._rebins, []
        return rebins

    def remove(self, island: int, program_id: str) -> Elite:
        """Remove a program from one island (raises KeyError when it is not there)."""
        elite = self.archive(island).remove(program_id)
        self._versions[island] += 1
        return elite

    def elites(self, island: int) -> list[Elite]:
        """The elites of ``island``, sorted by cell."""
        return self.archive(island).elites()

    def island_best(self, island: int) -> Elite | None:
        """The best elite of ``island`` or None when it is empty."""
        return self.archive(island).best()

    def best(self) -> Elite | None:
        """The best elite over all islands (ties: smaller id), or None when all are empty."""
        bests = [b for b in (a.best() for a in self._archives) if b is not None]
        return rank_elites(bests, self.metrics)[0] if bests else None

    def islands_of(self, program_id: str) -> tuple[int, ...]:
        """The islands holding ``program_id``, ascending."""
        return tuple(i for i, a in enumerate(self._archives) if program_id in a)

    def populated(self) -> list[int]:
        """Indices of the islands holding at least one elite, ascending."""
        return [i for i, a in enumerate(self._archives) if len(a)]

    def __len__(self) -> int:
        """Total number of elites over all islands (a migrated program counts per island)."""
        return sum(len(a) for a in self._archives)

    def __contains__(self, program_id: object) -> bool:
        return any(program_id in a for a in self._archives)

    def to_dict(self, archives: bool = True) -> dict[str, Any]:
        """JSON-friendly state: island count, capacity, archives, the axes and their live ranges.

        ``archives=False`` leaves ``"islands"`` None, for a caller that encodes the
        archives itself (the committer's ``IslandsText``).
        """
        d: dict[str, Any] = {
            "n_islands": self.n_islands,
            "capacity_per_island": self.capacity_per_island,
            "islands": [a.to_dict() for a in self._archives] if archives else None,
            "descriptors": self.space.to_dicts(),  # for readers (dashboard); not read back
        }
        if self.space.adaptive:
            d["space"] = self.space.state_dict()
        return d

    def versions(self) -> tuple[int, ...]:
        """One counter per island, raised whenever its archive changes (an accepted add, a
        removal, a re-drawn grid, a load): a checkpoint re-encodes only the islands whose
        counter moved. Change the archives through the model, never through ``archive(i)``."""
        return tuple(self._versions)

    def load_dict(
        self,
        d: Mapping[str, Any],
        values_of: Callable[[str], Sequence[float]] | None = None,
    ) -> None:
        """Replace every island's elites (and the live ranges) with those saved by :meth:`to_dict`.

        The model's own space, metrics and capacity are kept (with a smaller
        capacity than the saved one, the best elites stay); the saved state
        must have been written by a model with the same island count. Saved
        ranges are restored exactly, so the grid, cells and ``to_dict`` are
        those of the run that saved them. A state saved before descriptor
        values were kept gets them from ``values_of(program_id)``.

        Raises:
            ValueError: when the island count differs, a saved cell is outside
                the space, or a saved archive or range is inconsistent.
        """
        islands = list(d.get("islands", ()))
        if len(islands) != self.n_islands:
            raise ValueError(f"{len(islands)} saved archives for {self.n_islands} islands")
        if self.space.adaptive:
            self.space.load_state(d.get("space", {}))
        archives = []
        for i, state in enumerate(islands):
            saved = MapElitesArchive.from_dict(state, self.metrics)
            bad = [e.cell for e in saved.elites() if not self.space.contains(e.cell)]
            if bad:
                raise ValueError(f"island {i}: cells {bad} are outside shape {self.space.shape}")
            archive = MapElitesArchive(self.metrics, self.capacity_per_island)
            for elite in saved.elites():
                values = elite.values
                if not values and values_of is not None:
                    values = tuple(float(v) for v in values_of(elite.program_id))
                archive.try_add(elite.program_id, elite.fitness, elite.cell, values)
            archives.append(archive)
        self._archives = archives
        self._rebins = []
        self._versions = [v + 1 for v in self._versions]
        if self.space.adaptive and "space" not in d:
            self._place_on_a_new_grid()

    def _place_on_a_new_grid(self) -> None:
        """Grow the (fresh) adaptive ranges over every elite, best first, and re-draw."""
        ranked = rank_elites([e for a in self._archives for e in a.elites()], self.metrics)
        for elite in ranked:
            if len(elite.values) != len(self.space.descriptors):
                raise ValueError(f"elite {elite.program_id} has no descriptor values to re-bin")
            self.space.observe(elite.values)
        self._rebin()
        self._rebins = []

    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any], space: BehaviourSpace, metrics: MetricsSpec
    ) -> IslandModel:
        """A new model with the island count and capacity saved by :meth:`to_dict`.

        Raises:
            ValueError: as :meth:`load_dict`.
        """
        model = cls(int(d["n_islands"]), space, metrics, d.get("capacity_per_island"))
        model.load_dict(d)
        return model
