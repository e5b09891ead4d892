"""Turn what a finished child left behind into a verdict (trusted side, in the worker)."""

from __future__ import annotations

import json
import math
import numbers
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_MAX_REASON_CHARS = 1000
MAX_FEEDBACK_CHARS = 2000
_CRASH_SIGNALS = {signal.SIGKILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT}


@dataclass(frozen=True)
class ChildRun:
    """Raw facts about one child, all measured by the worker or the kernel.

    ``wall_seconds`` runs from the fork to the exit (or the kill);
    ``cpu_seconds`` and ``peak_rss_bytes`` come from ``wait4``;
    ``sandbox_error`` says what the worker could not prepare or clean up.
    """

    status: int
    wall_seconds: float
    timed_out: bool
    result: bytes | None
    result_too_large: bool
    output_bytes: int
    tail: str
    output_too_large: bool = False
    cpu_seconds: float = 0.0
    peak_rss_bytes: int = 0
    sandbox_error: str | None = None


@dataclass(frozen=True)
class Limits:
    """The limits a verdict refers to."""

    timeout_s: float
    max_output_bytes: int
    max_result_bytes: int


class MetricsError(ValueError):
    """The validator's answer is not a usable metrics dict."""


@dataclass(frozen=True)
class ValidationContext:
    """What the worker measured itself, handed to a ``validate(output, context)`` validator.

    The child cannot alter any of it: the wall time runs from the fork to the
    exit, CPU time and peak resident memory come from the kernel (``wait4``),
    all read in the worker after the child is gone.

    Attributes:
        stage: ``"full"``, or ``"cascade"`` for a problem's cheap first stage.
        run_seconds: the child's wall time.
        cpu_seconds: its CPU time (user + system).
        peak_memory_bytes: its peak resident memory.
    """

    stage: str
    run_seconds: float
    cpu_seconds: float
    peak_memory_bytes: int


def _measured(run: ChildRun) -> dict[str, Any]:
    return {
        "run_seconds": run.wall_seconds,
        "cpu_seconds": run.cpu_seconds,
        "peak_rss_bytes": run.peak_rss_bytes,
        "stdout_tail": run.tail,
    }


def context_of(run: ChildRun, stage: str) -> ValidationContext:
    """The trusted measurements of ``run`` as a validator sees them."""
    return ValidationContext(stage, run.wall_seconds, run.cpu_seconds, run.peak_rss_bytes)


def split_answer(raw: Any) -> tuple[Any, str]:
    """The validator's answer as (metrics, feedback): a dict, or a ``(dict, str)`` pair.

    The feedback is clipped to ``MAX_FEEDBACK_CHARS``.

    Raises:
        MetricsError: a pair whose second item is not a string.
    """
    if isinstance(raw, tuple) and len(raw) == 2:
        metrics, feedback = raw
        if not isinstance(feedback, str):
            raise MetricsError(f"validator feedback must be a str, got a {type(feedback).__name__}")
        return metrics, feedback.strip()[:MAX_FEEDBACK_CHARS]
    return raw, ""


def invalid(reason: str, run: ChildRun) -> dict[str, Any]:
    """Fields of an invalid verdict."""
    return {"valid": False, "metrics": {}, "reason": reason[:_MAX_REASON_CHARS], **_measured(run)}


def invalid_fields(reason: str, verdict: Mapping[str, Any]) -> dict[str, Any]:
    """``verdict`` turned invalid for ``reason`` (measurements, tail and feedback kept)."""
    return {**verdict, "valid": False, "metrics": {}, "reason": reason[:_MAX_REASON_CHARS]}


def check_metrics(raw: Any, primary: str) -> dict[str, float]:
    """Coerce the validator's answer to ``{name: finite float}`` with ``primary`` present.

    Raises:
        MetricsError: not a dict, a non-numeric or non-finite value, or no primary metric.
    """
    if not isinstance(raw, Mapping):
        raise MetricsError(f"validator returned a {type(raw).__name__}, expected a dict")
    metrics: dict[str, float] = {}
    for name, value in raw.items():
        if not isinstance(value, numbers.Real):
            raise MetricsError(f"non-numeric metric {name}={value!r}")
        number = float(value)
        if not math.isfinite(number):
            raise MetricsError(f"non-finite metric {name}={number}")
        metrics[str(name)] = number
    if primary not in metrics:
        raise MetricsError(f"primary metric {primary!r} missing from validator output")
    return metrics


def _signal_reason(signum: int) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    if signum == signal.SIGXCPU:
        return "cpu time limit exceeded (SIGXCPU)"
    if signum in _CRASH_SIGNALS:
        return f"killed by {name} (memory limit or crash)"
    return f"killed by {name}"


def _process_reason(run: ChildRun, limits: Limits) -> str | None:
    """Why the child failed at the process level, or None when it reported normally."""
    signalled = os.WIFSIGNALED(run.status)
    signum = os.WTERMSIG(run.status) if signalled else 0
    if run.sandbox_error is not None:
        return f"sandbox: {run.sandbox_error}"
    if run.output_too_large or run.output_bytes > limits.max_output_bytes:
        return f"output limit exceeded (more than {limits.max_output_bytes} bytes)"
    if signum == signal.SIGXFSZ:
        return "file size limit exceeded (SIGXFSZ)"
    if run.timed_out:
        return f"timeout after {limits.timeout_s:g} s"
    if run.result_too_large:
        return f"result larger than {limits.max_result_bytes} bytes"
    if signalled:
        return _signal_reason(signum)
    if not run.result:
        code = os.WEXITSTATUS(run.status) if os.WIFEXITED(run.status) else run.status
        return f"program exited (status {code}) without returning a result"
    return None


def _parse_payload(data: bytes) -> dict[str, Any] | None:
    try:
        payload = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("ok"), bool):
        return None
    return payload


def judge(
    run: ChildRun,
    limits: Limits,
    primary: str,
    validate: Callable[[Any, ValidationContext], Any],
    stage: str = "full",
) -> dict[str, Any]:
    """Verdict fields (valid, metrics, reason, feedback, measurements, stdout_tail) for one child.

    ``validate`` takes the output and the trusted :class:`ValidationContext`
    (see ``worker.load_validator`` for validators that take the output only).
    """
    reason = _process_reason(run, limits)
    if reason is not None:
        return invalid(reason, run)
    payload = _parse_payload(run.result or b"")
    if payload is None:
        return invalid("malformed result from the program", run)
    if not payload["ok"]:
        return invalid(str(payload.get("reason", "program failed")), run)
    try:
        raw = validate(payload.get("output"), context_of(run, stage))
    except Exception as exc:  # trusted validator on untrusted output: record and survive
        message = str(exc) or type(exc).__name__
        return invalid(f"validator: {message}", run)
    try:
        raw, feedback = split_answer(raw)
        metrics = check_metrics(raw, primary)
    except MetricsError as exc:
        return invalid(str(exc), run)
    return {
        "valid": True,
        "metrics": metrics,
        "reason": None,
        "feedback": feedback,
        **_measured(run),
    }
