"""memory_stats.json reports how many of a run's judgements the evictor's memo supplied."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from gigaevo.memory.v2 import STATS_FILE
from gigaevo.memory.v2.provider import SESSION_COUNTERS
from gigaevo.pipeline.build import run_from_config


def test_a_runs_stats_count_the_judgements_taken_from_the_memo(
    make_cfg: Callable[..., DictConfig],
) -> None:
    """The sweep at close follows the last cadence sweep with no new evidence (48 outcomes,
    a sweep every 4), so each card the cadence sweep judged is judged on the same inputs and
    its judgement comes from the memo; the count adds up over sessions like the other
    counters."""
    cfg = make_cfg("memory=v2", "max_mutants=48", "memory.evictor.sweep_every=4")
    run_from_config(cfg, show_progress=False)
    ev = json.loads((Path(cfg.checkpoint_dir) / STATS_FILE).read_text())["evictor"]
    assert isinstance(ev["judgements_reused"], int)
    assert 0 < ev["judgements_reused"] <= ev["cards_judged"]
    assert "evictor.judgements_reused" in SESSION_COUNTERS
