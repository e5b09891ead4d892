"""The librarian: DROP / NEW / EQUIVALENT, tombstones, fail-open, retries, the chain timeout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gigaevo.memory.v2 import Librarian, read_ledger, writer_outcome
from tests.memory.fakes import ScriptedMemoryLLM, fixed_card
from tests.memory.helpers import METRICS, librarian, result


def ingest(lib: Librarian, *results: object, final: bool = False) -> None:
    for r in results:
        lib.submit(writer_outcome(r, METRICS))  # type: ignore[arg-type]
        lib.drain(final=final)


def insights(lib: Librarian) -> int:
    return len(lib.store.cards(kind="insight"))


def rows(tmp_path: Path, item: str = "insight") -> list:
    return [r for r in read_ledger(tmp_path / "write_ledger.jsonl") if r.item == item]


def test_drop_is_ledgered_as_discarded_and_banks_nothing(lib: Librarian, tmp_path: Path) -> None:
    ingest(lib, result(0, gain=-0.02, archive_status="rejected", status="rejected"))
    (row,) = rows(tmp_path)
    assert row.outcome == "discarded" and row.reason.startswith("author_drop")
    assert insights(lib) == 0


def test_new_card_is_admitted_with_provenance_evidence_and_lineage(
    lib: Librarian, tmp_path: Path
) -> None:
    ingest(lib, result(0, scope="f3", cited=("ins-earlier",)))
    (row,) = rows(tmp_path)
    assert row.outcome == "added" and row.judge is None and row.neighbour_ids == ()
    card = lib.store.get(row.card_id or "")
    assert card is not None and card.kind == "insight" and card.task_key == "toy"
    assert "(tactic: perturb_constants)" in card.description and "`f3`" in card.description
    assert card.provenance == ("parent-0", "child-0") and card.derived_from == ("ins-earlier",)
    assert card.evidence[0].normalised_gain == pytest.approx(0.05)
    assert card.created_by == "run-test" and card.revision == 1


def test_equivalent_candidate_pools_into_the_banked_card(lib: Librarian, tmp_path: Path) -> None:
    ingest(lib, result(0, scope="f1"), result(1, scope="f1"), result(2, scope="f2"))
    added, updated, other = rows(tmp_path)
    assert (added.outcome, updated.outcome, other.outcome) == ("added", "updated", "added")
    assert updated.judge == "EQUIVALENT" and updated.card_id == added.card_id
    assert updated.reason == "evidence_pooled" and updated.candidate is not None
    card = lib.store.get(added.card_id or "")
    assert card is not None and card.n_evidence == 2 and card.revision == 2
    assert added.candidate is not None and card.description == added.candidate.description
    assert "child-1" in card.provenance
    assert other.judge == "NEW" and added.card_id in other.neighbour_ids


def test_tombstoned_payload_is_rejected_and_retirement_is_ledgered(
    bank: Path, tmp_path: Path
) -> None:
    llm = ScriptedMemoryLLM({"card_author": fixed_card("When C holds, try A because M.")})
    lib = librarian(bank, tmp_path / "write_ledger.jsonl", llm=llm)
    ingest(lib, result(0))
    (added,) = rows(tmp_path)
    assert lib.retire([added.card_id or "", "ins-gone"], "causal retirement") == [added.card_id]
    assert lib.tombstones.is_retired_id(added.card_id or "")
    ingest(lib, result(1))
    assert rows(tmp_path)[-1].outcome == "rejected_retired"
    (retired,) = rows(tmp_path, "card")
    assert retired.outcome == "retired" and retired.card_id == added.card_id
    assert insights(lib) == 0


@pytest.mark.parametrize("failure", ["garbage", "raise", ("sleep", 1.0)])
def test_judge_failure_fails_open_to_new_and_is_counted(
    bank: Path, tmp_path: Path, failure: object
) -> None:
    llm = ScriptedMemoryLLM({"equivalence_judge": failure})
    lib = librarian(
        bank, tmp_path / "write_ledger.jsonl", llm=llm, writer={"ingest_call_timeout_s": 0.5}
    )
    ingest(lib, result(0, scope="f1"), result(1, scope="f1"))
    _, second = rows(tmp_path)
    assert second.outcome == "added" and second.fail_open == "judge" and second.judge is None
    assert lib.counters.fail_open_judge == 1 and insights(lib) == 2


def test_retrieval_failure_fails_open_to_new(
    lib: Librarian, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ingest(lib, result(0, scope="f1"))

    def broken(*args: object, **kwargs: object) -> list:
        raise RuntimeError("index unavailable")

    monkeypatch.setattr(lib.store, "search", broken)
    ingest(lib, result(1, scope="f1"))
    assert rows(tmp_path)[-1].fail_open == "retrieval"
    assert lib.counters.fail_open_retrieval == 1 and insights(lib) == 2


@pytest.mark.parametrize("failure", ["garbage", "raise"])
def test_author_failure_is_retried_then_dropped_for_the_run(
    bank: Path, tmp_path: Path, failure: str
) -> None:
    llm = ScriptedMemoryLLM({"card_author": failure})
    lib = librarian(bank, tmp_path / "write_ledger.jsonl", llm=llm, writer={"llm_max_attempts": 1})
    ingest(lib, result(0))
    assert rows(tmp_path) == [] and lib.pending == 1  # retried at the next drain
    ingest(lib, result(1))
    ingest(lib, result(2))
    exhausted = [r for r in rows(tmp_path) if r.attempt == 0]
    assert len(exhausted) == 1 and exhausted[0].outcome == "discarded"
    assert exhausted[0].reason.startswith("attempts_exhausted")
    assert exhausted[0].ingest_attempts == 3
    lib.drain(final=True)
    assert len(rows(tmp_path)) == 3 and lib.pending == 0
    assert llm.calls["card_author"] == 9 and insights(lib) == 0  # raw notes never banked


def test_the_timeout_bounds_the_whole_chain(bank: Path, tmp_path: Path) -> None:
    llm = ScriptedMemoryLLM({"card_author": ("sleep", 2.0)})
    lib = librarian(
        bank,
        tmp_path / "write_ledger.jsonl",
        llm=llm,
        writer={"ingest_call_timeout_s": 0.2, "max_ingest_attempts": 2},
    )
    # the bank's embedder imports sklearn on first use (seconds on a loaded machine), when the
    # discarded row is written: not part of the chain under test
    import sklearn.feature_extraction.text  # noqa: F401

    started = time.monotonic()
    ingest(lib, result(0), final=True)
    # two attempts cut at 0.2 s each; uncut they would take 2 x 2.0 s (loose for a loaded machine)
    assert time.monotonic() - started < 3.5
    (row,) = rows(tmp_path)
    assert row.outcome == "discarded" and "IngestTimeout" in row.reason


def test_a_card_that_copies_the_change_report_is_refused(bank: Path, tmp_path: Path) -> None:
    note = "tactic: perturb_constants - line 3: 1.0 -> 1.25"
    llm = ScriptedMemoryLLM({"card_author": fixed_card(f"When asked, {note} and more.")})
    lib = librarian(bank, tmp_path / "write_ledger.jsonl", llm=llm)
    ingest(lib, result(0), final=True)
    (row,) = rows(tmp_path)
    assert row.outcome == "discarded" and "raw mutation note" in row.reason
    assert insights(lib) == 0


def test_a_held_authoring_lock_delays_the_ingest(bank: Path, tmp_path: Path) -> None:
    from tests.memory.helpers import open_store

    lib = librarian(
        bank,
        tmp_path / "write_ledger.jsonl",
        writer={"ingest_call_timeout_s": 0.3},
        exemplars={"enabled": False},
    )
    other = open_store(bank)
    with other.authoring():
        ingest(lib, result(0))
        assert rows(tmp_path) == [] and lib.counters.failed_attempts == 1
    lib.drain()
    assert [r.outcome for r in rows(tmp_path)] == ["added"]


def test_every_row_is_a_valid_ledger_record(lib: Librarian, tmp_path: Path) -> None:
    outcomes = [result(i, scope=f"f{i % 3}", gain=0.05 if i % 4 else -0.01) for i in range(12)]
    ingest(lib, *outcomes)
    insight = rows(tmp_path)
    assert len(insight) == 12 == lib.counters.ingested_insights
    assert {r.outcome for r in insight} <= {"added", "updated", "discarded"}
    assert all(r.time.endswith("Z") and r.ts > 0 and r.run_id == "run-test" for r in insight)


def test_retirement_rechecks_the_newest_revision_inside_the_transaction(
    lib: Librarian, tmp_path: Path
) -> None:
    ingest(lib, result(0, scope="f1"), result(1, scope="f2"))
    first, second = (r.card_id or "" for r in rows(tmp_path))
    removed = lib.retire([first, second], "causal", still_retirable=lambda c: c.id == first)
    assert removed == [first] and second in lib.store and first not in lib.store


def test_an_interrupted_drain_keeps_the_item_queued(
    lib: Librarian, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"n": 0}
    real = lib.author.insight

    def interrupted(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(lib.author, "insight", interrupted)
    lib.submit(writer_outcome(result(0), METRICS))
    with pytest.raises(KeyboardInterrupt):
        lib.drain()
    assert lib.pending == 2  # the insight and its exemplar
    lib.drain(final=True)
    assert [r.outcome for r in rows(tmp_path)] == ["added"] and lib.pending == 0
