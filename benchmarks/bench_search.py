"""Benchmark the search: archive coverage, QD-score and best fitness after N offline mutants.

Run from the repository root (nice'd: the study is long)::

    nice .venv/bin/python benchmarks/bench_search.py [--mutants 1000] [--seeds 0 1 2 3 4]
        [--problems circle_packing heilbronn rastrigin bin_packing] [--baseline DIR]
        [--out DIR] [--jobs 2] [override ...]

Every (problem, seed) is one ``run.py`` in its own process with the offline
mutator and ``memory=none`` (the memory's cards change the offline mutator's
choices; leaving it out compares the search alone), the given extra Hydra
overrides, in ``--out``. ``--baseline DIR`` runs the same rows with another
checkout (``git archive main | tar -x -C /tmp/base``: "today's" search),
interleaved with this one so that both see the same machine load; problems
the baseline does not have are skipped there. Runs already finished in
``--out`` are read, not repeated, so an interrupted study resumes.

Per run it prints the best fitness, the occupied cells of each island
(coverage) and the QD-score (the sum over an island's elites of their
normalised fitness); per problem and checkout the median over seeds with the
range (min..max), and the per-seed difference of best fitness to the
baseline in the metric's direction. Coverage of the baseline is read from
its archive checkpoint, as older versions write no ``archive`` summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _config

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ("circle_packing", "heilbronn", "rastrigin", "bin_packing")


@dataclass(frozen=True)
class Row:
    checkout: str
    problem: str
    seed: int
    best: float
    higher_is_better: bool
    cells: tuple[int, ...]
    qd: tuple[float, ...]
    seconds: float


def _has_problem(root: Path, problem: str) -> bool:
    return (root / "gigaevo" / "problems" / "builtin" / problem / "problem.yaml").is_file()


def _archive(ckpt: Path, summary: dict[str, Any]) -> tuple[tuple[int, ...], tuple[float, ...]]:
    if isinstance(summary.get("archive"), list):
        islands = summary["archive"]
        return tuple(i["coverage"] for i in islands), tuple(i["qd_score"] for i in islands)
    db = sqlite3.connect(ckpt / "programs.sqlite3")
    try:
        state = json.loads(db.execute("SELECT value FROM meta WHERE key = 'state'").fetchone()[0])
    finally:
        db.close()
    lower, upper = _bounds(ckpt)
    hib = summary["higher_is_better"]

    def quality(f: float) -> float:
        q = (f - lower) / (upper - lower)
        return min(1.0, max(0.0, q if hib else 1.0 - q))

    islands = state["islands"]["islands"]
    cells = tuple(len(i["elites"]) for i in islands)
    qd = tuple(round(sum(quality(e["fitness"]) for e in i["elites"]), 9) for i in islands)
    return cells, qd


def _bounds(ckpt: Path) -> tuple[float, float]:
    import yaml

    config = yaml.safe_load((ckpt / "config.yaml").read_text())
    name = config["problem"]["name"]
    spec = yaml.safe_load(
        (ROOT / "gigaevo" / "problems" / "builtin" / name / "problem.yaml").read_text()
    )
    return float(spec["metrics"]["lower_bound"]), float(spec["metrics"]["upper_bound"])


def launch(
    root: Path, problem: str, seed: int, n: int, ckpt: Path, cwd: Path, extra: list[str]
) -> None:
    """``run.py`` of checkout ``root``: ``n`` mutants of ``problem``, no memory, into ``ckpt``.

    Raises:
        RuntimeError: the run failed (with the end of its stderr).
    """
    args = [
        f"problem.name={problem}",
        f"seed={seed}",
        f"max_mutants={n}",
        "memory=none",
        f"checkpoint_dir={ckpt}",
        "progress=false",
        *extra,
    ]
    proc = _config.launch(args, cwd, root)
    if proc.returncode != 0:
        raise RuntimeError(f"{root} {problem} seed {seed} failed:\n{proc.stderr[-3000:]}")


def run_one(
    checkout: str, root: Path, problem: str, seed: int, n: int, out: Path, extra: list[str]
) -> Row:
    ckpt = out / checkout / f"{problem}_s{seed}"
    summary_path = ckpt / "summary.json"
    started = time.monotonic()
    done = summary_path.is_file() and json.loads(summary_path.read_text()).get("finished")
    if not done:
        if ckpt.exists():
            subprocess.run(["rm", "-rf", str(ckpt)], check=True)
        launch(root, problem, seed, n, ckpt, out, ["scratchpad.enabled=false", *extra])
    summary = json.loads(summary_path.read_text())
    cells, qd = _archive(ckpt, summary)
    return Row(
        checkout,
        problem,
        seed,
        float(summary["best_fitness"]),
        bool(summary["higher_is_better"]),
        cells,
        qd,
        time.monotonic() - started,
    )


def _median_range(values: list[float]) -> str:
    return f"{statistics.median(values):.6g} [{min(values):.6g}..{max(values):.6g}]"


def report(rows: list[Row]) -> None:
    print("\nper run:")
    print(f"{'checkout':10} {'problem':15} {'seed':>4} {'best':>12} {'cells':>12} {'QD':>18}")
    for r in sorted(rows, key=lambda r: (r.problem, r.checkout, r.seed)):
        qd = "/".join(f"{q:.2f}" for q in r.qd)
        cells = "/".join(str(c) for c in r.cells)
        print(f"{r.checkout:10} {r.problem:15} {r.seed:>4} {r.best:>12.6g} {cells:>12} {qd:>18}")
    print("\nmedian [min..max] over seeds:")
    for problem in sorted({r.problem for r in rows}):
        for checkout in ("baseline", "this"):
            mine = [r for r in rows if r.problem == problem and r.checkout == checkout]
            if not mine:
                continue
            cells = [float(c) for r in mine for c in r.cells]
            best = _median_range([r.best for r in mine])
            print(
                f"  {problem:15} {checkout:9} n={len(mine)}  best {best}"
                f"  cells/island {_median_range(cells)} (min {min(cells):.0f})"
                f"  QD/island {_median_range([q for r in mine for q in r.qd])}"
            )
        _paired(problem, rows)


def _paired(problem: str, rows: list[Row]) -> None:
    base = {r.seed: r for r in rows if r.problem == problem and r.checkout == "baseline"}
    this = {r.seed: r for r in rows if r.problem == problem and r.checkout == "this"}
    seeds = sorted(set(base) & set(this))
    if not seeds:
        return
    sign = 1.0 if this[seeds[0]].higher_is_better else -1.0
    gains = [sign * (this[s].best - base[s].best) for s in seeds]
    wins = sum(g > 0 for g in gains)
    median = statistics.median(gains)
    print(
        f"  {problem:15} this - baseline (oriented, + is better): median {median:+.4g}"
        f", {wins}/{len(seeds)} seeds better"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mutants", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS))
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--out", type=Path, default=Path("/tmp/gigaevo-bench-search"))
    parser.add_argument("--jobs", type=int, default=2, help="runs at once")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for this checkout")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    jobs: list[tuple[str, Path, str, int, list[str]]] = []
    for problem in args.problems:
        for seed in args.seeds:
            if args.baseline is not None and _has_problem(args.baseline.resolve(), problem):
                jobs.append(("baseline", args.baseline.resolve(), problem, seed, []))
            jobs.append(("this", ROOT, problem, seed, list(args.overrides)))
    print(f"load average at start: {os.getloadavg()}")
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [
            pool.submit(run_one, c, root, p, s, args.mutants, args.out, extra)
            for c, root, p, s, extra in jobs
        ]
        rows = []
        for f in futures:
            row = f.result()
            rows.append(row)
            print(
                f"done {row.checkout} {row.problem} seed {row.seed}: best {row.best:.6g}, "
                f"cells {row.cells} ({row.seconds:.0f} s)",
                flush=True,
            )
    print(f"load average at end: {os.getloadavg()}")
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
