"""Workers run programs in parallel; evaluate is safe to call from many threads."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from gigaevo.evaluation import SandboxEvaluator

from .conftest import MakeProblem

# the score (the sum of the returned list) is the wall-clock time at which solve started
STARTED_THEN_SLEEPS = (
    "import time\ndef solve():\n    t = time.time()\n    time.sleep(1.0)\n    return [t]\n"
)


def test_two_slow_programs_overlap(make_problem: MakeProblem) -> None:
    """Two 1 s programs on two workers run at once: the second starts before the first ends.

    (No wall-clock bound on the total: a loaded machine may be slow without being serial.
    The speed-up itself is measured by benchmarks/bench_timing_claims.py.)
    """
    with (
        SandboxEvaluator(make_problem(), max_workers=2, timeout_s=3.0, memory_mb=512) as ev,
        ThreadPoolExecutor(max_workers=2) as pool,
    ):
        results = list(pool.map(ev.evaluate, [STARTED_THEN_SLEEPS] * 2))
    assert all(r.valid for r in results)
    first, second = sorted(r.metrics["score"] for r in results)
    assert second - first < 1.0, "the second program started after the first had finished"


def test_at_most_max_workers_run_at_once(make_problem: MakeProblem) -> None:
    code = "import time\ndef solve():\n    time.sleep(0.3)\n    return [1]\n"
    with SandboxEvaluator(make_problem(), max_workers=1, timeout_s=2.0, memory_mb=512) as ev:
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=3) as pool:
            results = list(pool.map(ev.evaluate, [code] * 3))
        elapsed = time.monotonic() - started
    assert all(r.valid for r in results)
    assert elapsed >= 0.85  # serialised on the single worker


def test_many_threads_get_their_own_answers(evaluator: SandboxEvaluator) -> None:
    codes = [f"def solve():\n    return [{i}]\n" for i in range(20)]
    with ThreadPoolExecutor(max_workers=5) as pool:
        results = list(pool.map(evaluator.evaluate, codes))
    assert [r.metrics["score"] for r in results] == [float(i) for i in range(20)]
