"""Every config group option composes and its components instantiate."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hydra.utils import get_class, instantiate
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
    """Each leaf node builds the class its ``_target_`` names, with the configured values."""
    cfg = compose_config(["checkpoint_dir=/tmp/unused"])
    for node in ("selector", "inspirations", "scheduler", "migration"):
        built = instantiate(cfg.evolution[node])
        assert type(built) is get_class(cfg.evolution[node]._target_), node
        for key, value in cfg.evolution[node].items():
            if not str(key).startswith("_") and hasattr(built, str(key)):
                assert getattr(built, str(key)) == value, (node, key)
    memory = instantiate(cfg.memory)  # _partial_: the pipeline adds the runtime
    assert isinstance(memory, functools.partial)
    assert memory.func is get_class(cfg.memory._target_)
    llm = instantiate(cfg.llm)
    assert type(llm) is get_class(cfg.llm._target_)


def test_experiment_preset() -> None:
    cfg = compose_config(["+experiment=quick", "checkpoint_dir=/tmp/unused"])
    assert cfg.problem.name == "rastrigin" and cfg.max_mutants == 30
