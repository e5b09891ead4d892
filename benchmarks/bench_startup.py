"""Start-up time: offline, and from the command to the first request with a remote model.

Usage:
    .venv/bin/python benchmarks/bench_startup.py [--reps 7] [--openevolve PYTHON]

Each repetition runs ``run.py max_mutants=0`` in a fresh interpreter and a
fresh temporary directory (compose the config, load the problem, start the
sandbox workers, evaluate the initial program, write the outputs, exit) and
times it from outside. Printed: median, min and max wall seconds against the
1 s target (issue 13; issue 3 asked for 3 s); whether litellm was imported
(read from ``-X importtime`` of one more run); and, for scale, the cost of
``import litellm`` alone (median over 3 fresh interpreters, price map from
the package) and the same start-up with ``llm=openai_compatible`` and no call
(the router is built and its client's imports run in the background; the
process waits for them before it exits).

Time to first request (issue 13): ``run.py llm=openai_compatible max_mutants=2``
against ``benchmarks/_latency_server.py`` (answers at once), timed from the
spawn of the process to the arrival of its first request at the server (both
clocks are this machine's), with the default plain HTTP client (httpx; litellm
never imported), with ``llm.client=litellm`` (its import runs in a background
thread while the problem loads and the sandbox workers start), and with the
plain client and ``memory=none`` (what the memory's start-up adds). With
``--openevolve`` the same is measured for OpenEvolve 0.4.0
(``bench_dispatch.py``'s set-up, one iteration).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_dispatch import Server, run_openevolve

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 1.0  # offline start-up, quiet machine (issue 13)
FIRST_REQUEST_TARGET_S = 2.0  # command to first request, quiet machine (issue 13)


def _run(args: list[str], *, env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall seconds and stderr of one fresh interpreter in a new temporary directory."""
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr}")
    return elapsed, proc.stderr


def startup_times(reps: int, *overrides: str) -> list[float]:
    """Wall seconds of ``run.py max_mutants=0 OVERRIDES``, ``reps`` times."""
    args = [str(ROOT / "run.py"), "max_mutants=0", "progress=false", *overrides]
    return [_run(args)[0] for _ in range(reps)]


def imports_litellm(*overrides: str) -> bool:
    """Whether ``run.py max_mutants=0 OVERRIDES`` imports litellm (``-X importtime``)."""
    args = ["-X", "importtime", str(ROOT / "run.py"), "max_mutants=0", "progress=false"]
    _, stderr = _run([*args, *overrides])
    return any(line.rsplit("|", 1)[-1].strip() == "litellm" for line in stderr.splitlines())


def litellm_import_times(reps: int) -> list[float]:
    """Wall seconds of a fresh interpreter that only imports litellm."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_OFFLINE_MODE": "true"}
    return [_run(["-c", "import litellm"], env=env)[0] for _ in range(reps)]


def first_request_seconds(openevolve: str | None = None, *extra: str) -> float:
    """Seconds from spawning gigaevo (``extra``: further overrides) or OpenEvolve to its
    first request at a local server."""
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), seed=0, median=0.001, sigma=0.0)
        try:
            started = time.time()
            if openevolve is not None:
                run_openevolve(openevolve, Path(tmp), server, in_flight=1, mutants=1)
            else:
                args = [
                    str(ROOT / "run.py"),
                    "llm=openai_compatible",
                    f"llm.api_base={server.url}",
                    "llm.model=openai/bench-model",
                    "max_mutants=2",
                    "progress=false",
                    f"checkpoint_dir={tmp}/run",
                    *extra,
                ]
                subprocess.run([sys.executable, *args], cwd=tmp, capture_output=True, check=True)
            first = min(r["arrival"] for r in server.requests())
        finally:
            server.close()
    return first - started


def _row(name: str, times: list[float]) -> str:
    return (
        f"| {name} | {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} "
        f"| {len(times)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--openevolve", help="python of a venv with openevolve==0.4.0")
    args = parser.parse_args()
    reps = args.reps
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    n_first = max(3, reps // 2)
    first = [first_request_seconds() for _ in range(n_first)]
    via_litellm = [first_request_seconds(None, "llm.client=litellm") for _ in range(n_first)]
    no_memory = [first_request_seconds(None, "memory=none") for _ in range(n_first)]
    oe_first = [first_request_seconds(args.openevolve) for _ in range(3)] if args.openevolve else []
    offline = startup_times(reps)
    remote = startup_times(
        max(3, reps // 2), "llm=openai_compatible", "llm.api_base=http://127.0.0.1:9/v1"
    )
    bare = [_run(["-c", "pass"])[0] for _ in range(reps)]
    lite = litellm_import_times(3)
    print("| what | median s | min s | max s | runs |")
    print("|---|---|---|---|---|")
    print(_row("`python run.py max_mutants=0` (offline)", offline))
    print(_row("same with `llm=openai_compatible` (httpx loading behind, no call)", remote))
    print(_row("`python -c pass` (interpreter alone)", bare))
    print(_row("`python -c 'import litellm'`", lite))
    print(_row("command to first request, `llm=openai_compatible` (httpx)", first))
    print(_row("same with `llm.client=litellm`", via_litellm))
    print(_row("same with httpx and `memory=none`", no_memory))
    if oe_first:
        print(_row("command to first request, OpenEvolve 0.4.0", oe_first))
    verdict = "under" if statistics.median(offline) < TARGET_S else "OVER"
    print(
        f"\noffline start-up median {statistics.median(offline):.2f} s: {verdict} "
        f"{TARGET_S} s (the target is for a quiet machine)"
    )
    verdict = "under" if statistics.median(first) < FIRST_REQUEST_TARGET_S else "OVER"
    print(
        f"first request median {statistics.median(first):.2f} s: {verdict} "
        f"{FIRST_REQUEST_TARGET_S} s (the target is for a quiet machine)"
    )
    print(f"litellm imported by the offline run: {imports_litellm()}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
