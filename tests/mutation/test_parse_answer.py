"""Parsing answers: code parts, sections and card ids, tolerantly."""

from __future__ import annotations

from gigaevo.mutation import DiffBlock, parse_answer

FULL = """## Change report
tactic: perturb_constants
- line 12: 0.7 -> 0.65

## Explanation
A smaller frequency spreads the values.

card_ids_used: ["c1", "c2"]

## Code
<<<<<<< SEARCH
        values.append(SCALE * math.sin(0.7 * i) + 0.25)
=======
        values.append(SCALE * math.sin(0.65 * i) + 0.25)
>>>>>>> REPLACE
"""


def test_full_answer() -> None:
    parsed = parse_answer(FULL)
    assert parsed.change_report == "tactic: perturb_constants\n- line 12: 0.7 -> 0.65"
    assert parsed.explanation == "A smaller frequency spreads the values."
    assert parsed.card_ids_used == ("c1", "c2")
    assert parsed.tactic == "perturb_constants"
    assert parsed.blocks == (
        DiffBlock(
            "        values.append(SCALE * math.sin(0.7 * i) + 0.25)\n",
            "        values.append(SCALE * math.sin(0.65 * i) + 0.25)\n",
        ),
    )
    assert parsed.programs == () and parsed.notes == () and parsed.broken_blocks == 0


def test_multiple_blocks_in_order_and_empty_replace() -> None:
    text = (
        "<<<<<<< SEARCH\na = 1\n=======\na = 2\n>>>>>>> REPLACE\n"
        "some words\n"
        "<<<<<<< SEARCH\nb = 1\nc = 1\n=======\n>>>>>>> REPLACE\n"
    )
    parsed = parse_answer(text)
    assert parsed.blocks == (DiffBlock("a = 1\n", "a = 2\n"), DiffBlock("b = 1\nc = 1\n", ""))


def test_whitespace_variants_of_markers_and_line_endings() -> None:
    text = "  <<<<<<<  SEARCH \r\nx = 1\r\n=======   \r\nx = 2\r\n>>>>>>>   REPLACE\r\n"
    assert parse_answer(text).blocks == (DiffBlock("x = 1\n", "x = 2\n"),)


def test_diff_inside_a_fence_is_read_as_a_diff() -> None:
    text = "```diff\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n```\n"
    parsed = parse_answer(text)
    assert parsed.blocks == (DiffBlock("x = 1\n", "x = 2\n"),)
    assert parsed.programs == ()


def test_fenced_program_and_other_fences() -> None:
    text = "```text\nnot code\n```\n\n```python\nx = 1\n\ny = 2\n```\n```py\nz = 3\n```"
    assert parse_answer(text).programs == ("x = 1\n\ny = 2\n", "z = 3\n")


def test_cut_off_block_is_counted() -> None:
    parsed = parse_answer("<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n")
    assert parsed.blocks == () and parsed.broken_blocks == 1
    assert any("cut off" in note for note in parsed.notes)


def test_missing_sections_are_empty_and_noted() -> None:
    parsed = parse_answer("```python\nx = 1\n```")
    assert parsed.change_report == "" and parsed.explanation == "" and parsed.tactic == ""
    assert parsed.card_ids_used == ()
    assert parsed.notes == ("card_ids_used missing",)


def test_tolerant_headings_and_card_list_styles() -> None:
    text = (
        "**Change report:**\nmoved things\n\n"
        "Explanation:\nit helps\n\n"
        "**card_ids_used**: ['c9', 3, 'c9']\n"
    )
    parsed = parse_answer(text)
    assert parsed.change_report == "moved things"
    assert parsed.explanation == "it helps"
    assert parsed.card_ids_used == ("c9", "3")


def test_empty_card_list_variants() -> None:
    for value in ("[]", "none", "", "`[]`"):
        parsed = parse_answer(f"card_ids_used: {value}\n")
        assert parsed.card_ids_used == () and parsed.notes == (), value


def test_malformed_card_ids_give_empty_tuple_and_a_note() -> None:
    for value in ("c1, c2", '{"a": 1}', "[c1"):
        parsed = parse_answer(f"card_ids_used: {value}\n")
        assert parsed.card_ids_used == ()
        assert parsed.notes and parsed.notes[0].startswith("malformed card_ids_used"), value


def test_card_ids_inside_code_are_ignored() -> None:
    text = "```python\ncard_ids_used = ['x']\n```\ncard_ids_used: []\n"
    assert parse_answer(text).card_ids_used == ()


def test_sections_stop_at_the_next_heading_and_code() -> None:
    text = "## Change report\nline\n### Details\nmore\n## Explanation\nwhy\n```python\nx = 1\n```\n"
    parsed = parse_answer(text)
    assert parsed.change_report == "line"
    assert parsed.explanation == "why"
