"""The offline memory LLM: a seeded, deterministic card author and equivalence judge.

It answers the memory librarian's prompts (``gigaevo/memory/v2/prompts``)
from their text alone, with the JSON the prompts ask for. It does not import
the memory package (a lower layer never does); it recognises the agent from
the ``Agent: <name>`` line of the system message and reads the ``##``
sections of the user message, which a round-trip test keeps in step with the
templates.

- ``card_author``: NEW when the change report names a tactic the offline
  mutator knows and the normalised gain is positive, else DROP. The card says
  "When <condition on the changed function>, try <action> (tactic: <name>)
  because <mechanism>", so the offline mutator can follow it; the wording is
  varied by a seeded choice among paraphrases.
- ``program_author``: NEW with the program's strategy family: its structure
  inside the EVOLVE-BLOCK with constants abstracted away.
- ``equivalence_judge``: EQUIVALENT to the first neighbour with the same key,
  (tactic, function) for insights and the strategy family for programs; NEW
  otherwise.
- ``applicability_assessor``: a card is applicable to the parent program when
  at least half of the content words of its condition ("When C, try ...")
  occur in the parent's vocabulary (identifiers, their ``_`` parts, and plain
  names of code features it has: numeric literals, loops, comparisons,
  arithmetic); otherwise not applicable. The labels depend on the card and the
  parent only.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import re
import time
from typing import Any

import numpy as np

from gigaevo.llm.base import LLMResponse, Message, offline_response
from gigaevo.llm.offline import card_tactic
from gigaevo.llm.offline_applicability import MODULE_SCOPE, label_cards
from gigaevo.llm.offline_tactics import TACTICS
from gigaevo.llm.prompt_reader import fenced_blocks
from gigaevo.programs import pyast

_MASK64 = (1 << 64) - 1
_AGENT_RE = re.compile(r"^Agent:\s*([a-z_]+)\s*$", re.MULTILINE)
_HEADING_RE = re.compile(r"^## (.+?)\s*$")
_FENCE_RE = re.compile(r"^\s*```")
_TACTIC_RE = re.compile(r"\btactic:\s*([a-z_]+)")
_SCOPE_RE = re.compile(r"`([A-Za-z_<][A-Za-z0-9_.>]*)`")
_FAMILY_RE = re.compile(r"strategy family `([^`]+)`")
_GAIN_RE = re.compile(r"Normalised gain:\s*([-+0-9.eE]+)")
_NEIGHBOUR_RE = re.compile(r"^### id:\s*(\S+)\s*$")
MAX_FAMILY = 400

# tactic -> (condition, actions, mechanisms); {scope} is the changed function
_PHRASES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "perturb_constants": (
        "numeric literals in `{scope}` set the result directly",
        ("nudge a few of those literals by steps of varied size", "retune a handful of them"),
        (
            "the score is a smooth-enough function of them near a good program",
            "small parameter moves explore the neighbourhood of a working solution",
        ),
    ),
    "change_loop_bounds": (
        "a range() loop in `{scope}` fixes how many items or iterations are used",
        ("move that bound by one or two", "add or drop one iteration of that loop"),
        (
            "the item or iteration count can tip the balance of the solution",
            "a count that is off by one limits what the program can reach",
        ),
    ),
    "change_operators": (
        "a comparison or arithmetic operator in `{scope}` decides a boundary case or a sign",
        ("flip or relax that operator", "swap the operator for its neighbour"),
        (
            "the boundary case or the sign of a term may be the wrong way round",
            "one operator can hold the whole solution on the wrong side of a boundary",
        ),
    ),
    "swap_statements": (
        "two independent steps in `{scope}` run in a fixed order",
        ("exchange their order", "run the second step first"),
        ("later steps see different intermediate values", "order changes what each step acts on"),
    ),
    "duplicate_statement": (
        "one step in `{scope}` moves the solution in a useful direction",
        ("apply that step twice", "repeat that step once more"),
        ("a repeated step strengthens its effect", "the step had not yet gone far enough"),
    ),
    "delete_statement": (
        "a step in `{scope}` may undo what earlier steps achieved",
        ("drop that step", "leave that step out"),
        ("a harmful step costs more than it gives", "without it the earlier steps keep their gain"),
    ),
    "crossover": (
        "a stronger elite differs from the parent inside `{scope}`",
        ("take that part from the elite", "recombine that part of the elite into the parent"),
        ("strong parts of two programs can combine", "the elite's part already proved itself"),
    ),
}


class OfflineMemoryLLM:
    """``LLMClient`` for the memory librarian's agents, with no network (see the module docstring).

    The same prompt, constructor seed and call seed always give the same
    answer. Thread-safe: each call owns its generator.

    Args:
        seed: run-level seed, mixed with the call seed and the prompt digest.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    @property
    def name(self) -> str:
        return "offline-memory"

    def complete(
        self,
        messages: list[Message],
        *,
        seed: int,
        response_format: dict[str, Any] | None = None,
    ) -> LLMResponse:
        """Answer one librarian prompt with JSON; ``response_format`` is not needed (ignored)."""
        started = time.perf_counter()
        system = "\n".join(m.content for m in messages if m.role == "system")
        user = "\n\n".join(m.content for m in messages if m.role == "user")
        digest = int.from_bytes(hashlib.sha256((system + user).encode()).digest()[:8], "big")
        rng = np.random.default_rng([self.seed & _MASK64, seed & _MASK64, digest])
        agent = _AGENT_RE.search(system)
        answer = self.answer(agent.group(1) if agent else "", sections(user), rng)
        return offline_response(self.name, messages, json.dumps(answer, sort_keys=True), started)

    def answer(self, agent: str, parts: dict[str, str], rng: np.random.Generator) -> dict[str, Any]:
        """The JSON answer of ``agent`` to a prompt split into ``parts`` (see ``sections``)."""
        if agent == "card_author":
            return author_insight(parts, rng)
        if agent == "program_author":
            return author_program(parts)
        if agent == "equivalence_judge":
            return judge(parts)
        if agent == "applicability_assessor":
            return assess_applicability(parts)
        return {"error": f"the offline memory LLM serves no agent {agent!r}"}


