"""Run counters that are checkpointed with every commit and summarised at the end."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RunCounters:
    """Mutable tallies of one run (restored on resume)."""

    n_mutants: int = 0
    n_valid: int = 0
    n_invalid: int = 0
    n_duplicate: int = 0
    n_failed_mutations: int = 0
    n_accepted: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_cost_usd: float = 0.0
    best_id: str = ""
    best_fitness: float = 0.0
    initial_fitness: float = 0.0
    mutants_since_improvement: int = 0
    wall_seconds: float = 0.0  # run time at the last commit, across resumed sessions
    invalid_reasons: dict[str, int] = field(default_factory=dict)
    # cascade evaluation: programs the first stage stopped, and those it let through
    n_cascade_stopped: int = 0
    n_cascade_passed: int = 0
    # attempt numbers below this were dispatched (commits may come out of order)
    next_attempt: int = 0
    # unexpected exceptions contained in one attempt, by stage (the run went on)
    attempt_errors: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunCounters:
        return cls(**d)

    def count_cascade(self, outcome: str | None) -> None:
        """Tally a cascade outcome (``"stopped"``, ``"passed"``; None: no cascade)."""
        if outcome == "stopped":
            self.n_cascade_stopped += 1
        elif outcome == "passed":
            self.n_cascade_passed += 1

    def cascade_summary(self) -> dict[str, int]:
        """First-stage runs, programs stopped there, and full evaluations they allowed."""
        return {
            "n_first_stage": self.n_cascade_stopped + self.n_cascade_passed,
            "n_stopped": self.n_cascade_stopped,
            "n_full": self.n_cascade_passed,
        }

    def count_error(self, stage: str) -> None:
        """Tally an exception contained in one attempt at ``stage``."""
        self.attempt_errors[stage] = self.attempt_errors.get(stage, 0) + 1

    def count_reason(self, reason: str) -> None:
        """Tally an invalid reason by its kind (text before the first colon)."""
        kind = reason.split(":", 1)[0].strip()[:60] or "unknown"
        self.invalid_reasons[kind] = self.invalid_reasons.get(kind, 0) + 1
