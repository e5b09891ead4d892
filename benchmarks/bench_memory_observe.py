"""The memory's cost per observed outcome in a real run: ``decide`` and ``observe`` timed
inside ``run.py problem.name=rastrigin`` (issue 16, the write side; issue 13 point 2).

Usage:
    .venv/bin/python benchmarks/bench_memory_observe.py [--mutants 600]
        [--baseline PATH_OF_ANOTHER_CHECKOUT] [--profile] [-- HYDRA_OVERRIDES...]

Runs the default config (memory=v2: causal decisions, live authoring with the offline
memory LLM, stamps, leases, retirement sweeps) for ``--mutants`` mutants in a
temporary directory, in-process, with ``CardBankMemory.decide`` and ``observe`` wrapped
by a timer, and prints wall ms per call (mean, p50, p90) and their totals, the run's
wall time and the sizes of ``cards.json`` and its journals. Wall time is the
figure that matters for the memory lane (its fsyncs wait, they burn no CPU).
``--profile`` adds a cProfile of ``observe`` (cumulative, the top 40 entries).
``--baseline PATH`` runs the same on the package of another checkout (an export of
``main``: ``git archive main | tar -x -C /tmp/main_tree``) at the same time, in a
second process, so both see the same machine load; the ratio of the observe means is
printed at the end.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def child(tree: Path, mutants: int, profile: bool, overrides: list[str]) -> None:
    """Child mode: the package of checkout ``tree`` is measured; JSON on the last line."""
    import cProfile
    import pstats

    sys.path[:0] = [str(tree), str(tree / "benchmarks")]
    import gigaevo

    assert Path(gigaevo.__file__).is_relative_to(tree), gigaevo.__file__
    import _config
    from _config import run_config

    from gigaevo.memory.v2.provider import CardBankMemory
    from gigaevo.pipeline.build import run_from_config

    prof = cProfile.Profile()
    times: dict[str, list[float]] = {"decide": [], "observe": []}
    for name in times:
        original = getattr(CardBankMemory, name)

        def timed(self: object, arg: object, _f: object = original, _n: str = name) -> object:
            started = time.perf_counter()
            on = profile and _n == "observe"
            if on:
                prof.enable()
            try:
                return _f(self, arg)  # type: ignore[operator]
            finally:
                if on:
                    prof.disable()
                times[_n].append(time.perf_counter() - started)

        setattr(CardBankMemory, name, timed)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = run_config(tmp, "problem=rastrigin", f"max_mutants={mutants}", *overrides)
        if hasattr(_config, "describe"):  # an older baseline's _config may not have it
            print(f"config: {_config.describe(cfg)}", flush=True)
        started = time.perf_counter()
        run_from_config(cfg, show_progress=False)
        wall = time.perf_counter() - started
        sizes = {
            p.name: p.stat().st_size
            for p in Path(tmp).iterdir()
            if p.name in ("cards.json", "cards.trials.jsonl", "cards.records.jsonl")
        }
    if profile:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
        print(out.getvalue(), flush=True)
    result = {"wall_s": wall, "sizes": sizes}
    for name, t in times.items():
        t = sorted(t)
        result[name] = {
            "n": len(t),
            "mean_ms": 1e3 * statistics.mean(t) if t else 0.0,
            "p50_ms": 1e3 * statistics.median(t) if t else 0.0,
            "p90_ms": 1e3 * t[int(0.9 * len(t))] if t else 0.0,
            "total_s": sum(t),
        }
    print(json.dumps(result), flush=True)


def start(tree: Path, args: argparse.Namespace) -> subprocess.Popen[str]:
    cmd = [sys.executable, str(HERE), "--child", str(tree), "--mutants", str(args.mutants)]
    cmd += ["--profile"] * args.profile + ["--", *args.overrides]
    return subprocess.Popen(cmd, cwd=tree, stdout=subprocess.PIPE, text=True)


def report(label: str, out: str) -> dict[str, object]:
    lines = out.strip().splitlines()
    print("\n".join(lines[:-1]))
    r = json.loads(lines[-1])
    print(f"{label}: run wall {r['wall_s']:.0f} s; bank files {r['sizes']}")
    for name in ("decide", "observe"):
        s = r[name]
        print(
            f"  {name:>7}: {s['n']} calls, wall ms per call mean {s['mean_ms']:6.1f}"
            f"  p50 {s['p50_ms']:6.1f}  p90 {s['p90_ms']:6.1f}  (total {s['total_s']:.1f} s)"
        )
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mutants", type=int, default=600)
    ap.add_argument("--baseline", type=Path, help="another checkout, run at the same time")
    ap.add_argument("--profile", action="store_true", help="cProfile of observe")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (after --)")
    args = ap.parse_args()
    if args.child is not None:
        child(args.child.resolve(), args.mutants, args.profile, args.overrides)
        return
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    this = start(HERE.parents[1], args)
    base = start(args.baseline.resolve(), args) if args.baseline is not None else None
    mine = report(f"this checkout ({HERE.parents[1]})", this.communicate()[0])
    if base is not None:
        other = report(f"baseline ({args.baseline})", base.communicate()[0])
        ratio = other["observe"]["mean_ms"] / mine["observe"]["mean_ms"]  # type: ignore[index]
        print(f"observe mean, baseline / this: {ratio:.2f}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
