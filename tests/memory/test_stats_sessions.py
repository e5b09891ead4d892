"""memory_stats.json is cumulative over a run's sessions (a resumed run reports its totals)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from gigaevo.memory.v2.provider import SESSION_COUNTERS
from gigaevo.pipeline.build import run_from_config

# numeric fields that describe the state at the last close, not something counted
STATE_FIELDS = (
    "bank.generation",
    "bank.n_cards",
    "bank.n_cards_this_task",
    "outcomes_pending",
    "ledger",  # counted from write_ledger.jsonl, which already holds every session
    "duplicate_audit",
    "decide.leases_held",
    "decide.ope_written_at_outcome",
    "decide.applicability.cached_labels",
    "decide.transfer",
    "evictor.max_viability_probability",
)


def _numeric_leaves(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _numeric_leaves(v, f"{prefix}{k}.")]
    numeric = isinstance(node, (int, float)) and not isinstance(node, bool)
    return [prefix.rstrip(".")] if numeric else []


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + ".") for r in roots)


def test_a_resumed_run_reports_the_totals_of_both_sessions(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    ckpt = tmp_path / "run"
    run_from_config(make_cfg("max_mutants=6"), show_progress=False)
    first = json.loads((ckpt / "memory_stats.json").read_text())
    run_from_config(make_cfg("max_mutants=10", "resume=true"), show_progress=False)
    total = json.loads((ckpt / "memory_stats.json").read_text())
    assert total["sessions"] == 2 and first["sessions"] == 1
    assert total["outcomes_observed"] == 10 and total["decide"]["outcomes"] == 10
    assert total["decide"]["decisions"] == 10
    rows = [json.loads(line) for line in (ckpt / "write_ledger.jsonl").read_text().splitlines()]
    assert total["outcomes_ingested"] == sum(r["item"] == "insight" for r in rows)
    assert total["outcomes_ingested"] > first["outcomes_ingested"] > 0
    assert total["memory_llm"]["calls"] > first["memory_llm"]["calls"]
    unclassified = [
        p
        for p in _numeric_leaves(total)
        if not _under(p, SESSION_COUNTERS) and not _under(p, STATE_FIELDS)
    ]
    assert unclassified == [], "add each to SESSION_COUNTERS or STATE_FIELDS"
