"""Shared fixtures: composing the real Hydra config for a run in tmp_path."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "config"

# A shell starts a background job (``pytest ... &``, ``nohup``) with SIGINT ignored, and an
# ignored signal stays ignored across exec: every run.py a test starts would then ignore
# the Ctrl-C the interrupt tests send it and run on to its budget. Python's own handler is
# reset to the default at exec, so the children get Ctrl-C as a terminal would deliver it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def compose_config(overrides: list[str]) -> DictConfig:
    """The composed run config with ``overrides`` (no Hydra runtime needed)."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=overrides)


@pytest.fixture
def make_cfg(tmp_path: Path) -> Callable[..., DictConfig]:
    """Build a config for a small run whose checkpoint_dir is under tmp_path."""

    def _make(*overrides: str, run: str = "run") -> DictConfig:
        base = [
            "problem=rastrigin",
            "max_mutants=12",
            f"checkpoint_dir={tmp_path / run}",
            "progress=false",
            "evaluator.max_workers=1",
        ]
        return compose_config([*base, *overrides])

    return _make


def run_py(*args: str, cwd: Path, timeout: float = 300) -> tuple[int, str, str]:
    """Run ``python run.py ARGS`` in ``cwd``; returns (exit code, stdout, stderr)."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    return proc.returncode, proc.stdout, proc.stderr


def kill_9_when(
    args: list[str],
    ckpt: Path,
    cwd: Path,
    ready: Callable[[], bool],
    timeout: float = 120.0,
    poll: float = 0.02,
) -> None:
    """Start ``run.py ARGS checkpoint_dir=CKPT`` in its own session and SIGKILL its process
    group once ``ready()`` holds (or after ``timeout`` s), polling every ``poll`` s."""
    import subprocess
    import time

    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), *args, f"checkpoint_dir={ckpt}"],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    while not ready() and time.monotonic() < deadline:
        time.sleep(poll)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


# rastrigin's 2 s wall-clock limit per evaluation is a clock in the history: one evaluation
# starved past it on a loaded machine turns valid into invalid in one run only. Runs whose
# histories are compared take this far limit (no program of theirs loops: it costs nothing)
STEADY_EVAL = "evaluator.timeout_s=60"


def kill_9_after_commits(args: list[str], ckpt: Path, cwd: Path, commits: int) -> int:
    """Start ``run.py ARGS checkpoint_dir=CKPT``, SIGKILL its process group once the store
    holds ``commits`` programs (or after 120 s), and return how many it holds then."""
    from gigaevo.pipeline.build import STORE_FILE

    kill_9_when(args, ckpt, cwd, lambda: committed_count(ckpt / STORE_FILE) >= commits)
    return committed_count(ckpt / STORE_FILE)


def program_ids(checkpoint_dir: str | Path) -> list[str]:
    """Ids of every program in a run's store, in commit order."""
    from gigaevo.evolution.store import ProgramStore
    from gigaevo.pipeline.build import STORE_FILE

    store = ProgramStore(Path(checkpoint_dir) / STORE_FILE)
    try:
        return [p.id for p in store.iter_programs()]
    finally:
        store.close()


def committed_count(store: Path) -> int:
    """Programs committed so far in a store another process may be writing (0 if unreadable)."""
    import sqlite3

    if not store.exists():
        return 0
    try:
        con = sqlite3.connect(store, timeout=5)
        try:
            return int(con.execute("SELECT COUNT(*) FROM programs").fetchone()[0])
        finally:
            con.close()
    except sqlite3.OperationalError:
        return 0


@pytest.fixture
def fsync_log(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``os.fsync`` from now on, as "dir" or "file" (each call still happens)."""
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append("dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return synced
