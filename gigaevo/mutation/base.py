"""The Mutator role: one parent (plus context) in, one child program out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gigaevo.llm.base import LLMResponse
from gigaevo.problems.spec import MetricsSpec
from gigaevo.programs import MutationInfo, Program


@dataclass(frozen=True)
class MutationRequest:
    """Everything one mutation may show the LLM, frozen before the call.

    Attributes:
        task_description: the problem text.
        metrics: the metrics spec (primary name, direction, bounds).
        parent: the program to improve.
        inspirations: other elites shown for inspiration or crossover.
        seed: per-mutation seed; the same request gives the same answer offline.
        memory_slate: rendered memory cards ("" when memory is off).
        scratchpad: stable prompt prefix from the run's scratchpad ("" if none).
    """

    task_description: str
    metrics: MetricsSpec
    parent: Program
    inspirations: tuple[Program, ...]
    seed: int
    memory_slate: str = ""
    scratchpad: str = ""


@dataclass(frozen=True)
class MutationOutcome:
    """The child's source (None when the answer could not be applied) and how it came about."""

    child_code: str | None
    info: MutationInfo
    llm: LLMResponse | None = None


class Mutator(Protocol):
    """Turns a MutationRequest into a child program. Thread-safe; never raises on a bad answer."""

    def mutate(self, request: MutationRequest) -> MutationOutcome: ...
