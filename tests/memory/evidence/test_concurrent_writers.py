"""Two real processes writing one ledger through BEGIN IMMEDIATE lose nothing."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

from gigaevo.memory.v2.evidence import SelectionEvidence
from tests.memory.evidence.workers import write_attempts

N = 40


def test_two_writer_processes_lose_nothing(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    SelectionEvidence(tmp_path).open().close()  # create the schema once
    start = ctx.Event()
    procs = [
        ctx.Process(target=write_attempts, args=(str(tmp_path), run, N, start))
        for run in ("run-a", "run-b")
    ]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    ledger = SelectionEvidence(tmp_path).open()
    assert len(ledger.decisions()) == 2 * N
    assert len(ledger.terminals()) == 2 * N
    assert ledger.open_decisions() == ()
    assert sorted(e.ordinal for e in ledger.edges(island=0)) == list(range(1, 2 * N + 1))
    assert len(ledger.head_rows("immediate")) == 2 * N
    assert ledger.verify() == 6 * N