def sections(text: str) -> dict[str, str]:
    """The text under each ``## heading`` (outside code fences), keyed by heading."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    in_fence = False
    for line in text.split("\n"):
        if _FENCE_RE.match(line):
            in_fence = not in_fence
        match = None if in_fence else _HEADING_RE.match(line)
        if match:
            current = out[match.group(1)] = []
        elif current is not None:
            current.append(line)
    return {k: "\n".join(v).strip("\n") for k, v in out.items()}


def author_insight(parts: dict[str, str], rng: np.random.Generator) -> dict[str, Any]:
    """DROP, or NEW with one card naming the tactic of the change report."""
    report = parts.get("Change report", "")
    tactic = _report_tactic(report, parts.get("Explanation", ""))
    if tactic is None:
        return _drop("the change report names no tactic this author knows")
    gain = _GAIN_RE.search(parts.get("Outcome", ""))
    if gain is None or not float(gain.group(1)) > 0:
        return _drop("the child did not improve on its parent: no gain to explain")
    parent = _first_block(parts.get("Parent program", ""))
    child = _first_block(parts.get("Child program", ""))
    scope = changed_scope(parent, child)
    condition, actions, mechanisms = _PHRASES[tactic]
    action = actions[int(rng.integers(len(actions)))]
    mechanism = mechanisms[int(rng.integers(len(mechanisms)))]
    card = {
        "description": f"When {condition.format(scope=scope)}, try to {action} "
        f"(tactic: {tactic}) because {mechanism}.",
        "explanation_summary": f"Hypothesis: {mechanism}; a {tactic.replace('_', ' ')} edit "
        f"in `{scope}` tests it.",
    }
    return {"decision": "NEW", "card": card, "reason": f"a gain after {tactic} in {scope}"}


def author_program(parts: dict[str, str]) -> dict[str, Any]:
    """NEW with the strategy family of the program, or DROP when it does not parse."""
    code = _first_block(parts.get("Program", ""))
    family = strategy_family(code)
    if not family:
        return _drop("the program does not parse or has no structure to name")
    task = parts.get("Task", "").split(":", 1)[0].strip() or "this task"
    card = {
        "description": f"When solving {task}, use the strategy family `{family}` and tune its "
        "numeric parameters (tactic: perturb_constants) because this structure reached "
        "a new best fitness.",
        "explanation_summary": "The structure carries the solution; its parameters decide how "
        "well it scores, so a search that keeps the structure works on what matters.",
    }
    return {"decision": "NEW", "card": card, "reason": "a new best program"}


def judge(parts: dict[str, str]) -> dict[str, Any]:
    """EQUIVALENT to the first neighbour with the candidate's key, else NEW."""
    kind = parts.get("Card kind", "").strip().split("\n")[0].strip()
    key = card_key(kind, parts.get("Candidate", "").split("\n")[0])
    if key is not None:
        for neighbour_id, first_line in _neighbours(parts.get("Neighbours", "")):
            if card_key(kind, first_line) == key:
                return {
                    "decision": "EQUIVALENT",
                    "equivalent_id": neighbour_id,
                    "reason": f"same {'strategy family' if kind == 'program' else 'intervention'}",
                }
    return {"decision": "NEW", "equivalent_id": None, "reason": "no neighbour has the same key"}


