"""Numeric-constant tactics of the offline mutator: adaptive perturbation and constant crossover.

Constants of two programs *align* when they sit at the same position of
statements with the same shape (numbers masked) in the same scope; aligned
pairs drive the differential-evolution step and the uniform crossover.
"""

from __future__ import annotations

import ast
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from gigaevo.llm.offline_source import (
    SourceView,
    Span,
    TacticContext,
    TacticResult,
    header_nodes,
    walk_statements,
)

_SKIPPED_KEYWORDS = frozenset({"axis"})  # numbers that select, not quantify
MAX_CONSTANTS = 4


@dataclass(frozen=True)
class NumericConstant:
    """A numeric literal (``-x`` included) inside the markers, with its alignment key."""

    node: ast.expr
    value: int | float
    key: tuple[str, str, int, int]  # scope, masked statement header, occurrence, position
    stmt_line: int

    @property
    def is_int(self) -> bool:
        return isinstance(self.value, int)


def numeric_value(node: ast.AST) -> int | float | None:
    """The value of a numeric literal or a signed numeric literal; None otherwise (bools too)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return None if isinstance(node.value, bool) else node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = numeric_value(node.operand)
        if inner is not None and isinstance(node.operand, ast.Constant):
            return -inner if isinstance(node.op, ast.USub) else inner
    return None


def numeric_constants(view: SourceView) -> list[NumericConstant]:
    """Numeric literals inside the markers in source order (not subscript indices, not axis=)."""
    out: list[NumericConstant] = []
    seen: Counter[tuple[str, str]] = Counter()
    for scope, stmt in walk_statements(view.tree):
        nodes: list[ast.expr] = []
        for part in header_nodes(stmt):
            _collect(part, nodes)
        masked = type(stmt).__name__ + "|" + "|".join(_masked(p) for p in header_nodes(stmt))
        occurrence = seen[(scope, masked)]
        seen[(scope, masked)] += 1
        nodes.sort(key=lambda n: (n.lineno, n.col_offset))
        for pos, node in enumerate(nodes):
            value = numeric_value(node)
            if value is not None and view.node_editable(node):
                out.append(
                    NumericConstant(node, value, (scope, masked, occurrence, pos), stmt.lineno)
                )
    return sorted(out, key=lambda c: (c.node.lineno, c.node.col_offset))


def _collect(node: ast.AST, out: list[ast.expr]) -> None:
    if numeric_value(node) is not None:
        out.append(node)  # type: ignore[arg-type]
        return
    for name, child in ast.iter_fields(node):
        if isinstance(node, ast.Subscript) and name == "slice":
            continue
        if isinstance(node, ast.keyword) and node.arg in _SKIPPED_KEYWORDS:
            continue
        for item in child if isinstance(child, list) else [child]:
            if isinstance(item, ast.AST) and not isinstance(item, ast.stmt):
                _collect(item, out)


def _masked(node: object) -> str:
    """A structural dump with every numeric literal replaced by ``#``."""
    if isinstance(node, ast.AST):
        if numeric_value(node) is not None:
            return "#"
        fields = ",".join(_masked(getattr(node, f, None)) for f in node._fields)
        return f"{type(node).__name__}({fields})"
    if isinstance(node, list):
        return "[" + ",".join(_masked(item) for item in node) + "]"
    return repr(node)


def aligned(
    parent: list[NumericConstant], other: list[NumericConstant]
) -> dict[int, NumericConstant]:
    """Index into ``parent`` -> the constant of ``other`` at the same aligned position."""
    by_key = {c.key: c for c in other}
    return {i: by_key[c.key] for i, c in enumerate(parent) if c.key in by_key}


def format_number(value: float, is_int: bool, resolution: float) -> str:
    """Literal text for ``value``: ints stay ints; floats keep ~2 digits below ``resolution``."""
    if is_int:
        return str(int(value))
    if not math.isfinite(value):
        return "0.0"
    ratio = abs(value) / max(abs(resolution), 1e-15)
    digits = min(15, max(2, math.ceil(math.log10(max(ratio, 1.0))) + 2))
    text = f"{value:.{digits}g}"
    return text if any(ch in text for ch in ".e") else text + ".0"


def _literal(view: SourceView, const: NumericConstant, text: str) -> Span:
    """Writes ``text`` over the constant (in parentheses if a bare literal turns negative)."""
    if text.startswith("-") and isinstance(const.node, ast.Constant):
        text = f"({text})"
    return Span(view.start(const.node), view.end(const.node), text)


