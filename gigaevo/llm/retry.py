"""Retry timing for remote calls: capped exponential backoff with jitter, honouring Retry-After."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RetryPolicy:
    """When to retry a failed request and how long to wait first.

    The wait before retry ``r`` (0-based) is ``initial_s * multiplier**r``,
    capped at ``max_s``, then scaled by a factor drawn uniformly from
    ``[1 - jitter, 1]`` so that parallel callers spread out. A server's
    ``Retry-After`` is a lower bound (itself capped at ``max_s``).

    Attributes:
        max_retries: retries after the first request (0: never retry).
        initial_s: the first wait in seconds.
        max_s: the longest wait in seconds.
        multiplier: growth of the wait per retry (>= 1).
        jitter: fraction of the wait that is randomised, in [0, 1].

    Raises:
        ValueError: a negative or non-finite value, ``multiplier < 1`` or
            ``jitter`` outside [0, 1].
    """

    max_retries: int = 4
    initial_s: float = 1.0
    max_s: float = 60.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise ValueError(f"max_retries must be an integer, got {self.max_retries!r}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        for name in ("initial_s", "max_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        if not math.isfinite(self.multiplier) or self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must lie in [0, 1], got {self.jitter}")

    def delay(
        self, retry: int, rng: np.random.Generator, retry_after: float | None = None
    ) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        base = min(self.max_s, self.initial_s * self.multiplier ** min(retry, 64))
        wait = base * (1.0 - self.jitter * float(rng.random()))
        if retry_after is not None and math.isfinite(retry_after) and retry_after > 0:
            wait = max(wait, min(retry_after, self.max_s))
        return wait
