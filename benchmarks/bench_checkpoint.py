"""The run state a commit checkpoints: encoding the islands whole against re-encoding changes.

Usage:
    .venv/bin/python benchmarks/bench_checkpoint.py [--islands 4] [--bins 30] [--adds 20000]

Fills an island model (circle packing's metrics, two adaptive axes of ``--bins``
bins each, no capacity) with ``--adds`` random programs, then times, per commit:
``json.dumps(islands.to_dict(), sort_keys=True)`` (what every commit did before
issue 13's session 4), ``committer.IslandsText`` when no island changed (most
commits: a rejected, invalid or duplicate child), and ``IslandsText`` after an
accepted child changed one island. The texts are checked equal first.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Callable

from gigaevo.evolution.committer import IslandsText
from gigaevo.evolution.descriptors import BehaviourSpace
from gigaevo.evolution.islands import IslandModel
from gigaevo.problems import load_problem


def _ms(fn: Callable[[int], object], n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - start) / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--islands", type=int, default=4)
    parser.add_argument("--bins", type=int, default=30)
    parser.add_argument("--adds", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    axes = [
        {"name": n, "source": "feature", "bins": args.bins, "scale": "log", "adaptive": True}
        for n in ("code_length", "n_statements")
    ]
    metrics = load_problem(name="circle_packing").metrics
    model = IslandModel(args.islands, BehaviourSpace.from_dicts(axes), metrics, None)
    rng = random.Random(0)

    def add(i: int, fitness: float | None = None) -> None:
        values = (rng.uniform(100, 5000), rng.uniform(5, 300))
        model.add(
            i % args.islands,
            f"p{i:07d}",
            rng.random() if fitness is None else fitness,
            values=values,
        )

    for i in range(args.adds):
        add(i)
    text = IslandsText()
    assert text(model) == json.dumps(model.to_dict(), sort_keys=True)
    whole = _ms(lambda _: json.dumps(model.to_dict(), sort_keys=True), args.repeats)
    unchanged = _ms(lambda _: text(model), args.repeats)

    def accepted(i: int) -> str:
        add(args.adds + i, 2.0 + i)  # better than every elite: it changes its island
        return text(model)

    changed = _ms(accepted, args.repeats)
    size = len(text(model))
    print(f"{args.islands} islands, {len(model)} elites, state text {size / 1000:.0f} kB")
    print("| per commit | ms |")
    print("|---|---|")
    print(f"| islands encoded whole (before) | {whole:.2f} |")
    print(f"| IslandsText, no island changed | {unchanged:.3f} |")
    print(f"| IslandsText, one island changed (an accepted child) | {changed:.2f} |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
