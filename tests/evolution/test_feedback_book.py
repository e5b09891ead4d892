"""The failure-feedback book: the right parent, the most recent children, bounded, order-free."""

from __future__ import annotations

import random

import pytest

from gigaevo.evolution import FeedbackBook, FeedbackSettings
from gigaevo.programs import MutationInfo, Program, ProgramStatus


def _child(ordinal: int, parent: str, reason: str | None, change: str = "") -> Program:
    status = ProgramStatus.INVALID if reason else ProgramStatus.REJECTED
    return Program(
        id=f"c{ordinal}",
        code="x = 1",
        ordinal=ordinal,
        parent_ids=(parent,),
        valid=reason is None,
        invalid_reason=reason,
        status=status,
        mutation=MutationInfo(model="m", change_report=change),
    )


def _parent(pid: str, output: str = "", feedback: str = "") -> Program:
    return Program(id=pid, code="y = 2", ordinal=0, output_tail=output, feedback=feedback)


def test_only_invalid_children_of_that_parent_are_listed_most_recent_first() -> None:
    book = FeedbackBook(FeedbackSettings(max_children=2))
    book.observe(_child(1, "a", "ValueError: first"))
    book.observe(_child(2, "b", "timeout after 1 s"))
    book.observe(_child(3, "a", None))  # valid: not a failure
    book.observe(_child(4, "a", "circles 3 and 7 overlap by 2e-09", change="- moved circle 3"))
    book.observe(_child(5, "a", "mutation failed: SEARCH text not found"))
    assert book.for_parent(_parent("a")).failures == (
        "mutation failed: SEARCH text not found",
        "moved circle 3 -> circles 3 and 7 overlap by 2e-09",
    )
    assert book.for_parent(_parent("b")).failures == ("timeout after 1 s",)
    assert not book.for_parent(_parent("c"))


def test_the_content_does_not_depend_on_the_commit_order() -> None:
    children = [_child(i, "ab"[i % 2], f"reason {i}") for i in range(40)]
    books = []
    for seed in range(3):
        shuffled = children[:]
        random.Random(seed).shuffle(shuffled)
        book = FeedbackBook(FeedbackSettings(max_children=3))
        book.restore(shuffled)
        books.append([book.for_parent(_parent(p)) for p in "ab"])
    assert books[0] == books[1] == books[2]
    assert books[0][0].failures == ("reason 38", "reason 36", "reason 34")


def test_parents_that_left_every_archive_are_forgotten() -> None:
    live = {"a"}
    book = FeedbackBook(is_live=live.__contains__)
    book.observe(_child(1, "a", "boom"))
    book.observe(_child(2, "gone", "boom"))
    assert len(book) == 1
    live.clear()
    book.prune()
    assert len(book) == 0


def test_everything_is_bounded() -> None:
    s = FeedbackSettings(
        max_children=2, max_reason_chars=50, max_output_chars=30, max_feedback_chars=20
    )
    book = FeedbackBook(s)
    for i in range(10):
        book.observe(_child(i, "a", "x" * 500, change="- " + "y" * 500))
    fb = book.for_parent(_parent("a", output="o" * 10_000 + "END", feedback="f" * 10_000))
    assert len(fb.failures) == 2 and all(len(line) <= 50 for line in fb.failures)
    assert len(fb.output_tail) == 30 and fb.output_tail.endswith("END")
    assert fb.validator_feedback == "f" * 20


def test_parent_output_and_validator_feedback_are_its_own() -> None:
    book = FeedbackBook()
    fb = book.for_parent(_parent("a", output="step 3: 0.91\n", feedback="try the corners"))
    assert fb.output_tail == "step 3: 0.91\n" and fb.validator_feedback == "try the corners"
    assert not FeedbackBook(FeedbackSettings(enabled=False)).for_parent(
        _parent("a", output="x", feedback="y")
    )


def test_bad_settings_are_named() -> None:
    with pytest.raises(ValueError, match="max_children"):
        FeedbackSettings(max_children=-1)
    with pytest.raises(ValueError, match="max_reason_chars"):
        FeedbackSettings(max_reason_chars=5)
