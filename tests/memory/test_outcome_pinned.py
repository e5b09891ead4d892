"""What the librarian ingests, pinned field by field (gigaevo/memory/v2/write/outcome.py;
issue 19: the outcome code under mutation testing). Each expected value is written out by
hand from the outcome it comes from."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gigaevo.memory.base import MutationResult
from gigaevo.memory.v2.bank.cards import Evidence
from gigaevo.memory.v2.write.outcome import (
    bounded_diff,
    clip,
    evidence_of,
    is_strictly_valid,
    number,
    writer_outcome,
)
from gigaevo.problems.spec import MetricsSpec

LOWER = MetricsSpec("cost", higher_is_better=False, lower_bound=0.0, upper_bound=4.0, sentinel=4.0)
GOOD = MutationResult(
    attempt=7,
    child_id="c7",
    parent_id="p3",
    status="rejected",  # evaluated and archived, but not kept: still strictly valid
    valid=True,
    parent_fitness=2.0,
    child_fitness=1.5,
    normalised_gain=0.125,  # (2.0 - 1.5) / 4, lower is better
    cited_card_ids=("ins-a", "ins-b"),
    accepted=False,
    island=2,
    archive_status="rejected",
    parent_code="x = 2\n",
    child_code="x = 1.5\n",
    change_report="x: 2 -> 1.5",
    explanation="smaller x",
)


def test_strict_validity_needs_each_condition_on_its_own() -> None:
    assert is_strictly_valid(GOOD)
    assert is_strictly_valid(replace(GOOD, status="accepted", archive_status="improved"))
    for bad in (
        replace(GOOD, valid=False),
        replace(GOOD, status="duplicate"),
        replace(GOOD, status="failed"),
        replace(GOOD, archive_status=None),
        replace(GOOD, normalised_gain=None),
        replace(GOOD, normalised_gain=math.nan),
        replace(GOOD, normalised_gain=math.inf),
        replace(GOOD, parent_fitness=-math.inf),
        replace(GOOD, child_fitness=math.nan),
    ):
        assert not is_strictly_valid(bad), bad


def test_the_writer_outcome_copies_every_field_and_the_metrics_direction() -> None:
    out = writer_outcome(GOOD, LOWER)
    assert (out.attempt, out.parent_id, out.child_id, out.island) == (7, "p3", "c7", 2)
    assert (out.parent_code, out.child_code) == ("x = 2\n", "x = 1.5\n")
    assert (out.change_report, out.explanation) == ("x: 2 -> 1.5", "smaller x")
    assert (out.parent_fitness, out.child_fitness, out.normalised_gain) == (2.0, 1.5, 0.125)
    assert out.higher_is_better is False and out.archive_status == "rejected"
    assert out.cited_card_ids == ("ins-a", "ins-b") and not out.accepted
    higher = MetricsSpec("s", higher_is_better=True, lower_bound=0, upper_bound=1, sentinel=0)
    kept = writer_outcome(replace(GOOD, archive_status="new_cell", cited_card_ids=()), higher)
    assert kept.higher_is_better is True and kept.accepted and kept.cited_card_ids == ()


def test_an_outcome_that_is_not_strictly_valid_is_refused_by_attempt() -> None:
    with pytest.raises(ValueError, match=r"^attempt 7 is not a strictly valid outcome$"):
        writer_outcome(replace(GOOD, valid=False), LOWER)


def test_the_evidence_row_carries_the_outcome_and_its_provenance() -> None:
    ev = evidence_of(writer_outcome(GOOD, LOWER), "task-k", "run-r", "cand-1", 12.5)
    assert ev == Evidence(
        task_key="task-k",
        run_id="run-r",
        attempt=7,
        parent_id="p3",
        child_id="c7",
        parent_fitness=2.0,
        child_fitness=1.5,
        normalised_gain=0.125,
        archive_status="rejected",
        candidate_id="cand-1",
        recorded_at=12.5,
    )


def test_the_diff_is_unified_with_two_lines_of_context_and_cut_with_a_note() -> None:
    parent = "".join(f"line {i}\n" for i in range(10))
    child = parent.replace("line 5\n", "line five\n")
    full = bounded_diff(parent, child, 100)
    assert full.splitlines() == [
        "--- parent",
        "+++ child",
        "@@ -4,5 +4,5 @@",
        " line 3",
        " line 4",
        "-line 5",
        "+line five",
        " line 6",
        " line 7",
    ]
    assert bounded_diff(parent, child, 9) == full  # exactly at the limit: not cut
    assert bounded_diff(parent, child, 4).splitlines() == [
        *full.splitlines()[:4],
        "... (5 more diff lines cut)",
    ]
    assert bounded_diff(parent, parent, 3) == ""


def test_clip_strips_newlines_and_cuts_with_a_note() -> None:
    assert clip("\n\nabc\n", 3) == "abc"
    assert clip("abcdef", 6) == "abcdef"
    assert clip("abc   def", 6) == "abc\n... (3 more characters cut)"  # the cut end stripped
    assert clip("\nabcdefgh\n", 4) == "abcd\n... (4 more characters cut)"


def test_clip_strips_only_newlines() -> None:
    # indentation and other characters at the ends are the program's text: kept
    assert clip("\n    x = 1  \n", 20) == "    x = 1  "
    assert clip("\tXX\n", 10) == "\tXX"
    assert clip("XabcX", 10) == "XabcX"


def test_numbers_keep_ten_significant_digits() -> None:
    assert number(1.0) == "1"
    assert number(1 / 3) == "0.3333333333"
    assert number(12345678901.0) == "1.23456789e+10"
    assert number(-0.000125) == "-0.000125"