def assess_applicability(parts: dict[str, str]) -> dict[str, Any]:
    """One label per offered card (``offline_applicability.label_cards``)."""
    code = _first_block(parts.get("Parent program", ""))
    return label_cards(code, _neighbours(parts.get("Cards", "")))


def card_key(kind: str, description: str) -> tuple[str, ...] | None:
    """What makes two offline cards equivalent, or None when the text carries no key."""
    if kind == "program":
        family = _FAMILY_RE.search(description)
        return None if family is None else ("program", family.group(1))
    tactic = _TACTIC_RE.search(description)
    scope = _SCOPE_RE.search(description)
    if tactic is None:
        return None
    return ("insight", tactic.group(1), scope.group(1) if scope else MODULE_SCOPE)


def changed_scope(parent: str, child: str) -> str:
    """The innermost function (or class) of ``child`` holding its first changed line."""
    old, new = parent.splitlines(), child.splitlines()
    first = next(
        (
            j
            for tag, _, _, j, _ in difflib.SequenceMatcher(None, old, new).get_opcodes()
            if tag != "equal"
        ),
        None,
    )
    try:
        tree = pyast.parse(child)
    except SyntaxError:
        return MODULE_SCOPE
    if first is None:
        return MODULE_SCOPE
    line = min(first + 1, max(1, len(new)))
    best: tuple[int, str] | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            end = node.end_lineno or node.lineno
            if node.lineno <= line <= end and (best is None or node.lineno >= best[0]):
                best = (node.lineno, node.name)
    return best[1] if best else MODULE_SCOPE


def strategy_family(code: str) -> str:
    """The program's structure inside its EVOLVE-BLOCK, constants and names of locals abstracted."""
    try:
        tree = pyast.parse(code)
    except SyntaxError:
        return ""
    lines = code.splitlines()
    start = next((i + 1 for i, s in enumerate(lines) if "EVOLVE-BLOCK-START" in s), 0)
    end = next((i + 1 for i, s in enumerate(lines) if "EVOLVE-BLOCK-END" in s), len(lines) + 1)
    family = "; ".join(_shape(n) for n in tree.body if start <= n.lineno <= end)
    if len(family) <= MAX_FAMILY:
        return family
    half = (MAX_FAMILY - 5) // 2  # keep both ends: edits often land at the start or the end
    return f"{family[:half]} ... {family[-half:]}"


def _shape(node: ast.AST) -> str:
    body = getattr(node, "body", None)
    inner = ""
    if isinstance(body, list):
        stmts = [s for s in body if not _is_docstring(s)]
        inner = " [" + ", ".join(_shape(s) for s in stmts) + "]"
        orelse = getattr(node, "orelse", None)
        if orelse:
            inner += " else [" + ", ".join(_shape(s) for s in orelse) + "]"
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return f"def {node.name}/{len(node.args.args)}{inner}"
    if isinstance(node, ast.ClassDef):
        return f"class {node.name}{inner}"
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        return f"call {_callee(node.value.func)}"
    if isinstance(node, ast.Assign | ast.AnnAssign):
        calls = sorted({_callee(c.func) for c in ast.walk(node) if isinstance(c, ast.Call)})
        return "assign" + (f"({', '.join(calls)})" if calls else "")
    names = {ast.AugAssign: "update", ast.Return: "return"}
    return names.get(type(node), type(node).__name__.lower()) + inner


def _callee(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return f"{_callee(func.value)}.{func.attr}"
    return "call"


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _report_tactic(report: str, explanation: str) -> str | None:
    explicit = _TACTIC_RE.search(report)
    if explicit:
        name = explicit.group(1)
        return name if name in TACTICS else None
    return card_tactic(f"{report}\n{explanation}")


def _neighbours(text: str) -> list[tuple[str, str]]:
    """(id, first line of its description) of each ``### id: X`` block."""
    out: list[tuple[str, str]] = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        match = _NEIGHBOUR_RE.match(line.strip())
        if match:
            out.append((match.group(1), lines[i + 1] if i + 1 < len(lines) else ""))
    return out


def _first_block(text: str) -> str:
    blocks = fenced_blocks(text.split("\n"))
    return blocks[0] if blocks else ""


def _drop(reason: str) -> dict[str, Any]:
    return {"decision": "DROP", "card": None, "reason": reason}
