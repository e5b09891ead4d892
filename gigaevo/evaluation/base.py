"""The Evaluator role and its result record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class EvaluationResult:
    """Outcome of running one program in the sandbox and validating its output.

    ``metrics`` is empty for invalid programs; ``reason`` says why a program is
    invalid (timeout, memory, output limit, exception with its type and
    message, validator rejection, non-finite metric). ``run_seconds`` is the
    wall time of the child process itself; ``overhead_seconds`` is the rest of
    the round trip (fork, pipes, validation).
    """

    valid: bool
    metrics: dict[str, float] = field(default_factory=dict)
    reason: str | None = None
    run_seconds: float = 0.0
    overhead_seconds: float = 0.0
    stdout_tail: str = ""


class Evaluator(Protocol):
    """Runs a program's entry function in isolation and validates its output.

    Implementations are thread-safe: the engine calls ``evaluate`` from several
    threads and at most ``max_workers`` programs run at once.
    """

    def evaluate(self, code: str) -> EvaluationResult: ...

    def close(self) -> None: ...
