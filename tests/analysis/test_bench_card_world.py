"""The synthetic card world of benchmarks/bench_card_world.py on a tiny configuration."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_card_world.py"


@pytest.fixture(scope="module")
def world() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_card_world", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_card_world"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_oracle_has_zero_regret_and_uniform_positive(world: ModuleType) -> None:
    cards = world.default_cards(4)
    traces = [world.run_seed((seed, 30, 10, 128, cards)) for seed in (0, 1)]
    for result in traces:
        assert set(result) == set(world.POLICIES)
        oracle = result["oracle"]
        assert oracle.regret.sum() == 0.0 and oracle.delivered == [0] * 30  # always "good"
        assert result["uniform"].regret.sum() > 0.1
        # never a card: (1 - 5 %) x 0.05 lost every round
        assert result["abstain"].regret == pytest.approx(np.full(30, 0.95 * 0.05))
        for trace in result.values():
            assert (trace.regret >= -1e-12).all() and len(trace.proposed) == 30
        causal = result["causal"]  # a delivered card is the proposed one; abstain delivers none
        pairs = zip(causal.proposed, causal.delivered, strict=True)
        assert all(d is None or d == p for p, d in pairs)


def test_value_is_the_hurdle_value_and_outcomes_use_the_truth(world: ModuleType) -> None:
    cards = world.default_cards(3)
    r = world.Round(np.array([1.0, 0.0, 0.5, 0.0, 0.0]), -0.5, 0.5, 0.0, 0.99)
    base = 0.01
    assert world.value(r, None) == pytest.approx(0.95 * base + 0.05 * -0.5)
    harmful = cards[-1]
    assert world.value(r, harmful) == pytest.approx(0.65 * (base - 0.02) + 0.35 * -0.5)
    assert world.outcome(r, cards[0]) == (False, pytest.approx(base + 0.05))
    invalid = world.Round(r.x, -0.5, 0.5, 0.0, 0.2)  # 0.2 < 35 %: the harmful card fails
    assert world.outcome(invalid, harmful) == (True, -0.5)
    assert world.outcome(invalid, None)[0] is False
