"""Parses a mutator's answer and applies it to the parent program.

The layout is documented in ``gigaevo.llm.answer_format``. Parsing is
tolerant and never fails: a missing change report or explanation is empty,
a missing or malformed ``card_ids_used`` is an empty tuple plus a note.
Applying is strict and raises ``AnswerError`` whose message is the reason.

Which code part is used:

- ``diff`` mode: the SEARCH/REPLACE blocks; with none, a single fenced
  program (or the only one holding an EVOLVE-BLOCK-START marker).
- ``rewrite`` mode: the fenced program (with several, the last holding a
  START marker, else the last); with none, the SEARCH/REPLACE blocks.

A fenced rewrite must keep the markers and the code outside them (blank
lines and trailing spaces aside). A rewrite without any markers is taken as
the new content of the parent's only EVOLVE block, unless it repeats the
parent's code outside the block (then the markers were dropped: an error).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from gigaevo.llm.answer_format import CARD_IDS_KEY, EVOLVE_START, MODES
from gigaevo.mutation.search_replace import (
    AnswerError,
    DiffBlock,
    apply_blocks,
    check_child,
    splice_rewrite,
)
from gigaevo.programs import pyast

_FENCE_OPEN = re.compile(r"^\s*```\s*(python3?|py)?\s*$", re.IGNORECASE)
_FENCE_ANY = re.compile(r"^\s*```")
_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$")
_HASH_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*$")
_PLAIN_HEADING = re.compile(r"^\s*\**\s*(change report|explanation|code)\W*$", re.IGNORECASE)
_CARD_LINE = re.compile(rf"^[\s*`>-]*{CARD_IDS_KEY}[\s*`]*[:=]\s*(.*?)\s*$", re.IGNORECASE)
_TACTIC = re.compile(
    r"^[\s*`-]*tactic[\s*`]*:\s*`?([A-Za-z0-9_.\-]+)", re.IGNORECASE | re.MULTILINE
)


@dataclass(frozen=True)
class ParsedAnswer:
    """The parts of an answer.

    Attributes:
        blocks: SEARCH/REPLACE blocks in answer order.
        broken_blocks: how many blocks were cut off (no divider or REPLACE line).
        programs: fenced python blocks that are not diffs, in answer order.
        change_report, explanation: the sections' text ("" when missing).
        card_ids_used: ids as the model wrote them (not grounded against the slate).
        tactic: the ``tactic: <name>`` the change report names, or "".
        notes: what the tolerant parser had to overlook.
    """

    blocks: tuple[DiffBlock, ...] = ()
    broken_blocks: int = 0
    programs: tuple[str, ...] = ()
    change_report: str = ""
    explanation: str = ""
    card_ids_used: tuple[str, ...] = ()
    tactic: str = ""
    notes: tuple[str, ...] = ()


def parse_answer(text: str) -> ParsedAnswer:
    """Split an answer into code parts, sections and cited card ids (never raises)."""
    lines = text.replace("\r\n", "\n").split("\n")
    blocks, broken, programs, prose = _code_parts(lines)
    notes = [f"{broken} SEARCH/REPLACE block(s) cut off"] if broken else []
    sections = _sections(prose)
    card_ids, card_note = _card_ids(prose)
    if card_note:
        notes.append(card_note)
    report = sections.get("change report", "")
    tactic = _TACTIC.search(report)
    return ParsedAnswer(
        blocks=tuple(blocks),
        broken_blocks=broken,
        programs=tuple(programs),
        change_report=report,
        explanation=sections.get("explanation", ""),
        card_ids_used=card_ids,
        tactic=tactic.group(1) if tactic else "",
        notes=tuple(notes),
    )


def _code_parts(lines: list[str]) -> tuple[list[DiffBlock], int, list[str], list[str]]:
    """Diff blocks, the number of cut-off blocks, fenced programs and the remaining prose lines."""
    blocks: list[DiffBlock] = []
    programs: list[str] = []
    prose: list[str] = []
    broken = 0
    in_diff_fence = False  # inside a fence that wraps SEARCH/REPLACE blocks
    i = 0
    while i < len(lines):
        line = lines[i]
        if _SEARCH.match(line):
            block, i = _diff_block(lines, i)
            if block is None:
                broken += 1
            else:
                blocks.append(block)
            continue
        if _FENCE_ANY.match(line):
            end = next(
                (j for j in range(i + 1, len(lines)) if _FENCE_ANY.match(lines[j])), len(lines)
            )
            if in_diff_fence or any(_SEARCH.match(b) for b in lines[i + 1 : end]):
                in_diff_fence = not in_diff_fence  # a diff wrapped in a fence: read it in place
                i += 1
                continue
            if _FENCE_OPEN.match(line) and end < len(lines):
                programs.append("\n".join(lines[i + 1 : end]) + "\n")
            i = end + 1
            continue
        prose.append(line)
        i += 1
    return blocks, broken, programs, prose


def _diff_block(lines: list[str], i: int) -> tuple[DiffBlock | None, int]:
    """The block starting at the SEARCH line ``i`` and the index after it (None if cut off)."""
    search: list[str] = []
    replace: list[str] = []
    part = search
    for j in range(i + 1, len(lines)):
        line = lines[j]
        if part is search and _DIVIDER.match(line):
            part = replace
        elif part is replace and _REPLACE.match(line):
            return DiffBlock(_joined(search), _joined(replace)), j + 1
        elif _SEARCH.match(line):
            return None, j
        else:
            part.append(line)
    return None, len(lines)


def _joined(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _sections(prose: list[str]) -> dict[str, str]:
    """Text under each heading (lower-cased name), up to the next heading or card-ids line."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in prose:
        heading = _HASH_HEADING.match(line) or _PLAIN_HEADING.match(line)
        if heading:
            name = heading.group(1).strip("*: \t").lower()
            current = None if name in sections else sections.setdefault(name, [])
        elif _CARD_LINE.match(line):
            current = None
        elif current is not None:
            current.append(line)
    return {name: "\n".join(body).strip() for name, body in sections.items()}


