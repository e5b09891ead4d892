"""Benchmark the sandbox: per-evaluation round trip and overhead above the program's own time.

Run from the repository root::

    .venv/bin/python benchmarks/bench_sandbox.py [--n 200] [--baseline DIR] [--layers]

Each program times its own work with ``perf_counter`` and returns that time,
which the validator passes through as a metric, so the overhead (round trip
minus the program's own time) is measured the same way for any version of
the sandbox. ``start ms`` is the time to build the evaluator (workers
started, namespaces and read-only root built, numpy and the validator
loaded). Configurations: a trivial program and a ~10 ms CPU-bound one,
with one worker and with two (driven by two threads).

``--baseline DIR`` runs the same rows against another checkout (for example
``git archive main | tar -x -C /tmp/base``), interleaved with this one in
alternating rounds so that both see the same machine load, and prints the
ratio. ``--layers`` adds rows for this checkout with namespaces and then
seccomp switched off, to show what each layer costs. For comparison it also
times a fresh ``python -c`` subprocess per program (bare, and importing
numpy as the warm workers do).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VALIDATOR = "def validate(output):\n    return {'score': 1.0, 'own_ms': 1e3 * float(output[0])}\n"
TRIVIAL = textwrap.dedent(
    """
    import time

    def solve():
        start = time.perf_counter()
        return [time.perf_counter() - start]
    """
)
BUSY_10MS = textwrap.dedent(
    """
    import time

    def solve():
        start = time.perf_counter()
        while time.perf_counter() - start < 0.010:
            pass
        return [time.perf_counter() - start]
    """
)
PROGRAMS = {"trivial": TRIVIAL, "10 ms busy": BUSY_10MS}

# Runs in a subprocess with one checkout first on sys.path; prints one JSON line.
MEASURE = textwrap.dedent(
    """
    import json, sys, time
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    root, directory, code, workers, n, extra = sys.argv[1:7]
    sys.path.insert(0, root)
    from gigaevo.evaluation import SandboxEvaluator
    from gigaevo.problems.spec import MetricsSpec, Problem

    problem = Problem(
        name="bench", directory=Path(directory), description="benchmark",
        initial_programs=(code,), entry_function="solve",
        validator_path=Path(directory) / "validator.py",
        metrics=MetricsSpec("score", True, 0.0, 1.0, 0.0), timeout_s=5.0,
    )
    workers, n = int(workers), int(n)
    begun = time.perf_counter()
    with SandboxEvaluator(problem, max_workers=workers, **json.loads(extra)) as ev:
        start_ms = (time.perf_counter() - begun) * 1e3
        for _ in range(5):
            ev.evaluate(code)

        def timed(_):
            start = time.perf_counter()
            result = ev.evaluate(code)
            return time.perf_counter() - start, result

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            samples = list(pool.map(timed, range(n)))
        wall = time.perf_counter() - start
    bad = [r.reason for _, r in samples if not r.valid]
    if bad:
        raise SystemExit(f"{len(bad)} invalid results, e.g. {bad[0]}")
    print(json.dumps({
        "round_trip": [t * 1e3 for t, _ in samples],
        "own": [r.metrics["own_ms"] for _, r in samples],
        "per_second": n / wall,
        "start_ms": start_ms,
    }))
    """
)


def _measure(root: Path, directory: Path, code: str, workers: int, n: int, extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    args = [str(root), str(directory), code, str(workers), str(n), extra]
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _stats(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"{statistics.mean(values):7.2f} {statistics.median(values):7.2f} {p95:7.2f}"


def _row(label: str, data: dict) -> tuple[str, float]:
    overhead = [t - o for t, o in zip(data["round_trip"], data["own"], strict=True)]
    line = (
        f"{label:<44} {_stats(data['round_trip'])} {_stats(data['own'])} "
        f"{_stats(overhead)} {data['per_second']:8.1f} {data['start_ms']:8.0f}"
    )
    return line, statistics.median(overhead)


def _fresh_process(code: str, n: int, preamble: str = "") -> list[float]:
    """A new ``python -c`` per program: interpreter start-up paid every time."""
    script = f"{preamble}{code}\nimport json\nprint(json.dumps(solve()))\n"
    times = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def main() -> None:
    """Parse arguments, run every configuration, print the table and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="evaluations per row")
    parser.add_argument("--fresh-n", type=int, default=30, help="runs per fresh-process row")
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--layers", action="store_true", help="rows with layers switched off")
    args = parser.parse_args()
    variants = [("this checkout", ROOT, "{}")]
    if args.baseline is not None:
        variants.insert(0, ("baseline", args.baseline.resolve(), "{}"))
    if args.layers:
        variants += [
            ("this, no namespaces", ROOT, '{"namespaces": false}'),
            ("this, no namespaces, no seccomp", ROOT, '{"namespaces": false, "seccomp": false}'),
        ]
    print(f"load average before: {os.getloadavg()}")
    header = (
        f"{'configuration':<44} {'round trip ms':^23} {'program own ms':^23} "
        f"{'overhead ms':^23} {'eval/s':>8} {'start ms':>8}"
    )
    print(header)
    print(f"{'':<44}" + " ".join(f"{'mean':>7} {'median':>7} {'p95':>7}" for _ in range(3)))
    print("-" * len(header))
    medians: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        (directory / "validator.py").write_text(VALIDATOR)
        for name, code in PROGRAMS.items():
            for workers in (1, 2):
                for label, root, extra in variants:  # alternating: the same load for each
                    data = _measure(root, directory, code, workers, args.n, extra)
                    line, median = _row(f"{label}: {name}, {workers} worker(s)", data)
                    medians[(label, f"{name}/{workers}")] = median
                    print(line, flush=True)
    for label, code, preamble in (("", TRIVIAL, ""), (" + numpy", TRIVIAL, "import numpy\n")):
        times = _fresh_process(code, args.fresh_n, preamble)
        print(f"{'fresh python -c' + label + ', trivial':<44} {_stats(times)}")
    print(f"load average after: {os.getloadavg()}")
    if args.baseline is not None:
        print("\nmedian overhead, this checkout minus baseline (ms):")
        for key in sorted({k for _, k in medians}):
            delta = medians[("this checkout", key)] - medians[("baseline", key)]
            print(f"  {key:<20} {delta:+7.2f}")


if __name__ == "__main__":
    main()
