"""The shared answer format: EVOLVE-BLOCK split, SEARCH location, diff-block generation."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.llm.answer_format import (
    editable_line_ranges,
    locate_search,
    make_diff_blocks,
    render_answer,
    render_diff_blocks,
    split_evolve_blocks,
)

from .samples import NO_MARKERS, RING, SAMPLES, TWO_BLOCKS


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_split_joins_back_to_the_program(name: str) -> None:
    layout = split_evolve_blocks(SAMPLES[name])
    assert layout.join() == SAMPLES[name]
    assert len(layout.fixed) == len(layout.blocks) + 1


def test_split_keeps_markers_in_the_fixed_parts() -> None:
    layout = split_evolve_blocks(TWO_BLOCKS)
    assert len(layout.blocks) == 2
    assert layout.fixed[0].endswith("# EVOLVE-BLOCK-START\n")
    assert layout.fixed[1].startswith("# EVOLVE-BLOCK-END\n")
    assert "OFFSET = 10.0" in layout.fixed[1]
    assert layout.blocks[0] == "WEIGHTS = [0.25, 1.5, -3.0]\n"


def test_program_without_markers_is_one_open_block() -> None:
    layout = split_evolve_blocks(NO_MARKERS)
    assert not layout.has_markers
    assert layout.blocks == (NO_MARKERS,)
    assert editable_line_ranges(NO_MARKERS) == [(1, 4)]


def test_unclosed_start_marker_runs_to_the_end() -> None:
    code = "x = 1\n# EVOLVE-BLOCK-START\ny = 2\n"
    layout = split_evolve_blocks(code)
    assert layout.blocks == ("y = 2\n",)
    assert layout.fixed[-1] == ""


def test_editable_ranges_are_strictly_inside_the_markers() -> None:
    lines = TWO_BLOCKS.splitlines()
    ranges = editable_line_ranges(TWO_BLOCKS)
    assert [lines[lo - 1 : hi] for lo, hi in ranges] == [
        ["WEIGHTS = [0.25, 1.5, -3.0]"],
        TWO_BLOCKS.split("# EVOLVE-BLOCK-START\n")[2].split("# EVOLVE-BLOCK-END")[0].splitlines(),
    ]


def test_locate_search_prefers_a_line_aligned_match() -> None:
    text = "        x = 1\n    x = 1\n"
    assert locate_search(text, "    x = 1\n") == len("        x = 1\n")
    assert locate_search("ab = 1\n", "b = 1") == 1  # no aligned match: first anywhere
    assert locate_search("x\n", "y") == -1


def _apply(text: str, blocks: list[tuple[str, str]]) -> str:
    for search, replace in blocks:
        pos = locate_search(text, search)
        assert pos >= 0
        text = text[:pos] + replace + text[pos + len(search) :]
    return text


@pytest.mark.parametrize("seed", range(30))
def test_diff_blocks_reproduce_random_line_edits(seed: int) -> None:
    rng = np.random.default_rng(seed)
    parent = RING + "\n" + "    pass\n" * 3 + "x = 1\n" * 2  # repeated lines force context
    lines = parent.splitlines(keepends=True)
    for _ in range(int(rng.integers(1, 5))):
        i = int(rng.integers(len(lines)))
        op = rng.integers(3)
        if op == 0:
            lines.insert(i, "    pass\n")
        elif op == 1 and len(lines) > 1:
            del lines[i]
        else:
            lines[i] = "x = 1\n"
    child = "".join(lines)
    blocks = make_diff_blocks(parent, child)
    assert all(search.strip() for search, _ in blocks)
    assert _apply(parent, blocks) == child


def test_rendered_answer_has_the_documented_layout() -> None:
    code = render_diff_blocks([("a = 1\n", "a = 2\n")])
    text = render_answer("tactic: perturb_constants\n- a", "because", ("c1",), code)
    assert text.splitlines() == [
        "## Change report",
        "tactic: perturb_constants",
        "- a",
        "",
        "## Explanation",
        "because",
        "",
        'card_ids_used: ["c1"]',
        "",
        "## Code",
        "<<<<<<< SEARCH",
        "a = 1",
        "=======",
        "a = 2",
        ">>>>>>> REPLACE",
    ]
