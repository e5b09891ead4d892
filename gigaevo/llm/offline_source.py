"""Source views and text edits for the offline mutator's AST-level tactics.

A tactic looks at the parent's AST through a ``SourceView`` (which nodes lie
inside the EVOLVE-BLOCK markers, where they sit in the text) and returns
``Span`` edits of the original text, so everything the tactic does not touch
(comments, layout, the code outside the markers) is kept byte for byte.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from gigaevo.llm.answer_format import editable_line_ranges, split_lines
from gigaevo.llm.prompt_reader import ElitePrompt
from gigaevo.programs import pyast


@dataclass(frozen=True)
class Span:
    """Replace ``code[start:end]`` with ``text`` (``start == end`` inserts)."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class TacticResult:
    """The edits one tactic made and one report line per edit."""

    spans: tuple[Span, ...]
    report: tuple[str, ...]


class SourceView:
    """A parsed program with offsets and the editable (inside-markers) line ranges.

    Raises:
        SyntaxError: the code does not parse.
    """

    def __init__(self, code: str) -> None:
        self.code = code if code.endswith("\n") else code + "\n"
        self.lines = split_lines(self.code)
        self.tree = pyast.parse(self.code)
        self.ranges = editable_line_ranges(self.code)
        starts = [0]
        for line in self.lines:
            starts.append(starts[-1] + len(line))
        self._line_starts = starts

    def offset(self, lineno: int, col_byte: int) -> int:
        """Absolute character offset of an AST position (1-based line, UTF-8 byte column)."""
        line = self.lines[lineno - 1] if lineno <= len(self.lines) else ""
        col = len(line.encode("utf-8")[:col_byte].decode("utf-8", errors="replace"))
        return self._line_starts[lineno - 1] + col

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def segment(self, node: ast.AST) -> str:
        return self.code[self.start(node) : self.end(node)]

    def line_offset(self, lineno: int) -> int:
        """Offset of the start of line ``lineno`` (one past the last line gives the end)."""
        return self._line_starts[lineno - 1]

    def editable(self, first: int, last: int) -> bool:
        """True when lines first..last all lie inside one EVOLVE block."""
        return any(lo <= first and last <= hi for lo, hi in self.ranges)

    def node_editable(self, node: ast.AST) -> bool:
        first = getattr(node, "lineno", None)
        last = getattr(node, "end_lineno", None)
        return first is not None and last is not None and self.editable(first, last)

    def editable_nodes(self, kind: type | tuple[type, ...]) -> list[ast.AST]:
        """Nodes of ``kind`` inside the markers, in source order."""
        found = [n for n in ast.walk(self.tree) if isinstance(n, kind) and self.node_editable(n)]
        return sorted(found, key=lambda n: (n.lineno, n.col_offset))  # type: ignore[attr-defined]

    def stmt_lines(self, stmt: ast.stmt) -> tuple[int, int]:
        """First and last line of a statement, decorators included."""
        decorators = getattr(stmt, "decorator_list", None) or []
        first = min([stmt.lineno] + [d.lineno for d in decorators])
        return first, stmt.end_lineno or stmt.lineno

    def owns_lines(self, stmt: ast.stmt) -> bool:
        """True when the statement's lines hold nothing else (no ``;`` neighbours)."""
        first, last = self.stmt_lines(stmt)
        head = self.code[self.line_offset(first) : self.start(stmt)]
        tail = self.code[self.end(stmt) : self.line_offset(last + 1)].strip()
        decorated = bool(getattr(stmt, "decorator_list", None))
        return (decorated or not head.strip()) and (not tail or tail.startswith("#"))

    def stmt_text(self, stmt: ast.stmt) -> str:
        first, last = self.stmt_lines(stmt)
        return self.code[self.line_offset(first) : self.line_offset(last + 1)]


def child_bodies(node: ast.AST) -> Iterator[list[ast.stmt]]:
    """The statement lists directly under ``node`` (bodies, else-branches, handlers, cases)."""
    for _, value in ast.iter_fields(node):
        if not isinstance(value, list) or not value:
            continue
        if isinstance(value[0], ast.stmt):
            yield value
        else:
            for item in value:
                body = getattr(item, "body", None)
                if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                    yield body


def header_nodes(stmt: ast.stmt) -> list[ast.AST]:
    """The parts of a statement that are not nested statement lists (a compound's header)."""
    out: list[ast.AST] = []
    for _, value in ast.iter_fields(stmt):
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, ast.AST) and not isinstance(
                item, (ast.stmt, ast.excepthandler, ast.match_case)
            ):
                out.append(item)
    return out


def walk_statements(tree: ast.Module) -> Iterator[tuple[str, ast.stmt]]:
    """Every statement with its scope (dotted names of the enclosing defs and classes)."""

    def visit(body: list[ast.stmt], scope: str) -> Iterator[tuple[str, ast.stmt]]:
        for stmt in body:
            yield scope, stmt
            inner = scope
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{scope}.{stmt.name}" if scope else stmt.name
            for child in child_bodies(stmt):
                yield from visit(child, inner)

    yield from visit(tree.body, "")


def apply_spans(code: str, spans: tuple[Span, ...] | list[Span]) -> str:
    """``code`` with every span replaced.

    Raises:
        ValueError: two spans overlap.
    """
    ordered = sorted(spans, key=lambda s: (s.start, s.end))
    for a, b in itertools.pairwise(ordered):
        if b.start < a.end:
            raise ValueError(f"overlapping edits at offsets {a.start}-{a.end} and {b.start}")
    out = code
    for span in reversed(ordered):
        out = out[: span.start] + span.text + out[span.end :]
    return out


@dataclass(frozen=True)
class TacticContext:
    """What a tactic may use: the parent, the parseable inspirations, the fitness direction."""

    parent: SourceView
    inspirations: tuple[tuple[ElitePrompt, SourceView], ...]
    parent_fitness: float | None
    higher_is_better: bool | None

    def inspiration_better(self, elite: ElitePrompt) -> bool | None:
        """Whether ``elite`` beats the parent, or None when the prompt did not say."""
        if None in (elite.fitness, self.parent_fitness, self.higher_is_better):
            return None
        diff = float(elite.fitness) - float(self.parent_fitness)  # type: ignore[arg-type]
        return diff > 0 if self.higher_is_better else diff < 0


Tactic = Callable[[TacticContext, np.random.Generator], TacticResult | None]
