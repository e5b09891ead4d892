"""Cascade evaluation: a cheap first stage whose failure spares the full evaluation.

A problem may declare a first stage (``cascade`` in ``problem.yaml``): another
entry function outside the EVOLVE-BLOCK, typically the same code on a small
instance, with its own time limit and a threshold on the primary metric. The
worker runs it in its own child; a program that is invalid there, or whose
primary metric is worse than the threshold, is recorded invalid with a
``cascade:`` reason and never gets the full evaluation. Verdicts here are the
plain dicts of ``verdict.judge``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gigaevo.evaluation.verdict import invalid_fields

STOPPED = "stopped"
PASSED = "passed"


@dataclass(frozen=True)
class CascadeStage:
    """The first stage as the worker runs it.

    Attributes:
        entry_function: called with no arguments in the first child.
        threshold: the primary metric must be at least this good to go on.
        timeout_s: wall-clock limit of the first child.
        higher_is_better: direction of the primary metric.
    """

    entry_function: str
    threshold: float
    timeout_s: float
    higher_is_better: bool

    def passes(self, value: float) -> bool:
        """True when ``value`` is as good as the threshold or better."""
        return value >= self.threshold if self.higher_is_better else value <= self.threshold


def after_first_stage(
    first: dict[str, Any], stage: CascadeStage, primary: str
) -> dict[str, Any] | None:
    """The final verdict when the first stage stops the program, or None to go on."""
    if not first["valid"]:
        reason = f"cascade: first stage failed: {first['reason']}"
        return {**invalid_fields(reason, first), "cascade": STOPPED}
    value = first["metrics"][primary]
    if stage.passes(value):
        return None
    relation = "below" if stage.higher_is_better else "above"
    reason = (
        f"cascade: {primary} {value:.6g} on the first stage is {relation} the threshold "
        f"{stage.threshold:.6g}; full evaluation skipped"
    )
    return {**invalid_fields(reason, first), "cascade": STOPPED}


def merge_stages(first: dict[str, Any], full: dict[str, Any]) -> dict[str, Any]:
    """The full stage's verdict, with the time and memory of both children."""
    return {
        **full,
        "run_seconds": first["run_seconds"] + full["run_seconds"],
        "cpu_seconds": first["cpu_seconds"] + full["cpu_seconds"],
        "peak_rss_bytes": max(first["peak_rss_bytes"], full["peak_rss_bytes"]),
        "cascade": PASSED,
    }
