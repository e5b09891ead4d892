"""Resume: budget counted right, initial program never re-added, history unchanged."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig

from gigaevo.evolution.store import ProgramStore
from gigaevo.pipeline.build import STORE_FILE, run_from_config
from tests.conftest import (
    ROOT,
    STEADY_EVAL,
    committed_count,
    kill_9_after_commits,
    program_ids,
    run_py,
)


def test_resume_extends_budget_without_readding_initial(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    first = run_from_config(make_cfg("max_mutants=10"), show_progress=False)
    assert first.n_mutants == 10
    before = program_ids(tmp_path / "run")
    again = run_from_config(make_cfg("max_mutants=20", "resume=true"), show_progress=False)
    assert again.n_mutants == 20
    ids = program_ids(tmp_path / "run")
    assert len(ids) == 21 and len(set(ids)) == 21
    assert ids[:11] == before  # nothing committed is lost or rewritten
    # a larger budget dispatches attempts 10.. later than an uninterrupted run
    # would, so only a resume at the same budget replays the same history
    # (see tests/pipeline/test_exactly_once.py)


def test_resume_of_finished_run_does_nothing(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    run_from_config(make_cfg("max_mutants=5"), show_progress=False)
    before = program_ids(tmp_path / "run")
    k = run_from_config(make_cfg("max_mutants=5", "resume=true"), show_progress=False)
    assert k.n_mutants == 5 and program_ids(tmp_path / "run") == before


def test_resume_with_other_seed_is_refused(
    make_cfg: Callable[..., DictConfig],
) -> None:
    from gigaevo.pipeline.build import ConfigError

    run_from_config(make_cfg("max_mutants=3"), show_progress=False)
    with pytest.raises(ConfigError, match="seed"):
        run_from_config(make_cfg("max_mutants=3", "seed=9", "resume=true"), show_progress=False)


def _wait_for_commits(store: Path, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while committed_count(store) < n and time.monotonic() < deadline:
        time.sleep(0.02)


def _islands(ckpt: Path) -> dict[str, Any]:
    store = ProgramStore(ckpt / STORE_FILE)
    try:
        islands: dict[str, Any] = store.get_meta("state")["islands"]
        return islands
    finally:
        store.close()


@pytest.mark.slow
def test_kill_9_then_resume_matches_uninterrupted_run(tmp_path: Path) -> None:
    args = [
        "problem=rastrigin",
        "max_mutants=60",
        "progress=false",
        "seed=5",
        STEADY_EVAL,
    ]
    ckpt = tmp_path / "killed"
    done = kill_9_after_commits(args, ckpt, tmp_path, 25)
    assert 25 <= done < 61, "the run should have been killed mid-way"
    code, _, err = run_py(*args, f"checkpoint_dir={ckpt}", "resume=true", cwd=tmp_path)
    assert code == 0, err
    code, _, err = run_py(*args, f"checkpoint_dir={tmp_path / 'whole'}", cwd=tmp_path)
    assert code == 0, err
    assert program_ids(ckpt) == program_ids(tmp_path / "whole")
    # the archives and the live ranges of rastrigin's adaptive axes, exactly
    killed, whole = _islands(ckpt), _islands(tmp_path / "whole")
    assert killed == whole and killed["space"]["axes"]
    summary = json.loads((ckpt / "summary.json").read_text())
    assert summary["n_mutants"] == 60
    events = (ckpt / "events.jsonl").read_text().splitlines()
    assert sum('"event": "initial"' in e for e in events) == 1


@pytest.mark.slow
def test_same_command_plus_resume_finds_the_run(tmp_path: Path) -> None:
    args = ["problem=rastrigin", "max_mutants=8", "progress=false"]
    assert run_py(*args, cwd=tmp_path)[0] == 0
    runs = list((tmp_path / "outputs").rglob(STORE_FILE))
    assert len(runs) == 1
    code, _, err = run_py(*[a.replace("8", "16") for a in args], "resume=true", cwd=tmp_path)
    assert code == 2  # other overrides: not the same command
    code, _, err = run_py(*args[:1], "max_mutants=8", "progress=false", "resume=true", cwd=tmp_path)
    assert code == 0, err
    assert "resuming" in err
    assert list((tmp_path / "outputs").rglob(STORE_FILE)) == runs


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_resumes(tmp_path: Path) -> None:
    ckpt = tmp_path / "run"
    args = ["problem=rastrigin", "max_mutants=100000", "progress=false", f"checkpoint_dir={ckpt}"]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), *args],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_commits(ckpt / STORE_FILE, 20)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:  # a failed wait must not leave a 100,000-mutant run behind
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "resume=true" in err
    summary = json.loads((ckpt / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted" and not summary["finished"]
    done = summary["n_mutants"]
    # the stop event counts the committed mutants, each of which has its mutant event
    events = [json.loads(line) for line in (ckpt / "events.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "stop" and events[-1]["n_mutants"] == done
    assert committed_count(ckpt / STORE_FILE) - 1 == done  # one initial program
    assert sorted(e["attempt"] for e in events if e["event"] == "mutant") == list(range(done))
    code, _, err = run_py(
        *args[:1], f"max_mutants={done + 10}", *args[2:], "resume=true", cwd=tmp_path
    )
    assert code == 0, err
    assert json.loads((ckpt / "summary.json").read_text())["n_mutants"] == done + 10
