"""Pruning: resolved Open items and obsolete Findings go; the file is state, not a log."""

from __future__ import annotations

from pathlib import Path

import pytest

from gigaevo.scratchpad import InvalidEntryError, Scratchpad, UnknownKeyError


def test_resolved_open_items_and_obsolete_findings_are_pruned(
    pad: Scratchpad, pad_path: Path
) -> None:
    pad.open_question("q1", "first question")
    pad.open_question("q2", "second question")
    pad.record_finding("f1", "old finding", source="s")
    pad.record_finding("f2", "kept finding", source="s")
    pad.add_hypothesis("h1", "dropped idea")
    pad.record_decision("d1", "a decision", source="config")
    pad.resolve("q1")
    pad.mark_obsolete("f1")
    pad.mark_obsolete("h1")
    assert "- [q1] (resolved) first question" in pad_path.read_text()
    result = pad.prune()
    assert sorted(result.removed) == ["f1", "h1", "q1"]
    assert [e.key for e in pad.state] == ["d1", "f2", "q2"]
    size = pad_path.stat().st_size
    assert not pad.prune().changed
    assert pad_path.stat().st_size == size


def test_resolve_with_prune_removes_at_once(pad: Scratchpad) -> None:
    pad.open_question("q", "awaited")
    result = pad.resolve("q", prune=True)
    assert result.removed == ("q",) and "q" not in pad.state


def test_prune_only_named_keys(pad: Scratchpad) -> None:
    pad.open_question("a", "x")
    pad.open_question("b", "y")
    pad.resolve("a")
    pad.resolve("b")
    pad.prune(["a"])
    assert [e.key for e in pad.state] == ["b"]


def test_growth_is_bounded_by_keys(pad: Scratchpad, pad_path: Path) -> None:
    for round_ in range(30):
        pad.record_finding(
            "best", f"best so far {round_}", source=f"p{round_}", record_change=False
        )
        pad.open_question(f"q{round_}", "awaited")
        pad.resolve(f"q{round_}", prune=True)
    assert [e.key for e in pad.state] == ["best"]
    assert pad_path.stat().st_size < 400


def test_resolve_needs_an_open_item(pad: Scratchpad) -> None:
    pad.record_finding("f", "x", source="s")
    with pytest.raises(UnknownKeyError, match="no entry 'nope'"):
        pad.resolve("nope")
    with pytest.raises(InvalidEntryError, match="cannot be marked 'resolved'"):
        pad.resolve("f")
    pad.record_decision("d", "x", source="config")
    with pytest.raises(InvalidEntryError, match="cannot be marked 'obsolete'"):
        pad.mark_obsolete("d")  # decisions are never pruned
