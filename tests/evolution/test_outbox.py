"""The commit outbox: a commit's events and observation are delivered exactly once (issue 15).

A "kill" is an exception at one instant of delivery; the abandoned objects are
dropped and a new store on the same file replays what the entry still holds.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest

from gigaevo.evolution.events import EventLog, event
from gigaevo.evolution.outbox import Outbox, inline, result_from_dict, result_to_dict
from gigaevo.evolution.store import ProgramStore
from gigaevo.memory.base import MutationResult
from gigaevo.programs import Program


class Killed(BaseException):
    """Stands for SIGKILL."""


def _result(attempt: int) -> MutationResult:
    return MutationResult(
        attempt=attempt,
        child_id=f"c{attempt}",
        parent_id="p0",
        status="accepted",
        valid=True,
        parent_fitness=1.0,
        child_fitness=1.5,
        normalised_gain=0.05,
        cited_card_ids=("ins-a",),
        accepted=True,
        parent_cell=(1, 2),
        child_cell=(2, 2),
        archive_status="improved",
        child_metrics={"score": 1.5},
    )


def _commit(store: ProgramStore, outbox: Outbox, attempt: int) -> dict[str, object]:
    prog = Program(id=f"c{attempt}", code=f"x = {attempt}\n", ordinal=attempt + 1, valid=True)
    records = [
        event("archive", program_id=prog.id, attempt=attempt),
        event("mutant", attempt=attempt, program_id=prog.id),
    ]
    marker = {"event": "mutant", "attempt": attempt}
    entry = outbox.entry(attempt, records, marker, _result(attempt))
    store.commit(prog, f"d{attempt}", attempt=attempt, state={"n": attempt + 1}, outbox=entry)
    return entry


def _events(path: Path) -> list[tuple[str, int]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line]
    return [(e["event"], e["attempt"]) for e in lines]


def test_a_result_survives_the_round_trip() -> None:
    r = _result(3)
    assert result_from_dict(json.loads(json.dumps(result_to_dict(r)))) == r
    invalid = MutationResult(3, "c", "p", "invalid", False, 1.0, -math.inf, None, (), False)
    assert result_from_dict(json.loads(json.dumps(result_to_dict(invalid)))) == invalid


@pytest.mark.parametrize("stop", ["before events", "before observe", "before done", "none"])
def test_replay_delivers_what_a_kill_left_exactly_once(tmp_path: Path, stop: str) -> None:
    db, log = tmp_path / "programs.sqlite3", tmp_path / "events.jsonl"
    observed: list[int] = []
    store, events = ProgramStore(db), EventLog(log)
    outbox = Outbox(store, events, inline(lambda r: observed.append(r.attempt)))
    for attempt in range(2):
        outbox.deliver(_commit(store, outbox, attempt))
    entry = _commit(store, outbox, 2)
    if stop == "before events":
        pass  # committed, nothing delivered
    elif stop == "before observe":
        events.emit_all(list(entry["events"]))  # type: ignore[arg-type]
    elif stop == "before done":
        events.emit_all(list(entry["events"]))  # type: ignore[arg-type]
        observed.append(2)
    else:
        outbox.deliver(entry)
    store.close()

    store = ProgramStore(db)  # the next session
    outbox = Outbox(store, EventLog(log), inline(lambda r: observed.append(r.attempt)))
    replayed = outbox.replay()
    assert replayed == ([] if stop == "none" else [2])
    assert store.outbox_entries() == []
    # observed again when the kill came after the observation: the memory's steps are
    # idempotent (tests/memory/test_observe_replay.py), the outbox cannot tell
    assert observed == [0, 1, 2] + ([2] if stop == "before done" else [])
    assert _events(log) == [(k, a) for a in range(3) for k in ("archive", "mutant")]
    store.close()


def test_a_kill_inside_the_observation_is_finished_on_replay(tmp_path: Path) -> None:
    db, log = tmp_path / "programs.sqlite3", tmp_path / "events.jsonl"
    store = ProgramStore(db)

    def dies(r: MutationResult) -> None:
        raise Killed

    outbox = Outbox(store, EventLog(log), inline(dies))
    with pytest.raises(Killed):
        outbox.deliver(_commit(store, outbox, 0))
    store.close()
    store = ProgramStore(db)
    observed: list[MutationResult] = []
    assert Outbox(store, EventLog(log), inline(observed.append)).replay() == [0]
    assert observed == [_result(0)]
    assert _events(log) == [("archive", 0), ("mutant", 0)]
    store.close()


def test_an_entry_stays_until_the_memory_thread_has_observed(tmp_path: Path) -> None:
    """Arrival order observes on the memory lane, later: a kill before the lane ran loses
    nothing, because the entry is dropped only once the observation is done."""
    from gigaevo.evolution.memory_lane import MemoryLane

    db, log = tmp_path / "programs.sqlite3", tmp_path / "events.jsonl"
    store = ProgramStore(db)
    release, observed = threading.Event(), []

    class SlowMemory:
        def observe(self, result: MutationResult) -> None:
            release.wait(10)
            observed.append(result.attempt)

    lane = MemoryLane(SlowMemory(), store)  # type: ignore[arg-type]
    outbox = Outbox(store, EventLog(log), lane.observe)
    outbox.deliver(_commit(store, outbox, 0))
    assert [e["key"] for e in store.outbox_entries()] == [0]  # queued, not yet observed
    # a kill now: the next session finds the entry and observes it (events not doubled)
    other = ProgramStore(db)
    again: list[int] = []
    assert Outbox(other, EventLog(log), inline(lambda r: again.append(r.attempt))).replay() == [0]
    assert again == [0] and other.outbox_entries() == []
    other.close()
    # the first session's lane finishes: its entry was already dropped by the replay
    release.set()
    lane.flush()
    lane.close()
    assert observed == [0] and store.outbox_entries() == []
    assert _events(log) == [("archive", 0), ("mutant", 0)]
    store.close()


def test_a_fatal_memory_error_keeps_the_entry_for_the_next_resume(tmp_path: Path) -> None:
    from gigaevo.evolution.memory_lane import MemoryLane
    from gigaevo.memory.base import MemoryUsageError

    store = ProgramStore(tmp_path / "programs.sqlite3")

    class BrokenBank:
        def observe(self, result: MutationResult) -> None:
            raise MemoryUsageError("cards.json: not a card bank")

    lane = MemoryLane(BrokenBank(), store)  # type: ignore[arg-type]
    outbox = Outbox(store, EventLog(tmp_path / "events.jsonl"), lane.observe)
    outbox.deliver(_commit(store, outbox, 0))
    lane.close()
    assert lane.fatal is not None
    assert outbox.replay(events_only=True) == [0]  # the engine's stop path: events only
    assert [e["key"] for e in store.outbox_entries()] == [0]
    store.close()


def test_entries_replay_in_commit_order_not_attempt_order(tmp_path: Path) -> None:
    store = ProgramStore(tmp_path / "programs.sqlite3")
    outbox = Outbox(store, EventLog(tmp_path / "events.jsonl"), inline(lambda r: None))
    for attempt in (5, 3, 4):  # arrival order commits out of attempt order
        _commit(store, outbox, attempt)
    assert [e["key"] for e in store.outbox_entries()] == [5, 3, 4]
    store.close()


def test_events_emitted_while_collecting_are_written_together_later(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.emit("resume", attempt=-1)
    with log.collecting() as batch:
        log.emit("archive", attempt=0)
        log.emit("mutant", attempt=0)
    assert _events(log.path) == [("resume", -1)]
    marker = {"event": "mutant", "attempt": 0}
    assert not log.holds(marker, since=0)
    offset = log.size()
    log.emit_all(batch)
    assert _events(log.path) == [("resume", -1), ("archive", 0), ("mutant", 0)]
    assert log.holds(marker, since=offset) and not log.holds(marker, since=log.size())
    assert not log.holds({"event": "mutant", "attempt": 1}, since=offset)
