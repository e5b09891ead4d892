"""An outcome observed again after a kill is finished, never ingested twice (issue 15).

A session is "killed" by an exception raised at one instant of the write path
(before the bank write, between the bank write and its ledger rows, between the
rows and dropping the intent, before the librarian's state is saved); the
abandoned provider is never closed, like a process killed with SIGKILL. A new
provider on the same folder then observes the interrupted outcome again and the
rest: the write ledger and the bank must equal those of an uninterrupted run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gigaevo.memory.base import MutationResult
from gigaevo.memory.v2.bank.recordjournal import RecordJournal
from gigaevo.memory.v2.write import ledger as ledger_module
from gigaevo.memory.v2.write.ledger import INTENT_FILE, read_ledger
from gigaevo.memory.v2.write.resume import LibrarianState
from gigaevo.util import atomic as atomic_module
from tests.memory.helpers import memory_provider, result

TACTICS = ("perturb_constants", "change_loop_bounds", "change_operators", "crossover")
_VOLATILE = {"ts", "time", "latency_s", "created_at", "updated_at", "recorded_at"}


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (no close, no retry)."""


def outcomes(n: int) -> list[MutationResult]:
    """Valid outcomes with a few new bests (exemplars) and repeated tactics (pooling)."""
    return [
        result(
            a,
            tactic=TACTICS[a % len(TACTICS)],
            scope=f"f{a % 3}",
            gain=0.02 + 0.01 * (a % 5),
            parent_fitness=5.0 + 0.1 * a,
        )
        for a in range(n)
    ]


def history(run: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ledger rows and the cards, without times."""
    rows = [
        _plain(json.loads(line))
        for line in (run / "write_ledger.jsonl").read_text().split("\n")
        if line
    ]
    cards = json.loads((run / "cards.json").read_text())["cards"]
    return rows, [_plain(c) for c in cards]


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items() if k not in _VOLATILE}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def run_all(tmp_path: Path, results: list[MutationResult]) -> Path:
    memory = memory_provider(tmp_path)
    for r in results:
        memory.observe(r)
    memory.close()
    return tmp_path / "run"


def kill_at(monkeypatch: pytest.MonkeyPatch, point: str, nth: int) -> None:
    """Raise ``Killed`` at the ``nth`` passage through ``point``."""
    seen = {"n": 0}

    def trip() -> None:
        seen["n"] += 1
        if seen["n"] == nth:
            raise Killed(point)

    if point == "bank write":  # the intent is saved, the bank write not yet landed
        real_text = atomic_module.atomic_write_text
        real_line = RecordJournal.append

        def write_text(path: Any, text: str, **kw: Any) -> None:
            if Path(path).name == "cards.json":
                trip()
            real_text(path, text, **kw)

        def append_line(self: RecordJournal, line: str) -> None:  # a run journals its writes
            trip()
            real_line(self, line)

        monkeypatch.setattr("gigaevo.memory.v2.bank.store.atomic_write_text", write_text)
        monkeypatch.setattr(RecordJournal, "append", append_line)
    elif point == "rows":  # cards.json replaced, the rows not appended
        real_append = ledger_module.WriteLedger.append

        def append(self: Any, row: Any) -> None:
            trip()
            real_append(self, row)

        monkeypatch.setattr(ledger_module.WriteLedger, "append", append)
    elif point == "intent drop":  # the rows appended, the intent still there
        real_commit = ledger_module.WriteLedger.commit

        def commit(self: Any, rows: Any) -> None:
            for row in rows:
                self.append(row)
            if rows and self.intent_path.exists():
                trip()
            real_commit(self, [])

        monkeypatch.setattr(ledger_module.WriteLedger, "commit", commit)
    else:  # the item is done, the librarian's state not yet saved
        real_save = LibrarianState.save

        def save(self: Any, librarian: Any) -> None:
            trip()
            real_save(self, librarian)

        monkeypatch.setattr(LibrarianState, "save", save)


@pytest.mark.parametrize(
    ("point", "nth"),
    [("bank write", 3), ("rows", 4), ("intent drop", 2), ("state", 5), ("rows", 9)],
)
def test_an_outcome_observed_again_after_a_kill_is_finished_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str, nth: int
) -> None:
    results = outcomes(12)
    expected = history(run_all(tmp_path / "whole", results))

    kill_at(monkeypatch, point, nth)
    first = memory_provider(tmp_path / "killed")
    done = 0
    with pytest.raises(Killed):
        for r in results:
            first.observe(r)
            done += 1
    monkeypatch.undo()  # the "process" is dead: the next one runs the real code
    run = tmp_path / "killed" / "run"
    if point != "state":
        assert (run / INTENT_FILE).exists() or point == "rows"
    second = memory_provider(tmp_path / "killed")
    for r in results[done:]:  # the engine observes the interrupted outcome again
        second.observe(r)
    second.close()
    assert history(run) == expected
    assert not (run / INTENT_FILE).exists()
    ingested = [r.attempt for r in read_ledger(run / "write_ledger.jsonl") if r.item == "insight"]
    assert sorted(ingested) == list(range(len(results)))  # every outcome once
