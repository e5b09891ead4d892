"""Several processes upserting at once lose nothing; the lock bounds the wait."""

from __future__ import annotations

import multiprocessing as mp
import subprocess
import sys
from pathlib import Path
from typing import Any

import filelock
import pytest

from gigaevo.scratchpad import DECISIONS, FINDINGS, OPEN, Scratchpad, ScratchpadLockError
from tests.conftest import ROOT
from tests.scratchpad.conftest import new_session

WORKERS, PER_WORKER = 6, 20


def _writer(path: str, worker: int, start: Any) -> None:
    start.wait()
    pad = Scratchpad(path)
    for i in range(PER_WORKER):
        pad.record_finding(f"w{worker}.f{i}", f"worker {worker} finding {i}", source=f"w{worker}")
        pad.upsert(OPEN, "shared", f"last writer so far: worker {worker} item {i}")
    pad.record_decision(f"w{worker}.done", "finished", source=f"w{worker}")


def test_concurrent_processes_lose_no_upsert(pad_path: Path) -> None:
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(str(pad_path), w, start)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    state = new_session(pad_path).load()
    findings = {e.key for e in state.section(FINDINGS)}
    assert findings == {f"w{w}.f{i}" for w in range(WORKERS) for i in range(PER_WORKER)}
    assert {e.key for e in state.section(DECISIONS)} == {f"w{w}.done" for w in range(WORKERS)}
    shared = [e for e in state if e.key == "shared"]
    assert len(shared) == 1 and shared[0].text.endswith(f"item {PER_WORKER - 1}")
    assert pad_path.read_text().count("[shared]") == 1


def test_concurrent_cli_processes_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / ".agent" / "scratchpad.md"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gigaevo.scratchpad",
                "--file",
                str(path),
                "upsert",
                "findings",
                f"cli.{i}",
                f"written by process {i}",
                "--source",
                f"proc{i}",
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        for i in range(8)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 8
    keys = {e.key for e in new_session(path).load()}
    assert keys == {f"cli.{i}" for i in range(8)}


def test_lock_timeout_is_a_named_error(pad_path: Path) -> None:
    pad_path.parent.mkdir(parents=True)
    holder = filelock.FileLock(str(pad_path) + ".lock")
    with holder:
        pad = Scratchpad(pad_path, lock_timeout=0.2)
        with pytest.raises(ScratchpadLockError, match=r"lock not obtained within 0\.2 s"):
            pad.add_hypothesis("h", "x")
    assert not pad_path.exists()
