"""The rendered prompt: order of sections, optional parts, mode instructions, round trip."""

from __future__ import annotations

from importlib import resources

import pytest

from gigaevo.llm.prompt_reader import read_prompt
from gigaevo.mutation import build_messages

from .helpers import PARENT, TWO_BLOCKS, program, request

ORDER = [
    "## Scratchpad",
    "## Task",
    "## Metrics",
    "## Parent program",
    "## Parent metrics",
    "## Inspirations",
    "## Memory cards",
    "## Response format",
]


def _user(mode: str = "diff", **kwargs: object) -> str:
    messages = build_messages(request(**kwargs), mode)  # type: ignore[arg-type]
    assert [m.role for m in messages] == ["system", "user"]
    return messages[1].content


def test_sections_come_in_order_with_the_scratchpad_first() -> None:
    insp = (program(TWO_BLOCKS, "e1", 2.0),)
    text = _user(scratchpad="## Hypotheses\n- h1\n", slate="[c1] a hint", inspirations=insp)
    assert text.startswith("## Scratchpad (run notes)\n## Hypotheses\n- h1\n")
    positions = [text.index(h) for h in ORDER]
    assert positions == sorted(positions)


def test_optional_sections_are_left_out_when_empty() -> None:
    text = _user()
    assert text.startswith("## Task\n")
    for heading in ("## Scratchpad", "## Inspirations", "## Memory cards"):
        assert heading not in text
    assert _user(slate="  \n") == text


def test_parent_is_fenced_with_its_markers_id_and_metrics() -> None:
    text = _user(fitness=1.25)
    assert f"```python\n{PARENT.rstrip()}\n```\n" in text
    assert "# EVOLVE-BLOCK-START" in text and "# EVOLVE-BLOCK-END" in text
    assert "id: p0; fitness: 1.25" in text
    assert "## Parent metrics\n- score: 1.25\n" in text


def test_metrics_spec_is_stated() -> None:
    text = _user()
    assert "Primary metric: `score` (higher is better). Bounds: [0, 10]. Best known: 9.5." in text


def test_inspirations_are_fenced_with_id_and_fitness() -> None:
    text = _user(inspirations=(program(TWO_BLOCKS, "e1", 2.0), program(PARENT, "e2", 0.5)))
    assert f"### Inspiration 1 (id: e1, fitness: 2)\n```python\n{TWO_BLOCKS.rstrip()}\n```" in text
    assert "### Inspiration 2 (id: e2, fitness: 0.5)" in text


def test_slate_is_included_verbatim() -> None:
    slate = "[c1] When X, try Y because Z.\n[c2] Another {braced} hint."
    text = _user(slate=slate)
    assert slate in text
    assert text.index("## Memory cards") < text.index(slate) < text.index("## Response format")


def test_mode_instructions() -> None:
    diff, rewrite = _user("diff"), _user("rewrite")
    assert "Answer mode: diff" in diff and "<<<<<<< SEARCH" in diff and ">>>>>>> REPLACE" in diff
    assert "Answer mode: rewrite" in rewrite and "<<<<<<< SEARCH" not in rewrite
    assert "```python block" in rewrite
    for text in (diff, rewrite):
        assert "## Change report" in text and "## Explanation" in text
        assert 'card_ids_used: ["<card id>", ...]' in text


def test_system_message_is_the_same_for_every_request() -> None:
    a = build_messages(request(), "diff")[0]
    b = build_messages(request(TWO_BLOCKS, slate="[c1] x", scratchpad="pad"), "rewrite")[0]
    assert a == b and "EVOLVE-BLOCK-START" in a.content


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        build_messages(request(), "patch")


def test_code_with_braces_renders_unharmed() -> None:
    code = PARENT.replace("values = []", "values = [v for v in {1: 2}]  # {n}")
    assert code.rstrip() in _user(code=code)


def test_templates_ship_as_package_data() -> None:
    folder = resources.files("gigaevo.mutation").joinpath("prompts")
    names = {p.name for p in folder.iterdir()}
    assert {"system.txt", "user.txt", "code_diff.txt", "code_rewrite.txt"} <= names


def test_the_offline_reader_understands_the_rendered_prompt() -> None:
    insp = (program(TWO_BLOCKS, "e1", 2.5),)
    for mode in ("diff", "rewrite"):
        text = _user(
            mode,
            scratchpad="## Parent program\nnot this",
            slate="[c1] tune a constant",
            inspirations=insp,
            fitness=1.5,
        )
        view = read_prompt(text)
        assert view.parent_code == PARENT
        assert view.parent_fitness == 1.5 and view.higher_is_better is True
        assert view.mode == mode
        assert [(e.id, e.fitness, e.code) for e in view.inspirations] == [("e1", 2.5, TWO_BLOCKS)]
        assert [(c.id, c.text) for c in view.cards] == [("c1", "[c1] tune a constant")]
