"""A misbehaving or missing model server: how long a run is held, how it stops, what it stores.

Usage:
    .venv/bin/python benchmarks/bench_remote_failures.py [--mutants 250]
        [--baseline /path/to/an/older/checkout]

Three runs of ``run.py`` on the built-in circle packing problem with
``llm=openai_compatible`` (``memory=none``, so that only the mutator calls the
server), each against ``benchmarks/_latency_server.py`` in a process of its own:

- **trickle**: the server sends each answer one byte every 0.5 s.
  ``llm.timeout_s=3 llm.max_retries=0``, 6 mutants, 2 in flight. Printed: the
  longest call in the run's call log (goal: about ``timeout_s``; before issue
  13 one such call was held 142 s) and the run's wall time.
- **nothing listening**: ``llm.api_base`` is a port where nothing listens, 40
  mutants. Printed: the exit code (goal 2), the wall time to the exit, the
  requests sent (from the call log) and the one line of error.
- **huge garbage**: ``--mutants`` mutants, 8 in flight, every answer 350,000
  characters of prose without code (fast: median 0.05 s). Printed: the growth
  of the checkpoint directory per failed mutant (store, events, call log; goal:
  kilobytes, before issue 13 about 350 KB), and of ``programs.sqlite3`` alone.

With ``--baseline`` the huge-garbage run is repeated with that checkout's
``run.py`` (same interpreter and packages) in the same invocation, side by side.
The load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from _config import launch
from bench_dispatch import Server

ROOT = Path(__file__).resolve().parents[1]


def _closed_url() -> str:
    """An ``api_base`` on a loopback port where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _run(root: Path, workdir: Path, url: str, *extra: str) -> tuple[int, float, str]:
    """Exit code, wall seconds and stderr of ``run.py`` of checkout ``root``."""
    args = [
        "problem=circle_packing",
        "llm=openai_compatible",
        f"llm.api_base={url}",
        "llm.model=openai/bench-model",
        "memory=none",
        "pipeline=guided",
        f"checkpoint_dir={workdir / 'run'}",
        "progress=false",
        *extra,
    ]
    started = time.perf_counter()
    proc = launch(args, workdir, root)
    return proc.returncode, time.perf_counter() - started, proc.stderr


def _calls(workdir: Path) -> list[dict[str, Any]]:
    path = workdir / "run" / "llm_calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _summary(workdir: Path) -> dict[str, Any]:
    return dict(json.loads((workdir / "run" / "summary.json").read_text()))


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def trickle() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        server = Server(work, 0, 0.05, 0.5, "--behaviour", "trickle", "--trickle-seconds", "0.5")
        try:
            extra = ("llm.timeout_s=3", "llm.max_retries=0", "max_mutants=6")
            code, wall, err = _run(ROOT, work, server.url, *extra, "evolution.max_in_flight=2")
            held = [r["done"] - r["arrival"] for r in server.requests()]
        finally:
            server.close()
        calls = _calls(work)
        longest = max((c["latency_s"] for c in calls), default=float("nan"))
        print(
            f"| trickle (1 byte / 0.5 s), timeout_s=3, no retries | exit {code} | "
            f"{len(calls)} calls, longest {longest:.2f} s; server held a request at most "
            f"{max(held, default=float('nan')):.2f} s | run.py {wall:.1f} s |"
        )
        if code != 0:
            print(f"  stderr: {_last_line(err)}")


def nothing_listening() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        code, wall, err = _run(ROOT, work, _closed_url(), "max_mutants=40")
        calls = _calls(work)
        requests = sum(int(c.get("attempts", 1)) for c in calls)
        print(
            f"| nothing listening, 40 mutants | exit {code} | {len(calls)} calls, "
            f"{requests} requests; `{_last_line(err)}` | run.py {wall:.1f} s |"
        )


def huge_garbage(root: Path, name: str, mutants: int) -> None:
    with tempfile.TemporaryDirectory() as tmp0, tempfile.TemporaryDirectory() as tmp:
        empty, work = Path(tmp0), Path(tmp)
        server = Server(work, 0, 0.05, 0.5, "--behaviour", "huge", "--huge-chars", "350000")
        try:
            _run(root, empty, server.url, "max_mutants=0")  # the size of a run without mutants
            before, store_before = _size(empty / "run"), _size_of_store(empty)
            extra = (f"max_mutants={mutants}", "evolution.max_in_flight=8")
            code, wall, err = _run(root, work, server.url, *extra)
        finally:
            server.close()
        if code != 0:
            print(f"| huge garbage, {name} | exit {code} | `{_last_line(err)}` | |")
            return
        s = _summary(work)
        failed = max(1, int(s.get("n_failed_mutations", 0)) + int(s.get("n_invalid", 0)))
        grown, store = _size(work / "run") - before, _size_of_store(work) - store_before
        print(
            f"| huge garbage (350,000 chars), {mutants} mutants, {name} | exit {code} | "
            f"{s.get('n_failed_mutations')} failed mutations; checkpoint dir +{grown / 1e6:.2f} MB "
            f"({grown / failed / 1e3:.1f} KB per failed mutant), programs.sqlite3 "
            f"+{store / 1e6:.2f} MB ({store / failed / 1e3:.1f} KB each) | run.py {wall:.1f} s |"
        )


def _size_of_store(work: Path) -> int:
    return sum(p.stat().st_size for p in (work / "run").glob("programs.sqlite3*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=250)
    parser.add_argument("--baseline", type=Path, help="an older checkout, for the huge answers")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print("| server | exit | what happened | wall |")
    print("|---|---|---|---|")
    trickle()
    nothing_listening()
    huge_garbage(ROOT, "this checkout", args.mutants)
    if args.baseline is not None:
        huge_garbage(args.baseline.resolve(), f"baseline {args.baseline}", args.mutants)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
