"""The paired report of benchmarks/bench_search_llm.py: per-seed differences in the metric's
direction, seeds ahead/level/behind and the sign test's p (against hand-computed values)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from bench_search_llm import _paired


def _results(a: list[float], b: list[float]) -> list[dict]:
    return [{"curves": {"x": [0.0, u], "ref": [0.0, v]}} for u, v in zip(a, b, strict=True)]


def test_counts_and_sign_test_p_in_the_metric_direction() -> None:
    # 7 ahead, 1 level, 2 behind: two-sided sign test over 9 = 2 * P(B <= 2), B ~ Bin(9, 1/2)
    x = [1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    ref = [0.5, 1, 2, 3, 4, 5, 6, 8, 9.5, 11]
    text = _paired(_results(x, ref), "x", "ref", 1, higher=True)
    p = 2 * (1 + 9 + 36) / 2**9
    assert f"(7/1/2, p = {p:.2g})" in text
    assert text.startswith("1 ")  # median of the ten differences (five of them are 1.0)
    flipped = _paired(_results(x, ref), "x", "ref", 1, higher=False)
    assert f"(2/1/7, p = {p:.2g})" in flipped
    assert flipped.startswith("-1 ")


def test_no_seed_differs() -> None:
    text = _paired(_results([1.0, 2.0], [1.0, 2.0]), "x", "ref", 1, higher=True)
    assert text.endswith("(0/2/0, p = 1)")
