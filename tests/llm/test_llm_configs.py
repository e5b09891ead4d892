"""Every remote option of config/llm and config/memory/llm composes and builds a router."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from gigaevo.llm import LiteLLMRouter
from gigaevo.pipeline.build import _build_llm
from tests.conftest import CONFIG_DIR, compose_config

REMOTE = ["gemini", "gpt54_mini", "openai_compatible", "qwen_instruct"]


def _set_key(cfg: DictConfig, node: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = OmegaConf.select(cfg, f"{node}.api_key_env")
    if env:
        monkeypatch.setenv(env, "test-key-not-used")


@pytest.mark.parametrize("option", REMOTE)
def test_llm_option(option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = compose_config([f"llm={option}", f"checkpoint_dir={tmp_path}", "seed=3"])
    _set_key(cfg, "llm", monkeypatch)
    node = OmegaConf.to_container(cfg.llm, resolve=True)
    assert isinstance(node, dict) and node.pop("max_cost_usd") is None
    router = instantiate(node)
    assert isinstance(router, LiteLLMRouter)
    assert router.role == "mutator" and router.seed == 3
    assert router.call_log is not None and router.call_log.path == tmp_path / "llm_calls.jsonl"


def _memory_llm_cfg(option: str, tmp_path: Path) -> DictConfig:
    base = [f"checkpoint_dir={tmp_path}"]
    if (CONFIG_DIR / "memory" / "v2.yaml").exists():
        return compose_config(["memory=v2", f"memory/llm={option}", *base])
    return compose_config([f"+memory/llm={option}", *base])


@pytest.mark.parametrize("option", REMOTE)
def test_memory_llm_option(option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _memory_llm_cfg(option, tmp_path)
    _set_key(cfg, "memory.llm", monkeypatch)
    router = instantiate(cfg.memory.llm)
    assert isinstance(router, LiteLLMRouter) and router.role == "memory"
    assert router.call_log is not None and router.call_log.path == tmp_path / "llm_calls.jsonl"
    assert "max_cost_usd" not in cfg.memory.llm  # the budget is llm.max_cost_usd


def test_remote_options_agree_on_their_keys() -> None:
    keys = {
        f"{group}/{option}": set(OmegaConf.load(CONFIG_DIR / group / f"{option}.yaml"))
        for group in ("llm", "memory/llm")
        for option in REMOTE
    }
    mutator = keys["llm/gemini"]
    for name, found in keys.items():
        expected = mutator if name.startswith("llm/") else mutator - {"max_cost_usd"}
        assert found == expected, name


def _readme_model_commands() -> list[list[str]]:
    """The overrides of every run.py command in docs/real-models.md."""
    section = (CONFIG_DIR.parent / "docs" / "real-models.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)\n```", section, flags=re.S):
        for command in block.replace("\\\n", " ").splitlines():
            if "run.py" in command:
                commands.append(shlex.split(command.split("run.py", 1)[1], comments=True))
    return commands


def test_readme_model_commands_compose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commands = _readme_model_commands()
    assert len(commands) >= 8
    for overrides in commands:
        if "memory=v2" in overrides and not (CONFIG_DIR / "memory" / "v2.yaml").exists():
            continue
        cfg = compose_config([*overrides, f"checkpoint_dir={tmp_path}"])
        _set_key(cfg, "llm", monkeypatch)
        _set_key(cfg, "memory.llm", monkeypatch)
        llm, _ = _build_llm(cfg)
        assert isinstance(llm, LiteLLMRouter), overrides
