"""gigaevo.evolution: the steady-state search layer's pure components.

- ``descriptors``: :class:`Descriptor` axes and the :class:`BehaviourSpace`
  mapping a program (code + metrics) to its MAP-Elites cell; code
  :data:`FEATURES` (``code_length``, ``n_lines``, ``n_statements``).
- ``archive``: :class:`MapElitesArchive`, one :class:`Elite` per cell,
  direction-aware, optional capacity; :class:`AddResult` says what an add did.
- ``islands``: :class:`IslandModel`, one archive per island.
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
from gigaevo.evolution.islands import IslandModel
from gigaevo.evolution.migration import Migrant, RingMigration
from gigaevo.evolution.selection import (
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
    "Descriptor",
    "Elite",
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
