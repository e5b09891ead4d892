"""After a reset (new session, new process, kill -9 and resume) state comes from the file alone."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig

from gigaevo.pipeline.build import STORE_FILE, run_from_config
from gigaevo.scratchpad import OPEN, RunScratchpad, Scratchpad, ScratchpadSettings
from gigaevo.scratchpad.checker import check_report_file, load_contracts
from tests.conftest import ROOT, committed_count, kill_9_when, run_py
from tests.scratchpad.conftest import new_session


def test_a_new_process_rebuilds_the_same_state_from_the_file(
    pad: Scratchpad, pad_path: Path
) -> None:
    pad.add_hypothesis("h", "loops may matter", source="card:7")
    pad.record_decision("d", "four in flight", source="config")
    pad.record_finding("f", "best 1.5 by program p9", source="p9")
    pad.open_question("q", "is attempt 3 done?")
    proc = subprocess.run(
        [sys.executable, "-m", "gigaevo.scratchpad", "--file", str(pad_path), "show", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(proc.stdout) == pad.state.to_dict()
    assert new_session(pad_path).load() == pad.state


def test_run_notes_rebuild_from_the_file_alone(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    run_from_config(make_cfg("max_mutants=20"), show_progress=False)
    ckpt = tmp_path / "run"
    first = RunScratchpad.open(ckpt, ScratchpadSettings(), metric="x")
    # only the scratchpad travels: no store, no events, no summary
    bare = tmp_path / "bare"
    (bare / ".agent").mkdir(parents=True)
    shutil.copy(ckpt / ".agent" / "scratchpad.md", bare / ".agent" / "scratchpad.md")
    rebuilt = RunScratchpad.open(bare, ScratchpadSettings(), metric="x")
    assert rebuilt.state == first.state
    assert rebuilt.prompt_prefix() == first.prompt_prefix() != ""
    assert rebuilt.pad.reads == 1


@pytest.mark.slow
def test_kill_9_then_resume_rebuilds_the_notes_from_the_file(tmp_path: Path) -> None:
    args = ["problem=rastrigin", "max_mutants=300", "progress=false", "seed=2"]
    args += ["scratchpad.record_every=7"]
    ckpt = tmp_path / "killed"
    kill_9_when(args, ckpt, tmp_path, lambda: committed_count(ckpt / STORE_FILE) >= 60, poll=0.01)
    assert committed_count(ckpt / STORE_FILE) < 301, "the run should have been killed mid-way"
    pad_file = ckpt / ".agent" / "scratchpad.md"
    at_kill = pad_file.read_bytes()
    before = new_session(pad_file).load()
    assert before.get("best") is not None and before.get("run.outcome") is None

    code, _, err = run_py(*args, f"checkpoint_dir={ckpt}", "resume=true", cwd=tmp_path)
    assert code == 0, err
    report = json.loads((ckpt / ".agent" / "design_report.json").read_text())
    session = report["run"]["session"]
    assert session["loaded_sha256"] == hashlib.sha256(at_kill).hexdigest()
    assert session["created"] is False and session["entries_at_load"] == len(before)
    assert report["run"]["resumed"] is True and report["read_policy"]["observed_reads"] == 1
    assert check_report_file(ckpt / ".agent" / "design_report.json", load_contracts()) == []
    after = new_session(pad_file).load()
    for entry in before.section("Decisions"):  # config choices kept byte for byte
        assert entry.render() in after.text
    assert after.section(OPEN) == ()  # awaited outcomes resolved and pruned
    assert "300 mutants committed" in after.get("run.outcome").text  # type: ignore[union-attr]

    code, _, err = run_py(*args, f"checkpoint_dir={tmp_path / 'whole'}", cwd=tmp_path)
    assert code == 0, err
    whole = (tmp_path / "whole" / ".agent" / "scratchpad.md").read_text()
    assert whole == after.text  # same notes as a run that was never killed
