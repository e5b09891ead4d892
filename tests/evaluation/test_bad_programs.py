"""Every kind of misbehaving child becomes an invalid result with a useful reason."""

from __future__ import annotations

import time

from gigaevo.evaluation import SandboxEvaluator

from .conftest import MakeProblem
from .helpers import program


def test_exception_reports_type_message_and_traceback(shared_evaluator: SandboxEvaluator) -> None:
    code = program(
        """
        def helper():
            return 1 / 0

        def solve():
            return [helper()]
        """
    )
    result = shared_evaluator.evaluate(code)
    assert not result.valid
    assert result.metrics == {}
    assert result.reason == "ZeroDivisionError: division by zero"
    assert "Traceback" in result.stdout_tail
    assert 'File "<program>", line 2, in helper' in result.stdout_tail
    assert "gigaevo" not in result.stdout_tail  # sandbox frames are hidden


def test_syntax_error(shared_evaluator: SandboxEvaluator) -> None:
    result = shared_evaluator.evaluate("def solve(:\n    return [1]\n")
    assert not result.valid
    assert result.reason is not None and result.reason.startswith("SyntaxError")
    assert "line 1" in result.reason


def test_missing_entry_function(shared_evaluator: SandboxEvaluator) -> None:
    result = shared_evaluator.evaluate("def something_else():\n    return [1]\n")
    assert not result.valid
    assert result.reason is not None and "'solve' is not defined" in result.reason


def test_entry_that_is_not_callable(shared_evaluator: SandboxEvaluator) -> None:
    result = shared_evaluator.evaluate("solve = [1, 2]\n")
    assert not result.valid
    assert result.reason is not None and "not callable" in result.reason


def test_hanging_program_times_out(shared_evaluator: SandboxEvaluator) -> None:
    started = time.monotonic()
    result = shared_evaluator.evaluate("def solve():\n    while True:\n        pass\n")
    elapsed = time.monotonic() - started
    assert not result.valid
    assert result.reason == "timeout after 1 s"
    # the program never ends, so the reason alone shows that the 1 s limit cut it; it ran
    # at least that long (a lower bound a loaded machine cannot break), and the call took
    # at least as long as the program (no upper bound: speed is measured in benchmarks/)
    assert result.run_seconds >= 0.9
    assert elapsed >= result.run_seconds


def test_allocating_ten_gigabytes_hits_the_memory_limit(
    shared_evaluator: SandboxEvaluator,
) -> None:
    result = shared_evaluator.evaluate("def solve():\n    return [len(bytearray(10 * 2**30))]\n")
    assert not result.valid
    # the memory limit, not the 1 s time limit, ended it (no wall-clock bound: see above)
    assert result.reason is not None and "memory limit" in result.reason
    assert "timeout" not in result.reason


def test_numpy_allocation_hits_the_memory_limit(shared_evaluator: SandboxEvaluator) -> None:
    code = "import numpy as np\ndef solve():\n    return np.ones(10 * 2**30 // 8).tolist()\n"
    result = shared_evaluator.evaluate(code)
    assert not result.valid
    assert result.reason is not None and "memory limit" in result.reason


def test_printing_gigabytes_stops_at_the_output_cap(shared_evaluator: SandboxEvaluator) -> None:
    code = program(
        """
        import sys

        def solve():
            chunk = "x" * 1_000_000
            while True:  # endless: only the 100 kB cap (or the 1 s timeout) stops it
                sys.stdout.write(chunk)
        """
    )
    result = shared_evaluator.evaluate(code)
    assert not result.valid
    # the cap, not the timeout, ended it: it acts while the program writes, not after
    assert result.reason.startswith("output limit exceeded")
    assert len(result.stdout_tail) <= 2048


def test_stderr_flood_is_capped_too(shared_evaluator: SandboxEvaluator) -> None:
    code = program(
        """
        import os

        def solve():
            while True:
                os.write(2, b"e" * 65536)
        """
    )
    result = shared_evaluator.evaluate(code)
    assert not result.valid
    assert result.reason.startswith("output limit exceeded")


