"""Ablation arms differ only by the arm: an abstaining memory leaves the search unchanged."""

from __future__ import annotations

from collections.abc import Callable

from omegaconf import DictConfig

from gigaevo.evolution.store import ProgramStore
from gigaevo.pipeline.build import STORE_FILE, run_from_config


def _ids(cfg: DictConfig) -> list[str]:
    run_from_config(cfg, show_progress=False)
    store = ProgramStore(f"{cfg.checkpoint_dir}/{STORE_FILE}")
    try:
        return [p.id for p in store.iter_programs()]
    finally:
        store.close()


def test_memory_none_and_abstaining_v2_give_the_same_history(
    make_cfg: Callable[..., DictConfig],
) -> None:
    # memory=v2 authors cards but (until its read side lands) offers none, so
    # every prompt, including the scratchpad prefix, must be the same as
    # under memory=none
    none = _ids(make_cfg("max_mutants=20", "memory=none", run="none"))
    v2 = _ids(make_cfg("max_mutants=20", "memory=v2", "memory.selection=none", run="v2"))
    assert none == v2
