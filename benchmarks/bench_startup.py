"""Start-up time of ``python run.py max_mutants=0`` (offline), and whether it imports litellm.

Usage:
    .venv/bin/python benchmarks/bench_startup.py [--reps 7]

Each repetition runs ``run.py max_mutants=0`` in a fresh interpreter and a
fresh temporary directory (compose the config, load the problem, start the
sandbox workers, evaluate the initial program, write the outputs, exit) and
times it from outside. Printed: median, min and max wall seconds against the
3 s target; whether litellm was imported (read from ``-X importtime`` of one
more run); and, for scale, the cost of ``import litellm`` alone (median over
3 fresh interpreters, price map from the package) and the same start-up with
``llm=openai_compatible`` (the router is built, litellm is not imported until
its first call).
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

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 3.0


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


def _row(name: str, times: list[float]) -> str:
    return (
        f"| {name} | {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} "
        f"| {len(times)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    reps = parser.parse_args().reps
    offline = startup_times(reps)
    remote = startup_times(
        max(3, reps // 2), "llm=openai_compatible", "llm.api_base=http://127.0.0.1:9/v1"
    )
    bare = [_run(["-c", "pass"])[0] for _ in range(reps)]
    lite = litellm_import_times(3)
    print("| what | median s | min s | max s | runs |")
    print("|---|---|---|---|---|")
    print(_row("`python run.py max_mutants=0` (offline)", offline))
    print(_row("same with `llm=openai_compatible` (router built, no call)", remote))
    print(_row("`python -c pass` (interpreter alone)", bare))
    print(_row("`python -c 'import litellm'`", lite))
    verdict = "under" if statistics.median(offline) < TARGET_S else "OVER"
    print(f"\noffline start-up median {statistics.median(offline):.2f} s: {verdict} {TARGET_S} s")
    print(f"litellm imported by the offline run: {imports_litellm()}")
    print(
        "litellm imported with llm=openai_compatible and no call: "
        f"{imports_litellm('llm=openai_compatible', 'llm.api_base=http://127.0.0.1:9/v1')}"
    )


if __name__ == "__main__":
    main()
