"""Bank writes against the length of the run: bytes written per use-trial stamp (issue 16.3).

Usage:
    .venv/bin/python benchmarks/bench_bank_writes.py [--cards 100 1000] [--stamps 2000]
        [--hot 5] [--batch 16] [--edits 400] [--baseline PATH_OF_ANOTHER_CHECKOUT]

For each bank size: a bank of synthetic insight cards (``LocalMemoryStore``), then
``--stamps`` use-trial stamps (``read.trials.stamp_trial``, one bank transaction each)
spread over the first ``--hot`` cards (as in a run, where the few cards delivered most
get the trials), then one card-record change (a revision bump), then as many stamps
again staged in the store and written ``--batch`` at a time (as ``TrialStamper`` does
on each usefulness-eligible terminal since the stamps ride along with the next bank
write; skipped for a checkout without ``LocalMemoryStore.stage``). Prints the bytes
each stamp writes (the process's ``wchar`` from ``/proc/self/io``: every byte passed to
``write``, temporary files included) over the first and the last 96 stamps, their CPU
and wall ms (wall includes the fsyncs, which dominate), and the sizes of
``cards.json`` and ``cards.trials.jsonl`` at the end. Flat bytes per stamp: a write
costs what changed, not what the run has stamped so far.

Then ``--edits`` card-record writes (issue 16.3: an outcome pooled into a random card, and
every fourth one a new card admitted, as the librarian does), one transaction each:
bytes, CPU and wall ms per write over the first and last 96, and how many rewrote
``cards.json`` whole (a checkout with ``cards.records.jsonl`` appends the changed records
and compacts once the journal outgrows the bank; before it, every write rewrote it).

``--durability N`` adds the cost of durability on the observe path: N lease
acquire + release cycles (``SelectionLeases``, each a transaction on
``selection_leases.json``), with the checkout's fsyncs and with fsync made a no-op (what
the fsyncs cost), and N ledger commits of a 1 KB row through the ledger's own
``evidence.sqlite.connect`` (its ``synchronous`` setting, printed) next to the same
commits at ``synchronous=FULL``.

``--baseline`` runs the same measurement on the package of another checkout (for
example an export of ``main``: ``git archive main | tar -x -C /tmp/main_tree``) in a
subprocess, side by side in one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def wchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("wchar:"))


def _series(store, ids: list[str], stamps: int, hot: int, staged: int, tag: str) -> Series:
    """``stamps`` use-trial stamps onto the first ``hot`` cards; per stamp (bytes, CPU s, wall s).

    ``staged=0``: one bank transaction per stamp (``stamp_trial``). ``staged=n``: staged in
    the store and written n at a time (``TrialStamper``'s batching), so each n-th stamp
    pays the write for the n before it.
    """
    from gigaevo.memory.v2.bank.cards import UseTrial
    from gigaevo.memory.v2.bank.trialjournal import TrialIdSets
    from gigaevo.memory.v2.read.trials import _stamp_into, stamp_trial

    out = Series([], [], [])
    kept = TrialIdSets()  # kept across the staged stamps, as ``TrialStamper`` keeps it
    for i in range(stamps):
        trial = UseTrial(f"{tag}-{i:07d}", "bench-run", "toy", i % 2, bool(i % 3))
        cid = ids[i % hot]
        w0, c0, t0 = wchar(), time.process_time(), time.perf_counter()
        if staged:
            store.stage(lambda cards, c=cid, t=trial: _stamp_into(cards, c, t, 0.0, kept), _ok)
            if store.staged >= staged:
                store.flush()
        else:
            _ok(stamp_trial(store, cid, trial))
        out.add(wchar() - w0, time.process_time() - c0, time.perf_counter() - t0)
    if staged:
        store.flush()
    return out


def _ok(outcome: str) -> None:
    assert outcome == "stamped", outcome


@dataclasses.dataclass
class Series:
    written: list[int]
    cpu: list[float]
    wall: list[float]

    def add(self, written: int, cpu: float, wall: float) -> None:
        self.written.append(written)
        self.cpu.append(cpu)
        self.wall.append(wall)

    def line(self, k: int) -> str:
        first, last = statistics.mean(self.written[:k]), statistics.mean(self.written[-k:])
        ms = 1e3
        return (
            f"bytes written per stamp, first {k} {first:9,.0f}  last {k} {last:9,.0f}"
            f"  (last / first {last / first:5.2f}); ms per stamp, first {k}: CPU"
            f" {ms * statistics.mean(self.cpu[:k]):5.2f}"
            f" wall {ms * statistics.mean(self.wall[:k]):6.2f},"
            f" last {k}: CPU {ms * statistics.mean(self.cpu[-k:]):5.2f}"
            f" wall {ms * statistics.mean(self.wall[-k:]):6.2f}"
        )


def _edits(store, n_cards: int, edits: int) -> tuple[Series, int]:
    """``edits`` card-record writes: pool an outcome into a random card, every fourth write
    admit a new card; per write (bytes, CPU s, wall s), and the writes that rewrote
    ``cards.json`` (its inode changed)."""
    import numpy as np
    from bench_memory_bank import synthetic_card

    from gigaevo.memory.v2.bank.cards import pool_into

    rng = np.random.default_rng(1)
    ids = [c.id for c in store.cards()]
    path = store.path
    out, rewrites = Series([], [], []), 0
    for i in range(edits):
        inode = path.stat().st_ino
        w0, c0, t0 = wchar(), time.process_time(), time.perf_counter()
        if i % 4 == 3:
            new = synthetic_card(n_cards + i, rng)
            store.transaction(lambda w, c=new: w.update({c.id: c}))
            ids.append(new.id)
        else:
            cid = ids[int(rng.integers(len(ids)))]
            ev = store.get(cid).evidence[0]
            store.transaction(
                lambda w, c=cid, e=ev, p=f"e{i}": w.update({c: pool_into(w[c], e, (p,), 1.0)})
            )
        out.add(wchar() - w0, time.process_time() - c0, time.perf_counter() - t0)
        rewrites += path.stat().st_ino != inode
    return out, rewrites


def measure(n_cards: int, stamps: int, hot: int, batch: int, edits: int) -> None:
    """Child mode: the package on ``sys.path[0]`` is the one measured."""
    import numpy as np
    from bench_memory_bank import synthetic_card

    from gigaevo.memory.v2 import HashingEmbedder, LocalMemoryStore

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = LocalMemoryStore(root, embedder=HashingEmbedder()).open()
        rng = np.random.default_rng(0)
        cards = [synthetic_card(i, rng) for i in range(n_cards)]
        store.transaction(lambda working: working.update({c.id: c for c in cards}))
        start_size = (root / "cards.json").stat().st_size
        ids = [c.id for c in cards]
        each = _series(store, ids, stamps, hot, 0, "each")
        card = store.get(cards[0].id)
        assert card is not None and len(card.use_trials) == stamps // hot
        w0, c0, t0 = wchar(), time.process_time(), time.perf_counter()
        store.transaction(
            lambda working: working.update(
                {card.id: dataclasses.replace(card, revision=card.revision + 1)}
            )
        )
        edit, edit_cpu, edit_wall = wchar() - w0, time.process_time() - c0, time.perf_counter() - t0
        sizes = {p: (root / p).stat().st_size if (root / p).exists() else 0 for p in FILES}
        staged = None
        if hasattr(store, "stage"):  # a checkout whose stamper stages its stamps
            staged = _series(store, ids, stamps, hot, batch, "staged")
        edited, rewrites = _edits(store, n_cards, edits) if edits else (None, 0)
        journal = root / "cards.records.jsonl"
        journal_size = journal.stat().st_size if journal.exists() else 0
        end_size = (root / "cards.json").stat().st_size
    k = min(96, stamps // 2)
    print(f"  cards {n_cards:>5}: one transaction per stamp: {each.line(k)}", flush=True)
    if staged is not None:
        print(f"               staged, {batch} per write:    {staged.line(k)}", flush=True)
    else:
        print("               staged stamps: not in this checkout", flush=True)
    print(
        f"               cards.json {start_size:,} B at start, {sizes[FILES[0]]:,} B after"
        f" {stamps} stamps; cards.trials.jsonl {sizes[FILES[1]]:,} B;"
        f" one card-record change writes {edit:,} B ({1e3 * edit_cpu:.1f} CPU ms,"
        f" {1e3 * edit_wall:.1f} wall ms)",
        flush=True,
    )
    if edited is not None:
        ke = min(96, edits // 2)
        print(
            f"               {edits} card writes: {edited.line(ke).replace('stamp', 'write')}",
            flush=True,
        )
        print(
            f"               {rewrites} of them rewrote cards.json ({end_size:,} B at the end;"
            f" cards.records.jsonl {journal_size:,} B); mean bytes per card write"
            f" {statistics.mean(edited.written):,.0f}",
            flush=True,
        )


FILES = ("cards.json", "cards.trials.jsonl")


def durability(n: int) -> None:
    """Wall ms per lease cycle (with and without fsync) and per ledger commit."""
    from gigaevo.memory.v2.evidence import sqlite as db
    from gigaevo.memory.v2.read.leases import SelectionLeases

    def leases(root: Path) -> float:
        lease = SelectionLeases(root, run_id="bench")
        t0 = time.perf_counter()
        for i in range(n):
            held = lease.acquire(f"ins-{i % 7}", (), i)
            lease.release(held.lease_id)
        return 1e3 * (time.perf_counter() - t0) / n

    def commits(path: Path, mode: str | None) -> tuple[str, float]:
        conn = db.connect(str(path), 30.0)
        if mode is not None:
            conn.execute(f"PRAGMA synchronous = {mode}")
        level = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[
            conn.execute("PRAGMA synchronous").fetchone()[0]
        ]
        conn.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, body TEXT)")
        body = "x" * 1024
        t0 = time.perf_counter()
        for _ in range(n):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (body) VALUES (?)", (body,))
            conn.execute("COMMIT")
        conn.close()
        return level, 1e3 * (time.perf_counter() - t0) / n

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        synced = leases(root / "a")
        real = os.fsync
        os.fsync = lambda fd: None  # what the lease file's fsyncs cost
        try:
            unsynced = leases(root / "b")
        finally:
            os.fsync = real
        level, ledger = commits(root / "ledger.sqlite3", None)
        _, full = commits(root / "full.sqlite3", "FULL")
    print(
        f"  durability, {n} each: lease acquire+release {synced:6.2f} wall ms"
        f" ({unsynced:5.2f} with fsync a no-op); ledger commit at its synchronous={level}"
        f" {ledger:5.2f} wall ms (FULL {full:5.2f})",
        flush=True,
    )


def run_tree(tree: Path, args: argparse.Namespace) -> None:
    """Measure the package of checkout ``tree`` in a subprocess."""
    sha = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(f"{tree} {sha or '(an export)'}  load average {os.getloadavg()[0]:.2f}", flush=True)
    for i, n in enumerate(args.cards):
        cmd = [sys.executable, str(HERE), "--child", str(tree), "--cards", str(n)]
        cmd += ["--stamps", str(args.stamps), "--hot", str(args.hot), "--batch", str(args.batch)]
        last = i == len(args.cards) - 1  # the durability figures once, after the last bank
        cmd += ["--edits", str(args.edits), "--durability", str(args.durability if last else 0)]
        subprocess.run(cmd, check=True, cwd=tree)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cards", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--stamps", type=int, default=2000, help="stamps per bank")
    ap.add_argument("--hot", type=int, default=5, help="cards that receive the stamps")
    ap.add_argument("--batch", type=int, default=16, help="staged stamps per write")
    ap.add_argument("--edits", type=int, default=400, help="card-record writes per bank")
    ap.add_argument("--durability", type=int, default=0, help="lease cycles and commits")
    ap.add_argument("--baseline", type=Path, help="another checkout, measured side by side")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:  # measure the package of this checkout
        sys.path[:0] = [str(args.child), str(HERE.parent)]
        import gigaevo  # from the checkout measured, before bench_memory_bank adds its own

        assert Path(gigaevo.__file__).is_relative_to(args.child.resolve()), gigaevo.__file__
        for n in args.cards:
            measure(n, args.stamps, args.hot, args.batch, args.edits)
        if args.durability:
            durability(args.durability)
        return
    started = time.perf_counter()
    run_tree(HERE.parents[1], args)
    if args.baseline is not None:
        run_tree(args.baseline.resolve(), args)
    print(
        f"wall {time.perf_counter() - started:.0f} s; load average at end {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
