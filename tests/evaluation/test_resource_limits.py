"""CPU-time and result-size caps, and validators that misbehave."""

from __future__ import annotations

import pytest

from gigaevo.evaluation import SandboxEvaluator

from .conftest import MakeProblem
from .helpers import program


def test_cpu_time_limit(make_problem: MakeProblem) -> None:
    with SandboxEvaluator(
        make_problem(), max_workers=1, timeout_s=5.0, cpu_seconds=0.5, memory_mb=512
    ) as ev:
        result = ev.evaluate("def solve():\n    while True:\n        pass\n")
    assert not result.valid
    assert result.reason == "cpu time limit exceeded (SIGXCPU)"
    # RLIMIT_CPU takes whole seconds: 0.5 rounds up to 1 (the kernel's figure, whatever the
    # load; wait4's tick-sampled utime + stime was seen at 0.898 s under load average 20)
    assert 0.75 <= result.cpu_seconds < 2.0


def test_default_cpu_limit_is_twice_the_timeout_plus_one(make_problem: MakeProblem) -> None:
    with SandboxEvaluator(make_problem(), max_workers=1, timeout_s=0.5, memory_mb=512) as ev:
        assert ev.cpu_seconds == 2.0
        assert ev.timeout_s == 0.5


def test_timeout_defaults_to_the_problem(make_problem: MakeProblem) -> None:
    with SandboxEvaluator(make_problem(timeout_s=0.75), max_workers=1, memory_mb=512) as ev:
        assert ev.timeout_s == 0.75


def test_oversized_result_is_invalid(make_problem: MakeProblem) -> None:
    with SandboxEvaluator(
        make_problem(), max_workers=1, memory_mb=512, max_result_bytes=10_000
    ) as ev:
        result = ev.evaluate("def solve():\n    return list(range(100_000))\n")
        small = ev.evaluate("def solve():\n    return list(range(10))\n")
    assert not result.valid
    assert result.reason == "result larger than 10000 bytes"
    assert small.valid and small.metrics["score"] == 45.0


def test_validator_exception_is_recorded(make_problem: MakeProblem) -> None:
    validator = """
    def validate(output):
        if output[0] < 0:
            raise ValueError("circles overlap")
        return {"score": float(output[0])}
    """
    with SandboxEvaluator(make_problem(validator), max_workers=1, memory_mb=512) as ev:
        bad = ev.evaluate("def solve():\n    return [-1]\n")
        good = ev.evaluate("def solve():\n    return [3]\n")
    assert not bad.valid and bad.reason == "validator: circles overlap"
    assert good.valid and good.metrics == {"score": 3.0}


def test_missing_primary_metric_is_invalid(make_problem: MakeProblem) -> None:
    validator = "def validate(output):\n    return {'other': 1.0}\n"
    with SandboxEvaluator(make_problem(validator), max_workers=1, memory_mb=512) as ev:
        result = ev.evaluate("def solve():\n    return [1]\n")
    assert not result.valid
    assert result.reason == "primary metric 'score' missing from validator output"


def test_validator_nan_is_invalid(make_problem: MakeProblem) -> None:
    validator = "def validate(output):\n    return {'score': 1.0, 'sum_radii': float('nan')}\n"
    with SandboxEvaluator(make_problem(validator), max_workers=1, memory_mb=512) as ev:
        result = ev.evaluate("def solve():\n    return [1]\n")
    assert not result.valid
    assert result.reason == "non-finite metric sum_radii=nan"


def test_child_cannot_patch_the_validator(make_problem: MakeProblem) -> None:
    validator = """
    def validate(output):
        if output != [42]:
            raise ValueError("wrong answer")
        return {"score": 42.0}
    """
    code = program(
        """
        import sys

        def solve():
            for module in list(sys.modules.values()):
                if hasattr(module, "validate"):
                    module.validate = lambda output: {"score": 1e9}
            return [0]
        """
    )
    with SandboxEvaluator(make_problem(validator), max_workers=1, memory_mb=512) as ev:
        result = ev.evaluate(code)
        again = ev.evaluate("def solve():\n    return [0]\n")
    assert not result.valid and result.reason == "validator: wrong answer"
    assert not again.valid and again.reason == "validator: wrong answer"


def test_memory_cap_below_the_worker_footprint_warns(make_problem: MakeProblem) -> None:
    with (
        pytest.warns(RuntimeWarning, match="memory_mb=64"),
        SandboxEvaluator(make_problem(), max_workers=1, memory_mb=64),
    ):
        pass
