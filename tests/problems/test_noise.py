"""problem.yaml's ``noise`` key: declarations, one-line errors, the start-up estimate (issue 20)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gigaevo.evaluation.base import EvaluationResult
from gigaevo.pipeline.noise import NOISE_META, resolve_noise
from gigaevo.problems import ProblemError, builtin_problem_names, load_problem
from gigaevo.problems.noise import MeasurementNoise, pooled_standard_error
from tests.problems.test_problem_loader import MINIMAL_PROGRAM, MINIMAL_VALIDATOR, MINIMAL_YAML

MakeProblem = Callable[[str], Path]


@pytest.fixture
def make_problem(tmp_path: Path) -> MakeProblem:
    """``make_problem(noise)``: the loader tests' minimal problem with a ``noise`` line."""

    def make(noise: str) -> Path:
        root = tmp_path / "tiny"
        root.mkdir(exist_ok=True)
        (root / "task.md").write_text("Return a float in [0, 1].")
        (root / "problem.yaml").write_text(
            MINIMAL_YAML.replace("timeout_s:", f"{noise}\ntimeout_s:")
        )
        (root / "initial_program.py").write_text(MINIMAL_PROGRAM)
        (root / "validator.py").write_text(MINIMAL_VALIDATOR)
        return root

    return make


@pytest.mark.parametrize("name", builtin_problem_names())
def test_builtins_declare_a_deterministic_evaluation(name: str) -> None:
    noise = load_problem(name).noise
    assert noise.kind == "deterministic"
    assert noise.result_fields({"anything": 1.0}) == {"se": 0.0, "measurement": "deterministic"}


@pytest.mark.parametrize(
    ("text", "metrics", "expected"),
    [
        ("", {"score": 0.5}, (None, None)),  # undeclared: unknown
        ("noise: unknown", {"score": 0.5}, (None, None)),
        ("noise: deterministic", {"score": 0.5}, (0.0, "deterministic")),
        ("noise: {kind: constant, se: 0.02}", {"score": 0.5}, (0.02, "scalar")),
        ("noise:\n  kind: metric\n  metric: score_se", {"score_se": 0.004}, (0.004, "scalar")),
        ("noise: {kind: metric, metric: score_se}", {"score": 0.5}, (None, None)),  # missing
        ("noise: {kind: metric, metric: score_se}", {"score_se": -1.0}, (None, None)),
        ("noise: {kind: metric, metric: score_se}", {"score_se": math.inf}, (None, None)),
        ("noise: {kind: estimate, repeats: 4}", {"score": 0.5}, (None, None)),  # not yet
    ],
)
def test_declarations_give_each_outcome_its_standard_error(
    make_problem: MakeProblem,
    text: str,
    metrics: dict[str, float],
    expected: tuple[float | None, str | None],
) -> None:
    noise = load_problem(directory=make_problem(text)).noise
    assert noise.measurement(metrics) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("noise: noisy", "noise.kind must be one of"),
        ("noise: [1, 2]", "noise must be one of"),
        ("noise: {se: 0.1}", "noise.kind must be one of"),
        ("noise: {kind: constant}", "noise.kind=constant needs noise.se"),
        ("noise: {kind: constant, se: -0.1}", "noise.se must be a finite number >= 0"),
        ("noise: {kind: constant, se: yes}", "noise.se must be a number"),
        ("noise: {kind: constant, se: 0.1, metric: s}", "unknown key noise.metric"),
        ("noise: {kind: metric}", "noise.kind=metric needs noise.metric"),
        ("noise: {kind: metric, metric: score}", "not the primary metric"),
        ("noise: {kind: estimate, repeats: 1}", "noise.repeats must be >= 2"),
        ("noise: {kind: estimate, repeats: 2.5}", "noise.repeats must be an integer"),
        ("noise: {kind: deterministic, se: 0}", "unknown key noise.se"),
    ],
)
def test_bad_declarations_fail_with_one_line_naming_the_key(
    make_problem: MakeProblem,
    text: str,
    expected: str,
) -> None:
    root = make_problem(text)
    with pytest.raises(ProblemError) as info:
        load_problem(directory=root)
    message = str(info.value)
    assert "\n" not in message and "problem.yaml" in message and expected in message, message


def test_pooled_standard_error_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    samples = [list(m + 0.2 * rng.standard_normal(n)) for m, n in ((1.0, 5), (7.0, 3), (2.0, 1))]
    ss = sum(float(np.sum((np.array(s) - np.mean(s)) ** 2)) for s in samples)
    assert pooled_standard_error(samples) == pytest.approx(math.sqrt(ss / (4 + 2)))
    assert pooled_standard_error([[3.0, 3.0, 3.0]]) == 0.0
    with pytest.raises(ValueError, match="evaluated twice"):
        pooled_standard_error([[1.0], [2.0]])


@dataclass
class _Evaluator:
    """Scores each program with its own mean plus Gaussian noise of sd ``sd``."""

    sd: float
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    calls: int = 0
    fail_at: int | None = None

    def evaluate(self, code: str) -> EvaluationResult:
        self.calls += 1
        if self.calls == self.fail_at:
            return EvaluationResult(False, reason="timeout")
        mean = float(len(code) % 7)
        return EvaluationResult(True, {"score": mean + self.sd * float(self.rng.standard_normal())})

    def close(self) -> None:
        return None


@dataclass
class _Meta:
    values: dict[str, Any] = field(default_factory=dict)

    def get_meta(self, key: str) -> Any:
        return self.values.get(key)

    def set_meta(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_estimate_recovers_the_evaluator_sd_and_a_resume_reuses_it(
    make_problem: MakeProblem,
) -> None:
    root = make_problem("noise: {kind: estimate, repeats: 40}")
    problem = load_problem(directory=root)
    meta = _Meta()
    evaluator = _Evaluator(sd=0.03)
    resolved = resolve_noise(problem, evaluator, meta)  # type: ignore[arg-type]
    assert evaluator.calls == 40
    se = resolved.noise.se
    assert se is not None and abs(se - 0.03) < 4 * 0.03 / math.sqrt(2 * 39)
    assert resolved.noise.measurement({}) == (se, "scalar")
    assert meta.values[NOISE_META]["se"] == se
    again = _Evaluator(sd=0.5)  # a resume: the stored figure, no new evaluation
    assert resolve_noise(problem, again, meta).noise.se == se  # type: ignore[arg-type]
    assert again.calls == 0
    assert resolve_noise(load_problem("rastrigin"), again, meta).noise == MeasurementNoise(
        "deterministic"
    )  # type: ignore[arg-type]


def test_estimate_refuses_an_initial_program_that_fails_a_repeat(
    make_problem: MakeProblem,
) -> None:
    problem = load_problem(directory=make_problem("noise: {kind: estimate, repeats: 3}"))
    meta = _Meta()
    with pytest.raises(ProblemError, match="initial program 0 is invalid in a repeated evaluation"):
        resolve_noise(problem, _Evaluator(0.1, fail_at=2), meta)  # type: ignore[arg-type]
    assert NOISE_META not in meta.values