def _new_float(
    rng: np.random.Generator,
    value: float,
    typical: float,
    partner: float | None,
    better: bool | None,
) -> tuple[float, float, str]:
    """A perturbed float, the step's resolution and how it was made.

    The log-uniform step (1e-4 to 1 times a scale) is mostly relative to the
    literal's own size (at least 0.3 ``typical``), sometimes to the typical
    size of the program's literals, so small literals can grow and cross zero.
    """
    if partner is not None and partner != value and rng.random() < 0.6:
        diff = partner - value
        if better is None:
            factor = rng.uniform(0.2, 1.0) * rng.choice([-0.5, 1.0])
        else:
            factor = rng.uniform(0.2, 1.0) if better else -rng.uniform(0.1, 0.6)
        step = factor * diff
        return value + step, abs(step), f"differential step {factor:+.2f} x (elite - parent)"
    own = rng.random() < 0.8
    scale = max(abs(value), 0.3 * typical) if own else typical
    step = 10.0 ** rng.uniform(-4.0, 0.0) * scale * rng.choice([-1.0, 1.0])
    return value + step, abs(step), f"log-uniform step {step:+.3g}"


def _new_int(
    rng: np.random.Generator, value: int, partner: float | None, better: bool | None
) -> tuple[int, str]:
    if partner is not None and partner != value and better is not False and rng.random() < 0.5:
        return int(partner), "took the elite's value"
    sign = int(rng.choice([-1, 1]))
    if abs(value) <= 16 or rng.random() < 0.7:
        step = sign * int(rng.choice([1, 1, 1, 2]))
    else:
        step = sign * max(1, round(abs(value) * 10.0 ** rng.uniform(-2.0, -0.7)))
    new = value + step
    if value >= 0 > new:  # counts and bounds stay non-negative
        new = value - step
    return new, f"step {new - value:+d}"


def perturb_constants(ctx: TacticContext, rng: np.random.Generator) -> TacticResult | None:
    """Change one to a few numeric literals with multi-scale or differential steps."""
    view = ctx.parent
    consts = numeric_constants(view)
    if not consts:
        return None
    partners, better = _partners(ctx, consts, rng)
    typical = _typical_size(consts)
    weights = np.array([0.35 if c.is_int else 1.0 for c in consts])
    n = int(min(rng.geometric(0.55), MAX_CONSTANTS, len(consts)))
    chosen = rng.choice(len(consts), size=n, replace=False, p=weights / weights.sum())
    spans: dict[int, Span] = {}
    report: list[str] = []
    for i in sorted(int(k) for k in chosen):
        const = consts[i]
        partner = partners[i].value if i in partners else None
        for _ in range(8):  # redraw until the literal text really changes
            if const.is_int:
                new_int, how = _new_int(rng, int(const.value), partner, better)
                text = format_number(new_int, True, 1.0)
            else:
                new, resolution, how = _new_float(rng, float(const.value), typical, partner, better)
                text = format_number(new, False, resolution)
            if float(text) != const.value:
                break
        else:
            continue
        twins = [i, *_twins(consts, i)] if rng.random() < 0.5 else [i]
        for j in twins:
            spans[j] = _literal(view, consts[j], text)
        also = f" (and {len(twins) - 1} equal literal(s) nearby)" if len(twins) > 1 else ""
        report.append(
            f"- line {const.node.lineno}: {view.segment(const.node)} -> {text}, {how}{also}"
        )
    if not spans:
        return None
    return TacticResult(tuple(spans.values()), tuple(report))


def _typical_size(consts: list[NumericConstant]) -> float:
    """The median magnitude of the non-zero float literals (0.01 when there are none)."""
    sizes = [abs(float(c.value)) for c in consts if not c.is_int and c.value != 0]
    return float(np.median(sizes)) if sizes else 0.01


def _twins(consts: list[NumericConstant], i: int) -> list[int]:
    """Other literals of the same statement with the same value (e.g. a radius used for x and y)."""
    me = consts[i]
    return [
        j
        for j, c in enumerate(consts)
        if j != i and c.stmt_line == me.stmt_line and c.value == me.value and c.is_int == me.is_int
    ]


def _partners(
    ctx: TacticContext, consts: list[NumericConstant], rng: np.random.Generator
) -> tuple[dict[int, NumericConstant], bool | None]:
    """Aligned constants of one randomly chosen inspiration, and whether it beats the parent."""
    if not ctx.inspirations:
        return {}, None
    elite, view = ctx.inspirations[int(rng.integers(len(ctx.inspirations)))]
    return aligned(consts, numeric_constants(view)), ctx.inspiration_better(elite)


def crossover_constants(ctx: TacticContext, rng: np.random.Generator) -> TacticResult | None:
    """Uniform crossover: each differing aligned literal takes the elite's value with p = 0.5."""
    consts = numeric_constants(ctx.parent)
    for k in rng.permutation(len(ctx.inspirations)):
        elite, view = ctx.inspirations[int(k)]
        pairs = [
            (i, o)
            for i, o in aligned(consts, numeric_constants(view)).items()
            if o.value != consts[i].value
        ]
        if not pairs:
            continue
        take = [p for p in pairs if rng.random() < 0.5] or [pairs[int(rng.integers(len(pairs)))]]
        spans = tuple(_literal(ctx.parent, consts[i], view.segment(o.node)) for i, o in take)
        report = tuple(
            f"- line {consts[i].node.lineno}: {ctx.parent.segment(consts[i].node)} -> "
            f"{view.segment(o.node)} (from {elite.id})"
            for i, o in take
        )
        return TacticResult(spans, report)
    return None
