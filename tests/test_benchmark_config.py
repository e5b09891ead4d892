"""The benchmark scripts print the configuration they actually run (issue 19: three of them
said "memory=none" while running memory=v2).

Each script that runs the pipeline is executed with ``run_from_config`` replaced by a stub
that records the composed config and writes a plausible ``summary.json``: the printed
``config:`` lines must be exactly the descriptions of the configs run, and the description
must name the memory option Hydra actually chose.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = {
    "bench_progress": ["--mutants", "3", "--seeds", "0", "1"],
    "bench_throughput": ["--mutants", "3"],
    "bench_scratchpad": ["--mutants", "3", "--repeats", "1"],
}


@pytest.fixture
def bench_modules(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    loaded = {}
    for name in (*SCRIPTS, "_config"):
        sys.modules.pop(name, None)
        loaded[name] = importlib.import_module(name)
    yield loaded
    for name in (*SCRIPTS, "_config"):
        sys.modules.pop(name, None)


def _fake_run(ran: list[DictConfig]) -> Any:
    def run_from_config(cfg: DictConfig, show_progress: bool = False) -> None:
        ran.append(cfg)
        summary = {
            "best_fitness": 1.0,
            "initial_fitness": 0.5,
            "n_valid": 3,
            "n_mutants": 3,
            "wall_seconds": 0.1,
        }
        (Path(cfg.checkpoint_dir) / "summary.json").write_text(json.dumps(summary))

    return run_from_config


@pytest.mark.parametrize(("script", "argv"), sorted(SCRIPTS.items()))
def test_printed_configuration_is_what_runs(
    script: str,
    argv: list[str],
    bench_modules: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module, config = bench_modules[script], bench_modules["_config"]
    ran: list[DictConfig] = []
    monkeypatch.setattr(module, "run_from_config", _fake_run(ran))
    monkeypatch.setattr(sys, "argv", [script, *argv])
    module.main()
    out = capsys.readouterr().out
    printed = [
        line.removeprefix("config: ") for line in out.splitlines() if line.startswith("config: ")
    ]
    assert ran, f"{script} ran nothing"
    assert sorted(set(printed)) == sorted({config.describe(cfg) for cfg in ran})
    assert all("memory=v2 (" in line for line in printed)  # the default memory
    assert "memory=none" not in out


def test_extra_overrides_reach_the_printed_configuration(
    bench_modules: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = bench_modules["bench_progress"]
    ran: list[DictConfig] = []
    monkeypatch.setattr(module, "run_from_config", _fake_run(ran))
    argv = ["--mutants", "3", "--seeds", "0", "--set", "memory=none", "pipeline=guided"]
    monkeypatch.setattr(sys, "argv", ["bench_progress", *argv])
    module.main()
    out = capsys.readouterr().out
    assert "memory=none" in out and "memory=v2" not in out
    assert len(ran) == 1 and ran[0].memory._target_ == "gigaevo.memory.NoMemory"


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["memory=none"],
        ["memory=v2_multitask"],
        ["memory.selection=none", "memory/evictor=none", "memory/write=end_of_run"],
    ],
)
def test_the_description_names_hydras_choice(bench_modules: Any, overrides: list[str]) -> None:
    config = bench_modules["_config"]
    cfg = config.run_config("/tmp/unused", *overrides)
    with initialize_config_dir(config_dir=str(ROOT / "config"), version_base="1.3"):
        hydra_cfg = compose(
            "config", overrides=["checkpoint_dir=/tmp/unused", *overrides], return_hydra_config=True
        )
    choices = hydra_cfg.hydra.runtime.choices
    text = config.describe(cfg)
    assert f"memory={choices['memory']}" in text
    assert f"problem={cfg.problem.name}" in text
    if choices["memory"] != "none":
        assert f"evictor={choices['memory/evictor']}" in text
        assert f"write={choices['memory/write']}" in text
        assert f"selection={cfg.memory.selection}" in text


def _fake_run_with_events(ran: list[DictConfig]) -> Any:
    """``run_from_config`` that also writes the two events bench_memory_scale reads."""
    base = _fake_run(ran)

    def run_from_config(cfg: DictConfig, show_progress: bool = False) -> None:
        base(cfg, show_progress)
        events = [{"event": "initial", "time": 0.0}, {"event": "mutant", "attempt": 1, "time": 1.0}]
        lines = "".join(json.dumps(e) + "\n" for e in events)
        (Path(cfg.checkpoint_dir) / "events.jsonl").write_text(lines)

    return run_from_config


@pytest.mark.parametrize(
    ("overrides", "memory"), [((), "memory=v2"), (("memory=none",), "memory=none")]
)
def test_the_memory_scale_run_prints_what_it_runs(
    overrides: tuple[str, ...],
    memory: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    for name in ("bench_memory_scale", "bench_memory_bank", "_config"):
        sys.modules.pop(name, None)
    try:
        module = importlib.import_module("bench_memory_scale")
        config = importlib.import_module("_config")
        ran: list[DictConfig] = []
        monkeypatch.setattr(module, "run_from_config", _fake_run_with_events(ran))
        module.real_run(1, *overrides)
        out = capsys.readouterr().out
    finally:
        for name in ("bench_memory_scale", "bench_memory_bank", "_config"):
            sys.modules.pop(name, None)
    (cfg,) = ran
    assert f"config: {config.describe(cfg)}\n" in out
    label = config.memory_description(cfg)
    assert f"1 mutants, {label}:" in out and label.startswith(memory)


@pytest.mark.parametrize(
    ("overrides", "memory"), [([], "memory=v2 ("), (["memory=none"], "memory=none")]
)
def test_the_observe_benchmark_prints_what_its_child_runs(
    overrides: list[str],
    memory: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import gigaevo.pipeline.build as build
    from gigaevo.memory.v2.provider import CardBankMemory

    for name in ("decide", "observe"):  # the child wraps them: restored after the test
        monkeypatch.setattr(CardBankMemory, name, getattr(CardBankMemory, name))
    ran: list[DictConfig] = []
    monkeypatch.setattr(build, "run_from_config", _fake_run(ran))
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    for name in ("bench_memory_observe", "_config"):
        sys.modules.pop(name, None)
    try:
        module = importlib.import_module("bench_memory_observe")
        module.child(ROOT, 3, False, overrides)
        config = sys.modules["_config"]
        out = capsys.readouterr().out
    finally:
        for name in ("bench_memory_observe", "_config"):
            sys.modules.pop(name, None)
    (cfg,) = ran
    printed = [line for line in out.splitlines() if line.startswith("config: ")]
    assert printed == [f"config: {config.describe(cfg)}"] and memory in printed[0]
