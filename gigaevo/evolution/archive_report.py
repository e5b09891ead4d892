"""Archive statistics: coverage and QD-score per island, and grid re-drawings (events, summary).

- **coverage**: cells holding an elite, out of ``n_cells``;
- **QD-score**: the sum over an island's elites of their normalised fitness
  (``MetricsSpec.quality``: 0 at the worst declared bound, 1 at the best), so
  it grows both with more cells and with better elites, and is comparable
  across runs of one problem whatever the metric's direction.
"""

from __future__ import annotations

from typing import Any

from gigaevo.evolution.events import EventLog
from gigaevo.evolution.islands import IslandModel
from gigaevo.evolution.state import RunCounters

STATS_EVERY = 50  # committed mutants between two ``archive_stats`` events


def island_stats(model: IslandModel) -> list[dict[str, Any]]:
    """Per island: index, coverage, n_cells, coverage share, QD-score and best fitness."""
    out = []
    for island in range(model.n_islands):
        elites = model.elites(island)
        best = model.island_best(island)
        qd = sum(model.metrics.quality(e.fitness) for e in elites)
        out.append(
            {
                "island": island,
                "coverage": len(elites),
                "n_cells": model.space.n_cells,
                "coverage_share": round(len(elites) / model.space.n_cells, 6),
                "qd_score": round(qd, 9),
                "best_fitness": None if best is None else best.fitness,
            }
        )
    return out


class ArchiveReporter:
    """Emits ``rebin`` and periodic ``archive_stats`` events; builds the summary's archive part.

    Args:
        islands: the run's island model.
        events: the run's event log.
        every: committed mutants between two ``archive_stats`` events.
    """

    def __init__(self, islands: IslandModel, events: EventLog, every: int = STATS_EVERY) -> None:
        self.islands = islands
        self.events = events
        self.every = max(1, int(every))

    def after_commit(self, n_mutants: int) -> None:
        """Emit the grid re-drawings of this commit; the statistics every ``every`` mutants."""
        self.emit_rebins()
        if n_mutants % self.every == 0:
            self.events.emit("archive_stats", n_mutants=n_mutants, islands=self.stats())

    def emit_rebins(self) -> None:
        """Emit the grid re-drawings not reported yet."""
        for rebin in self.islands.take_rebins():
            self.events.emit(
                "rebin",
                version=rebin.version,
                dropped=[{"island": i, "program_id": e.program_id} for i, e in rebin.dropped],
                ranges=self.islands.space.ranges(),
            )

    def stats(self) -> list[dict[str, Any]]:
        return island_stats(self.islands)

    def summary(self, counters: RunCounters) -> dict[str, Any]:
        """The ``archive``, ``descriptors`` and ``cascade`` parts of ``summary.json``."""
        return {
            "archive": self.stats(),
            "descriptors": self.islands.space.ranges(),
            "cascade": counters.cascade_summary(),
        }
