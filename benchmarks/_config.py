"""Shared helpers of the benchmark scripts: compose the run config like run.py does, and say
which configuration a benchmark actually runs."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

CONFIG_DIR = Path(__file__).resolve().parents[1] / "config"
_ANNOUNCED: set[str] = set()


def run_config(checkpoint_dir: str, *overrides: str) -> DictConfig:
    """The composed config for a quiet run in ``checkpoint_dir`` with ``overrides``."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(
            "config",
            overrides=[f"checkpoint_dir={checkpoint_dir}", "progress=false", *overrides],
        )


def _target(node: object) -> str:
    target = str(OmegaConf.select(node, "_target_") or "?")  # type: ignore[arg-type]
    return target.rsplit(".", 1)[-1]


def memory_description(cfg: DictConfig) -> str:
    """``memory=<option> (...)`` read from what the config builds, not from its overrides."""
    target = _target(cfg.memory)
    if target == "NoMemory":
        return "memory=none"
    if target != "CardBankMemory":
        return f"memory={target}"
    m = cfg.memory
    name = "v2_multitask" if OmegaConf.select(m, "transfer.enabled") else "v2"
    details = [
        f"selection={m.selection}",
        f"write={OmegaConf.select(m, 'write.cadence')}",
        f"evictor={OmegaConf.select(m, 'evictor.mode')}",
        f"memory/llm={_target(m.llm)}",
    ]
    return f"memory={name} ({', '.join(details)})"


def describe(cfg: DictConfig) -> str:
    """One line naming the key settings of a run: problem, LLM, memory, pipeline, budget, seed,
    evaluator workers, mutations in flight and the scratchpad."""
    llm = _target(cfg.llm)
    llm = (
        "offline" if llm == "OfflineMutatorLLM" else f"{llm}({OmegaConf.select(cfg, 'llm.model')})"
    )
    pad = cfg.scratchpad
    scratchpad = f"every {pad.record_every}" if pad.enabled else "off"
    return (
        f"problem={cfg.problem.name}, llm={llm}, {memory_description(cfg)}, "
        f"mutator mode={OmegaConf.select(cfg, 'pipeline.mutator.mode')}, "
        f"max_mutants={cfg.max_mutants}, seed={cfg.seed}, "
        f"evaluator.max_workers={OmegaConf.select(cfg, 'evaluator.max_workers')}, "
        f"evolution.max_in_flight={OmegaConf.select(cfg, 'evolution.max_in_flight')}, "
        f"scratchpad={scratchpad}"
    )


def announce(cfg: DictConfig) -> None:
    """Print ``config: <describe(cfg)>`` the first time a configuration is run."""
    line = f"config: {describe(cfg)}"
    if line not in _ANNOUNCED:
        _ANNOUNCED.add(line)
        print(line, flush=True)
