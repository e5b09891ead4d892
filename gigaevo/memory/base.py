"""The memory provider role: a decision before each mutation, an outcome after it.

The engine freezes a ``MutationContext`` before the LLM is called and hands it
to ``decide``; the returned ``Decision`` carries the rendered slate shown to the
mutator. After the child is evaluated and archived the engine reports a
``MutationResult`` to ``observe``. The memory never sees engine internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class MutationContext:
    """Pre-treatment context of one mutation attempt (frozen before the LLM call)."""

    task_key: str
    attempt: int  # mutant index, 0-based
    parent_id: str
    parent_fitness: float
    island: int
    cell: tuple[int, ...]
    coordinates: tuple[float, ...]  # behaviour coordinates in [0, 1]
    progress: float  # mutants done / budget, in [0, 1]


@dataclass(frozen=True)
class Decision:
    """What the memory offers one mutation: a slate (possibly empty) and its card ids."""

    attempt: int
    slate: str = ""
    card_ids: tuple[str, ...] = ()
    record: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class MutationResult:
    """The terminal of one attempt as the memory sees it."""

    attempt: int
    child_id: str
    parent_id: str
    status: str  # ProgramStatus value
    valid: bool
    parent_fitness: float
    child_fitness: float
    normalised_gain: float | None  # None for invalid or duplicate children
    cited_card_ids: tuple[str, ...]  # card_ids_used ∩ slate, frozen at birth
    accepted: bool


class MemoryProvider(Protocol):
    """Chooses hints for the mutator and learns from outcomes."""

    def decide(self, context: MutationContext) -> Decision: ...

    def observe(self, result: MutationResult) -> None: ...

    def close(self) -> None: ...


class NoMemory:
    """``memory=none``: offers nothing and learns nothing (the ablation arm)."""

    def decide(self, context: MutationContext) -> Decision:
        return Decision(attempt=context.attempt)

    def observe(self, result: MutationResult) -> None:
        return None

    def close(self) -> None:
        return None


def ground_citations(card_ids_used: tuple[str, ...], decision: Decision) -> tuple[str, ...]:
    """The cited ids that were really on the slate, in slate order.

    Missing, malformed or invented ids get no credit.
    """
    used = set(card_ids_used)
    return tuple(cid for cid in decision.card_ids if cid in used)
