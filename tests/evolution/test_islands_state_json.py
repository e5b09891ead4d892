"""``IslandsText``: the islands' checkpoint text, re-encoding changed islands only.

The committer writes it into the store at every commit and a resume reads it
back, so it must be byte for byte what ``json.dumps(to_dict(), sort_keys=True)``
gives (exact resume), whatever happened to the archives since the last call.
"""

from __future__ import annotations

import json
import random

import pytest

from gigaevo.evolution import BehaviourSpace, IslandModel
from gigaevo.evolution.archive import MapElitesArchive
from gigaevo.evolution.committer import IslandsText
from gigaevo.problems.spec import MetricsSpec

ADAPTIVE = [
    {"name": "code_length", "source": "feature", "bins": 6, "scale": "log", "adaptive": True},
    {"name": "n_statements", "source": "feature", "bins": 4, "scale": "log", "adaptive": True},
]
FIXED = [
    {"name": "x", "low": 0.0, "high": 1.0, "bins": 5},
    {"name": "n_lines", "source": "feature", "low": 1, "high": 100, "bins": 3, "scale": "log"},
]


def _same(text: IslandsText, model: IslandModel) -> None:
    assert text(model) == json.dumps(model.to_dict(), sort_keys=True)


@pytest.mark.parametrize("axes", [ADAPTIVE, FIXED], ids=["adaptive", "fixed"])
@pytest.mark.parametrize("capacity", [None, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_state_json_is_to_dicts_text_after_any_sequence(
    metrics: MetricsSpec, axes: list[dict[str, object]], capacity: int | None, seed: int
) -> None:
    rng = random.Random(seed)
    model = IslandModel(3, BehaviourSpace.from_dicts(axes), metrics, capacity)
    text = IslandsText()
    _same(text, model)
    for step in range(400):
        op = rng.random()
        island = rng.randrange(3)
        if op < 0.75:  # a new program, sometimes far out (an adaptive axis grows: re-drawn)
            scale = 50.0 if rng.random() < 0.05 else 1.0
            values = (rng.uniform(0.0, 1.0), rng.uniform(1.0, 100.0) * scale)
            if axes is ADAPTIVE:
                values = (rng.uniform(100.0, 2000.0) * scale, rng.uniform(5.0, 60.0) * scale)
            model.add(island, f"p{step}", rng.choice([1.0, 2.0, rng.random()]), values=values)
        elif op < 0.85 and model.elites(island):  # a removal
            model.remove(island, rng.choice(model.elites(island)).program_id)
        elif op < 0.95:  # a migration: an elite of one island offered to the next
            elites = model.elites(island)
            if elites:
                e = rng.choice(elites)
                model.add((island + 1) % 3, e.program_id, e.fitness, values=e.values)
        else:  # a resume: the saved state loaded into a fresh model
            saved = json.loads(text(model))
            if rng.random() < 0.5:  # into a fresh model, or into the same one
                model = IslandModel(3, BehaviourSpace.from_dicts(axes), metrics, capacity)
            model.load_dict(saved)
        if rng.random() < 0.5:  # not every change is followed by a checkpoint
            _same(text, model)
    _same(text, model)


def test_only_changed_islands_are_encoded_again(
    monkeypatch: pytest.MonkeyPatch, metrics: MetricsSpec
) -> None:
    model = IslandModel(3, BehaviourSpace.from_dicts(FIXED), metrics)
    model.add(0, "a", 1.0, values=(0.1, 5.0))
    model.add(1, "b", 1.0, values=(0.5, 5.0))
    text = IslandsText()
    text(model)
    encoded: list[int] = []
    to_dict = MapElitesArchive.to_dict

    def counted(self: MapElitesArchive) -> dict[str, object]:
        encoded.append(next(i for i in range(3) if model.archive(i) is self))
        return to_dict(self)

    monkeypatch.setattr(MapElitesArchive, "to_dict", counted)
    text(model)
    assert encoded == []  # nothing changed
    model.add(0, "a2", 1.0, values=(0.1, 5.0))  # same cell, not better: rejected
    text(model)
    assert encoded == []
    model.add(2, "c", 1.0, values=(0.9, 50.0))
    text(model)
    assert encoded == [2]
    model.remove(1, "b")
    text(model)
    assert encoded == [2, 1]
