"""Newly authored cards are recorded as scratchpad Hypotheses, never shown through the notes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from gigaevo.mutation.base import MutationOutcome, MutationRequest
from gigaevo.pipeline.build import build_run


class _Recording:
    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.requests: list[MutationRequest] = []

    def mutate(self, request: MutationRequest) -> MutationOutcome:
        self.requests.append(request)
        return self.inner.mutate(request)  # type: ignore[attr-defined]


def test_new_cards_become_hypotheses_outside_the_prompt(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    cfg = make_cfg("max_mutants=80", "memory=v2", "scratchpad.record_every=10")
    built = build_run(cfg, show_progress=False)
    recorder = _Recording(built.engine.mutator)
    built.engine.mutator = recorder
    try:
        built.engine.run()
    finally:
        built.close()
    ckpt = tmp_path / "run"
    added = [
        row["card_id"]
        for row in map(json.loads, (ckpt / "write_ledger.jsonl").read_text().splitlines())
        if row["outcome"] == "added"
    ]
    assert added, "the offline librarian should admit at least one card in 80 mutants"
    pad = (ckpt / ".agent" / "scratchpad.md").read_text()
    hypotheses = pad.split("## Hypotheses", 1)[1].split("## Decisions", 1)[0]
    for card_id in added:
        assert f"[card.{card_id}]" in hypotheses
        assert f"[src:{card_id} @ " in hypotheses
    assert not any("[card." in r.scratchpad for r in recorder.requests)
