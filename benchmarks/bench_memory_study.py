"""The memory study: memory=none vs memory=v2 at a fixed mutation budget, over seeds.

Usage:
    .venv/bin/python benchmarks/bench_memory_study.py [--quick] [--seeds 5]
        [--mutants 300] [--problems circle_packing heilbronn rastrigin]
        [--jobs 2] [--out DIR] [--set KEY=VALUE ...]

Arms (offline mutator and offline memory LLM, nothing remote):
  none: ``memory=none pipeline=guided``
  v2:   ``memory=v2 pipeline=memory_guided`` (causal selection, randomised offers)

Each (problem, arm, seed) is one ``run.py`` subprocess (``evaluator.max_workers=1``;
``--jobs`` runs at a time, at most 2) writing its own checkpoint directory under
``--out`` (a temporary directory by default; keep it to open the runs with
``gigaevo.analysis.load_sweep`` or ``python -m gigaevo.report``). The table:
per problem and arm the seeds, the budget, the mean best fitness with its 95 %
Student-t interval over seeds; on the v2 row the paired difference v2 - none
over the same seeds with its t interval (positive = v2 higher; for a
lower-is-better problem a negative difference favours v2), and the memory's
read side: offered share (offers / decisions), withheld share (controls /
randomised decisions), cited offers per run, and the ITT DR of offering the
proposed card (``ope_summary.json``, raw oriented gain) as the mean over seeds
with its t interval. ``--quick`` is 2 seeds x 60 mutants. ``--set`` adds Hydra
overrides to every run of both arms (e.g. ``--set llm=gemini memory/llm=gemini``
for a real model; the default is the offline backends).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
from scipy import stats

from gigaevo.analysis import compare_arms, load_sweep, paired_difference

ROOT = Path(__file__).resolve().parents[1]
ARMS = {
    "none": ("memory=none", "pipeline=guided"),
    "v2": ("memory=v2", "pipeline=memory_guided"),
}
PROBLEMS = ("circle_packing", "heilbronn", "rastrigin")


def run_one(
    out: Path, problem: str, arm: str, seed: int, mutants: int, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One run.py subprocess; returns its exit code and wall time."""
    job = out / f"{problem}-{arm}-s{seed}"
    cmd = [
        sys.executable,
        "run.py",
        f"problem={problem}",
        *ARMS[arm],
        f"seed={seed}",
        f"max_mutants={mutants}",
        "progress=false",
        "evaluator.max_workers=1",
        f"checkpoint_dir={job}",
        *extra,
    ]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        print(f"  FAILED {job.name}: exit {done.returncode}\n{done.stderr[-800:]}", file=sys.stderr)
    return {"job": job.name, "code": done.returncode, "wall": wall}


def t_interval(values: pd.Series, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval of the mean (NaN bounds with fewer than 2 values)."""
    v = values.dropna().astype(float)
    n = len(v)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if n < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * float(v.std(ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half


def _fmt(mean: float, low: float, high: float, digits: int = 4) -> str:
    if math.isnan(mean):
        return "-"
    if math.isnan(low):
        return f"{mean:.{digits}g}"
    return f"{mean:.{digits}g} [{low:.{digits}g}, {high:.{digits}g}]"


def study_table(sweep: pd.DataFrame, mutants: int) -> pd.DataFrame:
    """One row per (problem, arm) from the sweep of the study's runs (see the module doc)."""
    rows = []
    arms = compare_arms(sweep, ["override.problem", "override.memory"])
    for _, arm in arms.iterrows():
        problem, name = arm["override.problem"], arm["override.memory"]
        jobs = sweep[(sweep["override.problem"] == problem) & (sweep["override.memory"] == name)]
        row: dict[str, Any] = {
            "problem": problem,
            "arm": name,
            "dir": "higher" if bool(jobs["higher_is_better"].iloc[0]) else "lower",
            "seeds": int(arm["n"]),
            "budget": mutants,
            "mean best": arm["mean"],
            "95% CI": _fmt(arm["mean"], arm["ci_low"], arm["ci_high"]),
            "wall s": float(jobs["wall_seconds"].mean()),
        }
        if name == "v2":
            row.update(_paired(sweep, problem))
            row.update(_memory(jobs))
        rows.append(row)
    return pd.DataFrame(rows)


def _paired(sweep: pd.DataFrame, problem: str) -> dict[str, Any]:
    diff = paired_difference(sweep[sweep["override.problem"] == problem])
    if diff.empty:
        return {"v2 - none": "-"}
    row = diff.iloc[0]
    return {"v2 - none": _fmt(row["mean"], row["ci_low"], row["ci_high"])}


def _memory(jobs: pd.DataFrame) -> dict[str, Any]:
    if "memory.decisions" not in jobs:
        return {}
    offered = jobs["memory.offered_share"].mean()
    withheld = jobs["memory.withheld_share"].mean()
    return {
        "offered": f"{offered:.0%}",
        "withheld": f"{withheld:.0%}",
        "cited/run": f"{jobs['memory.cited'].mean():.1f}",
        "ITT DR": _fmt(*t_interval(jobs["memory.itt_dr"]), digits=3),
        "DR CI>0/<0": f"{int((jobs['memory.itt_ci_low'] > 0).sum())}/"
        f"{int((jobs['memory.itt_ci_high'] < 0).sum())}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds x 60 mutants")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--mutants", type=int, default=300)
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS))
    parser.add_argument("--jobs", type=int, default=2, choices=(1, 2))
    parser.add_argument("--out", default=None, help="keep the runs here (default: temporary)")
    parser.add_argument("--set", nargs="*", default=[], help="extra overrides for every run")
    args = parser.parse_args()
    seeds, mutants = (2, 60) if args.quick else (args.seeds, args.mutants)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        specs = [(p, a, s) for p in args.problems for s in range(seeds) for a in ("v2", "none")]
        print(
            f"memory study: {len(args.problems)} problem(s) x 2 arms x {seeds} seeds, "
            f"{mutants} mutants each, llm=offline, {args.jobs} run(s) at a time",
            flush=True,
        )
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            extra = tuple(args.set)
            done = list(pool.map(lambda spec: run_one(out, *spec, mutants, extra), specs))
        failed = [d["job"] for d in done if d["code"] != 0]
        sweep = load_sweep(out)
        sweep = sweep[sweep["finished"].astype(bool)]
        table = study_table(sweep, mutants)
        with pd.option_context("display.width", 250, "display.max_columns", 30):
            print(table.to_string(index=False, na_rep="-"))
        print(f"total wall {time.perf_counter() - start:.0f} s; failed runs: {failed or 'none'}")
        (out / "study.json").write_text(table.to_json(orient="records", indent=1))
        if args.out:
            print(f"runs and study.json kept in {out}")


if __name__ == "__main__":
    main()
