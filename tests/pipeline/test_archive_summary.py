"""The archive in a real run: coverage and QD-score in summary.json and events.

The exact resume of the archive and its grid is checked by
``tests/pipeline/test_resume.py::test_kill_9_then_resume_matches_uninterrupted_run``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from gigaevo.evolution.store import ProgramStore
from gigaevo.pipeline.build import STORE_FILE, run_from_config
from gigaevo.problems import load_problem


def _state(ckpt: Path) -> dict[str, Any]:
    store = ProgramStore(ckpt / STORE_FILE)
    try:
        state: dict[str, Any] = store.get_meta("state")
        return state
    finally:
        store.close()


def test_summary_and_events_report_coverage_and_qd_score(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    run_from_config(make_cfg("max_mutants=51", "memory=none"), show_progress=False)
    ckpt = tmp_path / "run"
    summary = json.loads((ckpt / "summary.json").read_text())
    islands = _state(ckpt)["islands"]["islands"]
    metrics = load_problem(name="rastrigin").metrics
    assert [s["island"] for s in summary["archive"]] == [0, 1]
    for stats, archive in zip(summary["archive"], islands, strict=True):
        elites = archive["elites"]
        assert stats["coverage"] == len(elites) >= 2  # the grid spreads from the start
        assert stats["n_cells"] == 200  # rastrigin: 20 x 10
        assert abs(stats["qd_score"] - sum(metrics.quality(e["fitness"]) for e in elites)) < 1e-6
    names = [d["name"] for d in summary["descriptors"]]
    assert names == ["l2_norm", "code_length"]
    assert summary["descriptors"][0]["low"] == 0.0  # the floor
    events = [json.loads(line) for line in (ckpt / "events.jsonl").read_text().splitlines()]
    stats_events = [e for e in events if e["event"] == "archive_stats"]
    assert [e["n_mutants"] for e in stats_events] == [50]
    assert any(e["event"] == "rebin" for e in events)
