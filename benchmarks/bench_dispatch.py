"""Loop time per mutant against a latency-emulating model server, and beside OpenEvolve.

Usage:
    .venv/bin/python benchmarks/bench_dispatch.py [--mutants 240] [--seed 0]
        [--openevolve /work/scratch/oe-venv/bin/python] [--cells 8:none 8:v2 32:none 32:v2]
        [--strict] [--litellm] [--set OVERRIDE ...]

The server (``benchmarks/_latency_server.py``, a process of its own) answers
each request after a log-normal wait (median 0.5 s, sigma 1, seeded by the
request's number: every run sees the same sequence) with a SEARCH/REPLACE
block that nudges the decimals on one line of the parent. Each cell runs
``run.py`` on the built-in 26-circle packing problem (``llm=openai_compatible``,
default dispatch: arrival order for a remote model) in a fresh process against
a fresh server. Optionally the same server answers OpenEvolve 0.4.0 (installed
in a separate venv, never a dependency of gigaevo) on the same initial program,
with 8 parallel iterations.

What is measured (from the server's log, so start-up and teardown of either
framework do not count): the requests are dispatched over a window from the
first request's arrival to the last one's; with every slot busy, a perfect
loop dispatches one request per ``mean latency / in_flight`` after the first
``in_flight``. So:

- ``loop s/mutant`` = window / (requests - in_flight);
- ``ideal s/mutant`` = mean emulated latency of the served requests / in_flight;
- ``efficiency`` = ideal / loop (goal: >= 85 % in every cell);
- ``OpenEvolve ratio`` = our loop time / OpenEvolve's at the same in_flight (goal < 0.6);
- ``CPU ms/mutant``: CPU time of the framework's processes (sandbox or worker
  processes included) per mutant, start-up included; on this 2-core machine a
  loop needs it under 2 x 1000 x ideal to keep up at all;
- the memory thread's time per mutant (``memory_seconds`` of summary.json).

A row with ``evolution.dispatch=strict`` (one slow answer holds the others)
is printed for reference (``--strict``), and rows sending the requests
through litellm instead of the plain HTTP client (``--litellm``). ``--set``
adds Hydra overrides to every gigaevo row (``--set evolution.in_flight_ramp=50``
measures what the in-flight ramp costs). The load average is printed with the
figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _config import launch
from _config import run_openevolve as openevolve_in

ROOT = Path(__file__).resolve().parents[1]
SERVER = Path(__file__).resolve().parent / "_latency_server.py"
PROBLEM = ROOT / "gigaevo" / "problems" / "builtin" / "circle_packing"


class Server:
    """The latency server in a subprocess; ``url`` once it listens, ``requests()`` its log."""

    def __init__(self, workdir: Path, seed: int, median: float, sigma: float, *extra: str) -> None:
        self.log = workdir / "requests.jsonl"
        args = ["--log", str(self.log), "--seed", str(seed)]
        args += ["--median", str(median), "--sigma", str(sigma), *extra]
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), *args], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        self.port = int(line[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(x) for x in self.log.read_text().splitlines()]

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def loop_figures(requests: list[dict[str, Any]], in_flight: int) -> dict[str, float]:
    """Loop and ideal seconds per mutant from a server log (see the module docstring)."""
    arrivals = sorted(r["arrival"] for r in requests)
    n = len(arrivals)
    mean_latency = statistics.fmean(r["latency"] for r in requests)
    loop = (arrivals[-1] - arrivals[0]) / max(1, n - in_flight)
    ideal = mean_latency / in_flight
    return {
        "requests": n,
        "mean_latency": mean_latency,
        "loop": loop,
        "ideal": ideal,
        "efficiency": ideal / loop,
        "wall": max(r["done"] for r in requests) - arrivals[0],
    }


def run_gigaevo(
    workdir: Path, server: Server, in_flight: int, memory: str, mutants: int, *extra: str
) -> dict[str, Any]:
    """Run ``run.py`` against ``server``; its summary.json."""
    pipeline = "memory_guided" if memory == "v2" else "guided"
    args = [
        "problem=circle_packing",
        "llm=openai_compatible",
        f"llm.api_base={server.url}",
        "llm.model=openai/bench-model",
        f"memory={memory}",
        f"pipeline={pipeline}",
        f"evolution.max_in_flight={in_flight}",
        f"max_mutants={mutants}",
        f"checkpoint_dir={workdir / 'run'}",
        "progress=false",
        *extra,
    ]
    proc = launch(args, workdir)
    if proc.returncode != 0:
        raise SystemExit(f"run.py failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return dict(json.loads((workdir / "run" / "summary.json").read_text()))


OPENEVOLVE_CONFIG = """
max_iterations: {iterations}
checkpoint_interval: 1000
log_level: WARNING
random_seed: {seed}
diff_based_evolution: true
llm:
  api_base: {url}
  api_key: no-key
  models:
    - name: bench-model
      weight: 1.0
  temperature: 0.7
  timeout: 300
  retries: 0
