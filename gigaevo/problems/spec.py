"""Problem and metric specifications (plain data; loading lives in ``loader``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from gigaevo.problems.descriptors import Descriptor
from gigaevo.problems.noise import MeasurementNoise


class ProblemError(ValueError):
    """A problem directory or its spec is unusable; the message names the culprit."""


@dataclass(frozen=True)
class MetricsSpec:
    """The primary metric and its declared bounds.

    ``lower_bound < upper_bound`` always; ``sentinel`` is the fitness recorded
    for invalid programs (normally the worst bound).
    """

    primary: str
    higher_is_better: bool
    lower_bound: float
    upper_bound: float
    sentinel: float
    best_known: float | None = None

    @property
    def span(self) -> float:
        return self.upper_bound - self.lower_bound

    def oriented(self, value: float) -> float:
        """``value`` turned so that larger is always better."""
        return value if self.higher_is_better else -value

    def better(self, a: float, b: float) -> bool:
        """True when fitness ``a`` is strictly better than ``b``."""
        return self.oriented(a) > self.oriented(b)

    def normalised_gain(self, parent: float, child: float) -> float:
        """Direction-oriented gain divided by the bound span (positive = better)."""
        return (self.oriented(child) - self.oriented(parent)) / self.span

    def quality(self, value: float) -> float:
        """Position of ``value`` within the bounds, in [0, 1], 1 = best bound."""
        if not math.isfinite(value):
            return 0.0
        q = (value - self.lower_bound) / self.span
        q = q if self.higher_is_better else 1.0 - q
        return min(1.0, max(0.0, q))


@dataclass(frozen=True)
class CascadeSpec:
    """A cheap first stage of evaluation (``cascade`` in problem.yaml).

    Attributes:
        entry_function: a top-level function of the program, callable with no
            arguments, that runs the cheap check (a small instance, say).
        threshold: the primary metric the first stage must reach (in the
            metric's direction) for the full evaluation to run.
        timeout_s: wall-clock limit of the first stage (None: the evaluation's).
    """

    entry_function: str
    threshold: float
    timeout_s: float | None = None


@dataclass(frozen=True)
class Problem:
    """A loaded problem directory.

    Attributes:
        name: short name (the directory name for user problems).
        directory: absolute path of the problem directory.
        description: the task text the LLM reads.
        initial_programs: source of each initial program, in file-name order.
        entry_function: name of the function each program defines and the
            sandbox calls with no arguments.
        validator_path: ``validator.py`` defining ``validate(output) -> dict``.
        metrics: the metrics spec.
        timeout_s: suggested wall-clock limit for one evaluation.
        extra_metrics: names of further metrics the validator reports (usable
            as behaviour descriptors).
        validator_sha256: hex SHA-256 of ``validator.py`` as loaded (None for
            problems built in code); the sandbox refuses a validator that no
            longer matches it, and a run records it.
        descriptors: the problem's behaviour descriptors (the archive's axes
            unless the configuration names others); empty: the generic default.
        cascade: the cheap first stage of evaluation, if any.
        noise: how noisy one evaluation of the primary metric is (``noise`` in
            ``problem.yaml``; unknown when absent).
    """

    name: str
    directory: Path
    description: str
    initial_programs: tuple[str, ...]
    entry_function: str
    validator_path: Path
    metrics: MetricsSpec
    timeout_s: float = 10.0
    extra_metrics: tuple[str, ...] = ()
    validator_sha256: str | None = None
    descriptors: tuple[Descriptor, ...] = ()
    cascade: CascadeSpec | None = None
    noise: MeasurementNoise = field(default_factory=MeasurementNoise)
