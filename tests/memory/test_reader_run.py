"""End to end: ``memory=v2 pipeline=memory_guided`` offers cards with randomised offer/withhold."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig

from gigaevo.evolution.store import ProgramStore
from gigaevo.memory.v2.evidence import SelectionEvidence
from gigaevo.memory.v2.read.events import EVENTS_FILE, read_events
from gigaevo.memory.v2.read.leases import LEASE_FILE
from gigaevo.memory.v2.read.outcomes import OPE_FILE
from gigaevo.pipeline.build import STORE_FILE, run_from_config

N = 70


def _run(cfg: DictConfig) -> Path:
    run_from_config(cfg, show_progress=False)
    return Path(str(cfg.checkpoint_dir))


def _cfg(make_cfg: Callable[..., DictConfig], *extra: str, run: str = "run") -> DictConfig:
    return make_cfg(f"max_mutants={N}", "memory=v2", "pipeline=memory_guided", *extra, run=run)


def _ledger(ckpt: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with SelectionEvidence(ckpt).open(censor_orphans=False) as ev:
        decisions = sorted(
            (d.attempt, d.proposed_id, d.z, d.rho0, d.rho, d.joint, d.fitted_row_ids)
            for d in ev.decisions()
        )
        by_id = {d.decision_id: d.attempt for d in ev.decisions()}
        terminals = sorted(
            (by_id[t.decision_id], t.status, t.child_id, t.cited_ids, t.gain)
            for t in ev.terminals()
        )
    return decisions, terminals


def _history(ckpt: Path) -> list[tuple[str, float]]:
    store = ProgramStore(f"{ckpt}/{STORE_FILE}")
    try:
        return [(p.id, p.fitness) for p in store.iter_programs()]
    finally:
        store.close()


def test_causal_reader_offers_withholds_and_logs(make_cfg: Callable[..., DictConfig]) -> None:
    ckpt = _run(_cfg(make_cfg))
    with SelectionEvidence(ckpt).open(censor_orphans=False) as ev:
        decisions, terminals = ev.decisions(), ev.terminals()
        obs = ev.observations()
        edges = ev.edges()
    # one decision and one terminal per mutant
    assert sorted(d.attempt for d in decisions) == list(range(N))
    assert len(terminals) == N and len({t.decision_id for t in terminals}) == N
    assert len(edges) == N
    proposed = [d for d in decisions if not d.abstain]
    z1 = [d for d in proposed if d.z == 1]
    z0 = [d for d in proposed if d.z == 0]
    assert z1 and z0, (len(z1), len(z0))
    # every proposal is a card of the universe frozen at the decision
    assert all(d.snapshot(d.proposed_id or "") is not None for d in proposed)
    # the offline mutator cites delivered cards, and only the proposed one
    cited = [o for o in obs if o.terminal.cited_ids]
    assert any(o.cited for o in obs)
    for o in cited:
        assert o.decision.z == 1 and set(o.terminal.cited_ids) <= {o.decision.proposed_id}
    # leases are all released
    leases = json.loads((ckpt / LEASE_FILE).read_text())
    assert leases["leases"] == []
    kinds = [e["event"] for e in read_events(ckpt / EVENTS_FILE)]
    assert kinds.count("assignment") == N and kinds.count("outcome") == N
    ope = json.loads((ckpt / OPE_FILE).read_text())
    assert ope["decisions"] == N and ope["n_treated"] == len(z1) and ope["n_control"] == len(z0)
    stats = json.loads((ckpt / "memory_stats.json").read_text())["decide"]
    assert stats["selection"] == "causal" and stats["decisions"] == N
    assert stats["offered"] == len(z1) and stats["withheld"] == len(z0)
    assert stats["leases_held"] == 0


def test_causal_reader_is_deterministic(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    # the run id is derived from the checkpoint directory and seed: rerun in place
    cfg = _cfg(make_cfg, "max_mutants=40", run="det")
    first = _run(cfg)
    ledger, history = _ledger(first), _history(first)
    shutil.rmtree(first)
    second = _run(cfg)
    assert _ledger(second) == ledger
    assert _history(second) == history


def test_selection_none_abstains_and_writes_no_ledger(
    make_cfg: Callable[..., DictConfig],
) -> None:
    ckpt = _run(make_cfg("max_mutants=5", "memory=v2", "memory.selection=none"))
    assert not (ckpt / "memory_v2_selection_evidence.sqlite3").exists()
    stats = json.loads((ckpt / "memory_stats.json").read_text())
    assert "abstains" in stats["decide"]


def test_unknown_selection_is_a_config_error(make_cfg: Callable[..., DictConfig]) -> None:
    from gigaevo.pipeline.build import ConfigError

    with pytest.raises(ConfigError, match="selection"):
        _run(make_cfg("max_mutants=1", "memory=v2", "memory.selection=sometimes"))
