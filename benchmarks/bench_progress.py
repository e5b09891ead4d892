"""How far the offline mutator gets: best fitness per seed at a fixed budget.

Usage:
    .venv/bin/python benchmarks/bench_progress.py [--problem circle_packing]
        [--mutants 300] [--seeds 0 1 2 3 4] [--set memory=none pipeline=guided ...]

Runs the default configuration (offline mutator, the default memory=v2), or the one the
``--set`` overrides give, once per seed; prints the configuration it runs, then the
initial and best fitness, the improvement, valid share and wall time per run, then the
mean and range over seeds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from _config import announce, run_config

from gigaevo.pipeline.build import run_from_config


def run_once(
    problem: str, mutants: int, seed: int, extra: tuple[str, ...] = ()
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        overrides = (f"problem={problem}", f"max_mutants={mutants}", f"seed={seed}", *extra)
        cfg = run_config(tmp, *overrides)
        announce(cfg)
        run_from_config(cfg, show_progress=False)
        return dict(json.loads((Path(tmp) / "summary.json").read_text()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="circle_packing")
    parser.add_argument("--mutants", type=int, default=300)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--set", nargs="*", default=[], help="further Hydra overrides")
    args = parser.parse_args()
    header = f"  {'seed':>4} {'initial':>10} {'best':>10} {'gain':>10} {'valid':>6} {'seconds':>8}"
    bests = []
    for i, seed in enumerate(args.seeds):
        s = run_once(args.problem, args.mutants, seed, tuple(args.set))
        if i == 0:
            print(header)
        gain = s["best_fitness"] - s["initial_fitness"]
        bests.append(s["best_fitness"])
        print(
            f"  {seed:>4} {s['initial_fitness']:>10.5g} {s['best_fitness']:>10.5g} "
            f"{gain:>+10.4g} {s['n_valid'] / max(1, s['n_mutants']):>6.0%} "
            f"{s['wall_seconds']:>8.2f}"
        )
    print(
        f"  best over seeds: mean {statistics.mean(bests):.5g}, "
        f"min {min(bests):.5g}, max {max(bests):.5g}"
    )


if __name__ == "__main__":
    main()
