"""Following a run while it grows: JSONL tails, the store read after the last ordinal, LiveRun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gigaevo.analysis import lineage, live_store, load_events, load_programs, load_run
from gigaevo.analysis.live import LiveRun
from gigaevo.analysis.tail import JsonlTail
from tests.analysis.test_read_only import Writer
from tests.conftest import ROOT


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text)


def test_tail_returns_complete_new_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    tail = JsonlTail(path)
    assert tail.read().rows == []  # missing file
    _append(path, '{"a": 1}\n{"a": 2}\n{"a": 3, "b"')  # a line still being written
    assert [r["a"] for r in tail.read().rows] == [1, 2]
    assert tail.read().rows == []
    _append(path, ": 4}\n")  # the same line finished
    assert tail.read().rows == [{"a": 3, "b": 4}]
    assert tail.offset == path.stat().st_size and tail.bad_lines == 0


def test_tail_skips_a_torn_fragment_once_the_writer_ends_it(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    tail = JsonlTail(path)
    _append(path, '{"a": 1}\n{"a": 2, "b":')  # killed mid-line
    assert tail.read().rows == [{"a": 1}]
    _append(path, '\n{"a": 5}\n')  # the resumed writer ends the fragment, then appends
    assert tail.read().rows == [{"a": 5}]
    assert (tail.lines, tail.bad_lines) == (3, 1)


def test_tail_starts_again_when_the_file_is_truncated_or_replaced(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    tail = JsonlTail(path)
    _append(path, '{"a": 1}\n{"a": 2}\n')
    assert len(tail.read().rows) == 2
    path.write_text('{"a": 9}\n')  # truncated and rewritten, shorter
    read = tail.read()
    assert read.restarted and read.rows == [{"a": 9}]
    other = tmp_path / "other.jsonl"
    other.write_text('{"a": 7}\n{"a": 8}\n{"a": 9}\n')
    os.replace(other, path)  # another file (inode) under the name, longer
    read = tail.read()
    assert read.restarted and [r["a"] for r in read.rows] == [7, 8, 9]
    path.unlink()
    assert tail.read().restarted


def test_tail_reads_only_what_was_appended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps({"n": i, "pad": "x" * 100}) + "\n" for i in range(2000)))
    tail = JsonlTail(path)
    assert len(tail.read().rows) == 2000
    reads: list[int] = []
    real_open = Path.open

    def counting_open(self: Path, *args: object, **kwargs: object) -> object:
        fh = real_open(self, *args, **kwargs)  # type: ignore[call-overload]
        real_read = fh.read
        fh.read = lambda n=-1: reads.append(n) or real_read(n)  # type: ignore[method-assign]
        return fh

    monkeypatch.setattr(Path, "open", counting_open)
    _append(path, '{"n": 2000}\n')
    assert tail.read().rows == [{"n": 2000}]
    assert reads == [len('{"n": 2000}\n')]  # the new bytes, not the file


def _grow(run_dir: Path, total: int) -> subprocess.Popen[str]:
    """Resume the run in ``run_dir`` up to ``total`` mutants (a real engine writing)."""
    args = [sys.executable, str(ROOT / "run.py"), f"checkpoint_dir={run_dir}", "resume=true"]
    args += ["problem=rastrigin", f"max_mutants={total}", "progress=false", "memory=none"]
    args += ["pipeline=guided", "evaluator.max_workers=1"]
    return subprocess.Popen(args, cwd=run_dir.parent, stdout=subprocess.PIPE, text=True)


def test_live_run_follows_a_resumed_run_reading_only_new_rows(
    plain_run: Path, copy_of: Callable[[Path], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = copy_of(plain_run)
    asked: list[int] = []
    real = live_store.read_new_rows

    def recording(path: Path, after: int, after_id: str | None = None) -> object:
        asked.append(after)
        return real(path, after, after_id)

    monkeypatch.setattr("gigaevo.analysis.live.read_new_rows", recording)
    live = LiveRun(run_dir, min_interval_s=0)
    live.refresh()
    assert live.status()["state"] == "stopped"
    first = len(live.programs)
    proc = _grow(run_dir, 24)
    counts = []
    while proc.poll() is None:
        live.refresh()
        counts.append(len(live.programs))
    assert proc.wait() == 0
    live.refresh()
    run = load_run(run_dir)
    assert live.programs.ids == list(run.programs["id"])  # every program, once, in order
    assert list(live.programs.mutant) == list(run.programs["mutant"])
    assert counts == sorted(counts) and first < len(live.programs)
    # each read starts after the last ordinal already held: nothing is read twice
    assert asked[0] == -1 and all(a >= 0 for a in asked[1:])
    assert asked == sorted(asked) and asked[-1] == len(run.programs) - 1
    assert live.events.tail.offset == (run_dir / "events.jsonl").stat().st_size
    assert live.events.tail.lines == len(load_events(run_dir))
    status = live.status()
    assert status["state"] == "stopped" and status["resumes"] == 1
    assert "24" in status["stop_reason"]
    curve = run.best_so_far()
    changes = curve[curve["best"].diff().fillna(1) != 0]
    assert live.best_steps == list(zip(changes["mutant"], changes["best"], strict=True))
    assert live.counters["n_mutants"] == 24


def test_family_tree_matches_the_frame(plain_run: Path) -> None:
    live = LiveRun(plain_run)
    live.refresh()
    programs = load_programs(plain_run)
    t = live.programs
    best = t.index[live.best_id]
    chain = lineage(programs, live.best_id)
    assert [t.ids[r] for r in t.ancestors(best)] == list(chain["id"])
    for row in range(len(t)):
        kids = programs.loc[programs["parent_id"] == t.ids[row], "id"]
        assert [t.ids[c] for c in t.children(row)] == list(kids)


def test_a_new_run_in_the_folder_starts_the_view_again(
    plain_run: Path, memory_run: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(plain_run, run_dir)
    live = LiveRun(run_dir, min_interval_s=0)
    live.refresh()
    assert live.generation == 0
    shutil.rmtree(run_dir)
    shutil.copytree(memory_run, run_dir)  # another run now lives in the folder
    live.refresh()
    assert live.generation == 1
    assert live.programs.ids == list(load_programs(memory_run)["id"])
    assert live.memory.present and sum(live.memory.writes.values()) > 0


def test_a_store_that_is_not_a_database_is_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / "programs.sqlite3").write_bytes(b"this is not sqlite" * 100)
    (tmp_path / "events.jsonl").write_text('{"event": "initial", "time": 1.0}\n')
    live = LiveRun(tmp_path)
    live.refresh()
    assert live.error is not None and "programs.sqlite3" in live.error
    assert len(live.programs) == 0 and live.events.counts["initial"] == 1


def test_status_tells_a_live_writer_from_a_killed_one(
    plain_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(plain_run)
    (run_dir / "events.jsonl").write_text(  # the run's events without its stop
        "".join(line for line in plain_run.joinpath("events.jsonl").open() if '"stop"' not in line)
    )
    live = LiveRun(run_dir, min_interval_s=0)
    writer = Writer(run_dir / "programs.sqlite3", 2)
    assert writer.written()
    live.refresh()
    assert live.status()["state"] == "running" and live.status()["writer"] is True
    writer.kill()
    live.refresh()
    assert live.status()["state"] == "interrupted" and live.status()["writer"] is False
