"""Memory v2's footprint against the length of a run (issue 16, item 4): bytes per decision.

Usage:
    .venv/bin/python benchmarks/bench_footprint.py [--marks 1000 2000 5000]
        [--baseline PATH] [--skip-run]

Part 1, a real run (``run.py problem.name=rastrigin max_mutants=<last mark>``, default
config: memory=v2, offline backends), in a child process per checkout. Prints the RSS of
the engine's process (and of its process tree, evaluator workers included) when the run
passes each mark, the process's peak RSS, and the RSS slope between the first and the last
mark in bytes per mutant. At each mark a copy of the causal ledger is taken (SQLite's
online backup).

Part 2, what the memory keeps per ledger row, on those copies: for each mark and checkout,
a fresh child imports the package, then under ``tracemalloc`` builds the real provider on
the copy (the ledger opened and verified, its views synced, the heads' training rows read:
what a resumed run holds before its first decision) and prints the bytes still allocated
per decision, with the five largest allocation sites. The figure does not depend on the
machine's load, so it is compared between checkouts as a plain ratio (baseline / this).

``--trim`` also returns the allocator's free pages to the system at each mark (glibc's
``malloc_trim(0)``, from the watching thread) and reads the RSS again: the slope of the
trimmed RSS is what the process holds, the rest of the untrimmed slope is freed memory that
malloc keeps for reuse. Trimming lowers the later marks' untrimmed RSS too, so the default
run does not trim.

``--baseline PATH`` runs both parts on the package of another checkout too (an export of
``main``), on the same ledger copies (part 2) and in the same invocation (part 1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

LEDGER = "memory_v2_selection_evidence.sqlite3"
HERE = Path(__file__).resolve()


def _self_rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmRSS:"))


def _peak_rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:"))


def _mutants(events: Path, pos: int) -> tuple[int, int]:
    """(``mutant`` events in events.jsonl after byte ``pos``, the new position)."""
    if not events.exists():
        return 0, pos
    with open(events, "rb") as f:
        f.seek(pos)
        data = f.read()
    end = data.rfind(b"\n") + 1
    return data[:end].count(b'"event": "mutant"'), pos + end


def child_run(tree: Path, marks: list[int], copies: Path, trim: bool) -> dict[str, Any]:
    """A real run of the package of ``tree`` to the last mark (this process)."""
    import ctypes
    import gc

    from _config import run_config
    from bench_memory_scale import _tree_rss

    from gigaevo.pipeline.build import run_from_config

    out: dict[str, Any] = {"marks": {}}
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp)
        done = threading.Event()

        def watch() -> None:
            count, pos, todo = 0, 0, list(marks)
            while todo and not done.wait(0.25):
                new, pos = _mutants(run / "events.jsonl", pos)
                count += new
                while todo and count >= todo[0]:
                    mark = todo.pop(0)
                    out["marks"][mark] = m = {"rss": _self_rss(), "tree": _tree_rss()}
                    if trim:
                        gc.collect()
                        ctypes.CDLL("libc.so.6").malloc_trim(0)
                        m["trimmed"] = _self_rss()
                    target = copies / f"at{mark}"
                    target.mkdir(parents=True, exist_ok=True)
                    src = sqlite3.connect(str(run / LEDGER))
                    dst = sqlite3.connect(str(target / LEDGER))
                    src.backup(dst)
                    dst.close()
                    src.close()

        watcher = threading.Thread(target=watch, daemon=True)
        cfg = run_config(tmp, "problem=rastrigin", f"max_mutants={marks[-1]}")
        watcher.start()
        started = time.perf_counter()
        run_from_config(cfg, show_progress=False)
        out["wall"] = time.perf_counter() - started
        time.sleep(0.6)
        done.set()
        watcher.join()
    out["peak"] = _peak_rss()
    return out


def child_footprint(ledger_dir: Path) -> dict[str, Any]:
    """Bytes the provider keeps after opening a copy of ``ledger_dir`` (this process)."""
    from _config import run_config
    from hydra.utils import instantiate

    from gigaevo.memory.base import MemoryRuntime
    from gigaevo.pipeline.build import resolve_problem

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(ledger_dir / LEDGER, Path(tmp) / LEDGER)
        cfg = run_config(tmp, "problem=rastrigin")
        problem = resolve_problem(cfg)
        runtime = MemoryRuntime(
            problem.name, problem.description, problem.metrics, tmp, tmp, 0, 10**6
        )
        build = instantiate(cfg.memory)
        tracemalloc.start(1)
        memory = build(runtime=runtime)
        memory.reader.heads.rows.sync()
        evidence = memory.reader.evidence
        evidence.observations()
        decisions = evidence.counts()["decisions"]
        snap = tracemalloc.take_snapshot()
        tracemalloc.stop()
        memory.close()
    snap = snap.filter_traces([tracemalloc.Filter(False, "<frozen *>")])  # imports
    stats = snap.statistics("lineno")
    total = sum(s.size for s in stats)
    sites = [
        (f"{s.traceback[0].filename.split('/')[-1]}:{s.traceback[0].lineno}", s.size)
        for s in stats[:6]
    ]
    return {"decisions": decisions, "bytes": total, "sites": sites}


def _child(tree: Path, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE), "--child", str(tree.resolve()), *args]
    out = subprocess.run(cmd, check=True, cwd=tree, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--marks", type=int, nargs="+", default=[1000, 2000, 5000])
    ap.add_argument("--baseline", type=Path, help="another checkout, side by side")
    ap.add_argument("--skip-run", action="store_true", help="ledgers only from --ledgers")
    ap.add_argument("--ledgers", type=Path, help="keep (or with --skip-run, reuse) the copies")
    ap.add_argument("--trim", action="store_true", help="also the RSS after malloc_trim(0)")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--run-into", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--footprint", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    marks = sorted(args.marks)
    if args.child is not None:  # the package measured is the child's checkout
        sys.path[:0] = [str(args.child), str(args.child / "benchmarks"), str(HERE.parent)]
        import gigaevo

        assert Path(gigaevo.__file__).is_relative_to(args.child), gigaevo.__file__
        if args.run_into is not None:
            print(json.dumps(child_run(args.child, marks, args.run_into, args.trim)), flush=True)
        else:
            print(json.dumps(child_footprint(args.footprint)), flush=True)
        return
    trees = {"this": HERE.parents[1]}
    if args.baseline is not None:
        trees["baseline"] = args.baseline
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    keep = args.ledgers or Path(tempfile.mkdtemp(prefix="footprint-"))
    runs: dict[str, dict[str, Any]] = {}
    if not args.skip_run:
        for name, tree in trees.items():
            target = keep / name
            extra = ["--trim"] if args.trim else []
            runs[name] = r = _child(
                tree, "--marks", *map(str, marks), "--run-into", str(target), *extra
            )
            print(
                f"real run, rastrigin, {marks[-1]} mutants, {name} ({tree}): wall {r['wall']:.0f} s"
            )
            for mark, m in sorted(r["marks"].items(), key=lambda kv: int(kv[0])):
                trimmed = f", {m['trimmed'] / 1e6:6.1f} MB trimmed" if "trimmed" in m else ""
                print(
                    f"  at {int(mark):>6} mutants: RSS {m['rss'] / 1e6:6.1f} MB{trimmed}"
                    f" (process tree {m['tree'] / 1e6:6.1f} MB)"
                )
            got = sorted(r["marks"].items(), key=lambda kv: int(kv[0]))
            if len(got) > 1:
                (m0, r0), (m1, r1) = got[0], got[-1]
                slope = (r1["rss"] - r0["rss"]) / (int(m1) - int(m0))
                print(f"  RSS slope {m0} -> {m1}: {slope:,.0f} bytes per mutant")
                if "trimmed" in r0:
                    held = (r1["trimmed"] - r0["trimmed"]) / (int(m1) - int(m0))
                    print(f"  trimmed RSS slope {m0} -> {m1}: {held:,.0f} bytes per mutant")
            print(f"  peak RSS of the engine's process: {r['peak'] / 1e6:.1f} MB", flush=True)
    print("kept by the memory after opening the ledger of the run at each mark (tracemalloc):")
    source = keep / "this"
    for mark in marks:
        ledger_dir = source / f"at{mark}"
        if not (ledger_dir / LEDGER).exists():
            continue
        found = {name: _child(tree, "--footprint", str(ledger_dir)) for name, tree in trees.items()}
        mine = found["this"]
        per = mine["bytes"] / max(1, mine["decisions"])
        line = f"  {mine['decisions']:>6} decisions: this {per:8,.0f} B per decision"
        if "baseline" in found:
            base = found["baseline"]["bytes"] / max(1, found["baseline"]["decisions"])
            line += f" | baseline {base:8,.0f} | baseline / this {base / per:.2f}"
        print(line, flush=True)
        sites = ", ".join(f"{s} {b / mine['decisions']:,.0f}" for s, b in mine["sites"])
        print(f"    largest sites (B per decision): {sites}", flush=True)
    print(f"ledger copies in {keep}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
