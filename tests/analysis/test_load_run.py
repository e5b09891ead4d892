"""load_run and the per-file loaders on real finished runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from gigaevo.analysis import (
    lineage,
    load_archive,
    load_cards,
    load_events,
    load_programs,
    load_run,
    load_write_ledger,
)
from gigaevo.analysis.programs import MUTATION_FIELDS, PROGRAM_COLUMNS


def test_programs_have_one_row_per_program_with_flattened_fields(plain_run: Path) -> None:
    run = load_run(plain_run)
    df = run.programs
    assert list(df.columns[: len(PROGRAM_COLUMNS)]) == PROGRAM_COLUMNS
    assert {f"mutation.{f}" for f in MUTATION_FIELDS} <= set(df.columns)
    assert "metric.rastrigin_value" in df.columns
    mutants = df[df.status != "initial"]
    assert len(mutants) == run.summary["n_mutants"] == 12
    assert list(mutants.mutant) == list(range(1, 13))
    assert (df[df.status == "initial"].mutant == 0).all()
    assert mutants.valid.sum() == run.summary["n_valid"]
    assert df.ordinal.is_monotonic_increasing


def test_best_so_far_ends_at_the_summary_best(plain_run: Path) -> None:
    run = load_run(plain_run)
    assert run.finished and run.missing == [] and run.warnings == []
    assert run.higher_is_better is False  # rastrigin is minimised
    curve = run.best_so_far()
    assert curve.best.is_monotonic_decreasing
    assert curve.best.iloc[-1] == pytest.approx(run.summary["best_fitness"])


def test_archive_holds_stored_programs_and_lineage_reaches_an_initial_one(
    plain_run: Path,
) -> None:
    run = load_run(plain_run)
    archive = load_archive(plain_run)
    assert len(archive) > 0 and set(archive.island) <= {0, 1}
    assert set(archive.program_id) <= set(run.programs.id)
    chain = lineage(run.programs, run.best_id or "")
    assert chain.id.iloc[0] == run.best_id
    assert chain.status.iloc[-1] == "initial"
    assert list(chain.depth) == list(range(len(chain)))
    assert list(chain.generation) == sorted(chain.generation, reverse=True)
    assert lineage(run.programs, "no-such-id").empty


def test_events_match_the_store(plain_run: Path) -> None:
    events = load_events(plain_run)
    assert (events.event == "mutant").sum() == 12
    assert events.elapsed_s.iloc[0] == 0 and events.seq.tolist() == list(range(len(events)))
    assert set(events.program_id.dropna()) <= set(load_programs(plain_run).id)


def test_overrides_are_typed(plain_run: Path) -> None:
    run = load_run(plain_run)
    assert run.overrides["max_mutants"] == 12
    assert run.overrides["problem"] == "rastrigin"


def test_memory_run_loads_cards_and_ledger(memory_run: Path) -> None:
    run = load_run(memory_run)
    assert run.missing == []
    cards, ledger = load_cards(memory_run), load_write_ledger(memory_run)
    assert len(cards) == cards.attrs["header"]["n_cards"] > 0
    assert set(cards.kind) <= {"insight", "program"}
    insight_rows = ledger[ledger["item"] == "insight"]
    assert len(insight_rows) == run.memory_stats["outcomes_ingested"]
    assert "candidate.description" in ledger.columns and "candidate" not in ledger.columns
    assert set(run.card_evidence.card_id) <= set(cards.id)
    # use trials live in the journal beside cards.json: every stamp is counted on its card
    stamps = (memory_run / "cards.trials.jsonl").read_text().splitlines()
    assert len(stamps) > 0 and cards.n_use_trials.sum() == len(stamps)
