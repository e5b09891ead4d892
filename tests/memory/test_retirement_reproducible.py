"""A seeded offline memory=v2 run retires the same card at the same outcome every time (issue 20).

The retirement draws are keyed by the evidence version V. V used to digest whole ledger
rows, wall-clock times and the writing session's id included, so the same seeded run
retired a card at outcome 349, 324 or 349. Here the real ``CardBankMemory`` (causal
selection, the outcome recorder, the causal evictor sweeping every 10 outcomes; fewer
draws and an 8-edge lineage window than in production, to stay quick) runs one seeded
synthetic task three times, each in a fresh directory and session at a different
time: the decisions, V at every sweep, every viability draw count and the retirement
(card, outcome, V) must be identical, and the retirement must really happen.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gigaevo.memory.base import MemoryRuntime, MutationContext, MutationResult
from gigaevo.memory.v2 import CardBankMemory, HashingEmbedder
from gigaevo.memory.v2.read.events import EVENTS_FILE
from gigaevo.problems.spec import MetricsSpec
from tests.memory.helpers import open_store
from tests.memory.ledger_rows import fast_dir, put_card

TASK = "toy"
METRICS = MetricsSpec("score", True, 0.0, 1.0, 0.0)
CARDS = {"harmful": (-0.08, 0.45), "plain": (0.0, 0.0)}  # (gain shift, added invalid rate)
# Seed 3 retired the harmful card at outcome 49 until retirement weighed both invalidity
# shift levels (issue 20, session 6). Seeds 0, 1, 6, 7 and 8 then never retired it: the
# lineage head's residual scale piled at its lower bound on these deterministic outcomes
# and the gate switched the sweeps off. Since the gate ignores that lower-end mass when
# every row's measurement is declared (session 7), seeds 2-6 retire it (outcomes 59, 99,
# 49, 59, 79); in 0, 1, 7 and 8 the sweeps run and keep it (it left the safe set with 4
# to 13 cited rows, and one context keeps W at 0.10-0.21). With the wide shift level's
# prior weight at 0.3 (session 9; it was 0.1) seeds 0, 1, 3, 4, 5, 7 and 8 retire it
# (outcomes 39, 39, 119, 49, 59, 129, 129) and 2 and 6 keep it. The point here is that a
# retirement that happens happens identically, so the test runs a seed where one does.
SEED = 4
ROUNDS = 130  # the run stops at its retirement (outcome 49 with these settings)


def _run(directory: Path, seed: int = SEED) -> dict[str, Any]:
    """One seeded run; returns its decisions, sweep versions, draws and retirements."""
    directory.mkdir(parents=True)
    store = open_store(directory)
    for cid in CARDS:
        put_card(store, cid, task=TASK)
    runtime = MemoryRuntime(TASK, "A toy task.", METRICS, directory, directory, seed, ROUNDS)
    mem = CardBankMemory(
        runtime,
        llm=None,
        embedder=HashingEmbedder(),
        selection="causal",
        writer={"authoring_enabled": False},
        program_exemplars={"enabled": False},
        causal={"summary_draws": 256, "world_draws": 128, "lineage_budget": 8},
        evictor={"mode": "causal", "sweep_every": 10, "retirement_draws": 2048},
    )
    assert mem.evictor is not None and mem.reader is not None
    rng = np.random.default_rng(seed)
    decisions, retired = [], []
    for t in range(ROUNDS):
        f, b = float(rng.uniform(0.2, 0.8)), rng.uniform(size=2)
        cell = tuple(int(v) for v in np.minimum(b * 3, 2))
        ctx = MutationContext(TASK, t, f"p{t}", f, t % 2, cell, tuple(b), t / ROUNDS)
        d = mem.decide(ctx)
        card = d.card_ids[0] if d.card_ids else None
        decisions.append((d.record.get("proposed_id"), d.record.get("z")))
        shift, extra = CARDS.get(card or "", (0.0, 0.0))
        invalid = rng.uniform() < 0.05 + extra
        gain = float(np.clip(0.01 + shift + 0.03 * rng.standard_normal(), -f, 1.0 - f))
        time.sleep(0.001)  # distinct wall-clock times in every run
        mem.observe(
            MutationResult(
                attempt=t, child_id=f"c{t}", parent_id=f"p{t}", status="accepted",
                valid=not invalid, parent_fitness=f,
                child_fitness=0.0 if invalid else f + gain,
                normalised_gain=None if invalid else gain,
                cited_card_ids=(card,) if card else (), accepted=not invalid, island=t % 2,
                parent_cell=cell, archive_status=None if invalid else "improved",
                se=None if invalid else 0.0, measurement=None if invalid else "deterministic",
            )
        )  # fmt: skip
        live = {c.id for c in mem.store.cards(task_key=TASK)}
        retired.extend((t, cid) for cid in CARDS if cid not in live and (t, cid) not in retired)
        if any(cid not in live for cid in CARDS):
            break
    stats = mem.evictor.stats()
    owner = mem.reader.evidence.owner
    mem.close()
    events = [json.loads(line) for line in (directory / EVENTS_FILE).read_text().splitlines()]
    return {
        "decisions": decisions,
        "retired": retired[:1],
        "retired_events": [
            (e["retired_card_ids"], e["evidence_version"])
            for e in events
            if e.get("event") == "retired" and e.get("retired_card_ids")
        ],
        "evaluations": stats["viability_evaluations"],
        "verdicts": stats["verdicts"],
        "owner": owner,
    }


@pytest.mark.slow
def test_the_same_seeded_run_retires_identically_three_times(tmp_path: Path) -> None:
    runs = []
    for i in range(3):
        with fast_dir(tmp_path / f"run{i}") as base:
            runs.append(_run(base / "run"))
    first = runs[0]
    assert first["retired"] and first["retired"][0][1] == "harmful", first["retired"]
    assert first["evaluations"] > 0 and first["verdicts"] >= 1  # retirement draws were made
    assert len({r["owner"] for r in runs}) == 3  # three writing sessions
    for other in runs[1:]:
        for key in ("decisions", "retired", "retired_events", "evaluations", "verdicts"):
            assert other[key] == first[key], key


def test_a_deterministic_task_retires_a_harmful_card_though_lineage_residuals_are_exactly_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 3: every matured lineage residual is exactly 0 (deterministic outcomes), so the
    lineage head's residual scale sits at its lower bound. The gate used to count that mass
    (M- > alpha) and switch retirement off for good; with every measurement declared it
    does not (memory-model.md "Eligibility"), and the harmful card is retired at a sweep
    the old rule would have disabled."""
    from gigaevo.memory.v2.read import evictor

    gates: list[tuple[str, str]] = []
    gate = evictor.heads_gate

    def recording(heads: Any, alpha: float, declared: bool = False) -> str:
        gates.append((gate(heads, alpha, declared), gate(heads, alpha, False)))
        return gates[-1][0]

    monkeypatch.setattr(evictor, "heads_gate", recording)
    with fast_dir(tmp_path) as base:
        run = _run(base / "run", seed=3)
    assert run["retired"] == [(119, "harmful")], run["retired"]
    assert gates and all(new == "" for new, _ in gates)
    assert gates[-1][1].startswith("lineage head residual scale at its boundary"), gates[-1]
