"""What the librarian ingests: strictly valid mutation outcomes, and bounded prompt views."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

from gigaevo.memory.base import MutationResult
from gigaevo.memory.v2.bank.cards import Evidence
from gigaevo.problems.spec import MetricsSpec

# ProgramStatus values of valid, evaluated, archived children
_VALID_STATUSES = ("accepted", "rejected")


@dataclass(frozen=True)
class WriterOutcome:
    """A strictly valid mutation outcome, with everything the card author is shown.

    ``normalised_gain`` is direction-oriented (positive = better) and divided
    by the metric's bound span.
    """

    attempt: int
    parent_id: str
    child_id: str
    parent_code: str
    child_code: str
    change_report: str
    explanation: str
    parent_fitness: float
    child_fitness: float
    higher_is_better: bool
    normalised_gain: float
    archive_status: str
    island: int
    cited_card_ids: tuple[str, ...]

    @property
    def accepted(self) -> bool:
        return self.archive_status != "rejected"


def is_strictly_valid(result: MutationResult) -> bool:
    """True for a valid, evaluated, archived child with finite fitnesses and gain.

    Invalid children, duplicates (never evaluated) and failed mutations never
    reach the writer: validity is a precondition, not a prompt field.
    """
    return (
        result.valid
        and result.status in _VALID_STATUSES
        and result.archive_status is not None
        and result.normalised_gain is not None
        and all(
            math.isfinite(v)
            for v in (result.normalised_gain, result.parent_fitness, result.child_fitness)
        )
    )


def writer_outcome(result: MutationResult, metrics: MetricsSpec) -> WriterOutcome:
    """The librarian's view of a strictly valid ``result``.

    Raises:
        ValueError: ``result`` is not strictly valid (see ``is_strictly_valid``).
    """
    if not is_strictly_valid(result):
        raise ValueError(f"attempt {result.attempt} is not a strictly valid outcome")
    assert result.normalised_gain is not None and result.archive_status is not None
    return WriterOutcome(
        attempt=result.attempt,
        parent_id=result.parent_id,
        child_id=result.child_id,
        parent_code=result.parent_code,
        child_code=result.child_code,
        change_report=result.change_report,
        explanation=result.explanation,
        parent_fitness=result.parent_fitness,
        child_fitness=result.child_fitness,
        higher_is_better=metrics.higher_is_better,
        normalised_gain=result.normalised_gain,
        archive_status=result.archive_status,
        island=result.island,
        cited_card_ids=tuple(result.cited_card_ids),
    )


def evidence_of(
    outcome: WriterOutcome, task_key: str, run_id: str, candidate_id: str, now: float
) -> Evidence:
    """The evidence row ``outcome`` brings to the card it founds or is pooled into."""
    return Evidence(
        task_key=task_key,
        run_id=run_id,
        attempt=outcome.attempt,
        parent_id=outcome.parent_id,
        child_id=outcome.child_id,
        parent_fitness=outcome.parent_fitness,
        child_fitness=outcome.child_fitness,
        normalised_gain=outcome.normalised_gain,
        archive_status=outcome.archive_status,
        candidate_id=candidate_id,
        recorded_at=now,
    )


def bounded_diff(parent: str, child: str, max_lines: int) -> str:
    """The unified diff parent -> child, cut to ``max_lines`` lines with a note when cut."""
    lines = list(
        difflib.unified_diff(
            parent.splitlines(), child.splitlines(), "parent", "child", n=2, lineterm=""
        )
    )
    if len(lines) <= max_lines:
        return "\n".join(lines)
    return "\n".join([*lines[:max_lines], f"... ({len(lines) - max_lines} more diff lines cut)"])


def clip(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters with a note when cut."""
    text = text.strip("\n")
    if len(text) <= max_chars:
        return text
    return text[:max_chars].rstrip() + f"\n... ({len(text) - max_chars} more characters cut)"


def number(value: float) -> str:
    """A fitness or gain as prompts show it (10 significant digits)."""
    return f"{value:.10g}"
