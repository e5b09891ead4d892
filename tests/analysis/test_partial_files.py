"""A missing, torn or damaged file loads what is there and says what is missing."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from gigaevo.analysis import PartialRunWarning, load_events, load_run, load_write_ledger
from gigaevo.analysis.run import CORE_FILES
from gigaevo.evolution.store import ProgramStore


def _tear_last_line(path: Path) -> int:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    return len(lines)


def test_a_torn_last_line_is_skipped_with_a_warning(
    plain_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(plain_run)
    n = _tear_last_line(run_dir / "events.jsonl")
    with pytest.warns(PartialRunWarning, match="events.jsonl"):
        events = load_events(run_dir)
    assert len(events) == n - 1
    run = load_run(run_dir)
    assert len(run.events) == n - 1
    assert any("events.jsonl" in w for w in run.warnings)


def test_a_run_without_summary_is_reported_missing_not_failed(
    plain_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(plain_run)
    (run_dir / "summary.json").unlink()
    run = load_run(run_dir)
    assert run.missing == ["summary.json"]
    assert run.summary.empty and not run.finished
    assert run.higher_is_better is False  # from the problem's own files
    assert run.best_id is not None  # from the store's last checkpoint
    assert len(run.best_so_far()) > 0


def test_an_empty_directory_gives_empty_frames(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = load_run(tmp_path)
    assert run.missing == list(CORE_FILES)
    assert run.programs.empty and "fitness" in run.programs.columns
    assert run.events.empty and run.archive.empty and run.cards.empty
    assert run.best_so_far().empty and run.best_id is None


def test_a_damaged_store_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "programs.sqlite3").write_bytes(b"not a database at all" * 100)
    run = load_run(tmp_path)
    assert run.programs.empty
    assert any("programs.sqlite3" in w for w in run.warnings)


def test_a_damaged_bank_and_torn_ledger_load_what_is_there(
    memory_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(memory_run)
    n = _tear_last_line(run_dir / "write_ledger.jsonl")
    (run_dir / "cards.json").write_text('{"format": "gigaevo.cards/1", "cards": [')
    (run_dir / "memory_stats.json").unlink()
    with pytest.warns(PartialRunWarning):
        assert len(load_write_ledger(run_dir)) == n - 1
    run = load_run(run_dir)
    assert run.cards.empty
    assert "memory_stats.json" in run.missing
    assert any("cards.json" in w for w in run.warnings)


def test_not_a_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_run(tmp_path / "nope")


def test_a_store_open_in_a_writer_is_read(plain_run: Path, copy_of: Callable[[Path], Path]) -> None:
    run_dir = copy_of(plain_run)
    n = len(load_run(run_dir).programs)
    writer = ProgramStore(run_dir / "programs.sqlite3")  # WAL mode, as a live run holds it
    try:
        writer.set_meta("probe", 1)
        run = load_run(run_dir)
    finally:
        writer.close()
    assert len(run.programs) == n and run.meta["probe"] == 1 and run.warnings == []
