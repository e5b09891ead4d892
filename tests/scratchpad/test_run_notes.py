"""RunScratchpad's staged API (what the memory uses) and its checkpoint cadence."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig

from gigaevo.pipeline.build import build_run
from gigaevo.scratchpad import (
    DECISIONS,
    FINDINGS,
    HYPOTHESES,
    MissingProvenanceError,
    NoteWriter,
    RunScratchpad,
    Scratchpad,
    ScratchpadSettings,
    UnknownKeyError,
)
from tests.scratchpad.conftest import DAY


def _notes(tmp_path: Path, every: int = 5) -> RunScratchpad:
    settings = ScratchpadSettings(record_every=every)
    return RunScratchpad.open(tmp_path, settings, metric="score", today=lambda: DAY)


def _on_disk(tmp_path: Path) -> set[str]:
    return {e.key for e in Scratchpad(tmp_path / ".agent" / "scratchpad.md").load()}


def test_staged_notes_wait_for_the_next_checkpoint(tmp_path: Path) -> None:
    notes = _notes(tmp_path)
    notes.start_session(resumed=False, n_mutants=0, best_id="p0", best_fitness=1.0, pending={})
    assert _on_disk(tmp_path) == {"best"}
    notes.add_hypothesis("card.c1", "card c1 may help", source="card:c1")
    notes.record_finding("card.c2", "card c2 helps (P=0.97)", source="ledger:c2")
    notes.record_decision("card.c3", "card c3 retired", source="ledger:c3")
    for n in range(1, 5):
        notes.after_commit(n - 1, n, "p0", 1.0)
    assert _on_disk(tmp_path) == {"best"}  # nothing between checkpoints
    notes.after_commit(4, 5, "p7", 0.5)
    assert _on_disk(tmp_path) == {"best", "card.c1", "card.c2", "card.c3"}
    state = notes.state
    assert state.get("card.c1").section == HYPOTHESES  # type: ignore[union-attr]
    assert state.get("card.c2").section == FINDINGS  # type: ignore[union-attr]
    assert state.get("card.c3").section == DECISIONS  # type: ignore[union-attr]
    assert state.get("best").source == "p7"  # type: ignore[union-attr]
    # card notes stay in the file but never reach the prompt: cards reach the
    # mutator only through the memory's randomised offer
    assert "[best]" in notes.prompt_prefix()
    assert "[card." not in notes.prompt_prefix()


def test_prompt_marks_hypotheses_as_not_validated() -> None:
    from gigaevo.scratchpad.document import parse, render_prompt

    state, _ = parse(
        "# Scratchpad\n\n## Hypotheses\n- [idea.h1] wider rings may help\n\n"
        "## Decisions\n- [config.llm] offline [src:config @ 2026-11-30]\n\n"
        "## Findings\n- [best] 1.5 [src:p1 @ 2026-11-30]\n\n## Open\n",
        "mem.md",
    )
    text = render_prompt(state)
    assert "### Hypotheses (not yet validated)" in text and "[idea.h1]" in text
    assert "[best] 1.5 [src:p1]" in text  # no date in the prompt
    assert "[config." not in text


def test_staging_validates_at_once(tmp_path: Path) -> None:
    notes = _notes(tmp_path)
    with pytest.raises(MissingProvenanceError):
        notes.record_finding("card.x", "helps", source=None)  # type: ignore[arg-type]
    with pytest.raises(UnknownKeyError):
        notes.resolve("never.opened")


def test_resolved_and_obsolete_notes_are_pruned_in_a_run(tmp_path: Path) -> None:
    notes = _notes(tmp_path, every=1)
    notes.open_question("q", "does card c1 help?")
    notes.add_hypothesis("card.c1", "card c1 may help")
    notes.after_commit(0, 1, "p0", 1.0)
    notes.resolve("q")
    notes.mark_obsolete("card.c1")
    notes.after_commit(1, 2, "p0", 1.0)
    assert _on_disk(tmp_path) == {"best"}


def test_a_run_and_a_plain_scratchpad_are_note_writers(tmp_path: Path) -> None:
    run = _notes(tmp_path / "a", every=1)
    plain = Scratchpad(tmp_path / "b.md")
    writers: list[NoteWriter] = [run, plain]
    for writer in writers:
        writer.add_hypothesis("h", "x")
    # the plain scratchpad writes at once; the run's notes wait for its next checkpoint
    assert "h" in Scratchpad(tmp_path / "b.md").state
    assert "h" not in _on_disk(tmp_path / "a")
    run.after_commit(0, 1, "p0", 1.0)
    assert "h" in _on_disk(tmp_path / "a")
    for writer in writers:
        entry = writer.state.get("h")
        assert entry is not None and entry.section == HYPOTHESES and "x" in entry.text


def test_the_memory_gets_the_run_notes(make_cfg: Callable[..., DictConfig]) -> None:
    built = build_run(make_cfg(), show_progress=False)
    try:
        runtime = built.engine.memory.runtime  # type: ignore[attr-defined]
        assert runtime.scratchpad is built.scratchpad is built.engine.scratchpad
        assert built.scratchpad is not None and built.scratchpad.pad.reads == 1
    finally:
        built.close()


def test_writes_remade_at_every_start_skip_the_directory_fsync(
    tmp_path: Path, fsync_log: list[str]
) -> None:
    """The skeleton, the config Decisions, the start's reconciliation and a finish that holds
    only the best and the outcome are rebuilt by the next start: file fsync only (never torn
    or blank). Notes the memory staged exist nowhere else: their write fsyncs the directory."""
    from gigaevo.scratchpad.settings import RunOutcome

    synced = fsync_log  # from before the skeleton's creation
    notes = _notes(tmp_path)  # creates the skeleton
    notes.record_config({"problem": "problem p, metric score"})
    notes.start_session(resumed=False, n_mutants=0, best_id="p0", best_fitness=1.0, pending={})
    assert synced == ["file"] * 3 and notes.writes == 2
    outcome = RunOutcome(
        n_mutants=0, n_valid=0, n_invalid=0, n_duplicate=0, stop_reason="max_mutants"
    )
    notes.finish(outcome, "p0", 1.0)
    assert synced == ["file"] * 4
    assert _on_disk(tmp_path) == {"best", "run.outcome", "config.problem"}
    # a checkpoint of staged memory notes, and a finish or start carrying them: durable
    notes.add_hypothesis("card.c1", "card c1 may help", source="card:c1")
    for n in range(1, 6):
        notes.after_commit(n - 1, n, "p0", 1.0)
    assert synced[4:] == ["file", "dir"]
    notes.record_finding("card.c2", "card c2 helps", source="ledger:c2")
    notes.finish(outcome, "p1", 2.0)
    assert synced[6:] == ["file", "dir"]
    notes.record_finding("card.c3", "card c3 helps", source="ledger:c3")
    notes.start_session(resumed=True, n_mutants=10, best_id="p1", best_fitness=2.0, pending={})
    assert synced[8:] == ["file", "dir"]
    assert {"card.c1", "card.c2", "card.c3"} <= _on_disk(tmp_path)


def test_the_design_report_is_written_without_fsync(tmp_path: Path, fsync_log: list[str]) -> None:
    import json

    notes = _notes(tmp_path)
    fsync_log.clear()  # the skeleton's creation
    path = notes.write_report()
    assert fsync_log == [] and json.loads(path.read_text())["run"]["writes"] == notes.writes
