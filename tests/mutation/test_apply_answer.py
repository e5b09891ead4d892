"""Applying answers to the parent, and every reason an answer is refused."""

from __future__ import annotations

import pytest

from gigaevo.llm.answer_format import split_evolve_blocks
from gigaevo.mutation import AnswerError, apply_answer, parse_answer

from .helpers import NO_MARKERS, PARENT, TWO_BLOCKS


def _diff(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


def _fenced(code: str) -> str:
    return f"## Change report\nrewrote\n\n```python\n{code}```\n"


def _apply(text: str, mode: str = "diff", parent: str = PARENT) -> str:
    return apply_answer(parent, parse_answer(text), mode)


def _error(text: str, mode: str = "diff", parent: str = PARENT) -> AnswerError:
    with pytest.raises(AnswerError) as info:
        _apply(text, mode, parent)
    return info.value


def test_single_block() -> None:
    child = _apply(_diff("    for i in range(n):\n", "    for i in range(n + 1):\n"))
    assert child == PARENT.replace("range(n)", "range(n + 1)")


def test_blocks_apply_in_order_to_the_updated_program() -> None:
    text = _diff("def build(n=5):\n", "def build(n=6):\n") + _diff(
        "def build(n=6):\n", "def build(n=7):\n"
    )
    assert "def build(n=7):" in _apply(text)


def test_trailing_whitespace_and_indentation_are_tolerated() -> None:
    text = _diff(
        "for i in range(n):   \n    values.append(SCALE * math.sin(0.7 * i) + 0.25)\n",
        "for i in range(n):\n    values.append(SCALE * math.sin(0.5 * i) + 0.25)\n",
    )
    child = _apply(text)
    assert "        values.append(SCALE * math.sin(0.5 * i) + 0.25)\n" in child
    assert "    for i in range(n):\n" in child


def test_crlf_answer_applies() -> None:
    text = _diff("    return values\n", "    return values[::-1]\n").replace("\n", "\r\n")
    assert "return values[::-1]" in _apply(text)


def test_search_not_found_names_the_block_and_its_first_line() -> None:
    text = _diff("    return values\n", "    return []\n") + _diff(
        "\n    y = nothing\n", "    y = 1\n"
    )
    err = _error(text)
    assert err.kind == "search_not_found"
    assert "block 2" in str(err) and "'y = nothing'" in str(err)


def test_empty_search_is_refused() -> None:
    assert _error(_diff("\n", "x = 1\n")).kind == "search_not_found"


def test_change_outside_the_markers_is_refused() -> None:
    err = _error(_diff("SCALE = 2.0\n", "SCALE = 3.0\n"))
    assert err.kind == "outside_changed" and "SCALE = 2.0" in str(err)


def test_removing_a_marker_is_refused() -> None:
    err = _error(_diff("    return values\n# EVOLVE-BLOCK-END\n", "    return values\n"))
    assert err.kind == "markers"


def test_marker_used_as_context_is_fine() -> None:
    text = _diff(
        "# EVOLVE-BLOCK-START\ndef build(n=5):\n", "# EVOLVE-BLOCK-START\ndef build(n=4):\n"
    )
    assert "def build(n=4):" in _apply(text)


def test_syntax_error_reports_the_line() -> None:
    err = _error(_diff("    return values\n", "    return values +\n"))
    assert err.kind == "syntax"
    line = PARENT.splitlines().index("    return values") + 1
    assert f"line {line}" in str(err)


def test_no_change_is_refused() -> None:
    assert _error(_diff("    return values\n", "    return values\n")).kind == "no_change"
    assert _error(_fenced(PARENT), "rewrite").kind == "no_change"


def test_no_code_is_refused() -> None:
    err = _error("## Change report\nnothing\n\ncard_ids_used: []\n")
    assert err.kind == "no_code" and "no code" in str(err)


def test_cut_off_block_is_refused() -> None:
    assert _error("<<<<<<< SEARCH\n    return values\n=======\n").kind == "malformed"


def test_rewrite_with_markers() -> None:
    child_code = PARENT.replace("0.25", "0.5")
    assert _apply(_fenced(child_code), "rewrite") == child_code


def test_rewrite_may_reflow_blank_lines_outside() -> None:
    child_code = PARENT.replace("0.25", "0.5").replace("import math\n", "import math   \n\n")
    assert _apply(_fenced(child_code), "rewrite") == child_code


def test_rewrite_changing_outside_is_refused() -> None:
    child_code = PARENT.replace("0.25", "0.5").replace("SCALE = 2.0", "SCALE = 9.0")
    assert _error(_fenced(child_code), "rewrite").kind == "outside_changed"


def test_rewrite_of_only_the_block_is_spliced_in() -> None:
    block = split_evolve_blocks(PARENT).blocks[0].replace("0.25", "0.5")
    child = _apply(_fenced(block), "rewrite")
    assert child == PARENT.replace("0.25", "0.5")


def test_rewrite_that_dropped_the_markers_is_refused() -> None:
    stripped = "".join(line for line in PARENT.splitlines(True) if "EVOLVE-BLOCK" not in line)
    err = _error(_fenced(stripped.replace("0.25", "0.5")), "rewrite")
    assert err.kind == "markers"


def test_block_only_rewrite_for_a_two_block_parent_is_refused() -> None:
    err = _error(_fenced("WEIGHTS = [1.0]\n"), "rewrite", parent=TWO_BLOCKS)
    assert err.kind == "markers" and "2 blocks" in str(err)


def test_program_without_markers_may_change_anywhere() -> None:
    assert "a = 2.5" in _apply(_diff("    a = 1.5\n", "    a = 2.5\n"), parent=NO_MARKERS)
    new = NO_MARKERS.replace("b = 2", "b = 3")
    assert _apply(_fenced(new), "rewrite", parent=NO_MARKERS) == new


def test_a_diff_is_accepted_in_rewrite_mode() -> None:
    assert "return values[:2]" in _apply(
        _diff("    return values\n", "    return values[:2]\n"), "rewrite"
    )


def test_a_single_program_is_accepted_in_diff_mode() -> None:
    child_code = PARENT.replace("0.25", "0.5")
    assert _apply(_fenced(child_code), "diff") == child_code


def test_several_programs_are_ambiguous_in_diff_mode_but_not_in_rewrite_mode() -> None:
    a, b = PARENT.replace("0.25", "0.5"), PARENT.replace("0.25", "0.75")
    text = _fenced(a) + f"\n```python\n{b}```\n"
    assert _error(text, "diff").kind == "ambiguous"
    assert _apply(text, "rewrite") == b
    snippet_then_program = "```python\nx = 1\n```\n" + _fenced(a)
    assert _apply(snippet_then_program, "diff") == a


def test_diff_wins_over_program_in_diff_mode_and_program_wins_in_rewrite_mode() -> None:
    program = PARENT.replace("0.25", "0.5")
    text = _diff("    return values\n", "    return values[:1]\n") + _fenced(program)
    assert "values[:1]" in _apply(text, "diff")
    assert _apply(text, "rewrite") == program


def test_unknown_mode_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="mode"):
        apply_answer(PARENT, parse_answer(""), "patch")


def test_moved_markers_are_refused() -> None:
    # the first END moves into the second block: same marker counts, one block fewer
    text = _diff("LIMIT = 4\n# EVOLVE-BLOCK-END\n", "LIMIT = 4\n")
    text += _diff("    total = 0.0\n", "    total = 0.0\n# EVOLVE-BLOCK-END\n")
    err = _error(text, parent=TWO_BLOCKS)
    assert err.kind == "markers" and "moved" in str(err)
