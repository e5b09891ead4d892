"""gigaevo.evolution: the steady-state search layer's pure components.

- ``descriptors``: :class:`Descriptor` axes (fixed or adaptive) and the
  :class:`BehaviourSpace` mapping a program's descriptor values to its
  MAP-Elites cell; code :data:`FEATURES` (``code_length``, ``n_lines``,
  ``n_statements``).
- ``archive``: :class:`MapElitesArchive`, one :class:`Elite` per cell,
  direction-aware, optional capacity, re-binned when the grid grows;
  :class:`AddResult` says what an add did.
- ``islands``: :class:`IslandModel`, one archive per island; :class:`Rebin`.
- ``archive_report``: coverage and QD-score per island (events, summary).
- ``feedback``: :class:`FeedbackBook`, why a parent's recent children failed.
- ``selection``: the :class:`ParentSelector` role and its implementations,
  :class:`InspirationSampler`, and the :class:`IslandScheduler` role.
- ``migration``: :class:`RingMigration` plans :class:`Migrant` moves.
- ``stoppers``: the :class:`Stopper` role over a :class:`RunState`.

Nothing here performs I/O or touches global random state: every random choice
takes an explicit ``np.random.Generator`` and is deterministic given it.
"""

from gigaevo.evolution.archive import AddResult, AddStatus, Elite, MapElitesArchive, rank_elites
from gigaevo.evolution.descriptors import (
    FEATURES,
    BehaviourSpace,
    Descriptor,
    code_length,
    n_lines,
    n_statements,
)
from gigaevo.evolution.feedback import FeedbackBook, FeedbackSettings
from gigaevo.evolution.islands import IslandModel, Rebin
from gigaevo.evolution.migration import Migrant, RingMigration
from gigaevo.evolution.selection import (
    BestOrTournament,
    FitnessProportional,
    FitnessProportionalTournament,
    InspirationSampler,
    IslandScheduler,
    ParentSelector,
    RoundRobinIslands,
    TournamentSelection,
    UniformSelection,
    relative_quality,
)
from gigaevo.evolution.stoppers import (
    AnyStopper,
    FitnessPlateau,
    MaxMutants,
    RunState,
    Stopper,
    TargetFitness,
    WallClock,
)

__all__ = [
    "FEATURES",
    "AddResult",
    "AddStatus",
    "AnyStopper",
    "BehaviourSpace",
    "BestOrTournament",
    "Descriptor",
    "Elite",
    "FeedbackBook",
    "FeedbackSettings",
    "FitnessPlateau",
    "FitnessProportional",
    "FitnessProportionalTournament",
    "InspirationSampler",
    "IslandModel",
    "IslandScheduler",
    "MapElitesArchive",
    "MaxMutants",
    "Migrant",
    "ParentSelector",
    "Rebin",
    "RingMigration",
    "RoundRobinIslands",
    "RunState",
    "Stopper",
    "TargetFitness",
    "TournamentSelection",
    "UniformSelection",
    "WallClock",
    "code_length",
    "n_lines",
    "n_statements",
    "rank_elites",
    "relative_quality",
]
