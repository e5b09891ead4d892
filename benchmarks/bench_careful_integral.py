"""The careful chance-constraint integral on random near-degenerate laws, and its cost.

Usage:
    .venv/bin/python benchmarks/bench_careful_integral.py [--laws 200] [--seed 11]
        [--baseline /tmp/main-s8]

Part 1 draws ``--laws`` laws of (eta_0, eta_1): means N(-1, 1.5), sd_0 = exp(N(0, 0.7)),
zeta = N(0, 1.2), varsigma / sd_1 = 10^U(-4.9, 0), delta in {0.05, 0.1, 0.2}, and compares
``acceptance_probability`` with the reference of ``tests/memory/causal/
test_acceptance_near_singular.py`` (tanh-sinh over pieces split at every root and turning
point of the gap). A law is bad when P_acc is above the truth by more than 1e-9 or below it
by more than twice its error bound plus 1e-9 (memory-model.md "Invalidity head and chance
constraint": P_acc is the integral minus its error bound). Prints the count of bad laws.

Part 2 times one call on 300 ordinary laws (|rho| < 0.9, sds 0.3-2), CPU ms per call;
``--baseline PATH`` times the same laws on another checkout's package right after, in a
subprocess, three alternations, and prints the ratio.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _timing() -> float:
    from gigaevo.memory.v2.causal import acceptance_probability

    rng = np.random.default_rng(7)
    laws = []
    for _ in range(300):
        m = rng.normal([-2.0, -1.8], 0.8)
        s0, s1 = np.exp(rng.uniform(math.log(0.3), math.log(2.0), 2))
        r = rng.uniform(-0.9, 0.9)
        laws.append((m, np.array([[s0 * s0, r * s0 * s1], [r * s0 * s1, s1 * s1]])))
    acceptance_probability(*laws[0])
    t = time.process_time()
    for m, c in laws:
        acceptance_probability(m, c, 0.10)
    return 1e3 * (time.process_time() - t) / len(laws)


def _random_laws(n: int, seed: int) -> tuple[int, int]:
    sys.path.insert(0, str(ROOT))
    from gigaevo.memory.v2.causal import acceptance_probability
    from tests.memory.causal.test_acceptance_near_singular import _truth_of

    rng = np.random.default_rng(seed)
    bad = failed = 0
    for _ in range(n):
        m0, m1 = rng.normal(-1.0, 1.5, 2)
        sd0 = math.exp(rng.normal(0.0, 0.7))
        zeta = rng.normal(0.0, 1.2)
        ratio = 10 ** rng.uniform(-4.9, 0.0)
        vs = ratio * abs(zeta) / math.sqrt(1.0 - ratio * ratio)
        delta = float(rng.choice([0.05, 0.1, 0.2]))
        cov = np.array([[sd0 * sd0, zeta * sd0], [zeta * sd0, zeta * zeta + vs * vs]])
        acc = acceptance_probability(np.array([m0, m1]), cov, delta)
        if acc.failed:
            failed += 1
            continue
        d = acc.probability - _truth_of(m0, sd0, m1, zeta, vs, delta)
        if not -2.0 * acc.error - 1e-9 <= d <= 1e-9:
            bad += 1
            print(f"  bad: m=({m0:.4f}, {m1:.4f}) sd0={sd0:.4f} zeta={zeta:.4f} vs={vs:.3g} "
                  f"delta={delta}: P_acc - truth = {d:+.3g}, bound {acc.error:.2g}")  # fmt: skip
    return bad, failed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--laws", type=int, default=200)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--baseline", type=Path, help="another checkout, timed side by side")
    ap.add_argument("--time-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.time_only:
        print(f"{_timing():.4f}")
        return
    if args.laws:
        bad, failed = _random_laws(args.laws, args.seed)
        print(f"random laws: {args.laws} (seed {args.seed}), failed closed {failed}, bad {bad}")
    trees = [ROOT, *([args.baseline] if args.baseline else [])]
    times: dict[Path, list[float]] = {t: [] for t in trees}
    for _ in range(3):
        for tree in trees:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            out = subprocess.run(
                [sys.executable, __file__, "--time-only"], env=env, capture_output=True,
                text=True, check=True, cwd="/",
            )  # fmt: skip
            times[tree].append(float(out.stdout.split()[-1]))
    for tree, ms in times.items():
        print(f"one careful call, ordinary laws, {tree}: {min(ms):.3f}-{max(ms):.3f} ms CPU")
    if args.baseline:
        ratio = np.median(times[args.baseline]) / np.median(times[ROOT])
        print(f"baseline / this (median CPU per call): {ratio:.2f}")


if __name__ == "__main__":
    main()
