"""CardBankMemory (memory=v2): abstaining decide, cadences, strict validity, the stats file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gigaevo.memory.base import MutationContext
from gigaevo.memory.v2 import (
    STATS_FILE,
    CardBankMemory,
    CorruptBankError,
    HashingEmbedder,
    MemoryConfigError,
    read_bank,
    read_ledger,
)
from tests.memory.helpers import memory_provider, result, runtime

provider = memory_provider


def context(attempt: int) -> MutationContext:
    return MutationContext("toy", attempt, "p", 1.0, 0, (0,), (0.5,), 0.0)


def insight_rows(tmp_path: Path) -> list:
    return [r for r in read_ledger(tmp_path / "run" / "write_ledger.jsonl") if r.item == "insight"]


def mixed_results() -> list:
    return [
        result(0, scope="f1"),
        result(1, valid=False, status="invalid"),
        replace(result(2), status="duplicate", valid=False, normalised_gain=None),
        result(3, scope="f1"),
        result(4, gain=-0.01, status="rejected", archive_status="rejected"),
        result(5, scope="f2"),
    ]


def test_decide_abstains_until_the_read_side_lands(tmp_path: Path) -> None:
    memory = provider(tmp_path)
    decision = memory.decide(context(7))
    assert decision.attempt == 7 and decision.slate == "" and decision.card_ids == ()
    assert decision.record["action"] == "abstain"


def test_live_cadence_ingests_strictly_valid_outcomes_as_they_arrive(tmp_path: Path) -> None:
    memory = provider(tmp_path)
    for r in mixed_results():
        memory.observe(r)
    assert [r.attempt for r in insight_rows(tmp_path)] == [0, 3, 4, 5]
    memory.close()
    memory.close()  # idempotent
    stats = json.loads((tmp_path / "run" / STATS_FILE).read_text())
    assert stats["outcomes_observed"] == 6 and stats["outcomes_strictly_valid"] == 4
    assert stats["outcomes_ingested"] == 4 and stats["outcomes_pending"] == 0
    assert sum(stats["ledger"]["insight"].values()) == 4
    assert stats["ledger"]["insight"]["updated"] == 1
    assert stats["bank"]["n_cards_this_task"]["insight"] == 2
    assert stats["duplicate_audit"]["residual_duplicate_rate"] == 0.0
    assert stats["decide"].endswith("the provider abstains")
    header = read_bank(tmp_path / "run" / "cards.json").header
    assert header.n_cards == stats["bank"]["n_cards"]


def test_end_of_run_cadence_ingests_at_close(tmp_path: Path) -> None:
    memory = provider(tmp_path, cadence="end_of_run")
    for r in mixed_results():
        memory.observe(r)
    assert insight_rows(tmp_path) == []
    memory.close()
    assert [r.attempt for r in insight_rows(tmp_path)] == [0, 3, 4, 5]


def test_no_write_cadence_writes_nothing(tmp_path: Path) -> None:
    memory = provider(tmp_path, cadence="none")
    for r in mixed_results():
        memory.observe(r)
    memory.close()
    assert not (tmp_path / "run" / "cards.json").exists()
    assert insight_rows(tmp_path) == []
    stats = json.loads((tmp_path / "run" / STATS_FILE).read_text())
    assert stats["outcomes_strictly_valid"] == 4 and stats["outcomes_ingested"] == 0


def test_authoring_disabled_builds_no_agents(tmp_path: Path) -> None:
    memory = provider(tmp_path, writer={"authoring_enabled": False})
    memory.observe(result(0))
    memory.close()
    assert memory.librarian is None and insight_rows(tmp_path) == []


def test_a_corrupt_bank_refuses_to_start(tmp_path: Path) -> None:
    bank = tmp_path / "run" / "cards.json"
    bank.parent.mkdir(parents=True)
    bank.write_text('{"format": "gigaevo.cards/1", "cards": [')
    with pytest.raises(CorruptBankError):
        provider(tmp_path)
    assert bank.read_text() == '{"format": "gigaevo.cards/1", "cards": ['


def test_a_bank_corrupted_mid_run_stops_observe_and_close_writes_stats(tmp_path: Path) -> None:
    memory = provider(tmp_path)
    memory.observe(result(0))
    bank = tmp_path / "run" / "cards.json"
    bank.write_text("garbage")
    with pytest.raises(CorruptBankError):
        memory.observe(result(1, scope="f4"))
    memory.close()
    stats = json.loads((tmp_path / "run" / STATS_FILE).read_text())
    assert "not a readable card bank" in stats["bank"]["error"]
    assert bank.read_text() == "garbage"


def test_settings_are_validated_at_construction(tmp_path: Path) -> None:
    with pytest.raises(MemoryConfigError, match=r"unknown key 'max_ingest_attempt'"):
        provider(tmp_path, writer={"max_ingest_attempt": 3})
    with pytest.raises(MemoryConfigError, match=r"memory\.llm must be set"):
        CardBankMemory(runtime(tmp_path), llm=None, embedder=HashingEmbedder())
