"""Delayed-lineage outcomes pinned rule by rule (memory-model.md "Delayed-lineage head"):
each case is a small topology worked by hand, one rule of the scan, the credit or the
incremental index at a time (issue 19: the survivors of a whole-module mutation run)."""

from __future__ import annotations

import pytest

from gigaevo.memory.v2.causal import (
    GainOutOfBoundsError,
    LineageEdge,
    LineageRoot,
    RewardDefinition,
    lineage_outcomes,
    raw_feasible_interval,
    root_outcome,
)
from gigaevo.memory.v2.causal.features import GAIN_TOLERANCE
from gigaevo.memory.v2.causal.lineage import extend_index

FEASIBLE = (-0.8, 0.2)  # a parent at 0.80 of a metric in [0, 1], higher is better


def _edge(
    parent: str,
    child: str,
    ordinal: int,
    gain: float | None = 0.0,
    disposition: str = "accepted",
    status: str = "valid",
    island: int = 0,
) -> LineageEdge:
    return LineageEdge(parent, child, island, ordinal, status, gain, disposition)  # type: ignore[arg-type]


def _fillers(first: int, last: int, island: int = 0) -> list[LineageEdge]:
    """Unrelated same-island edges that only bring the roots to maturity."""
    return [
        _edge("other", f"f{i}", i, -0.01, "rejected", island=island) for i in range(first, last + 1)
    ]


def _root(decision: str = "dA", child: str = "r", ordinal: int = 1, gain: float = 0.03):
    return LineageRoot(decision, child, 0, ordinal, gain, FEASIBLE)


def test_the_raw_interval_scales_the_normalised_one_by_the_range() -> None:
    # metric in [1, 3] (R = 2), parent at 2: normalised (-0.5, 0.5), raw (-1, 1)
    assert raw_feasible_interval(RewardDefinition(1.0, 3.0), 2.0) == (-1.0, 1.0)
    # lower is better, parent at 1.5 of [1, 5] (R = 4): raw gains from -3.5 to +0.5
    lower = RewardDefinition(1.0, 5.0, higher_is_better=False)
    assert raw_feasible_interval(lower, 1.5) == pytest.approx((-3.5, 0.5))


def test_a_root_on_an_island_without_edges_is_pending() -> None:
    edges = [_edge("p", "r", 1, 0.03), *_fillers(2, 40)]  # every edge on island 0
    lonely = LineageRoot("dB", "q", 7, 1, 0.0, FEASIBLE)
    out, other = lineage_outcomes([lonely, _root()], edges)
    assert out.status == "pending" and out.maturity_ordinal is None
    assert other.status == "outcome"


def test_duplicate_roots_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^root decision ids must be distinct$"):
        lineage_outcomes([_root(), _root()], [])


def test_a_degenerate_interval_and_the_exact_tolerance_are_accepted() -> None:
    assert LineageRoot("d", "r", 0, 1, 0.0, (0.0, 0.0)).feasible == (0.0, 0.0)
    lo, hi = FEASIBLE
    root = LineageRoot("d", "r", 0, 1, 0.0, FEASIBLE)
    assert root.contains(lo - GAIN_TOLERANCE) and root.contains(hi + GAIN_TOLERANCE)
    with pytest.raises(GainOutOfBoundsError, match=r"^direct gain 0.5 outside feasible"):
        LineageRoot("d", "r", 0, 1, 0.5, FEASIBLE)


def test_a_repeated_child_is_scanned_once_and_its_later_siblings_still_count() -> None:
    """r -> x is recorded twice; x has an invalid child; r's later child y is the best."""
    edges = [
        _edge("p", "r", 1, 0.03),
        _edge("r", "x", 2, 0.01),
        _edge("r", "x", 3, 0.01),  # the same child again
        _edge("x", "bad", 4, None, "none", status="invalid"),
        _edge("r", "y", 5, 0.10),
        *_fillers(6, 40),
    ]
    (out,) = lineage_outcomes([_root()], edges)
    assert out.status == "outcome"
    assert (out.best_descendant_id, out.best_depth) == ("y", 2)
    assert out.best_gain == pytest.approx(0.13) and out.residual == pytest.approx(0.10)
    assert out.invalid_edges == 1  # x expanded once


