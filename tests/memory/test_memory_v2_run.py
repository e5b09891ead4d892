"""End to end: ``run.py memory=v2`` fills the bank and the write ledger, and refuses bad banks."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from gigaevo.memory.v2 import STATS_FILE, read_bank, read_ledger
from tests.conftest import run_py


def _valid_mutants(run: Path) -> set[str]:
    con = sqlite3.connect(run / "programs.sqlite3")
    rows = [json.loads(d) for (d,) in con.execute("SELECT data FROM programs")]
    con.close()
    return {r["id"] for r in rows if r["status"] in ("accepted", "rejected")}


@pytest.mark.slow
def test_a_memory_v2_run_fills_the_bank_and_the_ledger(tmp_path: Path) -> None:
    run = tmp_path / "run"
    code, _, err = run_py(
        "memory=v2",
        "problem=rastrigin",
        "max_mutants=40",
        f"checkpoint_dir={run}",
        "progress=false",
        cwd=tmp_path,
    )
    assert code == 0, err
    valid = _valid_mutants(run)
    stats = json.loads((run / STATS_FILE).read_text())
    rows = read_ledger(run / "write_ledger.jsonl")
    insight = [r for r in rows if r.item == "insight"]
    # one row per strictly valid outcome, and the counts add up
    assert {r.child_id for r in insight} == valid
    assert len(insight) == stats["outcomes_ingested"] == stats["outcomes_strictly_valid"]
    assert sum(stats["ledger"]["insight"].values()) == len(insight)
    loaded = read_bank(run / "cards.json")
    assert loaded.cards and loaded.header.n_cards == len(loaded.cards) == stats["bank"]["n_cards"]
    added = {r.card_id for r in rows if r.outcome == "added"}
    assert added == {c.id for c in loaded.cards}
    pooled = sum(1 for r in rows if r.outcome in ("added", "updated"))
    assert sum(c.n_evidence for c in loaded.cards) == pooled
    for card in loaded.cards:
        assert card.task_key == "rastrigin" and card.description.startswith("When ")
        assert "(tactic: " in card.description and card.explanation_summary
        assert set(card.provenance) - {r.parent_id for r in insight} <= valid
    assert stats["duplicate_audit"]["residual_duplicate_rate"] == 0.0


def test_a_corrupt_bank_exits_2_with_one_line_and_stays_untouched(tmp_path: Path) -> None:
    bank = tmp_path / "bank"
    bank.mkdir()
    (bank / "cards.json").write_text('{"format": "gigaevo.cards/1", "cards": [')
    code, _, err = run_py(
        "memory=v2",
        "problem=rastrigin",
        "max_mutants=2",
        f"checkpoint_dir={tmp_path / 'run'}",
        f"memory_bank_dir={bank}",
        "progress=false",
        cwd=tmp_path,
    )
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "cards.json is not a readable card bank" in last
    assert (bank / "cards.json").read_text() == '{"format": "gigaevo.cards/1", "cards": ['


def test_an_inconsistent_setting_exits_2(tmp_path: Path) -> None:
    code, _, err = run_py(
        "memory=v2",
        "problem=rastrigin",
        f"checkpoint_dir={tmp_path / 'run'}",
        "memory.writer.ingest_call_timeout_s=900",
        cwd=tmp_path,
    )
    assert code == 2
    assert (
        err.strip().splitlines()[-1].startswith("error: memory.store.authoring_lock_timeout_s=300")
    )
