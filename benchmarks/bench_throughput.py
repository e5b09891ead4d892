"""Mutations per second of the offline mutator, alone and in the full loop.

Usage:
    .venv/bin/python benchmarks/bench_throughput.py [--mutants 400] [--problem rastrigin]
        [--set memory=none pipeline=guided ...]

Each end-to-end run uses the default configuration (memory=v2) plus ``--set``; the
configuration of every run is printed before its figures.

Prints, for the chosen problem:
- the offline mutator alone (prompt rendering, answer, parsing, applying);
- end-to-end runs (mutate + sandbox + archive + SQLite commit) for several
  evaluator.max_workers / evolution.max_in_flight settings, in mutants/s;
- the share of a run spent outside the child programs themselves.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _config import announce, run_config

from gigaevo.llm import OfflineMutatorLLM
from gigaevo.mutation import LLMMutator, MutationRequest
from gigaevo.pipeline.build import run_from_config
from gigaevo.problems import load_problem
from gigaevo.programs import Program


def bench_mutator(problem_name: str, n: int) -> float:
    """Mutations per second of LLMMutator(OfflineMutatorLLM) on the initial program."""
    problem = load_problem(name=problem_name)
    parent = Program(id="p0", code=problem.initial_programs[0], ordinal=0, valid=True)
    mutator = LLMMutator(OfflineMutatorLLM(seed=0), mode="diff")
    start = time.perf_counter()
    ok = 0
    for i in range(n):
        req = MutationRequest(
            task_description=problem.description,
            metrics=problem.metrics,
            parent=parent,
            inspirations=(),
            seed=i,
        )
        ok += mutator.mutate(req).child_code is not None
    elapsed = time.perf_counter() - start
    print(f"  offline mutator alone: {n / elapsed:8.1f} mutations/s ({ok}/{n} applied)")
    return n / elapsed


def bench_run(
    problem_name: str, n: int, workers: int, in_flight: int, extra: tuple[str, ...] = ()
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = run_config(
            tmp,
            f"problem={problem_name}",
            f"max_mutants={n}",
            f"evaluator.max_workers={workers}",
            f"evolution.max_in_flight={in_flight}",
            *extra,
        )
        announce(cfg)
        start = time.perf_counter()
        run_from_config(cfg, show_progress=False)
        elapsed = time.perf_counter() - start
        summary = json.loads((Path(tmp) / "summary.json").read_text())
    return {"seconds": elapsed, "rate": n / elapsed, "best": summary["best_fitness"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=400)
    parser.add_argument("--problem", default="rastrigin")
    parser.add_argument("--set", nargs="*", default=[], help="further Hydra overrides")
    args = parser.parse_args()
    print(f"problem={args.problem}, {args.mutants} mutants per run")
    bench_mutator(args.problem, args.mutants)
    print("  end to end (includes start-up of the sandbox workers and the initial program):")
    header = ("max_workers", "max_in_flight", "seconds", "mutants/s", "best")
    print("  " + " ".join(f"{h:>{w}}" for h, w in zip(header, (11, 13, 8, 10, 10), strict=True)))
    for workers, in_flight in ((1, 1), (1, 4), (2, 4), (2, 8)):
        r = bench_run(args.problem, args.mutants, workers, in_flight, tuple(args.set))
        print(
            f"  {workers:>11} {in_flight:>13} {r['seconds']:>8.2f} {r['rate']:>10.1f} "
            f"{r['best']:>10.4g}"
        )


if __name__ == "__main__":
    main()
