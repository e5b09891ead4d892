"""The memory lane: one thread, calls in the order asked, dispatches stored, errors contained."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gigaevo.evolution.memory_lane import MemoryLane
from gigaevo.evolution.records import Dispatch
from gigaevo.evolution.store import ProgramStore
from gigaevo.memory.base import Decision, MemoryUsageError, MutationContext, MutationResult


class _Recorder:
    """A memory that logs its calls (and the thread of each) and fails where told."""

    def __init__(self, fail_decide: int = -1, fatal_observe: int = -1) -> None:
        self.calls: list[tuple[str, int]] = []
        self.threads: set[str] = set()
        self.fail_decide = fail_decide
        self.fatal_observe = fatal_observe

    def decide(self, context: MutationContext) -> Decision:
        self.calls.append(("decide", context.attempt))
        self.threads.add(threading.current_thread().name)
        if context.attempt == self.fail_decide:
            raise ZeroDivisionError("division by zero")
        return Decision(
            attempt=context.attempt, slate=f"card for {context.attempt}", card_ids=("c1",)
        )

    def observe(self, result: MutationResult) -> None:
        self.calls.append(("observe", result.attempt))
        self.threads.add(threading.current_thread().name)
        if result.attempt == self.fatal_observe:
            raise MemoryUsageError("cards.json: not a card bank")

    def close(self) -> None:
        return None


def _context(attempt: int) -> MutationContext:
    return MutationContext("task", attempt, "p0", 1.0, 0, (0,), (0.5,), 0.0)


def _skeleton(attempt: int) -> Dispatch:
    return Dispatch(attempt, 0, "p0", (), seed=100 + attempt)


def _result(attempt: int) -> MutationResult:
    return MutationResult(attempt, f"c{attempt}", "p0", "rejected", True, 1.0, 1.0, 0.0, (), False)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ProgramStore]:
    s = ProgramStore(tmp_path / "programs.sqlite3")
    yield s
    s.close()


def test_calls_run_in_order_on_one_thread_and_dispatches_are_stored(store: ProgramStore) -> None:
    memory = _Recorder(fail_decide=2)
    lane = MemoryLane(memory, store)
    futures = [lane.decide(_context(a), _skeleton(a)) for a in range(3)]
    lane.observe(_result(0))
    futures.append(lane.decide(_context(3), _skeleton(3)))
    lane.flush()
    assert memory.calls == [
        ("decide", 0),
        ("decide", 1),
        ("decide", 2),
        ("observe", 0),
        ("decide", 3),
    ]
    assert len(memory.threads) == 1 and threading.current_thread().name not in memory.threads
    stored = store.pending_dispatches()
    assert stored == [f.result() for f in futures]
    assert stored[0].slate == "card for 0" and stored[0].card_ids == ("c1",)
    # a decision that raised fails its attempt, before any model call, on replay too
    assert stored[2].failure == "memory decide: ZeroDivisionError: division by zero"
    assert stored[2].slate == "" and stored[2].seed == 102
    lane.close()


def test_observations_wait_for_replayed_attempts_before_them(store: ProgramStore) -> None:
    memory = _Recorder()
    lane = MemoryLane(memory, store)
    lane.expect_replays([3, 5])
    for attempt in (7, 4, 3, 6, 5, 8):  # commit order of an arrival-order resume
        lane.observe(_result(attempt))
    lane.flush()
    # the memory censors an open decision of the dead session once a later attempt is
    # observed: 7 and 4 wait for replayed 3, 6 for replayed 5, and a release sends the
    # replayed attempts first, then the others in commit order
    assert [a for _, a in memory.calls] == [3, 4, 5, 7, 6, 8]
    lane.close()


def test_a_fatal_error_stops_the_lane_and_reaches_the_main_thread(store: ProgramStore) -> None:
    memory = _Recorder(fatal_observe=1)
    lane = MemoryLane(memory, store)
    lane.observe(_result(0))
    lane.observe(_result(1))
    lane.observe(_result(2))  # never made: the lane stopped
    with pytest.raises(MemoryUsageError, match="not a card bank"):
        lane.flush()
    later = lane.decide(_context(3), _skeleton(3))
    with pytest.raises(MemoryUsageError):
        later.result()
    assert memory.calls == [("observe", 0), ("observe", 1)]
    assert store.pending_dispatches() == []
    lane.close()


def test_other_observation_errors_are_counted(store: ProgramStore) -> None:
    class _Flaky(_Recorder):
        def observe(self, result: MutationResult) -> None:
            super().observe(result)
            if result.attempt % 2:
                raise RuntimeError("ledger row rejected")

    lane = MemoryLane(_Flaky(), store)
    for attempt in range(5):
        lane.observe(_result(attempt))
    lane.flush()
    assert lane.take_observe_errors() == 2 and lane.take_observe_errors() == 0
    lane.close()
