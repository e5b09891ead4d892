"""Benchmark the sandbox: per-evaluation round trip, program time and overhead.

Run from the repository root::

    .venv/bin/python benchmarks/bench_sandbox.py [--n 200] [--fresh-n 50]

For a trivial program and a ~10 ms CPU-bound program, evaluated through
``SandboxEvaluator`` with one and two workers (two workers are driven by two
threads), it prints mean / median / p95 of the round trip, the program's own
run time (``run_seconds``) and the overhead above it, plus evaluations per
second. For comparison it times a fresh ``python -c`` subprocess per program
(bare, and importing numpy as the warm workers do) and prints the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gigaevo.evaluation import EvaluationResult, SandboxEvaluator
from gigaevo.problems.spec import MetricsSpec, Problem

VALIDATOR = "def validate(output):\n    return {'score': float(sum(output))}\n"
TRIVIAL = "def solve():\n    return [1.0]\n"
BUSY_10MS = textwrap.dedent(
    """
    import time

    def solve():
        start = time.perf_counter()
        while time.perf_counter() - start < 0.010:
            pass
        return [1.0]
    """
)
PROGRAMS = {"trivial": TRIVIAL, "10 ms busy": BUSY_10MS}


@dataclass(frozen=True)
class Row:
    """One line of the results table (times in milliseconds)."""

    label: str
    round_trip: list[float]
    run: list[float] | None  # None for the fresh-process rows
    overhead: list[float] | None
    per_second: float


def _summary(values: list[float] | None) -> str:
    if values is None:
        return f"{'-':>7} {'-':>7} {'-':>7}"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"{statistics.mean(values):7.2f} {statistics.median(values):7.2f} {p95:7.2f}"


def _problem(directory: Path) -> Problem:
    validator = directory / "validator.py"
    validator.write_text(VALIDATOR)
    return Problem(
        name="bench",
        directory=directory,
        description="benchmark",
        initial_programs=(TRIVIAL,),
        entry_function="solve",
        validator_path=validator,
        metrics=MetricsSpec("score", True, 0.0, 1.0, 0.0),
        timeout_s=5.0,
    )


def bench_sandbox(problem: Problem, code: str, workers: int, n: int, label: str) -> Row:
    """Evaluate ``code`` ``n`` times with ``workers`` workers driven by as many threads."""
    with SandboxEvaluator(problem, max_workers=workers) as evaluator:
        for _ in range(5):  # warm-up
            evaluator.evaluate(code)

        def timed(_: int) -> tuple[float, EvaluationResult]:
            start = time.perf_counter()
            result = evaluator.evaluate(code)
            return time.perf_counter() - start, result

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            samples = list(pool.map(timed, range(n)))
        wall = time.perf_counter() - start
    bad = [r.reason for _, r in samples if not r.valid]
    if bad:
        raise RuntimeError(f"{label}: {len(bad)} invalid results, e.g. {bad[0]}")
    return Row(
        label=label,
        round_trip=[t * 1e3 for t, _ in samples],
        run=[r.run_seconds * 1e3 for _, r in samples],
        overhead=[(t - r.run_seconds) * 1e3 for t, r in samples],
        per_second=n / wall,
    )


def bench_fresh_process(code: str, n: int, label: str, preamble: str = "") -> Row:
    """A new ``python -c`` per program: interpreter start-up paid every time."""
    script = f"{preamble}{code}\nimport json\nprint(json.dumps(solve()))\n"
    times = []
    start_all = time.perf_counter()
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
        times.append((time.perf_counter() - start) * 1e3)
    wall = time.perf_counter() - start_all
    return Row(label, times, None, None, n / wall)


def print_table(rows: list[Row]) -> None:
    """Plain table: mean / median / p95 in ms for round trip, run and overhead."""
    header = (
        f"{'configuration':<34} {'round trip ms':^23} {'program run ms':^23} "
        f"{'overhead ms':^23} {'eval/s':>8}"
    )
    sub = f"{'':<34}" + " ".join(f"{'mean':>7} {'median':>7} {'p95':>7}" for _ in range(3))
    print(header)
    print(sub)
    print("-" * len(header))
    for row in rows:
        times = " ".join(_summary(v) for v in (row.round_trip, row.run, row.overhead))
        print(f"{row.label:<34} {times} {row.per_second:8.1f}")


def main() -> None:
    """Parse arguments, run every configuration, print the table and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="evaluations per sandbox row")
    parser.add_argument("--fresh-n", type=int, default=50, help="runs per fresh-process row")
    args = parser.parse_args()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as scratch:
        problem = _problem(Path(scratch))
        for name, code in PROGRAMS.items():
            for workers in (1, 2):
                label = f"sandbox {name}, {workers} worker(s)"
                rows.append(bench_sandbox(problem, code, workers, args.n, label))
    fresh = bench_fresh_process(TRIVIAL, args.fresh_n, "fresh python -c, trivial")
    fresh_np = bench_fresh_process(
        TRIVIAL, args.fresh_n, "fresh python -c + numpy, trivial", "import numpy\n"
    )
    rows += [fresh, fresh_np]
    print_table(rows)
    sandbox_trivial = statistics.median(rows[0].round_trip)
    print()
    print(f"median round trip, trivial program, 1 worker: {sandbox_trivial:.2f} ms")
    for row in (fresh, fresh_np):
        ratio = statistics.median(row.round_trip) / sandbox_trivial
        print(f"{row.label}: {ratio:.1f}x the sandbox round trip")


if __name__ == "__main__":
    main()
