"""Memory and disk kept per memory-v2 decision, against bank size.

Usage:
    .venv/bin/python benchmarks/bench_ledger_footprint.py [--sizes 100 1000]
        [--history 300] [--decisions 200]

For each bank size N it builds the latency benchmark's setup (``bench_decision_latency``:
N synthetic cards, a causal ledger of ``--history`` decisions of another run), then
commits ``--decisions`` decisions of its own, a new withheld control landing every tenth
(so the heads refit and new fit sets are written). It prints:

- Python memory kept per decision (``tracemalloc``, growth over the second half of the
  decisions, after the caches have warmed up);
- ledger bytes per decision (growth of the SQLite file and its WAL; and of the file
  alone with the WAL checkpointed into it before and after) and the mean decision
  body length, as stored;
- rows of the content-addressed tables (snapshots, universes, fit_sets);
- stored body bytes per measured decision by table (decisions of the measured run,
  snapshots, universes, fit_sets): what the ledger bytes are made of.
"""

from __future__ import annotations

import argparse
import gc
import sqlite3
import sys
import tempfile
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_decision_latency import build
from gigaevo.memory.v2.evidence import EVIDENCE_FILE


def _ledger_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.glob(EVIDENCE_FILE + "*"))


def _checkpointed_bytes(root: Path) -> int:
    """The ledger file's size once its WAL is checkpointed into it and truncated (the
    WAL's pages are reused after each checkpoint, so they are not per-decision growth)."""
    with sqlite3.connect(root / EVIDENCE_FILE) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return (root / EVIDENCE_FILE).stat().st_size


BODY_TABLES = ("snapshots", "universes", "fit_sets")


def _body_bytes(root: Path) -> dict[str, int]:
    with sqlite3.connect(root / EVIDENCE_FILE) as conn:
        out = {
            t: int(conn.execute(f"SELECT COALESCE(SUM(LENGTH(body)), 0) FROM {t}").fetchone()[0])
            for t in BODY_TABLES
        }
        out["decisions"] = int(
            conn.execute(
                "SELECT COALESCE(SUM(LENGTH(body)), 0) FROM decisions WHERE run_id = 'bench'"
            ).fetchone()[0]
        )
    return out


def measure(n_cards: int, history: int, decisions: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        setup, _ = build(root, n_cards, history)
        setup.decide()
        file_before = _checkpointed_bytes(root)
        bytes_before = _ledger_bytes(root)
        bodies_before = _body_bytes(root)
        half = decisions // 2
        tracemalloc.start()
        traced = 0
        for i in range(decisions):
            if i == half:
                gc.collect()
                traced = tracemalloc.get_traced_memory()[0]
            if i % 10 == 0:
                setup.new_control()
            setup.decide()
        gc.collect()
        kept = (tracemalloc.get_traced_memory()[0] - traced) / (decisions - half)
        tracemalloc.stop()
        bodies = _body_bytes(root)
        with sqlite3.connect(root / EVIDENCE_FILE) as conn:
            body = conn.execute(
                "SELECT AVG(LENGTH(body)) FROM decisions WHERE run_id = 'bench'"
            ).fetchone()[0]
            tables = {
                t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("snapshots", "universes", "fit_sets")
            }
        return {
            "kept_kb": kept / 1024,
            "ledger_kb": (_ledger_bytes(root) - bytes_before) / 1024 / decisions,
            "file_kb": (_checkpointed_bytes(root) - file_before) / 1024 / decisions,
            "body_kb": float(body) / 1024,
            **{f"rows_{t}": float(n) for t, n in tables.items()},
            **{
                f"bytes_{t}": (bodies[t] - bodies_before[t]) / 1024 / decisions
                for t in ("decisions", *BODY_TABLES)
            },
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--history", type=int, default=300, help="decisions of another run")
    ap.add_argument("--decisions", type=int, default=200, help="decisions measured")
    args = ap.parse_args()
    for n in args.sizes:
        m = measure(n, args.history, args.decisions)
        print(
            f"N={n:>6} cards  kept {m['kept_kb']:7.1f} KiB/decision (tracemalloc)"
            f"  ledger +{m['ledger_kb']:7.1f} KiB/decision (checkpointed file"
            f" +{m['file_kb']:6.1f})  body {m['body_kb']:6.1f} KiB"
            f"  rows: snapshots {m['rows_snapshots']:.0f}, universes {m['rows_universes']:.0f},"
            f" fit_sets {m['rows_fit_sets']:.0f}",
            flush=True,
        )
        print(
            "           stored body KiB per decision: "
            + ", ".join(f"{t} {m['bytes_' + t]:.2f}" for t in ("decisions", *BODY_TABLES)),
            flush=True,
        )


if __name__ == "__main__":
    main()
