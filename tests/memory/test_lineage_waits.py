"""Roots still waiting for their lineage window are not evaluated again (issue 16).

``OutcomeRecorder._evaluate`` asks only ``maturity`` of a root whose outcome is the plain
wait; after every outcome of a provider run, each root's kept outcome must still equal
``root_outcome`` over the island's edges as indexed then (what a full evaluation gives).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gigaevo.memory.base import MutationContext
from gigaevo.memory.v2.causal import root_outcome
from tests.memory.helpers import memory_provider, result
from tests.memory.ledger_rows import put_card

BUDGET, DEPTH = 5, 3


@pytest.mark.slow  # a whole provider run: seconds, not milliseconds
def test_kept_outcomes_equal_a_full_evaluation_after_every_outcome(tmp_path: Path) -> None:
    mem = memory_provider(
        tmp_path,
        selection="causal",
        causal={"summary_draws": 64, "world_draws": 64, "lineage_budget": BUDGET},
        writer={"authoring_enabled": False},
    )
    put_card(mem.store, "ins-a")
    recorder = mem.recorder
    assert recorder is not None
    rng = np.random.default_rng(5)
    children = ["root-program"]
    skipped = 0
    for attempt in range(70):
        parent = children[-int(rng.integers(1, min(4, len(children)) + 1))]
        island = int(rng.integers(3))
        fitness = float(rng.uniform(2.0, 8.0))
        ctx = MutationContext("toy", attempt, parent, fitness, island, (attempt % 3,), (0.5,), 0.1)
        decision = mem.decide(ctx)
        r = result(
            attempt,
            gain=float(rng.normal(0.02, 0.05)),
            parent_fitness=fitness,
            valid=rng.random() > 0.1,
            archive_status="improved" if rng.random() < 0.8 else "rejected",
            child_id=f"child-{attempt}",
            cited=tuple(decision.card_ids) if rng.random() < 0.6 else (),
        )
        waits_before = set(recorder._waits)
        mem.observe(replace(r, parent_id=parent, island=island))
        children.append(f"child-{attempt}")
        skipped += len(waits_before & set(recorder._waits))
        for did, root in recorder._roots.items():
            full = root_outcome(root, recorder._islands[root.island], DEPTH, BUDGET)
            assert recorder._outcomes[did] == full, (attempt, did)
    assert skipped > 20, "too few waits kept: the check would be weak"
    mem.close()
