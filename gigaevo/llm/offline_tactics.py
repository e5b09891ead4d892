"""Structural tactics of the offline mutator and the registry of all tactics with their weights.

Every tactic takes a ``TacticContext`` and a generator and returns the text
edits it made (``TacticResult``), or None when the parent offers it nothing to
work on. Tactics touch only nodes inside the EVOLVE-BLOCK markers.
"""

from __future__ import annotations

import ast
import itertools
import textwrap

import numpy as np

from gigaevo.llm.offline_constants import crossover_constants, numeric_value, perturb_constants
from gigaevo.llm.offline_source import (
    SourceView,
    Span,
    Tactic,
    TacticContext,
    TacticResult,
    child_bodies,
)

_STRICTNESS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
_FLIP = {
    ast.Lt: ast.Gt,
    ast.Gt: ast.Lt,
    ast.LtE: ast.GtE,
    ast.GtE: ast.LtE,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}
_ARITHMETIC = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult}
_OP_TEXT: dict[type, str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
}
# statements that end a body or carry no behaviour of their own: never moved, copied or deleted
_PINNED = (ast.Return, ast.Raise, ast.Global, ast.Nonlocal, ast.Break, ast.Continue, ast.Import)
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def change_loop_bounds(ctx: TacticContext, rng: np.random.Generator) -> TacticResult | None:
    """Move one ``range(...)`` bound: a literal by one or two, an expression by ``+ 1``/``- 1``."""
    view = ctx.parent
    calls = [
        c
        for c in view.editable_nodes(ast.Call)
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "range"
    ]
    calls = [c for c in calls if c.args and not c.keywords]
    if not calls:
        return None
    call = calls[int(rng.integers(len(calls)))]
    assert isinstance(call, ast.Call)
    arg = call.args[0] if len(call.args) == 1 or rng.random() < 0.25 else call.args[1]
    value = numeric_value(arg)
    step = int(rng.choice([-1, 1, 1, -2, 2])) if len(call.args) > 1 else int(rng.choice([-1, 1]))
    if isinstance(value, int):
        new_text = str(value + step if value + step >= 0 else value - step)
    else:
        new_text = f"{view.segment(arg)} {'+' if step > 0 else '-'} {abs(step)}"
        if isinstance(arg, (ast.BinOp, ast.BoolOp, ast.IfExp, ast.Lambda, ast.Compare)):
            new_text = f"({view.segment(arg)}) {'+' if step > 0 else '-'} {abs(step)}"
    span = Span(view.start(arg), view.end(arg), new_text)
    return TacticResult(
        (span,), (f"- line {arg.lineno}: range bound {view.segment(arg)} -> {new_text}",)
    )


def change_operators(ctx: TacticContext, rng: np.random.Generator) -> TacticResult | None:
    """Loosen or tighten a comparison (< <=, > >=), flip it, or swap + - or * /."""
    view = ctx.parent
    sites: list[tuple[ast.AST, ast.AST, type, type]] = []  # left, right, old op, new op
    for node in view.editable_nodes(ast.Compare):
        assert isinstance(node, ast.Compare)
        lefts = [node.left, *node.comparators[:-1]]
        for left, op, right in zip(lefts, node.ops, node.comparators, strict=True):
            table = _STRICTNESS if type(op) in _STRICTNESS and rng.random() < 0.7 else _FLIP
            if type(op) in table:
                sites.append((left, right, type(op), table[type(op)]))
    compare_sites = len(sites)
    for binop in view.editable_nodes(ast.BinOp):
        assert isinstance(binop, ast.BinOp)
        if type(binop.op) in _ARITHMETIC:
            sites.append((binop.left, binop.right, type(binop.op), _ARITHMETIC[type(binop.op)]))
    if not sites:
        return None
    prefer_compare = compare_sites > 0 and (compare_sites == len(sites) or rng.random() < 0.7)
    pool = sites[:compare_sites] if prefer_compare else sites[compare_sites:]
    lhs, rhs, old, new = pool[int(rng.integers(len(pool)))]
    start, end = view.end(lhs), view.start(rhs)
    between = view.code[start:end]
    at = between.find(_OP_TEXT[old])
    if at < 0:
        return None
    text = between[:at] + _OP_TEXT[new] + between[at + len(_OP_TEXT[old]) :]
    line = getattr(rhs, "lineno", 0)
    return TacticResult(
        (Span(start, end, text),), (f"- line {line}: operator {_OP_TEXT[old]} -> {_OP_TEXT[new]}",)
    )


