"""Every config group option composes and its components instantiate."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from gigaevo.pipeline.build import build_run
from tests.conftest import CONFIG_DIR, compose_config

GROUPS = ["problem", "llm", "evolution", "evaluator", "pipeline", "memory"]


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize(("group", "option"), [(g, o) for g in GROUPS for o in _options(g)])
def test_option_builds_a_run(
    group: str, option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = compose_config(
        [f"{group}={option}", f"checkpoint_dir={tmp_path}", "progress=false", "max_mutants=1"]
    )
    for node in ("llm", "memory.llm"):  # remote clients read their key at construction
        key_env = OmegaConf.select(cfg, f"{node}.api_key_env")
        if key_env:
            monkeypatch.setenv(key_env, "test-key-not-used")
    built = build_run(cfg, show_progress=False)
    try:
        assert built.engine.problem.name == cfg.problem.name
    finally:
        built.close()


def test_leaf_components_instantiate() -> None:
    cfg = compose_config(["checkpoint_dir=/tmp/unused"])
    for node in ("selector", "inspirations", "scheduler", "migration"):
        assert instantiate(cfg.evolution[node]) is not None
    assert instantiate(cfg.memory) is not None
    assert instantiate(cfg.llm) is not None


def test_experiment_preset() -> None:
    cfg = compose_config(["+experiment=quick", "checkpoint_dir=/tmp/unused"])
    assert cfg.problem.name == "rastrigin" and cfg.max_mutants == 30
