"""Backoff timing: exponential, capped, jittered, honouring Retry-After."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.llm import RetryPolicy


def test_exponential_growth_and_cap() -> None:
    policy = RetryPolicy(initial_s=1.0, max_s=10.0, multiplier=2.0, jitter=0.0)
    rng = np.random.default_rng(0)
    assert [policy.delay(r, rng) for r in range(6)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_jitter_stays_in_range_and_spreads() -> None:
    policy = RetryPolicy(initial_s=4.0, max_s=60.0, multiplier=2.0, jitter=0.5)
    rng = np.random.default_rng(1)
    waits = [policy.delay(0, rng) for _ in range(500)]
    assert min(waits) >= 2.0 and max(waits) <= 4.0 and np.std(waits) > 0.3


def test_retry_after_is_a_capped_lower_bound() -> None:
    policy = RetryPolicy(initial_s=0.1, max_s=5.0, jitter=0.0)
    rng = np.random.default_rng(0)
    assert policy.delay(0, rng, retry_after=3.0) == 3.0
    assert policy.delay(0, rng, retry_after=3600.0) == 5.0
    assert policy.delay(0, rng, retry_after=0.0) == 0.1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_retries": -1},
        {"initial_s": -1.0},
        {"max_s": float("inf")},
        {"multiplier": 0.5},
        {"jitter": 1.5},
    ],
)
def test_bad_values(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
