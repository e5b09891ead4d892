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


def test_without_ancestors_parents_that_left_every_archive_are_forgotten() -> None:
    live = {"a"}
    book = FeedbackBook(FeedbackSettings(ancestor_generations=0), is_live=live.__contains__)
    book.observe(_child(1, "a", "boom"))
    book.observe(_child(2, "gone", "boom"))
    assert len(book) == 1
    live.clear()
    book.prune()
    assert len(book) == 0


def _valid(pid: str, parent: str | None, ordinal: int) -> Program:
    parents = (parent,) if parent else ()
    return Program(id=pid, code="z = 3", ordinal=ordinal, parent_ids=parents, valid=True)


def _lineage_book(generations: int = 4, most: int = 6) -> FeedbackBook:
    """root -> p1 -> p2 -> p3, and a side branch root -> s1; failures under each."""
    live = {"p3", "s1"}  # root, p1, p2 left every archive: they still speak for p3
    settings = FeedbackSettings(
        max_children=2, ancestor_generations=generations, max_ancestor_failures=most
    )
    book = FeedbackBook(settings, is_live=live.__contains__)
    programs = [
        _valid("p1", "root", 1),
        _valid("p2", "p1", 2),
        _valid("p3", "p2", 3),
        _valid("s1", "root", 4),
        _child(10, "root", "root fail old"),
        _child(11, "root", "root fail new"),
        _child(12, "p1", "p1 fail"),
        _child(13, "p2", "p2 fail"),
        _child(14, "p3", "p3 fail"),
        _child(15, "s1", "side fail"),
        _child(16, "p2", "p1 fail"),  # the same line again: shown once
    ]
    book.restore(programs)
    return book


def test_ancestors_failures_reach_their_descendants_nearest_first() -> None:
    book = _lineage_book()
    book.prune()  # ancestors that left every archive are kept all the same
    fb = book.for_parent(_valid("p3", "p2", 3))
    assert fb.failures == ("p3 fail",)
    assert fb.ancestor_failures == ("p1 fail", "p2 fail", "root fail new", "root fail old")
    # a sibling branch's failures are not its ancestors': never shown to p3
    assert "side fail" not in fb.ancestor_failures
    side = book.for_parent(_valid("s1", "root", 4))
    assert side.failures == ("side fail",)
    assert side.ancestor_failures == ("root fail new", "root fail old")
    assert not book.for_parent(_valid("root", None, 0)).ancestor_failures


def test_ancestors_failures_are_bounded_in_generations_and_lines() -> None:
    fb = _lineage_book(generations=1).for_parent(_valid("p3", "p2", 3))
    assert fb.ancestor_failures == ("p1 fail", "p2 fail")  # the parent's parent only
    fb = _lineage_book(most=3).for_parent(_valid("p3", "p2", 3))
    assert fb.ancestor_failures == ("p1 fail", "p2 fail", "root fail new")
    fb = _lineage_book(generations=0).for_parent(_valid("p3", "p2", 3))
    assert fb.failures == ("p3 fail",) and fb.ancestor_failures == ()


def test_ancestors_failures_do_not_depend_on_the_commit_order() -> None:
    programs = [_valid(f"g{i}", f"g{i - 1}" if i else None, i) for i in range(12)]
    programs += [_child(100 + i, f"g{i % 11}", f"reason {i}") for i in range(60)]
    seen = set()
    for seed in range(4):
        shuffled = programs[:]
        random.Random(seed).shuffle(shuffled)
        book = FeedbackBook(FeedbackSettings(max_children=2, ancestor_generations=3))
        for p in shuffled:  # one by one, as commits arrive
            book.observe(p)
        seen.add(book.for_parent(programs[11]))
    assert len(seen) == 1
    (fb,) = seen
    assert fb.ancestor_failures == (
        "reason 54",
        "reason 43",
        "reason 53",
        "reason 42",
        "reason 52",
        "reason 41",
    )


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
