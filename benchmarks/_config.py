"""Shared helper of the benchmark scripts: compose the run config like run.py does."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

CONFIG_DIR = Path(__file__).resolve().parents[1] / "config"


def run_config(checkpoint_dir: str, *overrides: str) -> DictConfig:
    """The composed config for a quiet run in ``checkpoint_dir`` with ``overrides``."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(
            "config",
            overrides=[f"checkpoint_dir={checkpoint_dir}", "progress=false", *overrides],
        )
