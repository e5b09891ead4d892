"""Shared fixtures for the evolution components: metric specs in both directions, elites."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gigaevo.evolution import BehaviourSpace, Descriptor, Elite
from gigaevo.problems.spec import MetricsSpec

HIGHER = MetricsSpec(
    "score", higher_is_better=True, lower_bound=0.0, upper_bound=10.0, sentinel=0.0
)
LOWER = MetricsSpec(
    "loss", higher_is_better=False, lower_bound=0.0, upper_bound=10.0, sentinel=10.0
)

Ladder = Callable[[MetricsSpec, int], list[Elite]]


@pytest.fixture(params=[HIGHER, LOWER], ids=["higher_is_better", "lower_is_better"])
def metrics(request: pytest.FixtureRequest) -> MetricsSpec:
    """The same test in both metric directions."""
    return request.param


@pytest.fixture
def higher() -> MetricsSpec:
    return HIGHER


@pytest.fixture
def lower() -> MetricsSpec:
    return LOWER


@pytest.fixture
def good_bad(metrics: MetricsSpec) -> tuple[float, float]:
    """A (better, worse) pair of fitness values in the direction of ``metrics``."""
    return (8.0, 2.0) if metrics.higher_is_better else (2.0, 8.0)


def _ladder(metrics: MetricsSpec, n: int) -> list[Elite]:
    elites = []
    for i in range(n):
        q = (i + 1) / (n + 1)
        fitness = 10.0 * q if metrics.higher_is_better else 10.0 * (1 - q)
        elites.append(Elite(f"e{i}", fitness, (i,)))
    return elites


@pytest.fixture
def ladder() -> Ladder:
    """``ladder(metrics, n)``: elites ``e0`` (worst) .. ``e{n-1}`` (best), cells ``(i,)``."""
    return _ladder


@pytest.fixture
def space() -> BehaviourSpace:
    """A 4 x 3 space: metric ``x`` on [0, 1] and the ``n_lines`` feature on a log scale."""
    return BehaviourSpace(
        [
            Descriptor("x", low=0.0, high=1.0, bins=4),
            Descriptor("n_lines", source="feature", low=1, high=100, bins=3, scale="log"),
        ]
    )
