"""A well-behaved program is run, converted to JSON, validated and timed."""

from __future__ import annotations

import time

from gigaevo.evaluation import EvaluationResult, Evaluator, SandboxEvaluator

from .helpers import program


def test_valid_program_returns_metrics(shared_evaluator: SandboxEvaluator) -> None:
    code = program(
        """
        def solve():
            print("hello from the child")
            return [1.5, 2.5, 3]
        """
    )
    started = time.monotonic()
    result = shared_evaluator.evaluate(code)
    round_trip = time.monotonic() - started
    assert isinstance(result, EvaluationResult)
    assert result.valid, result.reason
    assert result.reason is None
    assert result.metrics == {"score": 7.0, "count": 3.0}
    assert "hello from the child" in result.stdout_tail
    # the two parts of the round trip (no bound on their size: speed is benchmarks' business)
    assert result.run_seconds >= 0.0 and result.overhead_seconds >= 0.0
    assert result.run_seconds + result.overhead_seconds <= round_trip


def test_numpy_values_and_tuples_are_converted(shared_evaluator: SandboxEvaluator) -> None:
    code = program(
        """
        import numpy as np

        def solve():
            return list(np.arange(3, dtype=np.int64)) + [np.float32(0.5), (1, 2)[0]]
        """
    )
    result = shared_evaluator.evaluate(code)
    assert result.valid, result.reason
    assert result.metrics["score"] == 4.5


def test_numpy_array_return(shared_evaluator: SandboxEvaluator) -> None:
    code = "import numpy as np\ndef solve():\n    return np.ones(4) * 2\n"
    result = shared_evaluator.evaluate(code)
    assert result.valid, result.reason
    assert result.metrics == {"score": 8.0, "count": 4.0}


def test_run_seconds_is_the_programs_own_time(shared_evaluator: SandboxEvaluator) -> None:
    code = "import time\ndef solve():\n    time.sleep(0.2)\n    return [1]\n"
    started = time.monotonic()
    result = shared_evaluator.evaluate(code)
    round_trip = time.monotonic() - started
    assert result.valid, result.reason
    # the sleep is in the program's time, and the overhead is the rest of the round trip
    # (relations that hold at any load; the overhead's size is measured in bench_sandbox.py)
    assert result.run_seconds >= 0.19
    assert result.overhead_seconds >= 0.0
    assert result.run_seconds + result.overhead_seconds <= round_trip


def test_satisfies_the_evaluator_protocol(shared_evaluator: SandboxEvaluator) -> None:
    evaluator: Evaluator = shared_evaluator
    assert evaluator.evaluate("def solve():\n    return [2]\n").metrics["score"] == 2.0


def test_child_runs_in_a_fresh_empty_scratch(shared_evaluator: SandboxEvaluator) -> None:
    code = program(
        """
        import os, tempfile

        def leftovers(directory):
            # read-only paths of the root that lie under /tmp (a checkout made with
            # mktemp, say) are bound back into every scratch: they are not leftovers
            with open("/proc/self/mountinfo") as handle:
                points = [line.split()[4] for line in handle]
            top = os.path.realpath(directory)
            return [
                name for name in os.listdir(directory)
                if not any((p + "/").startswith(os.path.join(top, name) + "/") for p in points)
            ]

        def solve():
            before = len(leftovers(".")) + len(leftovers(tempfile.gettempdir()))
            with open("scratch.txt", "w") as handle:
                handle.write("x")
            with open(os.path.expanduser("~/home.txt"), "w") as handle:
                handle.write("x")
            print("CWD=" + os.getcwd())
            return [before]
        """
    )
    results = [shared_evaluator.evaluate(code) for _ in range(4)]  # both workers, twice
    for result in results:
        assert result.valid, result.reason
        assert result.metrics["score"] == 0.0  # nothing left over from an earlier child
    if shared_evaluator.isolation.get("filesystem"):  # one tmpfs, its cwd, HOME and /tmp
        assert results[0].stdout_tail.split("CWD=")[1].split()[0] == "/tmp"


def test_stdin_is_closed(shared_evaluator: SandboxEvaluator) -> None:
    result = shared_evaluator.evaluate("def solve():\n    return [len(input())]\n")
    assert not result.valid
    assert result.reason is not None and result.reason.startswith("EOFError")


def test_stdout_tail_keeps_the_last_two_kilobytes(shared_evaluator: SandboxEvaluator) -> None:
    code = program(
        """
        def solve():
            for i in range(2000):
                print(f"line {i}")
            return [1]
        """
    )
    result = shared_evaluator.evaluate(code)
    assert result.valid, result.reason
    assert result.stdout_tail.endswith("line 1999\n")
    assert "line 0\n" not in result.stdout_tail
    assert 1500 <= len(result.stdout_tail) <= 2048
