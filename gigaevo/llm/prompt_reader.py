"""Reads a mutation prompt back into its parts, for the offline mutator (which sees only text).

The headings below are the ones the prompt templates in
``gigaevo/mutation/prompts`` write; a round-trip test keeps the two in step.
Only these known headings delimit sections, so other ``##`` headings inside a
scratchpad, task text or memory slate do not cut a section short; when a known
heading occurs twice the last one wins (the real sections follow the free text
of the scratchpad and task). Lines inside code fences are never headings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gigaevo.llm.answer_format import MODE_LINE_PREFIX, MODES

PARENT_HEADING = "## Parent program"
PARENT_METRICS_HEADING = "## Parent metrics"
INSPIRATIONS_HEADING = "## Inspirations"
MEMORY_HEADING = "## Memory cards"
FORMAT_HEADING = "## Response format"
FEEDBACK_HEADING = "## Feedback on the parent"
KNOWN_HEADINGS = (
    "## Scratchpad",
    "## Task",
    "## Metrics",
    PARENT_HEADING,
    PARENT_METRICS_HEADING,
    INSPIRATIONS_HEADING,
    MEMORY_HEADING,
    FORMAT_HEADING,
)

_FENCE_RE = re.compile(r"^\s*```\s*([A-Za-z0-9_+-]*)\s*$")
_FITNESS_RE = re.compile(r"fitness:\s*([-+0-9.eEinfINFna]+)")
_INSPIRATION_RE = re.compile(r"^###\s*Inspiration\b.*?\bid:\s*([^\s,)]+)(.*)$")
_DIRECTION_RE = re.compile(r"\((higher|lower) is better\)")
# A card starts on a line holding its id as "[id]", "id: id", "card_id=id" or "Card id:".
_CARD_ID_RES = (
    re.compile(r"^\s*(?:[-*]\s*|#+\s*)?\[([A-Za-z0-9_.:\-]+)\]"),
    re.compile(r"\b(?:card_)?id[\"']?\s*[:=]\s*[\"'`]?([A-Za-z0-9_.\-]+)"),
    re.compile(r"^\s*(?:[-*]\s*|#+\s*)?card\s+([A-Za-z0-9_.\-]+)\s*:", re.IGNORECASE),
)


@dataclass(frozen=True)
class ElitePrompt:
    """Another elite as the prompt shows it."""

    id: str
    code: str
    fitness: float | None


@dataclass(frozen=True)
class CardPrompt:
    """One memory card as the prompt shows it: its id and its whole text."""

    id: str
    text: str


@dataclass(frozen=True)
class PromptView:
    """What the offline mutator can learn from a prompt."""

    parent_code: str | None
    parent_fitness: float | None
    higher_is_better: bool | None
    mode: str
    inspirations: tuple[ElitePrompt, ...]
    cards: tuple[CardPrompt, ...]


def read_prompt(text: str) -> PromptView:
    """Parse the parts of a mutation prompt; missing parts come back empty or None."""
    lines = text.replace("\r\n", "\n").split("\n")
    sections = _sections(lines)
    parent_lines = sections.get(PARENT_HEADING, [])
    parent_blocks = fenced_blocks(parent_lines)
    if not parent_blocks:  # a foreign prompt: take the first fenced block with markers
        parent_blocks = [b for b in fenced_blocks(lines) if "EVOLVE-BLOCK-START" in b][:1]
    direction = _DIRECTION_RE.search(" ".join(sections.get("## Metrics", [])))
    return PromptView(
        parent_code=parent_blocks[0] if parent_blocks else None,
        parent_fitness=_fitness(" ".join(parent_lines[:3])),
        higher_is_better=None if direction is None else direction.group(1) == "higher",
        mode=_mode(sections.get(FORMAT_HEADING, lines)),
        inspirations=_inspirations(sections.get(INSPIRATIONS_HEADING, [])),
        cards=_cards(sections.get(MEMORY_HEADING, [])),
    )


def without_feedback(text: str) -> str:
    """``text`` without its ``## Feedback on the parent`` section (up to the next known heading).

    The offline mutator ignores the feedback, and seeds its answer on the digest
    of the rest: feedback lines (a child's failure, an ancestor's) must not
    re-draw the answers to a prompt that is otherwise the same.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    kept: list[str] = []
    skipping = in_fence = False
    for line in lines:
        if _FENCE_RE.match(line):
            in_fence = not in_fence
        if not in_fence and line.strip() == FEEDBACK_HEADING:
            skipping = True
            continue
        if skipping and not in_fence and _known_heading(line) is not None:
            skipping = False
        if not skipping:
            kept.append(line)
    return "\n".join(kept)


def fenced_blocks(lines: list[str]) -> list[str]:
    """Contents of the ``` fenced blocks among ``lines``, in order (unclosed ones dropped)."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in lines:
        if _FENCE_RE.match(line):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _sections(lines: list[str]) -> dict[str, list[str]]:
    """Lines under each known heading (last occurrence), up to the next known heading."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    in_fence = False
    for line in lines:
        if _FENCE_RE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else _known_heading(line)
        if heading is not None:
            current = sections[heading] = []
        elif current is not None:
            current.append(line)
    return sections


def _known_heading(line: str) -> str | None:
    stripped = line.strip()
    for heading in KNOWN_HEADINGS:
        if stripped == heading or stripped.startswith(heading + " "):
            return heading
    return None


def _fitness(text: str) -> float | None:
    match = _FITNESS_RE.search(text)
    if match is None:
        return None
    try:
        return float(match.group(1))
    except ValueError:
        return None


def _mode(lines: list[str]) -> str:
    for line in lines:
        if line.strip().startswith(MODE_LINE_PREFIX):
            word = line.strip()[len(MODE_LINE_PREFIX) :].strip().strip("`*.").lower()
            if word in MODES:
                return word
    return MODES[0]


def _inspirations(lines: list[str]) -> tuple[ElitePrompt, ...]:
    """Each ``### Inspiration ... id: X, fitness: F`` heading with the fenced block after it."""
    out: list[ElitePrompt] = []
    starts = [(i, m) for i, line in enumerate(lines) if (m := _INSPIRATION_RE.match(line.strip()))]
    for k, (i, match) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        blocks = fenced_blocks(lines[i + 1 : end])
        if blocks:
            out.append(ElitePrompt(match.group(1), blocks[0], _fitness(match.group(2))))
    return tuple(out)


def _cards(lines: list[str]) -> tuple[CardPrompt, ...]:
    """Split the slate into cards at each line naming an id; the first id per card wins."""
    cards: list[tuple[str, list[str]]] = []
    for line in lines:
        card_id = _card_id(line)
        if card_id is not None and card_id not in {c for c, _ in cards}:
            cards.append((card_id, [line]))
        elif cards:
            cards[-1][1].append(line)
    return tuple(CardPrompt(cid, "\n".join(body).strip()) for cid, body in cards)


def _card_id(line: str) -> str | None:
    for pattern in _CARD_ID_RES:
        match = pattern.search(line)
        if match:
            return match.group(1).strip(".:")
    return None
