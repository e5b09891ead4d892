"""``memory_events.jsonl``: assignment, outcome and applicability events."""

from __future__ import annotations

from pathlib import Path

import pytest

from gigaevo.memory.v2.read.events import EVENTS_FILE, MemoryEvents, read_events
from tests.memory.evidence.factories import make_decision, make_terminal


def test_events_are_appended_and_read_back(tmp_path: Path) -> None:
    events = MemoryEvents(tmp_path, run_id="r")
    d = make_decision(3, z=0)
    events.assignment(d)
    events.applicability(3, {"c2": "inapplicable", "c1": "applicable"})
    events.outcome(make_terminal(d), attempt=3)
    rows = read_events(tmp_path / EVENTS_FILE)
    assert [r["event"] for r in rows] == ["assignment", "applicability", "outcome"]
    assert rows[0]["z"] == 0 and rows[0]["decision_id"] == d.decision_id
    assert rows[1]["labels"] == {"c1": "applicable", "c2": "inapplicable"}
    assert rows[2]["status"] == "valid" and rows[2]["run_id"] == "r"


def test_torn_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / EVENTS_FILE
    path.write_text('{"event": "assignment", "tor')
    MemoryEvents(tmp_path, run_id="r").emit("outcome", {"attempt": 1})
    assert [r["event"] for r in read_events(path)] == ["outcome"]


def test_unknown_kind_and_reserved_keys_are_refused(tmp_path: Path) -> None:
    events = MemoryEvents(tmp_path, run_id="r")
    with pytest.raises(ValueError, match="unknown memory event"):
        events.emit("gossip", {})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reserved"):
        events.emit("outcome", {"run_id": "other"})
    assert read_events(tmp_path / EVENTS_FILE) == []
