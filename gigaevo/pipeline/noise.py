"""Start-up estimate of the measurement noise (``problem.yaml``: ``noise: {kind: estimate}``).

Each initial program is evaluated ``repeats`` times; the pooled within-program sd is the
standard error of one evaluation from then on (``gigaevo.problems.noise``). The figure is
kept in the run's store (meta key ``measurement_noise``), so a resumed run reuses it
instead of measuring again.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Protocol

from gigaevo.evaluation.base import Evaluator
from gigaevo.problems.noise import pooled_standard_error
from gigaevo.problems.spec import Problem, ProblemError

log = logging.getLogger("gigaevo")

NOISE_META = "measurement_noise"


class MetaStore(Protocol):
    def get_meta(self, key: str) -> Any: ...

    def set_meta(self, key: str, value: Any) -> None: ...


def resolve_noise(problem: Problem, evaluator: Evaluator, store: MetaStore) -> Problem:
    """``problem`` with an ``estimate`` declaration's standard error filled in.

    Other declarations are returned unchanged.

    Raises:
        ProblemError: an initial program was invalid in one of its repeated evaluations.
    """
    noise = problem.noise
    if noise.kind != "estimate":
        return problem
    stored = store.get_meta(NOISE_META)
    if isinstance(stored, dict) and stored.get("repeats") == noise.repeats:
        se = float(stored["se"])
        log.info("measurement noise: standard error %.6g (estimated at the run's start)", se)
        return dataclasses.replace(problem, noise=noise.with_estimate(se))
    samples = []
    for i, code in enumerate(problem.initial_programs):
        values = []
        for _ in range(noise.repeats):
            res = evaluator.evaluate(code)
            if not res.valid:
                raise ProblemError(
                    f"{problem.directory}: noise.kind=estimate: initial program {i} is invalid "
                    f"in a repeated evaluation ({res.reason})"
                )
            values.append(float(res.metrics[problem.metrics.primary]))
        samples.append(values)
    se = pooled_standard_error(samples)
    store.set_meta(
        NOISE_META,
        {"se": se, "repeats": noise.repeats, "programs": len(samples), "samples": samples},
    )
    log.info(
        "measurement noise: standard error %.6g from %d evaluations of %d initial program(s)",
        se,
        noise.repeats,
        len(samples),
    )
    return dataclasses.replace(problem, noise=noise.with_estimate(se))
