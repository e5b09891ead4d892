"""Outcomes lost to a kill are censored once each, with their own attempt (memory-model.md
"Rows and eligibility": a decision whose outcome can never arrive is censored).

A process killed with three decisions open: the next session resumes all three, the engine
re-dispatches the first and then moves past the other two (committed before the kill, never
observed). Both are censored as lost, each exactly once, each released, and each event names
its own attempt; the re-dispatched one terminates normally.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gigaevo.memory.v2.read.events import EVENTS_FILE
from gigaevo.memory.v2.read.outcomes import LOST_OUTCOME
from tests.memory.helpers import memory_provider, result
from tests.memory.test_reader_crash_resume import (
    WORKER,
    context,
    leases,
    one_terminal_each,
)
from tests.memory.test_reader_crash_resume import _killed_worker as _crash_worker

OPEN = 3


def _killed_worker(tmp_path: Path) -> list[dict[str, Any]]:
    """test_reader_crash_resume's worker, killed with ``OPEN`` proposed decisions open."""
    source = WORKER.replace('if o["proposed"]]) < 2', f'if o["proposed"]]) < {OPEN}')
    assert source != WORKER
    return _crash_worker(tmp_path, source)


def test_two_lost_outcomes_are_censored_once_each_with_their_own_attempt(tmp_path: Path) -> None:
    orphans = _killed_worker(tmp_path)
    assert len(orphans) == OPEN and all(o["proposed"] for o in orphans)
    mem = memory_provider(tmp_path, selection="causal")
    assert mem.reader is not None and mem.recorder is not None
    attempts = [o["attempt"] for o in orphans]
    assert sorted(mem.recorder.resumed) == attempts
    first, *lost = attempts
    mem.decide(context(first))
    mem.observe(result(first, scope="f1", gain=0.03))
    assert mem.recorder.stats()["lost_outcomes"] == 0  # nothing is lost before the engine moves
    nxt = attempts[-1] + 1
    mem.decide(context(nxt))
    mem.observe(result(nxt, scope="f2"))
    ev = mem.reader.evidence
    censored = [t for t in ev.terminals() if t.censor_reason == LOST_OUTCOME]
    lost_attempts = sorted(ev.decision(t.decision_id).attempt for t in censored)  # type: ignore[union-attr]
    assert lost_attempts == lost
    assert mem.recorder.stats()["lost_outcomes"] == len(lost)
    assert mem.reader.held == {}
    events = [
        json.loads(line) for line in (tmp_path / "run" / EVENTS_FILE).read_text().splitlines()
    ]
    lost_events = [
        e for e in events if e.get("event") == "outcome" and e.get("censor_reason") == LOST_OUTCOME
    ]
    assert sorted(e["attempt"] for e in lost_events) == lost
    assert {e["decision_id"] for e in lost_events} == {t.decision_id for t in censored}
    mem.close()
    assert leases(tmp_path / "run") == []
    with one_terminal_each(tmp_path / "run") as ledger:
        assert ledger.open_decisions() == ()