def _movable(view: SourceView, body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements of ``body`` that own their lines, lie inside the markers and are not pinned."""
    out = []
    for i, stmt in enumerate(body):
        docstring = (
            i == 0
            and isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
        )
        if docstring or isinstance(stmt, (*_PINNED, ast.ImportFrom)):
            continue
        if view.owns_lines(stmt) and view.editable(*view.stmt_lines(stmt)):
            out.append(stmt)
    return out


def _bodies(view: SourceView) -> list[list[ast.stmt]]:
    bodies = [body for node in ast.walk(view.tree) for body in child_bodies(node)]
    return [b for b in bodies if _movable(view, b)]


def swap_statements(ctx: TacticContext, rng: np.random.Generator) -> TacticResult | None:
    """Swap two adjacent statements of one body (not two definitions)."""
    view = ctx.parent
    pairs = []
    for body in _bodies(view):
        movable = {id(s) for s in _movable(view, body)}
        for a, b in itertools.pairwise(body):
            both_defs = all(isinstance(s, _DEFINITIONS) for s in (a, b))
            if id(a) in movable and id(b) in movable and not both_defs:
                pairs.append((a, b))
    if not pairs:
        return None
    a, b = pairs[int(rng.integers(len(pairs)))]
    a_first, a_last = view.stmt_lines(a)
    b_first, b_last = view.stmt_lines(b)
    between = view.code[view.line_offset(a_last + 1) : view.line_offset(b_first)]
    text = view.stmt_text(b) + between + view.stmt_text(a)
    span = Span(view.line_offset(a_first), view.line_offset(b_last + 1), text)
    return TacticResult((span,), (f"- swapped the statements at lines {a_first} and {b_first}",))


def duplicate_statement(ctx: TacticContext, rng: np.random.Generator) -> TacticResult | None:
    """Repeat one statement right after itself (definitions are never duplicated)."""
    view = ctx.parent
    stmts = [
        s for body in _bodies(view) for s in _movable(view, body) if not isinstance(s, _DEFINITIONS)
    ]
    if not stmts:
        return None
    stmt = stmts[int(rng.integers(len(stmts)))]
    first, last = view.stmt_lines(stmt)
    span = Span(view.line_offset(last + 1), view.line_offset(last + 1), view.stmt_text(stmt))
    return TacticResult((span,), (f"- repeated the statement at line {first}",))


def delete_statement(ctx: TacticContext, rng: np.random.Generator) -> TacticResult | None:
    """Delete one statement (a body left empty gets ``pass``)."""
    view = ctx.parent
    choices = [(s, len(body)) for body in _bodies(view) for s in _movable(view, body)]
    choices = [(s, n) for s, n in choices if not isinstance(s, _DEFINITIONS)]
    if not choices:
        return None
    stmt, body_len = choices[int(rng.integers(len(choices)))]
    first, last = view.stmt_lines(stmt)
    line = view.lines[first - 1]
    text = f"{line[: len(line) - len(line.lstrip())]}pass\n" if body_len == 1 else ""
    span = Span(view.line_offset(first), view.line_offset(last + 1), text)
    return TacticResult((span,), (f"- deleted the statement at line {first}",))


def crossover(ctx: TacticContext, rng: np.random.Generator) -> TacticResult | None:
    """Recombine with an elite: a same-named function or assignment, or aligned constants."""
    if not ctx.inspirations:
        return None
    ways = (_transplant_function, _transplant_assignment, crossover_constants)
    for k in rng.permutation(len(ways)):
        result = ways[int(k)](ctx, rng)
        if result is not None:
            return result
    return None


def _named_units(view: SourceView, functions: bool) -> dict[str, ast.stmt]:
    """Editable functions (by name) or single-target assignments (by scope-free target name)."""
    units: dict[str, ast.stmt] = {}
    for node in ast.walk(view.tree):
        if functions and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = node.name
        elif not functions and isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if not isinstance(target, ast.Name):
                continue
            name = target.id
        else:
            continue
        if name not in units and view.owns_lines(node) and view.editable(*view.stmt_lines(node)):
            units[name] = node
    return units


def _transplant(
    ctx: TacticContext, rng: np.random.Generator, functions: bool
) -> TacticResult | None:
    mine = _named_units(ctx.parent, functions)
    for k in rng.permutation(len(ctx.inspirations)):
        elite, view = ctx.inspirations[int(k)]
        theirs = _named_units(view, functions)
        names = [n for n in mine if n in theirs and ast.dump(mine[n]) != ast.dump(theirs[n])]
        if not names:
            continue
        name = names[int(rng.integers(len(names)))]
        stmt, donor = mine[name], theirs[name]
        first, last = ctx.parent.stmt_lines(stmt)
        line = ctx.parent.lines[first - 1]
        indent = line[: len(line) - len(line.lstrip())]
        text = textwrap.indent(textwrap.dedent(view.stmt_text(donor)), indent)
        span = Span(ctx.parent.line_offset(first), ctx.parent.line_offset(last + 1), text)
        kind = "function" if functions else "assignment to"
        return TacticResult((span,), (f"- took {kind} `{name}` (line {first}) from {elite.id}",))
    return None


def _transplant_function(ctx: TacticContext, rng: np.random.Generator) -> TacticResult | None:
    return _transplant(ctx, rng, functions=True)


def _transplant_assignment(ctx: TacticContext, rng: np.random.Generator) -> TacticResult | None:
    return _transplant(ctx, rng, functions=False)


TACTICS: dict[str, Tactic] = {
    "perturb_constants": perturb_constants,
    "change_loop_bounds": change_loop_bounds,
    "change_operators": change_operators,
    "swap_statements": swap_statements,
    "duplicate_statement": duplicate_statement,
    "delete_statement": delete_statement,
    "crossover": crossover,
}
DEFAULT_WEIGHTS: dict[str, float] = {
    "perturb_constants": 0.62,
    "change_loop_bounds": 0.06,
    "change_operators": 0.05,
    "swap_statements": 0.04,
    "duplicate_statement": 0.03,
    "delete_statement": 0.03,
    "crossover": 0.17,
}
EXPLANATIONS: dict[str, str] = {
    "perturb_constants": "The numeric parameters set the solution directly; a step of varied scale "
    "(or along the difference to a strong elite) explores their neighbourhood.",
    "change_loop_bounds": "A loop bound sets how many items or iterations the program uses; "
    "one more or one fewer can tip the balance.",
    "change_operators": "A boundary case or the sign of a term may be the wrong way round; "
    "changing one operator tests that.",
    "swap_statements": "The order of two independent steps can change what later steps see.",
    "duplicate_statement": "Applying one step twice strengthens its effect.",
    "delete_statement": "A step may do more harm than good; removing it tests that.",
    "crossover": "Another elite scores well; taking one of its parts combines their strengths.",
}
