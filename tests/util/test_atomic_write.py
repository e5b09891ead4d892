"""Atomic writes leave either the old or the new file; torn JSONL lines are repaired."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
from pathlib import Path

from gigaevo.util import (
    append_jsonl,
    atomic_write_json,
    atomic_write_text,
    remove_stale_temp_files,
)


def _writer_forever(path: str) -> None:
    i = 0
    while True:
        atomic_write_json(path, {"i": i, "pad": "x" * 100_000})
        i += 1


def test_reader_never_sees_half_a_file_even_after_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    atomic_write_json(path, {"i": -1, "pad": ""})
    proc = mp.get_context("fork").Process(target=_writer_forever, args=(str(path),))
    proc.start()
    try:
        for _ in range(300):
            json.loads(path.read_text())  # raises on a torn file
    finally:
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
    assert "i" in json.loads(path.read_text())
    leftovers = [p for p in tmp_path.iterdir() if p.name != "state.json"]
    assert all(p.name.endswith(".tmp") for p in leftovers)
    # the killed writer's temporary file (if the kill hit mid-write) is recognised as its own
    assert sorted(remove_stale_temp_files(tmp_path)) == sorted(leftovers)
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_atomic_write_text_replaces_content(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "f.txt"
    atomic_write_text(path, "one")
    atomic_write_text(path, "two")
    assert path.read_text() == "two"
    assert [p.name for p in path.parent.iterdir()] == ["f.txt"]


def test_append_jsonl_repairs_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    append_jsonl(path, {"a": 1})
    with open(path, "a") as f:
        f.write('{"torn": ')
    append_jsonl(path, {"b": 2})
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"a": 1}
    assert json.loads(lines[-1]) == {"b": 2}
    assert len(lines) == 3


def test_a_non_durable_write_fsyncs_the_file_but_not_the_directory(
    tmp_path: Path, fsync_log: list[str]
) -> None:
    """durable=False: the content is still fsynced before the rename (never torn)."""
    synced = fsync_log
    path = tmp_path / "leases.json"
    atomic_write_text(path, "one", durable=False)
    assert path.read_text() == "one" and synced == ["file"]
    atomic_write_text(path, "two")
    assert path.read_text() == "two" and synced == ["file", "file", "dir"]


def test_atomic_write_json_passes_durability_on(tmp_path: Path, fsync_log: list[str]) -> None:
    synced = fsync_log
    path = tmp_path / "summary.json"
    atomic_write_json(path, {"a": 1}, durable=False)
    assert synced == ["file"]
    atomic_write_json(path, {"a": 2}, durable=False, synced=False)
    assert synced == ["file"] and json.loads(path.read_text()) == {"a": 2}
    atomic_write_json(path, {"a": 3})
    assert synced == ["file", "file", "dir"]
