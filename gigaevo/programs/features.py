"""Program features computed from the source alone: behaviour descriptors of ``source: feature``."""

from __future__ import annotations

import ast
from collections.abc import Callable

from gigaevo.programs import pyast


def code_length(code: str) -> float:
    """Number of characters of ``code``."""
    return float(len(code))


def n_lines(code: str) -> float:
    """Number of lines of ``code`` that hold more than whitespace."""
    return float(sum(1 for line in code.splitlines() if line.strip()))


def n_statements(code: str) -> float:
    """Number of AST statements (at any depth) in ``code``; 0 when it does not parse."""
    try:
        tree = pyast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return 0.0
    return float(sum(1 for node in ast.walk(tree) if isinstance(node, ast.stmt)))


FEATURES: dict[str, Callable[[str], float]] = {
    "code_length": code_length,
    "n_lines": n_lines,
    "n_statements": n_statements,
}
"""Program features by name (a descriptor's ``source: feature``)."""
