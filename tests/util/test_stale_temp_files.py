"""Stale temporary files of atomic writes: removed when their writer is gone, never otherwise."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gigaevo.util.atomic as atomic
from gigaevo.util import (
    atomic_write_text,
    is_stale_temp_file,
    remove_stale_temp_files,
    storage_error_line,
)


def _temp(directory: Path, target: str, *, host: str, pid: int, token: str, age_s: float = 0):
    path = directory / f".{target}.{host}-{pid}-{token}.k2j4_8ls.tmp"
    path.write_text("half")
    if age_s:
        stamp = time.time() - age_s
        os.utime(path, (stamp, stamp))
    return path


def test_only_files_whose_writer_is_gone_are_removed(tmp_path: Path) -> None:
    host, token = atomic._HOST, atomic._TOKEN
    live = subprocess.Popen(["sleep", "30"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        keep = [
            _temp(tmp_path, "a.json", host=host, pid=live.pid, token="abcdef", age_s=9e5),
            _temp(tmp_path, "b.json", host=host, pid=os.getpid(), token=token),  # in flight here
            _temp(tmp_path, "c.json", host="0badf00d", pid=1, token="abcdef"),  # other host, fresh
            tmp_path / ".d.json.k2j4_8ls.tmp",  # unnamed (old pattern), fresh
            tmp_path / ".user-notes.tmp",  # not a name our writers make
            tmp_path / "e.json.tmp",
        ]
        for path in keep[3:]:
            path.write_text("x")
        gone = [
            _temp(tmp_path, "f.json", host=host, pid=dead.pid, token="abcdef"),
            # this pid, but an earlier process's token: a restarted container reusing pids
            _temp(tmp_path, "g.json", host=host, pid=os.getpid(), token="000000"),
            _temp(tmp_path, "h.json", host="0badf00d", pid=1, token="abcdef", age_s=2 * 86400),
        ]
        old = tmp_path / ".i.json.k2j4_8ls.tmp"
        old.write_text("x")
        os.utime(old, (time.time() - 2 * 86400,) * 2)
        gone.append(old)
        assert sorted(remove_stale_temp_files(tmp_path)) == sorted(gone)
        assert all(p.exists() for p in keep) and not any(p.exists() for p in gone)
    finally:
        live.kill()
        live.wait()


def test_a_concurrent_writer_in_another_process_keeps_its_file(tmp_path: Path) -> None:
    """A shared bank: another live run is mid-write while this one starts up."""
    code = (
        "import sys, time, gigaevo.util.atomic as a\n"
        "real = a.os.replace\n"
        "def slow(src, dst):\n"
        "    print('writing', flush=True); time.sleep(30); real(src, dst)\n"
        "a.os.replace = slow\n"
        f"a.atomic_write_text({str(tmp_path / 'cards.json')!r}, 'x')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
        (pending,) = tmp_path.glob(".cards.json.*.tmp")
        assert not is_stale_temp_file(pending)
        assert remove_stale_temp_files(tmp_path) == [] and pending.exists()
    finally:
        proc.kill()
        proc.wait()
    assert is_stale_temp_file(pending)


def test_a_failed_write_names_the_target_and_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "summary.json"
    atomic_write_text(path, "old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OSError) as info:
        atomic_write_text(path, "new")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    assert storage_error_line(info.value) == f"{path}: No space left on device"
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_network_errors_are_not_storage_errors() -> None:
    assert storage_error_line(ConnectionResetError(errno.ECONNRESET, "reset")) is None
    assert storage_error_line(ValueError("x")) is None
    assert storage_error_line(sqlite3.IntegrityError("UNIQUE constraint failed")) is None
