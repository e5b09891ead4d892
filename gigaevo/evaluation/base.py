"""The Evaluator role and its result record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class EvaluationResult:
    """Outcome of running one program in the sandbox and validating its output.

    ``metrics`` is empty for invalid programs; ``reason`` says why a program is
    invalid (timeout, memory, output limit, exception with its type and
    message, validator rejection, non-finite metric, a sandbox step).
    Measurements are taken by the trusted side, never reported by the
    program: ``run_seconds`` is the child's wall time from fork to exit,
    ``cpu_seconds`` and ``peak_memory_bytes`` its CPU time and peak resident
    memory according to the kernel; ``overhead_seconds`` is the rest of the
    round trip (pipes, validation, clean-up). ``feedback`` is the short text
    a validator may return beside its metrics (shown to the model with this
    program's children). ``cascade`` is None without a first stage, else
    ``"passed"`` or ``"stopped"`` (the full evaluation was skipped).
    """

    valid: bool
    metrics: dict[str, float] = field(default_factory=dict)
    reason: str | None = None
    run_seconds: float = 0.0
    overhead_seconds: float = 0.0
    stdout_tail: str = ""
    cpu_seconds: float = 0.0
    peak_memory_bytes: int = 0
    feedback: str = ""
    cascade: str | None = None


class Evaluator(Protocol):
    """Runs a program's entry function in isolation and validates its output.

    Implementations are thread-safe: the engine calls ``evaluate`` from several
    threads and at most ``max_workers`` programs run at once.
    """

    def evaluate(self, code: str) -> EvaluationResult: ...

    def close(self) -> None: ...