def test_ties_keep_the_direct_gain_then_the_first_scanned_descendant() -> None:
    # a descendant exactly at the direct gain does not replace it
    flat = [_edge("p", "r", 1, 0.03), _edge("r", "a", 2, 0.0), *_fillers(3, 40)]
    (out,) = lineage_outcomes([_root()], flat)
    assert (out.best_descendant_id, out.best_depth, out.residual) == ("r", 1, 0.0)
    assert out.credit_owner is None
    # two descendants at the same cumulative gain: the first scanned (lower ordinal) wins
    twins = [
        _edge("p", "r", 1, 0.03),
        _edge("r", "a", 2, 0.0625),
        _edge("r", "b", 3, 0.0625),
        *_fillers(4, 40),
    ]
    (out,) = lineage_outcomes([_root()], twins)
    assert out.best_descendant_id == "a" and out.residual == pytest.approx(0.0625)


def test_invalid_edges_seen_before_a_pending_one_are_counted_in_the_pending_row() -> None:
    """Inconsistent ordinals: the root child's children completed before the root edge.
    The window check does not see them; the scan counts the invalid one, then stops at the
    unresolved one with the row pending."""
    edges = [
        _edge("r", "bad", 2, None, "none", status="invalid"),
        _edge("r", "wait", 3, None, "none", status="pending"),
        _edge("p", "r", 4, 0.03),
        *_fillers(5, 40),
    ]
    (out,) = lineage_outcomes([_root(ordinal=4)], edges)
    assert out.status == "pending" and out.maturity_ordinal == 36
    assert out.invalid_edges == 1


def test_roots_with_different_best_descendants_each_keep_their_credit() -> None:
    edges = [
        _edge("p", "r", 1, 0.03),
        _edge("p", "s", 2, 0.0),
        _edge("r", "r2", 3, 0.05),
        _edge("s", "s2", 4, 0.07),
        *_fillers(5, 45),
    ]
    roots = [_root(), _root("dB", "s", 2, 0.0)]
    a, b = lineage_outcomes(roots, edges)
    assert (a.best_descendant_id, a.credit_owner, a.structural_zero) == ("r2", "dA", False)
    assert (b.best_descendant_id, b.credit_owner, b.structural_zero) == ("s2", "dB", False)
    assert a.residual == pytest.approx(0.05) and b.residual == pytest.approx(0.07)


def test_a_root_without_residual_never_competes_for_its_own_child() -> None:
    """Root dB's child q is the parent of root dA's child r. dB's best descendant is r
    (depth 2, +0.05); dA's best is its own child r at depth 1 with no residual. dA claims
    nothing, so dB keeps the credit for r."""
    edges = [
        _edge("p", "q", 1, 0.03),
        _edge("q", "r", 2, 0.05),
        *_fillers(3, 45),
    ]
    root_b = _root("dB", "q", 1, 0.03)
    root_a = LineageRoot("dA", "r", 0, 2, 0.05, (-0.85, 0.15))  # r's parent q is at 0.85
    b, a = lineage_outcomes([root_b, root_a], edges)
    assert (b.best_descendant_id, b.best_depth, b.credit_owner) == ("r", 2, "dB")
    assert b.residual == pytest.approx(0.05) and not b.structural_zero
    assert (a.best_descendant_id, a.residual, a.credit_owner) == ("r", 0.0, None)
    assert not a.structural_zero


def test_the_extended_index_reports_rebuilt_islands_and_keeps_each_childs_first_edge() -> None:
    index: dict = {}
    # in order on island 0: nothing rebuilt; an invalid root edge is indexed by its child
    assert extend_index(index, [_edge("p", "r", 1, None, "none", status="invalid")]) == set()
    assert extend_index(index, _fillers(2, 40)) == set()
    assert root_outcome(_root(), index[0]).status == "invalid"
    # an edge older than island 0's newest one rebuilds island 0 only
    late = _edge("p", "late", 0, 0.0, "rejected")
    fresh = _edge("p", "q", 1, 0.0, "rejected", island=1)
    assert extend_index(index, [fresh, late]) == {0}
    assert root_outcome(_root(), index[0]).status == "invalid"
