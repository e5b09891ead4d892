"""The parent selector hears which programs have children in flight, and only those."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from gigaevo.evolution import BestOrTournament, Elite
from gigaevo.pipeline.build import STORE_FILE, build_run
from gigaevo.problems.spec import MetricsSpec


class Spy:
    """The default selector, recording the pending counts it was handed, call by call."""

    def __init__(self) -> None:
        self.inner = BestOrTournament(p_best=0.9)
        self.calls: list[tuple[str, dict[str, int]]] = []

    def select(
        self,
        elites: Sequence[Elite],
        metrics: MetricsSpec,
        rng: np.random.Generator,
        pending: Mapping[str, int] | None = None,
    ) -> Elite:
        chosen = self.inner.select(elites, metrics, rng, pending=pending)
        self.calls.append((chosen.program_id, dict(pending or {})))
        return chosen


def test_strict_dispatch_tells_the_selector_the_parents_of_the_attempts_in_flight(
    make_cfg: Callable[..., DictConfig],
) -> None:
    cfg = make_cfg(
        "max_mutants=16",
        "memory=none",
        "evolution.max_in_flight=3",
        "evolution.dispatch=strict",
        "evolution.n_islands=1",
    )
    built = build_run(cfg, show_progress=False)
    spy = Spy()
    built.engine.selector = spy
    try:
        built.engine.run()
    finally:
        built.close()
    db = sqlite3.connect(Path(cfg.checkpoint_dir) / STORE_FILE)
    try:
        rows = [json.loads(r[0]) for r in db.execute("SELECT data FROM programs")]
    finally:
        db.close()
    assert len(spy.calls) == 16
    parents = [parent for parent, _ in spy.calls]  # attempt a's parent, a = 0, 1, ...
    for attempt, (_, pending) in enumerate(spy.calls):
        # strict: attempt a is dispatched when a - 3 commits; a - 2 and a - 1 are in flight
        in_flight = parents[max(0, attempt - 2) : attempt]
        expected: dict[str, int] = {}
        for p in in_flight:
            expected[p] = expected.get(p, 0) + 1
        assert pending == expected
    assert sum(bool(p) for _, p in spy.calls) >= 14  # a real run: in flight almost always
    children = [r for r in rows if r["parent_ids"]]
    assert sorted(r["parent_ids"][0] for r in children) == sorted(parents)
