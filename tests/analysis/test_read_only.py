"""The loaders read a run without creating or changing any file in it (issue 15, point 8).

A plain ``mode=ro`` SQLite connection to a WAL database leaves ``-wal`` and
``-shm`` files behind; these tests fingerprint every file of a run folder
(name, size, content) before and after reading it: finished, killed with its
WAL still open, and with a writer still committing.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gigaevo.analysis import _sqlite, load_programs, load_run, load_sweep
from gigaevo.analysis.report import write_report
from gigaevo.analysis.sweep import arm_labels, varying_overrides

STORE = "programs.sqlite3"

# a writer like the engine's store: WAL, one committed program per step, then it
# waits for a line on stdin and closes (SQLite then checkpoints and deletes its WAL)
WRITER = r"""
import json, sqlite3, sys, time
path, n, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
con = sqlite3.connect(path, isolation_level=None)
con.execute("PRAGMA journal_mode=WAL")
(last,) = con.execute("SELECT MAX(ordinal) FROM programs").fetchone()
(data,) = con.execute("SELECT data FROM programs WHERE ordinal = ?", (last,)).fetchone()
for k in range(1, n + 1):
    d = json.loads(data)
    d["ordinal"], d["id"] = last + k, f"written{k:09d}"
    con.execute(
        "INSERT INTO programs(ordinal, id, digest, status, data) VALUES (?, ?, ?, ?, ?)",
        (d["ordinal"], d["id"], f"digest{k}", d["status"], json.dumps(d)),
    )
    time.sleep(pause)
print("written", flush=True)
sys.stdin.readline()
con.close()
"""


def _fingerprint(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``folder``: relative path -> (size, sha256 of the content)."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            data = path.read_bytes()
            out[str(path.relative_to(folder))] = (len(data), hashlib.sha256(data).hexdigest())
    return out


class Writer:
    """A writer process on ``store``: ``n`` commits ``pause`` seconds apart, then it waits."""

    def __init__(self, store: Path, n: int, pause: float = 0.0) -> None:
        args = [sys.executable, "-c", WRITER, str(store), str(n), str(pause)]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def written(self, timeout: float = 60) -> bool:
        """Whether every commit is done (polls without blocking)."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return bool(ready) and self.proc.stdout.readline().strip() == "written"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("close\n")
        self.proc.stdin.flush()
        assert self.proc.wait(timeout=60) == 0

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def test_reading_a_finished_run_changes_no_file(
    read_side_run: Path, copy_of: Callable[[Path], Path], tmp_path: Path
) -> None:
    run_dir = copy_of(read_side_run)
    before = _fingerprint(run_dir)
    assert STORE in before and "memory_v2_selection_evidence.sqlite3" in before
    run = load_run(run_dir)
    assert len(run.programs) > 40 and not run.evidence.empty
    load_sweep(run_dir.parent)
    write_report(run_dir, tmp_path / "report")
    assert _fingerprint(run_dir) == before


