"""The committer keeps a bounded cache of programs; a miss reads the store, and the history
does not depend on the cache's size."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from omegaconf import DictConfig

from gigaevo.evolution import committer
from gigaevo.evolution.store import ProgramStore
from gigaevo.pipeline.build import STORE_FILE, run_from_config


def _run(cfg: DictConfig) -> list[tuple[str, str, float, tuple[str, ...], str]]:
    run_from_config(cfg, show_progress=False)
    store = ProgramStore(f"{cfg.checkpoint_dir}/{STORE_FILE}")
    try:
        whole = [
            (p.id, str(p.status), p.fitness, p.parent_ids, p.code) for p in store.iter_programs()
        ]
        assert [p.id for p in store.iter_programs(batch=3)] == [x[0] for x in whole]
        return whole
    finally:
        store.close()


def test_a_tiny_cache_reads_parents_back_and_changes_nothing(
    make_cfg: Callable[..., DictConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    get = ProgramStore.get

    def counted(self: ProgramStore, program_id: str):  # type: ignore[no-untyped-def]
        reads.append(program_id)
        return get(self, program_id)

    monkeypatch.setattr(ProgramStore, "get", counted)
    args = ("max_mutants=40", "memory=v2", "pipeline=memory_guided")
    full = _run(make_cfg(*args, run="full"))
    assert reads == []  # 41 programs fit the default cache: nothing is read back
    monkeypatch.setattr(committer, "PROGRAM_CACHE", 2)
    tiny = _run(make_cfg(*args, run="tiny"))
    assert len(reads) > 10  # parents evicted from the cache came from the store
    assert len(tiny) == 41
    assert tiny == full
