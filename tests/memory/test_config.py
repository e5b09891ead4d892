"""memory=v2 composes with every memory/llm and memory/write option and builds a run."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gigaevo.memory.v2 import CardBankMemory
from gigaevo.pipeline.build import ConfigError, build_run
from tests.conftest import CONFIG_DIR, compose_config


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize(
    ("group", "option"),
    [("memory/llm", o) for o in _options("memory/llm")]
    + [("memory/write", o) for o in _options("memory/write")],
)
def test_each_option_builds_the_provider(
    group: str, option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = compose_config(
        ["memory=v2", f"{group}={option}", f"checkpoint_dir={tmp_path}", "max_mutants=1"]
    )
    key_env = OmegaConf.select(cfg, "memory.llm.api_key_env")
    if key_env:  # remote clients read their key at construction (never called here)
        monkeypatch.setenv(key_env, "test-key-not-used")
    built = build_run(cfg, show_progress=False)
    try:
        assert isinstance(built.memory, CardBankMemory)
        assert built.memory.settings.write.cadence == cfg.memory.write.cadence
    finally:
        built.close()


def test_defaults_are_offline_and_live(tmp_path: Path) -> None:
    cfg = compose_config(["memory=v2", f"checkpoint_dir={tmp_path}"])
    assert cfg.memory.llm._target_.endswith("OfflineMemoryLLM")
    assert cfg.memory.write.cadence == "live"


def test_a_bad_memory_setting_is_a_config_error(tmp_path: Path) -> None:
    cfg = compose_config(
        ["memory=v2", f"checkpoint_dir={tmp_path}", "memory.writer.max_ingest_attempts=0"]
    )
    with pytest.raises(ConfigError, match=r"memory\.writer: max_ingest_attempts must be >= 1"):
        build_run(cfg, show_progress=False)


def test_a_corrupt_shared_bank_is_a_config_error(tmp_path: Path) -> None:
    bank = tmp_path / "bank"
    bank.mkdir()
    (bank / "cards.json").write_text("{not json")
    cfg = compose_config(
        ["memory=v2", f"checkpoint_dir={tmp_path / 'run'}", f"memory_bank_dir={bank}"]
    )
    with pytest.raises(ConfigError, match="is not a readable card bank"):
        build_run(cfg, show_progress=False)
    assert (bank / "cards.json").read_text() == "{not json"


def test_a_bank_that_breaks_mid_run_stops_the_run_as_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gigaevo.memory.v2 import CorruptBankError
    from gigaevo.pipeline.build import run_from_config

    def broken(self: CardBankMemory, result: object) -> None:
        raise CorruptBankError(f"{tmp_path}/cards.json is not a readable card bank (x)")

    monkeypatch.setattr(CardBankMemory, "observe", broken)
    cfg = compose_config(
        ["memory=v2", "problem=rastrigin", f"checkpoint_dir={tmp_path}", "max_mutants=3"]
    )
    with pytest.raises(ConfigError, match="not a readable card bank"):
        run_from_config(cfg, show_progress=False)
    assert (tmp_path / "memory_stats.json").exists()  # close() still ran