database:
  population_size: 200
  num_islands: 2
evaluator:
  timeout: 20
  cascade_evaluation: false
  parallel_evaluations: {in_flight}  # OpenEvolve's worker processes: LLM call + evaluation
  use_llm_feedback: false
"""


def run_openevolve(
    python: str, workdir: Path, server: Server, in_flight: int, mutants: int
) -> None:
    """OpenEvolve 0.4.0 on gigaevo's initial circle packing program, against ``server``."""
    config = OPENEVOLVE_CONFIG.format(
        iterations=mutants, seed=0, url=server.url, in_flight=in_flight
    )
    proc = openevolve_in(
        python,
        workdir,
        initial_program=(PROBLEM / "initial_program.py").read_text(),
        validator=PROBLEM / "validator.py",
        primary="sum_radii",
        config_yaml=config,
        iterations=mutants,
    )
    if proc.returncode != 0:
        raise SystemExit(f"OpenEvolve failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _row(name: str, f: dict[str, float], note: str = "") -> str:
    return (
        f"| {name} | {int(f['requests'])} | {f['mean_latency']:.3f} | {f['ideal']:.4f} "
        f"| {f['loop']:.4f} | {100 * f['efficiency']:.0f} % | {f['cpu'] * 1000:.0f} | {note} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=240, help="per cell at 8 in flight")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--median", type=float, default=0.5)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--cells", nargs="*", default=["8:none", "8:v2", "32:none", "32:v2"])
    parser.add_argument("--strict", action="store_true", help="add a strict-order row at 8")
    parser.add_argument(
        "--litellm", action="store_true", help="add memory=none rows with llm.client=litellm"
    )
    parser.add_argument("--openevolve", help="python of a venv with openevolve==0.4.0")
    parser.add_argument(
        "--set", nargs="*", default=[], help="Hydra overrides for every gigaevo row"
    )
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(
        "| run | requests | mean latency s | ideal s/mutant | loop s/mutant | efficiency "
        "| CPU ms/mutant | |"
    )
    print("|---|---|---|---|---|---|---|---|")
    ours: dict[int, float] = {}
    plans: list[tuple[str, int, str, tuple[str, ...]]] = []
    for cell in args.cells:
        flight, memory = cell.split(":")
        plans.append((f"gigaevo memory={memory}, {flight} in flight", int(flight), memory, ()))
    if args.litellm:
        for flight in sorted({int(cell.split(":")[0]) for cell in args.cells}):
            name = f"gigaevo memory=none, {flight} in flight, llm.client=litellm"
            plans.append((name, flight, "none", ("llm.client=litellm",)))
    if args.strict:
        strict = ("evolution.dispatch=strict",)
        plans.append(("gigaevo memory=none, 8 in flight, dispatch=strict", 8, "none", strict))
    for name, flight, memory, extra in plans:
        mutants = args.mutants * flight // 8
        with tempfile.TemporaryDirectory() as tmp:
            server = Server(Path(tmp), args.seed, args.median, args.sigma)
            try:
                started, cpu = time.perf_counter(), _cpu()
                summary = run_gigaevo(Path(tmp), server, flight, memory, mutants, *extra, *args.set)
                total = time.perf_counter() - started
                f = loop_figures(server.requests(), flight)
                f["cpu"] = (_cpu() - cpu) / mutants
            finally:
                server.close()
        if not extra and not args.set and memory == "none":
            ours[flight] = f["loop"]
        m = summary.get("memory_seconds", {})
        memory_ms = {k: round(1000 * v / mutants, 1) for k, v in m.items()}
        note = f"run.py {total:.1f} s in all; memory thread ms/mutant {memory_ms}"
        print(_row(name, f, note), flush=True)
    if args.openevolve:
        with tempfile.TemporaryDirectory() as tmp:
            server = Server(Path(tmp), args.seed, args.median, args.sigma)
            try:
                started, cpu = time.perf_counter(), _cpu()
                run_openevolve(args.openevolve, Path(tmp), server, 8, args.mutants)
                total = time.perf_counter() - started
                f = loop_figures(server.requests(), 8)
                f["cpu"] = (_cpu() - cpu) / args.mutants
            finally:
                server.close()
        ratio = ours.get(8, float("nan")) / f["loop"]
        note = f"{total:.1f} s in all; gigaevo/OpenEvolve loop time {ratio:.2f}"
        print(_row("OpenEvolve 0.4.0, 8 parallel iterations", f, note), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
