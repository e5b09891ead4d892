"""Turning parsed code parts into a child program, and the checks every child must pass.

SEARCH texts are located with ``gigaevo.llm.answer_format.locate_search`` (the
first line-aligned exact match); when there is none, a line-by-line match
ignoring trailing whitespace, then one ignoring indentation (the replacement
is re-indented to the matched place), is tried before giving up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gigaevo.llm.answer_format import (
    EvolveLayout,
    is_end_marker,
    is_start_marker,
    locate_search,
    split_evolve_blocks,
    split_lines,
)
from gigaevo.programs import pyast


class AnswerError(ValueError):
    """The answer cannot be turned into a child; ``str(exc)`` is the reason.

    ``kind`` names the condition for counting: ``no_code``, ``ambiguous``,
    ``malformed``, ``search_not_found``, ``markers``, ``outside_changed``,
    ``no_change`` or ``syntax``.
    """

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


@dataclass(frozen=True)
class DiffBlock:
    """One SEARCH/REPLACE pair; both are whole lines, each ending in a newline."""

    search: str
    replace: str


def apply_blocks(parent: str, blocks: tuple[DiffBlock, ...]) -> str:
    """Apply the blocks in order, each to the program as the earlier ones left it.

    Raises:
        AnswerError: a SEARCH text is blank or matches nowhere (``search_not_found``).
    """
    text = _with_newline(parent)
    for k, block in enumerate(blocks, start=1):
        first = next((line for line in block.search.splitlines() if line.strip()), "")
        if not first:
            raise AnswerError("search_not_found", f"block {k}: the SEARCH text is empty")
        pos = locate_search(text, block.search)
        if pos >= 0:
            text = text[:pos] + block.replace + text[pos + len(block.search) :]
            continue
        fuzzy = _apply_by_lines(text, block)
        if fuzzy is None:
            raise AnswerError(
                "search_not_found",
                f"block {k}: SEARCH text not found in the parent (first line: {first.strip()!r})",
            )
        text = fuzzy
    return text


def _apply_by_lines(text: str, block: DiffBlock) -> str | None:
    """Apply ``block`` matching lines without trailing whitespace, then without indentation."""
    lines = split_lines(text)
    want = [line.rstrip("\n") for line in split_lines(block.search)]
    keys: tuple[Callable[[str], str], ...] = (str.rstrip, str.strip)
    for key in keys:
        wanted = [key(w) for w in want]
        for i in range(len(lines) - len(want) + 1):
            if all(key(lines[i + j]) == wanted[j] for j in range(len(want))):
                replace = block.replace
                if key is str.strip:
                    replace = _reindent(replace, _indent(want[0]), _indent(lines[i]))
                return "".join(lines[:i]) + replace + "".join(lines[i + len(want) :])
    return None


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _reindent(text: str, old: str, new: str) -> str:
    """Swap the leading ``old`` indentation of each non-blank line for ``new``."""
    out = []
    for line in split_lines(text):
        if line.strip():
            line = new + (line[len(old) :] if line.startswith(old) else line.lstrip(" \t"))
        out.append(line)
    return "".join(out)


def splice_rewrite(parent: str, program: str) -> str:
    """A fenced rewrite as a child: as is, or spliced into the parent's only EVOLVE block.

    Raises:
        AnswerError: the rewrite has no markers but the parent has several
            blocks, or it repeats the parent's code outside the block
            (``markers``: the markers were dropped).
    """
    layout = split_evolve_blocks(parent)
    if not layout.has_markers or split_evolve_blocks(program).has_markers:
        return program
    if len(layout.blocks) != 1:
        raise AnswerError(
            "markers",
            f"EVOLVE-BLOCK markers removed (the parent has {len(layout.blocks)} blocks)",
        )
    if _repeats_fixed_code(layout, program):
        raise AnswerError("markers", "EVOLVE-BLOCK markers removed from the rewritten program")
    return layout.fixed[0] + _with_newline(program) + layout.fixed[1]


def _repeats_fixed_code(layout: EvolveLayout, program: str) -> bool:
    """True when at least half the parent's distinct fixed lines reappear in ``program``."""
    fixed = {
        line.strip()
        for part in layout.fixed
        for line in part.splitlines()
        if line.strip() and not (is_start_marker(line) or is_end_marker(line))
    }
    present = {line.strip() for line in program.splitlines()}
    return bool(fixed) and 2 * len(fixed & present) >= len(fixed)


def check_child(parent: str, child: str) -> str:
    """``child`` (newline-terminated) when it keeps the fixed code, differs and parses.

    Raises:
        AnswerError: markers removed or added (``markers``), code outside them
            changed (``outside_changed``), identical to the parent
            (``no_change``) or a syntax error (``syntax``, with its line).
    """
    child = _with_newline(child.replace("\r\n", "\n"))
    before, after = split_evolve_blocks(parent), split_evolve_blocks(child)
    counts = _marker_counts(parent), _marker_counts(child)
    if counts[0] != counts[1] or len(before.blocks) != len(after.blocks):
        raise AnswerError(
            "markers",
            "EVOLVE-BLOCK markers removed, added or moved (START/END: the parent has "
            f"{counts[0][0]}/{counts[0][1]}, the child {counts[1][0]}/{counts[1][1]})",
        )
    for old, new in zip(before.fixed, after.fixed, strict=True):
        a, b = _significant(old), _significant(new)
        if a != b:
            raise AnswerError(
                "outside_changed",
                f"code outside the EVOLVE-BLOCK markers changed (at {_first_difference(a, b)!r})",
            )
    if _significant(parent, keep_blank=True) == _significant(child, keep_blank=True):
        raise AnswerError("no_change", "no change: the child is identical to the parent")
    try:
        pyast.parse(child)
    except SyntaxError as exc:
        raise AnswerError(
            "syntax", f"the child does not parse: SyntaxError at line {exc.lineno}: {exc.msg}"
        ) from None
    return child


def _marker_counts(code: str) -> tuple[int, int]:
    lines = code.splitlines()
    return sum(map(is_start_marker, lines)), sum(map(is_end_marker, lines))


def _first_difference(a: list[str], b: list[str]) -> str:
    """The parent's first line that differs (or the child's first extra line)."""
    for x, y in zip(a, b, strict=False):
        if x != y:
            return x
    return a[len(b)] if len(a) > len(b) else b[len(a)]


def _significant(text: str, keep_blank: bool = False) -> list[str]:
    """Lines without trailing whitespace; blank lines dropped (or only trailing ones)."""
    lines = [line.rstrip() for line in text.splitlines()]
    if keep_blank:
        while lines and not lines[-1]:
            lines.pop()
        return lines
    return [line for line in lines if line]


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"
