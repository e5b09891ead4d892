"""Ring migration between islands: when it is due and which elites move where."""

from __future__ import annotations

from dataclasses import dataclass

from gigaevo.evolution.islands import IslandModel


@dataclass(frozen=True)
class Migrant:
    """One planned move: a copy of ``program_id`` offered to ``to_island`` in the same cell.

    ``values`` are the elite's descriptor values (empty on a fixed grid without them).
    """

    program_id: str
    fitness: float
    from_island: int
    to_island: int
    cell: tuple[int, ...]
    values: tuple[float, ...] = ()


class RingMigration:
    """Every ``interval`` committed mutants, each island sends its best to the next one.

    Island ``i`` sends its top ``count`` elites (best first, ties: smaller id)
    to island ``(i + 1) % n_islands``, keeping their cells. The plan is taken
    from one snapshot of the model, so a migrant moves one step per round.
    A program already on the destination island is not planned. The engine
    offers each migrant with ``model.add(m.to_island, m.program_id,
    m.fitness, m.cell, values=m.values or None)``; the destination archive may
    still reject it.

    Args:
        interval: committed mutants between rounds; 0 disables migration.
        count: elites each island sends per round.

    Raises:
        ValueError: when ``interval`` or ``count`` is negative.
    """

    def __init__(self, interval: int, count: int = 1) -> None:
        if interval < 0:
            raise ValueError(f"interval must be >= 0, got {interval}")
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        self.interval = interval
        self.count = count

    def due(self, n_committed_mutants: int) -> bool:
        """True when ``n_committed_mutants`` is a positive multiple of ``interval``."""
        n = n_committed_mutants
        return self.interval > 0 and n > 0 and n % self.interval == 0

    def plan(self, model: IslandModel) -> list[Migrant]:
        """The migrants of one round, by source island then rank; ``[]`` for one island."""
        if model.n_islands < 2 or self.count == 0:
            return []
        migrants: list[Migrant] = []
        for src in range(model.n_islands):
            dst = (src + 1) % model.n_islands
            destination = model.archive(dst)
            for elite in model.archive(src).ranked()[: self.count]:
                if elite.program_id in destination:
                    continue
                migrants.append(
                    Migrant(elite.program_id, elite.fitness, src, dst, elite.cell, elite.values)
                )
        return migrants
