"""Cost of the run scratchpad: one write, and the loop's speed with it on and off.

Usage:
    .venv/bin/python benchmarks/bench_scratchpad.py [--mutants 2000] [--repeats 4]

Prints the time of one changing upsert and of one that changes nothing, then
end-to-end mutants/s on the fast problem (2 workers, 8 in flight) with the
scratchpad off, on at the default cadence (every 50 mutants) and on at every
mutant, interleaved so that machine load affects all three alike, with the
number of file writes of each run. The runs use the default memory (memory=v2); the
configuration of each is printed before the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from _config import announce, run_config

from gigaevo.pipeline.build import run_from_config
from gigaevo.scratchpad import Scratchpad

SETTINGS = {
    "off": ("scratchpad.enabled=false",),
    "every 50 (default)": (),
    "every mutant": ("scratchpad.record_every=1",),
}


def bench_upsert(n: int = 300) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pad = Scratchpad(Path(tmp) / ".agent" / "scratchpad.md")
        for i in range(30):
            pad.record_decision(f"d{i}", f"decision number {i}", source="config")
        start = time.perf_counter()
        for i in range(n):
            pad.record_finding("best", f"best so far {i}", source=f"p{i}", record_change=False)
        changing = (time.perf_counter() - start) / n
        start = time.perf_counter()
        for _ in range(n):
            pad.record_finding("best", f"best so far {n - 1}", source=f"p{n - 1}")
        same = (time.perf_counter() - start) / n
    print(f"  one upsert that changes the file: {1000 * changing:.2f} ms")
    print(f"  one upsert that changes nothing:  {1000 * same:.2f} ms (lock and read, no write)")


def bench_run(n: int, overrides: tuple[str, ...]) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = run_config(
            tmp,
            "problem=rastrigin",
            f"max_mutants={n}",
            "evaluator.max_workers=2",
            "evolution.max_in_flight=8",
            *overrides,
        )
        announce(cfg)
        start = time.perf_counter()
        run_from_config(cfg, show_progress=False)
        rate = n / (time.perf_counter() - start)
        report = Path(tmp) / ".agent" / "design_report.json"
        writes = json.loads(report.read_text())["run"]["writes"] if report.exists() else 0
    return rate, writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    bench_upsert()
    rates: dict[str, list[float]] = {name: [] for name in SETTINGS}
    writes: dict[str, int] = {}
    for _ in range(args.repeats):
        for name, overrides in SETTINGS.items():
            rate, writes[name] = bench_run(args.mutants, overrides)
            rates[name].append(rate)
    print(f"  rastrigin, {args.mutants} mutants, median of {args.repeats} interleaved runs:")
    for name, values in rates.items():
        spread = ", ".join(f"{v:.0f}" for v in values)
        print(
            f"  {name:>20}: {statistics.median(values):6.1f} mutants/s ({spread}); "
            f"{writes[name]} writes"
        )


if __name__ == "__main__":
    main()
