"""The mutator answer format and EVOLVE-BLOCK layout, shared by every mutator backend.

An answer (from a remote model or the offline mutator) reads::

    ## Change report
    tactic: perturb_constants
    - what changed, one line each

    ## Explanation
    why the change should help

    card_ids_used: ["c1", "c2"]

    ## Code
    <<<<<<< SEARCH
    lines copied verbatim from the parent
    =======
    the lines that replace them
    >>>>>>> REPLACE

In ``rewrite`` mode the code part is the whole program in a fenced python
block instead. The parser lives in ``gigaevo.mutation.response``; this module
holds the constants, the one rule for locating a SEARCH text, the
EVOLVE-BLOCK split, and helpers that render an answer, so the offline mutator
(``gigaevo.llm``) and the parser (``gigaevo.mutation``) cannot drift apart.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass

SEARCH_MARKER = "<<<<<<< SEARCH"
DIVIDER_MARKER = "======="
REPLACE_MARKER = ">>>>>>> REPLACE"
CHANGE_REPORT_HEADING = "## Change report"
EXPLANATION_HEADING = "## Explanation"
CODE_HEADING = "## Code"
CARD_IDS_KEY = "card_ids_used"
TACTIC_KEY = "tactic"
MODE_LINE_PREFIX = "Answer mode:"
MODES = ("diff", "rewrite")
EVOLVE_START = "# EVOLVE-BLOCK-START"
EVOLVE_END = "# EVOLVE-BLOCK-END"

_START_RE = re.compile(r"^\s*#\s*EVOLVE-BLOCK-START\b")
_END_RE = re.compile(r"^\s*#\s*EVOLVE-BLOCK-END\b")


def split_lines(text: str) -> list[str]:
    """``text`` cut after each ``\\n`` only (as Python counts lines), newlines kept.

    Unlike ``str.splitlines`` it does not cut at form feeds or other Unicode
    line breaks, so line numbers agree with ``ast``.
    """
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def is_start_marker(line: str) -> bool:
    return bool(_START_RE.match(line))


def is_end_marker(line: str) -> bool:
    return bool(_END_RE.match(line))


@dataclass(frozen=True)
class EvolveLayout:
    """A program cut at its markers: ``fixed[0] blocks[0] fixed[1] ... blocks[-1] fixed[-1]``.

    Fixed parts include the marker lines themselves. A program without
    markers is one evolvable block with empty fixed parts: all of it may change.
    An unclosed START marker runs to the end of the file.
    """

    fixed: tuple[str, ...]
    blocks: tuple[str, ...]

    @property
    def has_markers(self) -> bool:
        return any(self.fixed)

    def join(self) -> str:
        parts = [self.fixed[0]]
        for block, fixed in zip(self.blocks, self.fixed[1:], strict=True):
            parts += [block, fixed]
        return "".join(parts)


def split_evolve_blocks(code: str) -> EvolveLayout:
    """Split ``code`` into fixed parts and EVOLVE-BLOCK contents (see ``EvolveLayout``)."""
    lines = split_lines(code)
    if not any(is_start_marker(line) for line in lines):
        return EvolveLayout(fixed=("", ""), blocks=(code,))
    fixed: list[str] = []
    blocks: list[str] = []
    current: list[str] = []
    inside = False
    for line in lines:
        if not inside and is_start_marker(line):
            fixed.append("".join([*current, line]))
            current, inside = [], True
        elif inside and is_end_marker(line):
            blocks.append("".join(current))
            current, inside = [line], False
        else:
            current.append(line)
    if inside:
        blocks.append("".join(current))
        current = []
    fixed.append("".join(current))
    return EvolveLayout(fixed=tuple(fixed), blocks=tuple(blocks))


def editable_line_ranges(code: str) -> list[tuple[int, int]]:
    """1-based inclusive line ranges strictly inside the EVOLVE-BLOCK markers.

    The whole program when it has no markers; empty blocks are left out.
    """
    layout = split_evolve_blocks(code)
    ranges = []
    line = 1
    for fixed, block in zip(layout.fixed, layout.blocks, strict=False):
        line += fixed.count("\n")
        n = block.count("\n") + (1 if block and not block.endswith("\n") else 0)
        if n:
            ranges.append((line, line + n - 1))
        line += n
    return ranges


def locate_search(text: str, search: str) -> int:
    """Where a SEARCH text applies in ``text``: an index, or -1 when absent.

    The first occurrence that starts at the beginning of a line wins, so a
    SEARCH of whole lines never lands inside a more indented copy of itself;
    failing that, the first occurrence anywhere.
    """
    first = text.find(search)
    pos = first
    while pos > 0 and text[pos - 1] != "\n":
        pos = text.find(search, pos + 1)
    return pos if pos >= 0 else first


def make_diff_blocks(parent: str, child: str) -> list[tuple[str, str]]:
    """SEARCH/REPLACE pairs of whole lines that turn ``parent`` into ``child``.

    Applied in order, each to the first place ``locate_search`` finds, they
    reproduce ``child`` exactly (both texts are taken to end with a newline).
    Context lines are added around a change until its SEARCH text is non-blank
    and found first at the intended place.
    """
    a = split_lines(_with_newline(parent))
    b = split_lines(_with_newline(child))
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    current = list(a)
    shift = 0
    blocks: list[tuple[str, str]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        pos, n_old, new = i1 + shift, i2 - i1, b[j1:j2]
        before, after = _context_for(current, pos, n_old)
        search = "".join(current[pos - before : pos + n_old + after])
        replace = "".join(
            current[pos - before : pos] + new + current[pos + n_old : pos + n_old + after]
        )
        blocks.append((search, replace))
        current[pos : pos + n_old] = new
        shift += len(new) - n_old
    return blocks


def _context_for(lines: list[str], pos: int, n_old: int) -> tuple[int, int]:
    """Context lines (before, after) making lines[pos:pos+n_old] a unique, non-blank SEARCH."""
    before = after = 0
    while True:
        chunk = lines[pos - before : pos + n_old + after]
        target = sum(len(line) for line in lines[: pos - before])
        found = locate_search("".join(lines), "".join(chunk))
        if "".join(chunk).strip() and found == target:
            return before, after
        can_up, can_down = pos - before > 0, pos + n_old + after < len(lines)
        if not (can_up or can_down):
            return before, after
        if can_up and (before <= after or not can_down):
            before += 1
        else:
            after += 1


def render_diff_blocks(blocks: list[tuple[str, str]]) -> str:
    """The SEARCH/REPLACE text for ``(search, replace)`` pairs of whole lines."""
    out = []
    for search, replace in blocks:
        out.append(
            f"{SEARCH_MARKER}\n{_with_newline(search) if search else ''}{DIVIDER_MARKER}\n"
            f"{_with_newline(replace) if replace else ''}{REPLACE_MARKER}\n"
        )
    return "\n".join(out)


def render_program(code: str) -> str:
    """A whole program as a fenced python block."""
    return f"```python\n{_with_newline(code)}```\n"


def render_answer(
    change_report: str, explanation: str, card_ids_used: tuple[str, ...], code_part: str
) -> str:
    """A complete answer in the documented layout (see the module docstring)."""
    return (
        f"{CHANGE_REPORT_HEADING}\n{change_report.strip()}\n\n"
        f"{EXPLANATION_HEADING}\n{explanation.strip()}\n\n"
        f"{CARD_IDS_KEY}: {json.dumps(list(card_ids_used))}\n\n"
        f"{CODE_HEADING}\n{code_part}"
    )


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"
