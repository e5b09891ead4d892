"""Kill -9 at random moments, resume each time: the history equals the uninterrupted run's.

Issue 15: a seeded memory=v2 run (the default) is killed ``GIGAEVO_KILLS``
times (20 by default; the issue also runs it with 100) at random moments,
mostly while it commits (a random delay after the session's first new
commit) and sometimes early (before or while the session starts), and resumed
with ``resume=true`` each time. The final programs, events (one line per
event: no lost ``mutant``, no doubled ``archive`` or ``new_best``), causal
ledger rows (decisions, terminals, edges, lineage), cards and write-ledger
rows equal those of the run never interrupted, and ``cards.json`` agrees with
``write_ledger.jsonl``. Times, latencies and session events (``resume``,
``stop``) are left out of the comparison.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gigaevo.analysis.ledgers import read_bank
from gigaevo.memory.v2.evidence.bodies import body_text
from gigaevo.pipeline.build import STORE_FILE
from tests.conftest import ROOT, STEADY_EVAL, committed_count, run_py

# about 60 s on a quiet machine (20 sessions, each killed after its first new commits);
# the timeout leaves room for a loaded one
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

KILLS = int(os.environ.get("GIGAEVO_KILLS", "20"))
BUDGET = 30
ARGS = [
    "problem=rastrigin",
    f"max_mutants={BUDGET}",
    "seed=7",
    "progress=false",
    STEADY_EVAL,
]
SESSION_EVENTS = {"resume", "stop"}
# times, and the writing process (host:pid:token) a decision row names as its owner
_VOLATILE = {"time", "ts", "latency_s", "eval_seconds", "seconds", "wall_seconds", "owner"}


def _plain(v: Any) -> Any:
    """``v`` without the keys in _VOLATILE or ending in ``_at``, recursively."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items() if k not in _VOLATILE and not k.endswith("_at")}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line torn by a kill (the next append starts a new one)
    return out


def _rows(db: Path, table: str, order: str = "seq") -> list[Any]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
    finally:
        con.close()
    return [
        _plain(json.loads(body_text(r[-2]))) if table != "programs" else _plain(json.loads(r[-1]))
        for r in rows
    ]


def _fitted_rows(db: Path, ref: str) -> list[str]:
    """The row ids behind a decision's ``fitted_rows_ref`` (a chain of fit-set links).

    A resumed process starts a new chain where the killed one would have added a
    link to its last: the same set under another hash, so sets are compared.
    """
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        chain = []
        sha: str | None = ref
        while sha is not None:
            (body,) = con.execute("SELECT body FROM fit_sets WHERE sha256 = ?", (sha,)).fetchone()
            link = json.loads(body_text(body))
            chain.append(link)
            sha = link["parent"]
    finally:
        con.close()
    ids: set[str] = set()
    for link in reversed(chain):
        ids = (ids - set(link["removed"])) | set(link["added"])
    return sorted(ids)


def history(run: Path) -> dict[str, Any]:
    evidence = run / "memory_v2_selection_evidence.sqlite3"
    decisions = _rows(evidence, "decisions")
    for d in decisions:
        if isinstance(d.get("fitted_rows_ref"), str):
            d["fitted_rows_ref"] = _fitted_rows(evidence, d["fitted_rows_ref"])
    return {
        "programs": _rows(run / STORE_FILE, "programs", "ordinal"),
        "events": [
            _plain(e) for e in _jsonl(run / "events.jsonl") if e["event"] not in SESSION_EVENTS
        ],
        "decisions": decisions,
        **{t: _rows(evidence, t) for t in ("terminals", "edges", "lineage")},
        "write_ledger": [_plain(r) for r in _jsonl(run / "write_ledger.jsonl")],
        "memory_events": [_plain(e) for e in _jsonl(run / "memory_events.jsonl")],
        "cards": _plain(read_bank(run)[1]),  # cards.json with its record journal
    }


def _first_difference(got: Any, want: Any, path: str = "") -> str:
    """Where ``got`` first differs from ``want`` (a path of keys and indices) and how."""
    if isinstance(got, dict) and isinstance(want, dict):
        for k in sorted(set(got) | set(want)):
            if got.get(k) != want.get(k):
                return _first_difference(got.get(k), want.get(k), f"{path}.{k}")
    if isinstance(got, list) and isinstance(want, list):
        for i, (g, w) in enumerate(zip(got, want, strict=False)):
            if g != w:
                return _first_difference(g, w, f"{path}[{i}]")
        if len(got) != len(want):
            return f"{path}: {len(got)} items, expected {len(want)}"
    return f"{path}: {str(got)[:200]} != {str(want)[:200]}"


def _session(ckpt: Path, rng: np.random.Generator, early: bool) -> bool:
    """Start (or resume) the run and SIGKILL it at a random moment.

    Returns False when the run had already finished (a fast machine) and there
    was nothing left to kill.
    """
    before = committed_count(ckpt / STORE_FILE) if (ckpt / STORE_FILE).exists() else 0
    resume = ["resume=true"] if ckpt.exists() else []
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run.py"), *ARGS, f"checkpoint_dir={ckpt}", *resume],
        cwd=ckpt.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    if early:  # before the store, while starting or replaying
        time.sleep(float(rng.uniform(0.0, 2.0)))
    else:  # while it commits
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if (ckpt / STORE_FILE).exists() and committed_count(ckpt / STORE_FILE) > before:
                break
            time.sleep(0.01)
        time.sleep(float(rng.uniform(0.0, 0.1)))
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # the session ended on its own: the budget was spent
        proc.wait()
        return False
    return proc.wait() == -signal.SIGKILL


def test_a_run_killed_20_times_records_what_an_uninterrupted_run_records(
    tmp_path: Path,
) -> None:
    code, _, err = run_py(*ARGS, f"checkpoint_dir={tmp_path / 'whole'}", cwd=tmp_path)
    assert code == 0, err
    rng = np.random.default_rng(15)
    ckpt = tmp_path / "killed"
    killed = sum(_session(ckpt, rng, early=i % 5 == 4) for i in range(KILLS))
    assert killed >= min(KILLS, 10), f"only {killed} of {KILLS} sessions were killed mid-run"
    code, _, err = run_py(*ARGS, f"checkpoint_dir={ckpt}", "resume=true", cwd=tmp_path)
    assert code == 0, err

    got, want = history(ckpt), history(tmp_path / "whole")
    for key in want:
        assert got[key] == want[key], f"{key}: {_first_difference(got[key], want[key])}"
    mutants = [e["attempt"] for e in got["events"] if e["event"] == "mutant"]
    assert sorted(mutants) == list(range(BUDGET))  # one mutant event per attempt
    stops = [e for e in _jsonl(ckpt / "events.jsonl") if e["event"] == "stop"]
    assert stops[-1]["n_mutants"] == BUDGET
    # cards.json agrees with write_ledger.jsonl: every card of the run was added once
    added = [r["card_id"] for r in got["write_ledger"] if r["outcome"] == "added"]
    assert len(added) == len(set(added))
    assert {c["id"] for c in got["cards"]} <= set(added)
    assert not list(ckpt.glob(".*.tmp")) and not (ckpt / ".write_ledger.intent.json").exists()
