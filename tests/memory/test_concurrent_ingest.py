"""Real processes ingesting into one bank at once lose no card and corrupt nothing."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import pytest

from gigaevo.llm.offline_memory import card_key
from gigaevo.memory.v2 import read_bank, read_ledger
from tests.memory.workers import ingest_worker


def _plans(n_procs: int, per_proc: int) -> list[list[tuple[int, int, int]]]:
    rng = np.random.default_rng(n_procs)
    # 4 tactics x 4 functions = 16 treatments shared by all processes: cross-process equivalents
    return [
        [(a, int(rng.integers(4)), int(rng.integers(4))) for a in range(per_proc)]
        for _ in range(n_procs)
    ]


def _run(tmp_path: Path, n_procs: int, per_proc: int) -> None:
    bank = tmp_path / "bank"
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(n_procs)  # released once every process has imported faiss and sklearn
    procs = [
        ctx.Process(
            target=ingest_worker,
            args=(str(bank), str(tmp_path / f"ledger{i}.jsonl"), f"run-{i}", plan, start),
        )
        for i, plan in enumerate(_plans(n_procs, per_proc))
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    rows = [r for i in range(n_procs) for r in read_ledger(tmp_path / f"ledger{i}.jsonl")]
    insight = [r for r in rows if r.item == "insight"]
    assert len(insight) == n_procs * per_proc  # one row per outcome in every process
    loaded = read_bank(bank / "cards.json")  # parses: nothing corrupt
    by_id = {c.id: c for c in loaded.cards}
    cards = [c for c in loaded.cards if c.kind == "insight"]
    added = [r.card_id for r in insight if r.outcome == "added"]
    updated = [r for r in insight if r.outcome == "updated"]
    assert set(added) == {c.id for c in cards}  # no admitted card lost
    assert all(r.card_id in by_id for r in updated)
    # every pooled outcome is on its card: no lost update under contention
    assert sum(c.n_evidence for c in cards) == len(added) + len(updated)
    # the authoring lock serialised retrieve -> judge -> admit: no duplicate treatment
    keys = [card_key("insight", c.description) for c in cards]
    assert len(keys) == len(set(keys))
    assert len({r.run_id for r in updated}) > 1  # pooling crossed processes
    families = [c for c in loaded.cards if c.kind == "program"]
    assert len(families) == 1 and families[0].n_evidence == sum(
        1 for r in rows if r.item == "program" and r.outcome in ("added", "updated")
    )
    assert loaded.header.generation == sum(
        1 for r in rows if r.outcome in ("added", "updated") and r.item != "card"
    )


def test_two_processes_ingest_into_one_bank(tmp_path: Path) -> None:
    _run(tmp_path, n_procs=2, per_proc=12)


@pytest.mark.slow
def test_four_processes_ingest_into_one_bank(tmp_path: Path) -> None:
    _run(tmp_path, n_procs=4, per_proc=15)