def test_a_killed_writers_wal_is_read_and_left_as_it_was(
    plain_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(plain_run)
    committed = len(load_programs(run_dir))
    writer = Writer(run_dir / STORE, 3)
    assert writer.written()
    writer.kill()
    before = _fingerprint(run_dir)
    assert {STORE + "-wal", STORE + "-shm"} <= set(before)  # the kill left the WAL open
    assert _sqlite.has_open_connection(run_dir / STORE) is False  # nobody holds the WAL
    programs = load_programs(run_dir)
    assert len(programs) == committed + 3  # the commits still in the WAL are read
    assert programs["id"].iloc[-1] == "written000000003"
    assert _fingerprint(run_dir) == before  # not even the shared memory is written


def test_a_wal_without_its_shared_memory_is_read_from_a_private_copy(
    plain_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(plain_run)
    committed = len(load_programs(run_dir))
    writer = Writer(run_dir / STORE, 2)
    assert writer.written()
    writer.kill()
    (run_dir / (STORE + "-shm")).unlink()
    before = _fingerprint(run_dir)
    assert len(load_programs(run_dir)) == committed + 2
    assert _fingerprint(run_dir) == before


def test_reading_while_a_writer_commits_sees_each_commit_and_leaves_nothing(
    plain_run: Path, copy_of: Callable[[Path], Path]
) -> None:
    run_dir = copy_of(plain_run)
    committed = len(load_programs(run_dir))
    writer = Writer(run_dir / STORE, 40, pause=0.01)
    seen = [len(load_programs(run_dir))]
    while not writer.written(timeout=0):
        seen.append(len(load_programs(run_dir)))
    assert seen == sorted(seen)  # never a count going back (no torn read)
    assert any(committed < n < committed + 40 for n in seen)  # commits seen while they happen
    assert len(load_programs(run_dir)) == committed + 40
    assert _sqlite.has_open_connection(run_dir / STORE) is True  # the writer is alive
    writer.close()
    assert _sqlite.has_open_connection(run_dir / STORE) is None  # closed: no -shm to ask
    # the writer closed last: SQLite removed its WAL and shared memory; no reader made any
    assert {p.name for p in run_dir.iterdir()} == {p.name for p in plain_run.iterdir()}
    assert len(load_programs(run_dir)) == committed + 40


def test_a_writer_closing_between_the_look_and_the_read_leaves_no_wal(
    plain_run: Path, copy_of: Callable[[Path], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite makes an empty WAL for a reader that opens just after the writer deleted its own."""
    run_dir = copy_of(plain_run)
    committed = len(load_programs(run_dir))
    writer = Writer(run_dir / STORE, 2)
    assert writer.written()
    real_connect = sqlite3.connect
    closes = []

    def connect_after_the_writer_closed(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        if not closes:
            closes.append(writer.close())  # the WAL and shared memory go away right here
            assert not (run_dir / (STORE + "-wal")).exists()
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(_sqlite.sqlite3, "connect", connect_after_the_writer_closed)
    assert len(load_programs(run_dir)) == committed + 2
    assert closes  # the race did happen
    assert {p.name for p in run_dir.iterdir()} == {p.name for p in plain_run.iterdir()}


def test_report_of_a_folder_of_runs_with_different_overrides(
    plain_run: Path, tmp_path: Path
) -> None:
    """``outputs/<problem>``: runs made by hand, each with its own overrides (some unset)."""
    folder = tmp_path / "rastrigin"
    folder.mkdir()
    variants = [["seed=1"], ["evaluator.memory_mb=1024"], ["evaluator.memory_mb=4096", "seed=2"]]
    for n, extra in enumerate(variants):
        run_dir = folder / f"2026-01-0{n + 1}_10-00-00_000000"
        subprocess.run(["cp", "-r", str(plain_run), str(run_dir)], check=True)
        overrides = ["problem=rastrigin", "memory=none", *extra]
        (run_dir / "command.json").write_text(json.dumps({"overrides": overrides}))
        # a run folder holds Hydra's record of its command too (checkpoint_dir is the run folder)
        (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    proc = subprocess.run(
        [sys.executable, "-m", "gigaevo.report", str(folder), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    page = (tmp_path / "out" / "report.html").read_text()
    # the arm is evaluator.memory_mb, which one run leaves to its default
    assert "Best fitness by evaluator.memory_mb" in page
    assert (tmp_path / "out" / "sweep_best.png").stat().st_size > 1000


def test_a_key_set_by_some_jobs_only_varies_and_labels_its_default() -> None:
    sweep = pd.DataFrame(
        {
            "job": ["a", "b", "c"],
            "override.seed": [1, 2, 3],
            "override.memory_mb": [np.nan, 1024.0, np.nan],
            "override.problem": ["rastrigin"] * 3,
        }
    )
    assert varying_overrides(sweep) == ["override.seed", "override.memory_mb"]
    labels = arm_labels(sweep, ["override.memory_mb", "override.problem"])
    assert list(labels) == [
        "memory_mb=default, problem=rastrigin",
        "memory_mb=1024.0, problem=rastrigin",
        "memory_mb=default, problem=rastrigin",
    ]
    assert list(arm_labels(sweep, [])) == ["a", "b", "c"]