def test_non_serialisable_return(shared_evaluator: SandboxEvaluator) -> None:
    result = shared_evaluator.evaluate("def solve():\n    return [object()]\n")
    assert not result.valid
    assert result.reason == "entry returned a non-serialisable object"
    result = shared_evaluator.evaluate("def solve():\n    return {1, 2}\n")
    assert result.reason == "entry returned a non-serialisable set"


def test_garbage_return_is_rejected_by_the_validator(shared_evaluator: SandboxEvaluator) -> None:
    result = shared_evaluator.evaluate("def solve():\n    return 'garbage'\n")
    assert not result.valid
    assert result.reason == "validator: expected a list of numbers"


def test_nan_metric_is_invalid(shared_evaluator: SandboxEvaluator) -> None:
    result = shared_evaluator.evaluate("def solve():\n    return [float('nan')]\n")
    assert not result.valid
    assert result.reason == "non-finite metric score=nan"


def test_infinite_metric_is_invalid(shared_evaluator: SandboxEvaluator) -> None:
    result = shared_evaluator.evaluate("def solve():\n    return [float('inf')]\n")
    assert not result.valid
    assert result.reason == "non-finite metric score=inf"


def test_sys_exit(shared_evaluator: SandboxEvaluator) -> None:
    result = shared_evaluator.evaluate("import sys\ndef solve():\n    sys.exit(3)\n")
    assert not result.valid
    assert result.reason == "program called sys.exit(3)"


def test_os_exit(shared_evaluator: SandboxEvaluator) -> None:
    result = shared_evaluator.evaluate("import os\ndef solve():\n    os._exit(0)\n")
    assert not result.valid
    assert result.reason == "program exited (status 0) without returning a result"


def test_exit_at_import_time(shared_evaluator: SandboxEvaluator) -> None:
    result = shared_evaluator.evaluate("raise SystemExit\n")
    assert not result.valid
    assert result.reason is not None and "sys.exit" in result.reason


def test_self_inflicted_signal(shared_evaluator: SandboxEvaluator) -> None:
    code = "import os, signal\ndef solve():\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
    result = shared_evaluator.evaluate(code)
    assert not result.valid
    assert result.reason == "killed by SIGSEGV (memory limit or crash)"


def test_forged_result_bytes_are_parsed_safely(shared_evaluator: SandboxEvaluator) -> None:
    code = "import os\ndef solve():\n    os.write(3, b'[[[[' * 100000)\n    os._exit(0)\n"
    result = shared_evaluator.evaluate(code)
    assert not result.valid
    assert result.reason == "malformed result from the program"


def test_workers_survive_a_run_of_bad_programs(shared_evaluator: SandboxEvaluator) -> None:
    pids = shared_evaluator.worker_pids
    result = shared_evaluator.evaluate("def solve():\n    return [1]\n")
    assert result.valid
    assert shared_evaluator.worker_pids == pids


def test_one_huge_print_is_stopped_by_the_output_cap(make_problem: MakeProblem) -> None:
    # 300 MB string under a 512 MB cap: encoding it whole would need another 300 MB.
    # Its own evaluator with room on the clock: building the string took over the
    # shared evaluator's 1 s on a loaded machine, and the timeout then hid the cap.
    with SandboxEvaluator(
        make_problem(), max_workers=1, timeout_s=20.0, memory_mb=512, max_output_bytes=100_000
    ) as ev:
        result = ev.evaluate("def solve():\n    print('x' * 300_000_000)\n")
    assert not result.valid
    assert result.reason.startswith("output limit exceeded")


def test_output_before_a_timeout_is_kept(shared_evaluator: SandboxEvaluator) -> None:
    code = "import time\ndef solve():\n    print('progress 42')\n    time.sleep(5)\n"
    result = shared_evaluator.evaluate(code)
    assert result.reason == "timeout after 1 s"
    assert "progress 42" in result.stdout_tail
