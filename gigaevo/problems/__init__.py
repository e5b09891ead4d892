"""Problems: what the search optimises, loaded from data directories.

A problem is a directory with ``task.md`` (the text the LLM reads),
``problem.yaml`` (entry function, time limit, metric bounds), ``validator.py``
(``validate(output) -> dict[str, float]``, strict, raises ``ValueError``) and
``initial_program.py`` or ``initial_programs/*.py`` (marked with
``# EVOLVE-BLOCK-START`` / ``# EVOLVE-BLOCK-END``). Built-in problems
(``circle_packing``, ``heilbronn``, ``rastrigin``) ship under ``builtin/``;
user problems use the same layout (see docs/problems.md).

``load_problem(name=...)`` or ``load_problem(directory=...)`` returns a frozen
``Problem``; every failure is a one-line ``ProblemError`` naming the culprit.
"""

from __future__ import annotations

from gigaevo.problems.loader import builtin_problem_names, builtin_root, load_problem
from gigaevo.problems.spec import MetricsSpec, Problem, ProblemError

__all__ = [
    "MetricsSpec",
    "Problem",
    "ProblemError",
    "builtin_problem_names",
    "builtin_root",
    "load_problem",
]
