"""Benchmark the search against a (1+1) hill-climb (and OpenEvolve) on the same model server.

Run from the repository root::

    nice .venv/bin/python benchmarks/bench_search_llm.py [--seeds 0 1 2 3 4]
        [--mutants 200] [--checkpoints 50 200] [--problem circle_packing]
        [--server aware|perturb] [--median 0.2] [--sigma 1.0] [--jobs 1]
        [--variant NAME:OVERRIDE,OVERRIDE ...] [--hill-feedback] [--no-hill-climb] [--no-ours]
        [--openevolve /work/scratch/oe-venv/bin/python] [--baseline DIR]
        [--out DIR] [override ...]

For each seed a model server of its own (``_search_server.py``, in its own
process, seeded by ``1000 + seed``) answers every contestant, who all start
from the problem's seed program. ``--server aware`` (the default) reads the
prompt: it repeats a habitual mistake per parent (a NameError) until the
prompt's feedback shows it, then fixes it; it does not repeat a move that the
feedback lists for a failed child; it recombines numbers from the
inspirations; it perturbs numbers, sometimes boldly; a few answers hold no
code. ``--server perturb`` only nudges 1 to 3 numbers of the parent (the
previous benchmark). Answers are seeded by the attempt's seed and the
prompt, latencies are log-normal with a stall now and then. The latencies come
from a separate stream and the runs use strict dispatch, so ``--median 0``
(no waiting) gives the same curves in a fraction of the time.

**Paired.** Each contestant talks to the seed's server under its own name
(``/c/<name>/v1``): the server counts repeated requests per contestant and
does not seed on the name, so contestants that send the same request (ours
and a variant, on their first mutants and wherever their choices agree) get
the same answer, and a run gives the same curve whether it runs alone or
beside others, first or last. The server seeds on the attempt seed and the
parent program (not the prompt's other parts), and the hill-climb's step i
uses the seed of ours' attempt i, so ours with one island, one mutation in
flight and always the best as parent makes the hill-climb's moves.
Differences between contestants are then differences of their choices,
compared on common random numbers.

Contestants:

- **ours**: ``run.py`` with ``llm=openai_compatible`` pointed at the server,
  ``memory=none``, ``evolution.dispatch=strict`` (so that the history is a
  function of the seeds, not of the latencies: arrival order changes when a
  result is seen, not how parents are chosen) and otherwise the default
  configuration (the overrides given on the command line are added);
- each ``--variant NAME:OVERRIDE,...``: ours with those overrides as well
  (``nofeedback:evolution.feedback.enabled=false``, say);
- **main** (with ``--baseline DIR``, a checkout of another version, e.g.
  ``git archive main | tar -x -C /tmp/base``): that checkout's ``run.py``;
- **(1+1) hill-climb**: the current best program is sent in the same prompt
  (``build_messages``, no inspirations) with the seed of ours' attempt of the
  same number; the child replaces it when it is valid and strictly better.
  With ``--hill-feedback`` also a hill-climb whose prompt carries the
  failures of the current parent's last three failed children, as ours
  does (``hill+fb``);
- **OpenEvolve** (``--openevolve PY``: a python with openevolve 0.4.0) on the
  same seed program, its evaluator calling this problem's validator;
  circle packing only.

It prints the best-so-far after each checkpoint (mutants, the seed program
not counted), per seed and as medians with a distribution-free interval over
seeds (order statistics: the widest pair whose coverage of the true median is
at least 90 %, stated), the per-seed difference of every contestant to the
(1+1) hill-climb and of every variant to ours (median with its interval,
seeds ahead / level / behind and the two-sided sign test's p), the archive
coverage (occupied cells per island) of gigaevo runs, the server's answers by
kind, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _config import run_openevolve  # noqa: E402
from bench_search import _archive, launch  # noqa: E402
from scipy.stats import binom, binomtest  # noqa: E402

from gigaevo.evaluation import SandboxEvaluator  # noqa: E402
from gigaevo.mutation import (  # noqa: E402
    AnswerError,
    MutationRequest,
    apply_answer,
    build_messages,
    parse_answer,
)
from gigaevo.mutation.base import ParentFeedback  # noqa: E402
from gigaevo.problems import Problem, load_problem  # noqa: E402
from gigaevo.programs import Program  # noqa: E402
from gigaevo.util import derive_seed  # noqa: E402

SERVER = ROOT / "benchmarks" / "_search_server.py"


class Server:
    """``_search_server.py`` in a process of its own; ``url`` once it listens."""

    def __init__(self, seed: int, mode: str, median: float, sigma: float) -> None:
        args = ["--seed", str(seed), "--mode", mode, "--median", str(median)]
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), *args, "--sigma", str(sigma), "--exit-on-eof"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        port = int(self.proc.stdout.readline().split()[1])
        self.base = f"http://127.0.0.1:{port}"
        self.url = f"{self.base}/v1"

    def url_for(self, contestant: str) -> str:
        """The API base of one contestant (its own repeat counts, the same seeds)."""
        return f"{self.base}/c/{contestant}/v1"

    def tactics(self) -> dict[str, int]:
        with urllib.request.urlopen(self.url + "/tactics", timeout=10) as response:
            return dict(json.loads(response.read()))

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def _ask(url: str, messages: list[dict[str, str]], seed: int) -> str:
    body = json.dumps({"model": "search-model", "messages": messages, "seed": seed}).encode()
    request = urllib.request.Request(
        url + "/chat/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return str(json.loads(response.read())["choices"][0]["message"]["content"])


def hill_climb(url: str, problem: Problem, seed: int, n: int, feedback: bool) -> list[float]:
    """Best-so-far after each of ``n`` mutants of a (1+1) hill-climb (index 0: the seed).

    With ``feedback`` the prompt carries the current parent's last three failed
    children (``failure_line``, as gigaevo's feedback section shows them).
    """
    metrics = problem.metrics
    with SandboxEvaluator(problem, max_workers=1) as evaluator:
        code = problem.initial_programs[0]
        first = evaluator.evaluate(code)
        best, best_metrics = float(first.metrics[metrics.primary]), dict(first.metrics)
        curve, failures = [best], []
        for i in range(n):
            parent = Program(id="hc", code=code, ordinal=i, fitness=best, metrics=best_metrics)
            request = MutationRequest(
                task_description=problem.description,
                metrics=metrics,
                parent=parent,
                inspirations=(),
                seed=derive_seed(seed, "mutate", i),  # ours' attempt i: shared draws
                feedback=ParentFeedback(failures=tuple(failures[:3])),
            )
            messages = [
                {"role": m.role, "content": m.content} for m in build_messages(request, "diff")
            ]
            text = _ask(url, messages, request.seed)
            try:
                answer = parse_answer(text)
                child = apply_answer(code, answer, "diff")
            except AnswerError as exc:
                if feedback:
                    failures.insert(0, f"the answer was refused: {exc}")
                curve.append(best)
                continue
            result = evaluator.evaluate(child)
            if result.valid and metrics.better(result.metrics[metrics.primary], best):
                code, best, failures = child, float(result.metrics[metrics.primary]), []
                best_metrics = dict(result.metrics)
            elif not result.valid and feedback:
                report = answer.change_report.splitlines()
                tried = next((x.strip(" -") for x in report if not x.startswith("tactic")), "")
                failures.insert(0, f"{tried[:100]} -> {' '.join(str(result.reason).split())}")
            curve.append(best)
    return curve


def ours(
    url: str, root: Path, name: str, problem: str, seed: int, n: int, out: Path, extra: list[str]
) -> tuple[list[float], tuple[int, ...]]:
    """Best-so-far after each mutant of a gigaevo run of checkout ``root`` on the server
    (index 0: the seed), and the occupied cells of each island at the end."""
    ckpt = out / f"{name}_{problem}_s{seed}"
    subprocess.run(["rm", "-rf", str(ckpt)], check=True)
    llm = [
        "llm=openai_compatible",
        f"llm.api_base={url}",
        "llm.model=openai/search-model",
        "llm.max_retries=0",
        "evolution.dispatch=strict",
    ]
    launch(root, problem, seed, n, ckpt, out, [*llm, *extra])
    db = sqlite3.connect(ckpt / "programs.sqlite3")
    try:
        rows = db.execute("SELECT data FROM programs ORDER BY ordinal").fetchall()
    finally:
        db.close()
    programs = [json.loads(r[0]) for r in rows]
    spec = load_problem(name=problem).metrics
    initial = [p for p in programs if not p["parent_ids"]]
    best = initial[0]["fitness"]
    for p in initial:
        best = p["fitness"] if spec.better(p["fitness"], best) else best
    curve = [best]
    for p in programs[len(initial) :]:
        if p["valid"] and spec.better(p["fitness"], best):
            best = p["fitness"]
        curve.append(best)
    cells, _ = _archive(ckpt, json.loads((ckpt / "summary.json").read_text()))
    return curve, cells


OPENEVOLVE_CONFIG = """
max_iterations: {n}
checkpoint_interval: 100000
log_level: WARNING
random_seed: {seed}
diff_based_evolution: true
llm:
  api_base: {url}
  api_key: no-key
  models:
    - name: search-model
      weight: 1.0
  timeout: 300
  retries: 0
database:
  population_size: 200
  num_islands: 2
evaluator:
  timeout: 20
  cascade_evaluation: false
  parallel_evaluations: 4
"""


def openevolve(python: str, url: str, problem: Problem, seed: int, n: int) -> list[float]:
    """Best-so-far of OpenEvolve 0.4.0 after each evaluation (index 0: the seed program).

    Raises:
        RuntimeError: OpenEvolve failed.
    """
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log = work / "scores.jsonl"
        proc = run_openevolve(
            python,
            work,
            initial_program=problem.initial_programs[0],
            validator=problem.validator_path,
            primary=problem.metrics.primary,
            config_yaml=OPENEVOLVE_CONFIG.format(n=n, seed=seed, url=url),
            iterations=n,
            log=log,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"OpenEvolve failed:\n{proc.stderr[-3000:]}")
        scores = [json.loads(x)["score"] for x in log.read_text().splitlines()]
    better = problem.metrics.better
    best, curve = scores[0], [scores[0]]
    for score in scores[1 : n + 1]:
        if score is not None and (best is None or better(score, best)):
            best = score
        curve.append(best)
    return curve


def _median_range(values: list[float]) -> str:
    return f"{statistics.median(values):.5g} [{min(values):.5g}..{max(values):.5g}]"


def median_interval(values: list[float], level: float = 0.9) -> tuple[float, float, float, float]:
    """(median, low, high, coverage): the order statistics ``x_(k) <= x_(n+1-k)`` with the
    largest ``k`` whose coverage of the population median, ``1 - 2 P(B < k)`` for ``B ~
    Binomial(n, 1/2)``, is at least ``level`` (distribution-free; with 5 values the
    range, 94 %; with 10, the 2nd and 9th, 98 %). Fewer values than that level
    needs give the range and its (lower) coverage.
    """
    x = sorted(values)
    n = len(x)
    k = 1
    while k + 1 <= (n + 1) // 2 and 1 - 2 * binom.cdf(k, n, 0.5) >= level:
        k += 1
    coverage = 1 - 2 * binom.cdf(k - 1, n, 0.5)
    return statistics.median(x), x[k - 1], x[n - k], float(coverage)


def _median_ci(values: list[float]) -> str:
    m, lo, hi, cover = median_interval(values)
    return f"{m:.5g} [{lo:.5g}, {hi:.5g}]{'' if cover >= 0.9 else f' ({cover:.0%})'}"


def _paired(results: list[dict[str, Any]], name: str, ref: str, c: int, higher: bool) -> str:
    """Per-seed difference of ``name`` to ``ref`` at checkpoint ``c`` in the metric's
    direction (positive: ``name`` better): median [interval], seeds ahead/level/behind
    and the two-sided sign test's p over the seeds that differ."""
    sign = 1.0 if higher else -1.0
    diffs = [sign * (r["curves"][name][c] - r["curves"][ref][c]) for r in results]
    ahead = sum(d > 0 for d in diffs)
    level = sum(d == 0 for d in diffs)
    behind = len(diffs) - ahead - level
    p = binomtest(ahead, ahead + behind).pvalue if ahead + behind else 1.0
    return f"{_median_ci(diffs)} ({ahead}/{level}/{behind}, p = {p:.2g})"


def run_seed(
    args: argparse.Namespace, seed: int, gigaevo: dict[str, tuple[Path, list[str]]]
) -> dict[str, Any]:
    """Every contestant on one seed, against one server: curves, cells and the server's tally."""
    problem = load_problem(name=args.problem)
    curves: dict[str, list[float]] = {}
    cells: dict[str, tuple[int, ...]] = {}
    with Server(1000 + seed, args.server, args.median, args.sigma) as server:
        for name, (root, extra) in gigaevo.items():
            curves[name], cells[name] = ours(
                server.url_for(name), root, name, args.problem, seed, args.mutants, args.out, extra
            )
        if not args.no_hill_climb:
            url = server.url_for("hill-climb")
            curves["hill-climb"] = hill_climb(url, problem, seed, args.mutants, False)
        if args.hill_feedback:
            url = server.url_for("hill+fb")
            curves["hill+fb"] = hill_climb(url, problem, seed, args.mutants, True)
        if args.openevolve:
            curves["openevolve"] = openevolve(
                args.openevolve, server.url_for("openevolve"), problem, seed, args.mutants
            )
        tactics = server.tactics()
    short = {name: len(c) - 1 for name, c in curves.items() if len(c) <= args.mutants}
    if short:
        print(f"seed {seed}: fewer mutants than asked {short}", flush=True)
    for c in curves.values():  # a contestant that stopped early keeps its last best
        c.extend([c[-1]] * (args.mutants + 1 - len(c)))
    return {"seed": seed, "curves": curves, "cells": cells, "tactics": tactics}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--mutants", type=int, default=200)
    parser.add_argument("--checkpoints", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--problem", default="circle_packing")
    parser.add_argument("--server", choices=["aware", "perturb"], default="aware")
    parser.add_argument("--median", type=float, default=0.2, help="median latency, s")
    parser.add_argument("--sigma", type=float, default=1.0, help="log-sd of the latency")
    parser.add_argument("--variant", action="append", default=[], help="NAME:OVERRIDE,...")
    parser.add_argument("--hill-feedback", action="store_true")
    parser.add_argument("--no-ours", action="store_true", help="only the variants of ours")
    parser.add_argument(
        "--no-hill-climb",
        action="store_true",
        help="leave the plain hill-climb out (its curve per seed does not change between runs)",
    )
    parser.add_argument("--openevolve", help="a python with openevolve 0.4.0 (circle packing)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds at once")
    parser.add_argument("--out", type=Path, default=Path("/tmp/gigaevo-bench-search-llm"))
    parser.add_argument("--baseline", type=Path, help="another checkout to run beside ours")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for ours")
    args = parser.parse_args()
    if args.openevolve and args.problem != "circle_packing":
        parser.error("--openevolve runs circle packing only")
    args.out.mkdir(parents=True, exist_ok=True)
    gigaevo = {} if args.no_ours else {"ours": (ROOT, list(args.overrides))}
    for spec in args.variant:
        name, _, overrides = spec.partition(":")
        gigaevo[name] = (ROOT, [*args.overrides, *filter(None, overrides.split(","))])
    if args.baseline is not None:
        gigaevo["main"] = (args.baseline.resolve(), [])
    print(f"load average at start: {os.getloadavg()}", flush=True)
    results = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for r in pool.map(lambda seed: run_seed(args, seed, gigaevo), args.seeds):
            row = "  ".join(
                f"{name} @{c}: {curve[c]:.5g}"
                for name, curve in r["curves"].items()
                for c in args.checkpoints
            )
            print(f"seed {r['seed']}: {row}  server: {r['tactics']}", flush=True)
            results.append(r)
    print(f"load average at end: {os.getloadavg()}")
    print(
        f"\nbest-so-far over {len(results)} seeds ({args.problem}, server {args.server}),"
        " median [interval covering the median with >= 90 %; else its coverage]:"
    )
    for name in results[0]["curves"]:
        at = "  ".join(
            f"@{c}: {_median_ci([r['curves'][name][c] for r in results])}" for c in args.checkpoints
        )
        cover = [float(c) for r in results for c in r["cells"].get(name, ())]
        cells = f"  cells/island {_median_range(cover)}" if cover else ""
        print(f"  {name:12} {at}{cells}")
    higher = load_problem(name=args.problem).metrics.higher_is_better
    for ref in ("hill-climb", "ours"):
        if ref not in results[0]["curves"] or len(results[0]["curves"]) < 2:
            continue
        print(
            f"\nminus {ref} per seed (positive: better), median [interval]"
            " (seeds ahead/level/behind, sign-test p):"
        )
        for name in results[0]["curves"]:
            if name not in (ref, "hill-climb"):
                at = "  ".join(
                    f"@{c}: {_paired(results, name, ref, c, higher)}" for c in args.checkpoints
                )
                print(f"  {name:12} {at}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
