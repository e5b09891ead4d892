"""The Mutator role: one parent (plus context) in, one child program out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gigaevo.llm.base import LLMResponse
from gigaevo.problems.spec import MetricsSpec
from gigaevo.programs import MutationInfo, Program


@dataclass(frozen=True)
class ParentFeedback:
    """What the parent's evaluation and its recent children said (bounded by whoever builds it).

    Attributes:
        failures: one line per recent invalid or failed child, most recent
            first (``"attempt 12: circles 3 and 7 overlap by 2e-09"``).
        output_tail: the end of what the parent printed (stdout and stderr).
        validator_feedback: the text the validator returned with its metrics.
        ancestor_failures: one line per invalid or failed child of the
            parent's ancestors (its parent first, then further back; the most
            recent first within each): changes to earlier versions of this
            code that failed, and would likely fail here too.
    """

    failures: tuple[str, ...] = ()
    output_tail: str = ""
    validator_feedback: str = ""
    ancestor_failures: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(
            self.failures
            or self.ancestor_failures
            or self.output_tail.strip()
            or self.validator_feedback.strip()
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "failures": list(self.failures),
            "output_tail": self.output_tail,
            "validator_feedback": self.validator_feedback,
        }
        if self.ancestor_failures:  # absent from dispatches stored before it existed
            d["ancestor_failures"] = list(self.ancestor_failures)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ParentFeedback:
        return cls(
            tuple(str(f) for f in d.get("failures", ())),
            str(d.get("output_tail", "")),
            str(d.get("validator_feedback", "")),
            tuple(str(f) for f in d.get("ancestor_failures", ())),
        )


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
        feedback: why the parent's recent children failed, what the parent
            printed and what its validator said (empty when there is nothing).
    """

    task_description: str
    metrics: MetricsSpec
    parent: Program
    inspirations: tuple[Program, ...]
    seed: int
    memory_slate: str = ""
    scratchpad: str = ""
    feedback: ParentFeedback = ParentFeedback()


@dataclass(frozen=True)
class MutationOutcome:
    """The child's source (None when the answer could not be applied) and how it came about."""

    child_code: str | None
    info: MutationInfo
    llm: LLMResponse | None = None


class Mutator(Protocol):
    """Turns a MutationRequest into a child program. Thread-safe; never raises on a bad answer."""

    def mutate(self, request: MutationRequest) -> MutationOutcome: ...
