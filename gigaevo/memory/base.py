"""The memory provider role: a decision before each mutation, an outcome after it.

The engine freezes a ``MutationContext`` before the LLM is called and hands it
to ``decide``; the returned ``Decision`` carries the rendered slate shown to the
mutator. After the child is evaluated and archived the engine reports a
``MutationResult`` to ``observe``. The memory never sees engine internals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gigaevo.problems.spec import MetricsSpec
from gigaevo.scratchpad import NoteWriter


@dataclass(frozen=True)
class MemoryRuntime:
    """What a memory provider is built with, besides its own config values.

    Attributes:
        task_key: stable identity of the task (the problem name).
        task_description: the problem text (context for authored cards).
        metrics: the problem's metrics spec (direction and bounds of gains).
        checkpoint_dir: this run's directory (ledgers, events).
        bank_dir: where the card bank lives (``memory_bank_dir``; may be shared).
        seed: the run seed.
        max_mutants: the mutation budget (progress = attempt / budget).
        scratchpad: the run's audited notes, or None when the run keeps none.
            Record cards established with evidence as Findings, retirements as
            Decisions and newly authored cards as Hypotheses (by stable key,
            e.g. ``card.<id>``); they are written at the run's next checkpoint.
    """

    task_key: str
    task_description: str
    metrics: MetricsSpec
    checkpoint_dir: Path
    bank_dir: Path
    seed: int
    max_mutants: int
    scratchpad: NoteWriter | None = None


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
    parent_code: str = ""  # the parent's source (agentic applicability labels read it)


@dataclass(frozen=True)
class Decision:
    """What the memory offers one mutation: a slate (possibly empty) and its card ids."""

    attempt: int
    slate: str = ""
    card_ids: tuple[str, ...] = ()
    record: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class MutationResult:
    """The terminal of one attempt as the memory sees it.

    ``archive_status`` is the MAP-Elites disposition (``new_cell``,
    ``improved``, ``rejected``) for valid children and None otherwise;
    ``invalid_reason`` says why an invalid child failed. The codes, change
    report and explanation are what the librarian shows its card author.
    ``se`` and ``measurement`` describe how precisely ``child_fitness`` was
    measured, as the problem declares it (``Problem.noise``): the standard
    error in metric units and the kind (``deterministic`` or ``scalar``);
    None for both when nothing is known.
    """

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
    island: int = 0
    parent_cell: tuple[int, ...] = ()
    child_cell: tuple[int, ...] | None = None
    archive_status: str | None = None
    invalid_reason: str | None = None
    parent_code: str = ""
    child_code: str = ""
    change_report: str = ""
    explanation: str = ""
    child_metrics: dict[str, float] = field(default_factory=dict)
    se: float | None = None
    measurement: str | None = None


class MemoryUsageError(Exception):
    """A memory provider cannot run as configured or with the bank it was given.

    Raised for a bad setting or an unreadable card bank; the message is one line
    naming the key or file. The pipeline turns it into exit code 2.
    """


class MemoryProvider(Protocol):
    """Chooses hints for the mutator and learns from outcomes."""

    def decide(self, context: MutationContext) -> Decision: ...

    def observe(self, result: MutationResult) -> None: ...

    def close(self) -> None: ...


class NoMemory:
    """``memory=none``: offers nothing and learns nothing (the ablation arm)."""

    def __init__(self, runtime: MemoryRuntime | None = None) -> None:
        self.runtime = runtime

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
