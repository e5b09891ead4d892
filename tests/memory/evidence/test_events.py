"""``memory_events.jsonl``: assignment, outcome and applicability events, exactly once
across kills and resumes (issue 16)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from gigaevo.memory.v2.evidence import DecisionRow, SelectionEvidence
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


def test_an_event_already_in_the_file_is_not_appended_again(tmp_path: Path) -> None:
    d = make_decision(3, z=0)
    MemoryEvents(tmp_path, run_id="run").assignment(d)
    resumed = MemoryEvents(tmp_path, run_id="run")  # a new session re-emits the attempt
    resumed.assignment(d)
    resumed.outcome(make_terminal(d), attempt=3)
    resumed.outcome(make_terminal(d), attempt=3)
    rows = read_events(tmp_path / EVENTS_FILE)
    assert [(r["event"], r["decision_id"]) for r in rows] == [
        ("assignment", d.decision_id),
        ("outcome", d.decision_id),
    ]


def _decide_and_observe(
    events: MemoryEvents, ledger: SelectionEvidence, decisions: Sequence[DecisionRow]
) -> None:
    """Commit each decision and its terminal (5 s later) with their event lines."""
    for d in decisions:
        ledger.append_decision(d)
        events.assignment(d)
        t = replace(make_terminal(d), created_at=d.created_at + 5)
        ledger.append_terminal(t)
        events.outcome(t, attempt=d.attempt)


def test_recover_appends_exactly_the_events_a_kill_lost_after_their_commit(
    tmp_path: Path, ledger: SelectionEvidence
) -> None:
    # commit times order the events a kill lost (a decision at 10 a, its outcome at 10 a + 5)
    decisions = [replace(make_decision(a), created_at=10.0 * a) for a in range(4)]
    events = MemoryEvents(tmp_path, run_id="run")
    _decide_and_observe(events, ledger, decisions[:3])
    d = decisions[3]
    ledger.append_decision(d)
    events.assignment(d)
    path = tmp_path / EVENTS_FILE
    uninterrupted = tmp_path / "uninterrupted.jsonl"
    uninterrupted.write_text(path.read_text())
    # a kill between this commit and its line, the outcome before it torn half-written
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-2]) + lines[-2][:20])
    resumed = MemoryEvents(tmp_path, run_id="run")
    assert resumed.recover(ledger) == 2
    got = [(r["event"], r["decision_id"]) for r in read_events(path)]
    assert got == [
        (kind, x.decision_id) for x in decisions[:3] for kind in ("assignment", "outcome")
    ] + [("assignment", d.decision_id)]
    volatile = {"ts", "time"}
    plain = [{k: v for k, v in r.items() if k not in volatile} for r in read_events(path)]
    assert plain == [
        {k: v for k, v in r.items() if k not in volatile} for r in read_events(uninterrupted)
    ]
    assert MemoryEvents(tmp_path, run_id="run").recover(ledger) == 0  # nothing twice
    other = make_decision(9, run_id="other-run")  # another run's rows are not this run's events
    ledger.append_decision(other)
    assert MemoryEvents(tmp_path, run_id="run").recover(ledger) == 0


def test_recover_reads_only_the_tail_after_its_mark(
    tmp_path: Path, ledger: SelectionEvidence
) -> None:
    """After a ``recover`` the file's head is taken as complete (its mark): blanking it
    changes nothing, while the lines lost after the mark are recovered exactly."""
    decisions = [replace(make_decision(a), created_at=10.0 * a) for a in range(8)]
    events = MemoryEvents(tmp_path, run_id="run")
    _decide_and_observe(events, ledger, decisions[:5])
    assert MemoryEvents(tmp_path, run_id="run").recover(ledger) == 0  # marks the file
    path = tmp_path / EVENTS_FILE
    head = path.stat().st_size
    session = MemoryEvents(tmp_path, run_id="run")
    session.recover(ledger)
    for d in decisions[5:]:
        ledger.append_decision(d)
        session.assignment(d)
        t = replace(make_terminal(d), created_at=d.created_at + 5)
        ledger.append_terminal(t)
        session.outcome(t, attempt=d.attempt)
    session.assignment(decisions[0])  # a resumed attempt before the mark: not again
    whole = path.read_text()
    lines = whole.splitlines(keepends=True)
    # the head blanked (a reader of the whole file would re-append its 10 events), and
    # the last outcome lost to a kill
    path.write_text(" " * (head - 1) + "\n" + "".join(lines[10:-1]))
    resumed = MemoryEvents(tmp_path, run_id="run")
    assert resumed.recover(ledger) == 1
    got = [(r["event"], r["decision_id"]) for r in read_events(path)]
    want = [(k, d.decision_id) for d in decisions[5:] for k in ("assignment", "outcome")]
    assert got == want
    resumed.outcome(make_terminal(decisions[2]), attempt=2)  # before the mark: not again
    assert len(read_events(path)) == len(want)
    # a mark the file no longer matches (shorter file) is ignored: the whole file is read
    path.write_text("".join(lines[:4]))
    assert MemoryEvents(tmp_path, run_id="run").recover(ledger) == 12
    assert len(read_events(path)) == 16
