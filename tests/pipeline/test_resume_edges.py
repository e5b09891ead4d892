"""Resume after any stop: before the store existed, a zero-byte scratchpad, stale temporary
files, a finished run, a storage failure; and what a rejected start leaves (nothing)."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig

import gigaevo.util.atomic as atomic
from gigaevo.evolution.store import ProgramStore
from gigaevo.pipeline.build import STORE_FILE, run_from_config
from gigaevo.pipeline.cli import run_job
from gigaevo.pipeline.runs import COMMAND_FILE, problem_label
from tests.conftest import program_ids

PAD = Path(".agent/scratchpad.md")


def _exit_line(capsys: pytest.CaptureFixture[str], run: Callable[[], None]) -> str:
    """Run ``run``, expect exit code 2, return the one line it printed on stderr."""
    with pytest.raises(SystemExit) as info:
        run()
    assert info.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def _events(ckpt: Path) -> list[str]:
    return (ckpt / "events.jsonl").read_text().splitlines()


def test_killed_before_its_store_existed_resumes(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    """What a kill 0.3 s after start leaves (the command, no store) resumes with resume=true."""
    ckpt = tmp_path / "run"
    ckpt.mkdir()
    (ckpt / COMMAND_FILE).write_text('{"overrides": ["problem=rastrigin"]}\n')
    k = run_from_config(make_cfg("max_mutants=4", "resume=true"), show_progress=False)
    assert k.n_mutants == 4 and len(program_ids(ckpt)) == 5
    assert json.loads((ckpt / COMMAND_FILE).read_text())["overrides"] == ["problem=rastrigin"]


def test_zero_byte_scratchpad_on_resume_stops_loudly(
    make_cfg: Callable[..., DictConfig], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_job(make_cfg("max_mutants=3"))
    ckpt = tmp_path / "run"
    (ckpt / PAD).write_bytes(b"")
    before = program_ids(ckpt), _events(ckpt)
    line = _exit_line(capsys, lambda: run_job(make_cfg("max_mutants=6", "resume=true")))
    assert str(ckpt / PAD) in line and "zero bytes" in line
    assert (ckpt / PAD).read_bytes() == b"" and (program_ids(ckpt), _events(ckpt)) == before


def test_stale_temporary_files_are_removed_at_resume(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    run_job(make_cfg("max_mutants=3"))
    ckpt = tmp_path / "run"
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "30"])
    tag = f"{atomic._HOST}-{{pid}}-abcdef.k2j4_8ls.tmp"
    stale = [
        ckpt / f".best_program.py.{tag.format(pid=dead.pid)}",
        ckpt / f".selection_leases.json.{tag.format(pid=dead.pid)}",
        ckpt / PAD.parent / f".scratchpad.md.{tag.format(pid=dead.pid)}",
    ]
    in_flight = ckpt / f".summary.json.{tag.format(pid=live.pid)}"  # a live writer's
    try:
        for path in [*stale, in_flight]:
            path.write_text("half a file")
        run_job(make_cfg("max_mutants=4", "resume=true"))
        assert not any(p.exists() for p in stale) and in_flight.exists()
    finally:
        live.kill()
        live.wait()


def test_resuming_a_finished_run_writes_nothing(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    run_job(make_cfg("max_mutants=3"))
    ckpt = tmp_path / "run"
    events, summary = _events(ckpt), (ckpt / "summary.json").read_text()
    run_job(make_cfg("max_mutants=3", "resume=true", "progress=true"))
    assert _events(ckpt) == events and (ckpt / "summary.json").read_text() == summary
    run_job(make_cfg("max_mutants=5", "resume=true"))  # a larger budget continues it
    assert json.loads((ckpt / "summary.json").read_text())["n_mutants"] == 5


def test_a_rejected_start_removes_what_it_made_and_nothing_else(
    make_cfg: Callable[..., DictConfig], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The memory refuses its setting after the store was made: the folder is as it was."""
    ckpt = tmp_path / "run"
    ckpt.mkdir()
    (ckpt / "notes.txt").write_text("mine")
    line = _exit_line(capsys, lambda: run_job(make_cfg("memory.causal.offer_probability=7")))
    assert "memory.causal.offer_probability" in line
    assert sorted(p.name for p in ckpt.iterdir()) == ["notes.txt"]
    fresh = tmp_path / "fresh"
    _exit_line(capsys, lambda: run_job(make_cfg("evaluator.memory_mb=-1", run="fresh")))
    assert not fresh.exists()


def test_a_full_disk_or_lost_permission_exits_2_and_resumes_once_fixed(
    make_cfg: Callable[..., DictConfig],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ENOSPC injected into the store's 6th commit, then EACCES into an atomic write."""
    ckpt = tmp_path / "run"
    real_commit = ProgramStore._commit
    calls = {"n": 0}

    def full_disk(self: ProgramStore, *args: object) -> None:
        calls["n"] += 1
        if calls["n"] == 6:
            raise sqlite3.OperationalError("database or disk is full")
        real_commit(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ProgramStore, "_commit", full_disk)
    line = _exit_line(capsys, lambda: run_job(make_cfg("max_mutants=8")))
    assert line.startswith(f"error: {ckpt / STORE_FILE}: database or disk is full;")
    assert "resume=true" in line and "rollback" not in line
    assert len(program_ids(ckpt)) == 5  # the commits before the failure, whole
    monkeypatch.undo()

    real_replace = os.replace

    def no_permission(src: str, dst: str) -> None:
        if str(dst).endswith("best_program.py"):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", no_permission)
    run = make_cfg("max_mutants=12", "resume=true")
    line = _exit_line(capsys, lambda: run_job(run))
    assert line.startswith(f"error: {ckpt / 'best_program.py'}: Permission denied;")
    assert not list(ckpt.rglob("*.tmp"))
    monkeypatch.undo()
    run_job(make_cfg("max_mutants=12", "resume=true"))
    ids = program_ids(ckpt)
    assert len(ids) == 13 == len(set(ids))


def test_problem_label_is_the_problem_s_own_name(tmp_path: Path) -> None:
    mine = tmp_path / "dir name"
    mine.mkdir()
    assert problem_label("circle_packing", None) == "circle_packing"
    assert problem_label("circle_packing", str(mine)) == "dir_name"
    (mine / "problem.yaml").write_text("name: knapsack_v2\n")
    assert problem_label("circle_packing", str(mine)) == "knapsack_v2"
    (mine / "problem.yaml").write_text("name: [unclosed\n")
    assert problem_label("circle_packing", str(mine)) == "dir_name"
