"""``call_before``: answers within the budget, gives up after it, reuses its worker thread."""

from __future__ import annotations

import threading

import pytest

from gigaevo.memory.v2.errors import IngestTimeout
from gigaevo.memory.v2.write.deadline import Deadline, call_before


def test_calls_reuse_one_worker_thread() -> None:
    idents = {call_before(Deadline(5), threading.get_ident, "t") for _ in range(20)}
    assert len(idents) == 1 and threading.get_ident() not in idents


def test_an_error_reaches_the_caller_and_the_worker_stays_usable() -> None:
    def boom() -> None:
        raise ValueError("bad answer")

    with pytest.raises(ValueError, match="bad answer"):
        call_before(Deadline(5), boom, "t")
    assert call_before(Deadline(5), lambda: 7, "t") == 7


def test_an_overrun_is_abandoned_and_its_worker_is_not_reused() -> None:
    release = threading.Event()
    slow_ident: list[int] = []
    finished: list[str] = []

    def slow() -> str:
        slow_ident.append(threading.get_ident())
        release.wait(600)
        finished.append("late")
        return "late"

    with pytest.raises(IngestTimeout, match=r"within the 0\.2s"):
        call_before(Deadline(0.2), slow, "slow")
    # the caller was let go while slow() still waits (it ends only when released below):
    # the deadline cut it, whatever the machine's load (no wall-clock bound)
    assert not finished and slow_ident
    # the next call does not wait behind the abandoned one, on another thread
    assert call_before(Deadline(5), threading.get_ident, "t") != slow_ident[0]
    release.set()


def test_a_spent_budget_calls_nothing() -> None:
    called = []
    with pytest.raises(IngestTimeout, match="already spent"):
        call_before(Deadline(0), lambda: called.append(1), "t")
    assert called == []
