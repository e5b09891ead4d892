"""Sandboxed execution of untrusted, LLM-written programs: validity and metrics.

``SandboxEvaluator`` implements the ``Evaluator`` role. It keeps warm worker
processes (``worker``) that fork one confined child per program (``child``,
``guard``, ``limits``), talk to the main process in length-prefixed JSON
(``protocol``), and validate the child's JSON output on the trusted side
(``verdict``). ``pool`` manages one worker from the main process.
"""

from __future__ import annotations

from gigaevo.evaluation.base import EvaluationResult, Evaluator
from gigaevo.evaluation.pool import SandboxError
from gigaevo.evaluation.sandbox import SandboxEvaluator

__all__ = ["EvaluationResult", "Evaluator", "SandboxError", "SandboxEvaluator"]