def _card_ids(prose: list[str]) -> tuple[tuple[str, ...], str | None]:
    """The ids on the first ``card_ids_used`` line, and a note when it is missing or malformed."""
    for line in prose:
        match = _CARD_LINE.match(line)
        if match is None:
            continue
        raw = match.group(1).strip().strip("`").strip()
        if raw.lower() in ("", "none", "null", "[]"):
            return (), None
        try:
            value = json.loads(raw)
        except ValueError:
            try:
                value = pyast.literal_eval(raw)
            except (ValueError, SyntaxError):
                return (), f"malformed {CARD_IDS_KEY}: {raw[:80]!r}"
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, (str, int)) for v in value
        ):
            return (), f"malformed {CARD_IDS_KEY}: {raw[:80]!r}"
        ids = tuple(dict.fromkeys(str(v).strip() for v in value if str(v).strip()))
        return ids, None
    return (), f"{CARD_IDS_KEY} missing"


def apply_answer(parent_code: str, parsed: ParsedAnswer, mode: str) -> str:
    """The child program the answer describes.

    Raises:
        ValueError: unknown ``mode``.
        AnswerError: no code, a SEARCH text not found, a cut-off block, code
            outside the markers changed or markers removed, no change, or a
            child that does not parse. The message is the reason.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    parent = parent_code.replace("\r\n", "\n")
    has_diff = bool(parsed.blocks or parsed.broken_blocks)
    program = _pick_program(parsed.programs, strict=mode == "diff")
    if has_diff and (mode == "diff" or program is None):
        if parsed.broken_blocks:
            raise AnswerError(
                "malformed", f"{parsed.broken_blocks} SEARCH/REPLACE block(s) cut off"
            )
        child = apply_blocks(parent, parsed.blocks)
    elif program is not None:
        child = splice_rewrite(parent, program)
    elif parsed.programs:
        raise AnswerError("ambiguous", f"{len(parsed.programs)} fenced programs and no diff")
    else:
        raise AnswerError(
            "no_code", "no code in the answer (no SEARCH/REPLACE block, no fenced program)"
        )
    return check_child(parent, child)


def _pick_program(programs: tuple[str, ...], strict: bool) -> str | None:
    """The program to use: the only one, else those with a START marker (strict: only one)."""
    if len(programs) <= 1:
        return programs[0] if programs else None
    marked = [p for p in programs if EVOLVE_START.split()[-1] in p]
    if strict:
        return marked[0] if len(marked) == 1 else None
    return (marked or list(programs))[-1]
