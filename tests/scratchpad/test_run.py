"""A run keeps checkpoint_dir/.agent/scratchpad.md: what it writes, when, and in the prompt."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from omegaconf import DictConfig

import gigaevo.scratchpad.pad as pad_module
from gigaevo.mutation.base import MutationOutcome, MutationRequest, Mutator
from gigaevo.mutation.prompt import build_messages
from gigaevo.pipeline.build import STORE_FILE, ConfigError, build_run, run_from_config
from gigaevo.scratchpad import DECISIONS, FINDINGS, OPEN, SKELETON, Scratchpad
from gigaevo.scratchpad.checker import check_report_file, lint_scratchpad, load_contracts
from gigaevo.util import derive_seed
from tests.conftest import ROOT, program_ids

PAD = Path(".agent") / "scratchpad.md"
REPORT = Path(".agent") / "design_report.json"


@dataclass
class _Recording:
    """Wraps the real mutator and keeps every request it sees."""

    inner: Mutator
    requests: list[MutationRequest] = field(default_factory=list)

    def mutate(self, request: MutationRequest) -> MutationOutcome:
        self.requests.append(request)
        return self.inner.mutate(request)


def _state(ckpt: Path) -> Scratchpad:
    pad = Scratchpad(ckpt / PAD)
    pad.load()
    return pad


def test_run_records_validated_conclusions(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    run_from_config(make_cfg("max_mutants=30"), show_progress=False)
    ckpt = tmp_path / "run"
    summary = json.loads((ckpt / "summary.json").read_text())
    state = _state(ckpt).state
    decisions = {e.key: e for e in state.section(DECISIONS)}
    assert {"config.problem", "config.llm", "config.memory", "config.budget"} <= set(decisions)
    assert all(e.source == "config" and e.date is not None for e in decisions.values())
    best = state.get("best")
    assert best is not None and best.section == FINDINGS
    assert best.source == summary["best_program_id"]
    assert f"{summary['best_fitness']:.10g}" in best.text
    outcome = state.get("run.outcome")
    assert outcome is not None and "30 mutants committed" in outcome.text
    assert state.section(OPEN) == ()


def test_design_report_of_a_run_passes_the_checker(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    run_from_config(make_cfg("max_mutants=10"), show_progress=False)
    ckpt = tmp_path / "run"
    contracts = load_contracts()
    assert check_report_file(ckpt / REPORT, contracts) == []
    assert lint_scratchpad(ckpt / PAD, contracts) == []
    report = json.loads((ckpt / REPORT).read_text())
    assert report["read_policy"]["observed_reads"] == 1
    assert report["scratchpad"]["path"] == ".agent/scratchpad.md"
    for args in ([str(ckpt / REPORT)], ["--scratchpad", str(ckpt / PAD)]):
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "check.sh"), *args], capture_output=True, timeout=60
        )
        assert proc.returncode == 0, proc.stdout


def test_prompt_carries_the_cached_notes_first_without_rereading(
    make_cfg: Callable[..., DictConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    built = build_run(make_cfg("max_mutants=40", "scratchpad.record_every=10"), show_progress=False)
    recorder = _Recording(built.engine.mutator)
    built.engine.mutator = recorder
    disk_reads: list[Path] = []
    real = pad_module.read_text
    monkeypatch.setattr(pad_module, "read_text", lambda p: disk_reads.append(p) or real(p))
    try:
        built.engine.run()
    finally:
        built.close()
    assert len(recorder.requests) == 40
    prefixes = {r.scratchpad for r in recorder.requests}
    assert all("[best]" in p for p in prefixes)
    # configuration Decisions stay in the file, out of the prompt (ablation arms
    # must see the same prompts)
    assert not any("[config." in p for p in prefixes)
    assert "[config.problem]" in (built.checkpoint_dir / ".agent" / "scratchpad.md").read_text()
    assert "@ 20" not in next(iter(prefixes))  # no dates: the same prompt on any day
    user = build_messages(recorder.requests[0], "diff")[1].content
    assert user.startswith("## Scratchpad")
    assert len(disk_reads) <= 40 // 10 + 2  # only the checkpoint writes read, never a prompt


def test_writes_are_bounded_by_the_checkpoint_cadence(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    run_from_config(make_cfg("max_mutants=200", "scratchpad.record_every=50"), show_progress=False)
    report = json.loads((tmp_path / "run" / REPORT).read_text())
    # config, initial best, at most one per checkpoint, the finish: never one per mutant
    assert 1 <= report["run"]["writes"] <= 2 + 200 // 50 + 1


def test_scratchpad_can_be_disabled_or_kept_out_of_the_prompt(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    run_from_config(make_cfg("scratchpad.enabled=false", run="off"), show_progress=False)
    assert not (tmp_path / "off" / ".agent").exists()
    built = build_run(make_cfg("scratchpad.in_prompt=false", run="quiet"), show_progress=False)
    recorder = _Recording(built.engine.mutator)
    built.engine.mutator = recorder
    try:
        built.engine.run()
    finally:
        built.close()
    assert {r.scratchpad for r in recorder.requests} == {""}
    assert _state(tmp_path / "quiet").state.get("best") is not None


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("scratchpad.path=notes.md", "scratchpad.path"),
        ("scratchpad.path=../x/.agent/s.md", "scratchpad.path"),
        ("scratchpad.record_every=0", "scratchpad.record_every"),
        ("scratchpad.enabled=maybe", "scratchpad.enabled"),
        ("+scratchpad.colour=red", "scratchpad.colour"),
    ],
)
def test_bad_scratchpad_settings_are_config_errors(
    make_cfg: Callable[..., DictConfig], tmp_path: Path, override: str, key: str
) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build_run(make_cfg(override), show_progress=False)
    assert not (tmp_path / "run" / STORE_FILE).exists()


def test_corrupt_scratchpad_stops_the_run_before_any_work(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    path = tmp_path / "run" / PAD
    path.parent.mkdir(parents=True)
    data = SKELETON.replace("## Open", "## Todo").encode()
    path.write_bytes(data)
    with pytest.raises(ConfigError) as info:
        build_run(make_cfg(), show_progress=False)
    assert f"{path}:10: unknown section" in str(info.value)
    assert path.read_bytes() == data
    assert not (tmp_path / "run" / STORE_FILE).exists()


class _Kill(BaseException):
    """Ends the session like a kill (an Exception in one attempt would be contained)."""


@dataclass
class _Crash:
    """Fails one attempt with ``exc`` (as a kill would stop it), others go to ``inner``."""

    inner: Mutator
    seed: int
    exc: BaseException

    def mutate(self, request: MutationRequest) -> MutationOutcome:
        if request.seed == self.seed:
            raise self.exc
        return self.inner.mutate(request)


def _run_with(cfg: DictConfig, crash_attempt: int, exc: BaseException) -> None:
    built = build_run(cfg, show_progress=False)
    built.engine.mutator = _Crash(
        built.engine.mutator, derive_seed(int(cfg.seed), "mutate", crash_attempt), exc
    )
    try:
        with pytest.raises(type(exc)):
            built.engine.run()
    finally:
        built.close()


def test_interrupt_leaves_open_items_that_resume_resolves_and_prunes(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    _run_with(make_cfg("max_mutants=20"), 9, KeyboardInterrupt())
    ckpt = tmp_path / "run"
    open_items = {e.key for e in _state(ckpt).state.section(OPEN)}
    assert "run.interrupted" in open_items and "attempt.9" in open_items
    assert len(open_items) >= 2
    run_from_config(make_cfg("max_mutants=20", "resume=true"), show_progress=False)
    state = _state(ckpt).state
    assert state.section(OPEN) == ()
    assert "20 mutants committed" in state.get("run.outcome").text  # type: ignore[union-attr]


@pytest.mark.parametrize("crash_attempt", [5, 6, 7, 8, 11])
def test_crash_and_resume_replays_the_same_prompts(
    make_cfg: Callable[..., DictConfig], tmp_path: Path, crash_attempt: int
) -> None:
    args = ("max_mutants=24", "scratchpad.record_every=3", "seed=4")
    _run_with(make_cfg(*args, run="crashed"), crash_attempt, _Kill("simulated kill"))
    run_from_config(make_cfg(*args, "resume=true", run="crashed"), show_progress=False)
    built = build_run(make_cfg(*args, run="whole"), show_progress=False)
    recorder = _Recording(built.engine.mutator)
    built.engine.mutator = recorder
    try:
        built.engine.run()
    finally:
        built.close()
    assert len({r.scratchpad for r in recorder.requests}) >= 3  # the notes did change
    assert program_ids(tmp_path / "crashed") == program_ids(tmp_path / "whole")
    crashed = (tmp_path / "crashed" / PAD).read_text().splitlines()
    whole = (tmp_path / "whole" / PAD).read_text().splitlines()
    assert crashed == whole
