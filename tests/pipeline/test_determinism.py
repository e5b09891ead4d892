"""A seeded offline run gives the same history twice, whatever max_workers is."""

from __future__ import annotations

from collections.abc import Callable

from omegaconf import DictConfig

from gigaevo.evolution.store import ProgramStore
from gigaevo.pipeline.build import STORE_FILE, run_from_config


def _history(cfg: DictConfig) -> list[tuple[str, str, float, tuple[str, ...]]]:
    run_from_config(cfg, show_progress=False)
    store = ProgramStore(f"{cfg.checkpoint_dir}/{STORE_FILE}")
    try:
        return [(p.id, str(p.status), p.fitness, p.parent_ids) for p in store.iter_programs()]
    finally:
        store.close()


def test_same_seed_same_history_across_worker_counts(make_cfg: Callable[..., DictConfig]) -> None:
    a = _history(make_cfg("max_mutants=24", "evaluator.max_workers=1", run="a"))
    b = _history(make_cfg("max_mutants=24", "evaluator.max_workers=2", run="b"))
    assert len(a) == 25  # one initial program + 24 mutants
    assert a == b


def test_other_seed_other_history(make_cfg: Callable[..., DictConfig]) -> None:
    a = _history(make_cfg("seed=1", run="a"))
    b = _history(make_cfg("seed=2", run="b"))
    assert [x[0] for x in a] != [x[0] for x in b]


def test_memory_v2_runs_repeat_in_any_directory(make_cfg: Callable[..., DictConfig]) -> None:
    # the causal read side draws, card ids and decision ids come from (task, seed)
    # when the bank is the run's own, so the history does not depend on the path
    args = ("max_mutants=40", "memory=v2", "pipeline=memory_guided")
    assert _history(make_cfg(*args, run="a")) == _history(make_cfg(*args, run="b"))
