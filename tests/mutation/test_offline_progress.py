"""The offline mutator makes real progress under selection (statistical, several seeds)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from gigaevo.llm import OfflineMutatorLLM
from gigaevo.mutation import LLMMutator

from .helpers import request

Score = Callable[[str], float | None]

TOY = """import math

# EVOLVE-BLOCK-START
def params():
    return [0.5, 1.5, -2.0, 3.0, 0.1, 7.0]
# EVOLVE-BLOCK-END


def entry():
    return params()
"""
TARGET = np.array([1.234, -0.75, 0.3, 2.5, -1.1, 4.2])  # unknown to the mutator
CIRCLES = Path(__file__).resolve().parents[2] / "gigaevo/problems/builtin/circle_packing"


def _run(code: str, entry: str) -> object:
    namespace: dict[str, object] = {"__name__": "child"}
    exec(compile(code, "<child>", "exec"), namespace)
    return namespace[entry]()  # type: ignore[operator]


def _toy_score(code: str) -> float | None:
    try:
        x = np.asarray(_run(code, "entry"), dtype=float)
    except Exception:  # a broken child is just a bad child here
        return None
    return -float(np.sum((x - TARGET) ** 2)) if x.shape == TARGET.shape else None


def _hill_climb(code: str, score: Score, steps: int, seed: int) -> tuple[float, float]:
    """(1+1) selection: keep the child when it scores strictly better."""
    mutator = LLMMutator(OfflineMutatorLLM(seed=seed))
    first = score(code)
    assert first is not None
    start = best = first
    for step in range(steps):
        child = mutator.mutate(request(code, seed=step, fitness=best)).child_code
        if child is None:
            continue
        value = score(child)
        if value is not None and value > best:
            code, best = child, value
    return start, best


@pytest.mark.parametrize("seed", range(5))
def test_toy_objective_improves_by_a_large_margin(seed: int) -> None:
    start, best = _hill_climb(TOY, _toy_score, steps=300, seed=seed)
    assert start < -20.0
    assert best > 0.1 * start  # at least 90 % of the squared error removed


def _circle_score(validator: ModuleType) -> Score:
    def score(code: str) -> float | None:
        try:
            with np.errstate(all="ignore"):  # children may divide by zero; the validator decides
                result = _run(code, "run_packing")
            out = [np.asarray(part).tolist() for part in result]  # type: ignore[attr-defined]
            return float(validator.validate(out)["sum_radii"])
        except Exception:  # invalid packing or broken child
            return None

    return score


@pytest.mark.slow
@pytest.mark.skipif(not (CIRCLES / "initial_program.py").exists(), reason="no circle packing")
def test_circle_packing_climbs() -> None:
    spec = importlib.util.spec_from_file_location("cp_validator", CIRCLES / "validator.py")
    assert spec is not None and spec.loader is not None
    validator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(validator)
    code = (CIRCLES / "initial_program.py").read_text()
    for seed in range(3):
        start, best = _hill_climb(code, _circle_score(validator), steps=300, seed=seed)
        assert best > start + 0.3
