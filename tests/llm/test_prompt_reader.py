"""Reading a mutation prompt back into its parts (what the offline mutator sees)."""

from __future__ import annotations

from gigaevo.llm.prompt_reader import fenced_blocks, read_prompt, without_feedback

from .samples import NO_MARKERS, RING, TWO_BLOCKS, prompt


def test_reads_parent_mode_fitness_and_direction() -> None:
    view = read_prompt(prompt(RING, mode="rewrite", fitness=2.5))
    assert view.parent_code == RING
    assert view.mode == "rewrite"
    assert view.parent_fitness == 2.5
    assert view.higher_is_better is True


def test_reads_inspirations_with_ids_and_fitness() -> None:
    view = read_prompt(
        prompt(RING, inspirations=(("e1", TWO_BLOCKS, 3.0), ("e2", NO_MARKERS, -1.0)))
    )
    assert [(e.id, e.fitness) for e in view.inspirations] == [("e1", 3.0), ("e2", -1.0)]
    assert view.inspirations[0].code == TWO_BLOCKS


def test_reads_cards_in_several_id_styles() -> None:
    slate = "\n".join(
        [
            "[c1] When rings overlap, try tactic: perturb_constants because spacing.",
            "  more text for c1",
            "- id: c2 | When stuck, try crossover.",
            "Card c3: swap two statements.",
            '{"id": "c4", "description": "tune a constant"}',
            "### card_id=c5",
            "body of c5",
        ]
    )
    cards = read_prompt(prompt(RING, slate=slate)).cards
    assert [c.id for c in cards] == ["c1", "c2", "c3", "c4", "c5"]
    assert "more text for c1" in cards[0].text
    assert cards[4].text.endswith("body of c5")


def test_headings_inside_code_and_slate_do_not_cut_sections() -> None:
    parent = RING.replace('"""A ring layout."""', '"""A ring layout.\n\n## Memory cards\n"""')
    slate = "[c1] first\n## Notes\nstill c1"
    view = read_prompt(prompt(parent, slate=slate))
    assert view.parent_code == parent
    assert [c.id for c in view.cards] == ["c1"]
    assert "still c1" in view.cards[0].text


def test_missing_parts_come_back_empty() -> None:
    view = read_prompt("nothing here")
    assert view.parent_code is None
    assert view.mode == "diff"
    assert view.inspirations == () and view.cards == ()
    assert view.parent_fitness is None and view.higher_is_better is None


def test_foreign_prompt_falls_back_to_the_first_marked_block() -> None:
    text = f"Improve this:\n```python\nprint(1)\n```\nand this:\n```python\n{RING}```\n"
    assert read_prompt(text).parent_code == RING


def test_fenced_blocks_drop_unclosed_fences() -> None:
    assert fenced_blocks(["```python", "a", "```", "```", "b"]) == ["a\n"]


def test_without_feedback_drops_only_the_feedback_section() -> None:
    plain = prompt(RING, inspirations=(("e1", TWO_BLOCKS, 3.0),))
    assert without_feedback(plain) == plain  # nothing to drop: the same text
    feedback = (
        "## Feedback on the parent\nRecent children of this parent that were invalid:\n"
        "- attempt 3: IndexError\n> ```\n> ## Task\n\n"
    )
    told = plain.replace("## Inspirations", feedback + "## Inspirations", 1)
    assert told != plain and without_feedback(told) == plain
    assert read_prompt(without_feedback(told)) == read_prompt(plain)
