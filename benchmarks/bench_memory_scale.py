"""Memory v2 at scale: cost per mutant against the length of the run (issue 16).

Usage:
    .venv/bin/python benchmarks/bench_memory_scale.py [--mutants 10000]
        [--rows 1000 10000 50000] [--cards 100 1000] [--measure 150] [--skip-run]
        [--skip-synthetic] [--none] [--components] [--baseline PATH] [--bank-writes N]
        [--profile A:B[,C:D]] [--profile-out DIR] [--set KEY=VALUE ...] [--repeat N]

Part 1, a real run: ``run.py problem.name=rastrigin max_mutants=--mutants`` (default
config: memory=v2, offline LLM and memory LLM, sandboxed evaluator) in a temporary
directory, in-process. Prints mutants/s in each successive 1,000 mutants (from the
``mutant`` events' times), the ratio last / first, wall time, the peak RSS of the
process tree (this process and its evaluator workers, sampled every 0.5 s) and the memory's
``decide`` / ``observe`` per call (CPU of the calling thread, wall; also per 1,000 calls)
and the CPU of the run's process per mutant in each 1,000 (every thread; the evaluator's
worker processes not included): a load-robust view of the cost behind the rates. ``--none``
also runs memory=none pipeline=guided with the same budget, side by side. ``--profile``
profiles the memory thread and the main thread in windows of decisions (``WindowProfiles``).
``--repeat N`` runs part 1 N times in turn (with ``--baseline``, each time beside the
baseline's) and prints each run's ratios and their medians: on a shared 2-core machine one
run's last / first moved between 0.72 and 1.06 (session 16), so a single run decides nothing.
``--set KEY=VALUE`` passes Hydra overrides to the memory=v2 run (repeatable), e.g.
``--set memory.posterior_config.invalidity_fit=laplace_prefix``.

Part 2, the memory alone at a given ledger length: for each bank size (synthetic insight
cards of the task) and ledger length (synthetic history of another run: ~45 %
abstentions, randomised rows offered with e = 0.7, a third of the deliveries cited,
~8 % invalid and ~4 % censored terminals, a mutation edge per attempt on two islands),
the real provider (``CardBankMemory`` from the default ``memory`` config, authoring off
so the bank keeps its size; stamps, leases, lineage, retirement sweeps and OPE on) then
takes ``--measure`` more mutants (after a warm-up through the first OPE summary and
sweep, whose first call catches up on the history once, and a full garbage collection of
the built history): ``decide`` then ``observe``
(terminal, edge, lineage, lease release, trial stamp, evictor every 25, OPE every 20).
Prints CPU and wall ms per mutant (mean and p50; CPU is the fairer figure on a shared
machine), the fits (decisions that found V or the cards moved) and the heads refitted in them, the
process RSS once the ledger is open and fitted, and from that the bytes kept per
historical decision (RSS slope between ledger lengths). ``--baseline PATH`` measures part 2
also on the package of another checkout (an export of ``main``, say), each setting in a
subprocess right after this checkout's (which then runs each setting in a fresh subprocess
too), with ``--baseline-measure`` mutants (the old code
can be slow at long ledgers), and prints the ratio of CPU ms per mutant. With part 1,
``--baseline`` also runs the real run of that checkout in a subprocess at the same time as
this one's (the same load on a shared machine) and prints its figures and the ratios of
wall and decide CPU (per call, and per 1,000 decisions). Setting PYTHONPATH does not
choose the package measured: the script puts its own checkout first on ``sys.path``.
``--components`` also times, on each ledger of this checkout and interleaved in one
process, a retirement sweep judging every card against a bounded one (memory-model.md "A
bounded sweep") and the immediate head's adaptive against its planned fit ("Incremental
fits"), CPU ms medians over 5 repetitions.

Part 3 (``--bank-writes N``): pooled outcomes written into a small bank (8 cards), one
transaction each, by a store with its default settings (a ``cards.json`` under 64 KiB is
rewritten whole on every write) and by a run's store (every write a journal line; compacted
past 256 KiB and at the end), in interleaved blocks of N in one process: CPU and wall ms per
write and the ratios.
"""

from __future__ import annotations

import os

# as run.py sets it for a run (numpy reads it at its import, below): no huge-page advice
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")

import argparse
import gc
import hashlib
import itertools
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

# the package measured: this checkout's, or with --child another checkout's (imported
# before bench_memory_bank, which puts this checkout first on sys.path), with the
# config of that checkout (its benchmarks/_config.py)
sys.path.insert(
    0,
    sys.argv[sys.argv.index("--child") + 1]
    if "--child" in sys.argv
    else str(Path(__file__).resolve().parents[1]),
)
sys.path.insert(0, str(Path(sys.path[0]) / "benchmarks"))  # its _config: its own config/
# isort: off
import gigaevo  # noqa: F401
from _config import run_config
from bench_memory_bank import synthetic_card

# isort: on
from hydra.utils import instantiate

from gigaevo.memory.base import MemoryRuntime, MutationContext, MutationResult
from gigaevo.memory.v2 import HashingEmbedder, LocalMemoryStore
from gigaevo.memory.v2.causal import RewardDefinition as CausalReward
from gigaevo.memory.v2.causal import context_features
from gigaevo.memory.v2.evidence import (
    Candidate,
    CardSnapshot,
    DecisionRow,
    EdgeRow,
    FrozenContext,
    SelectionEvidence,
    TerminalRow,
    decision_key_id,
    reward_definition,
)
from gigaevo.memory.v2.evidence.owner import session_owner
from gigaevo.pipeline.build import resolve_problem, run_from_config

HISTORY = "history"
CITED_CARDS = 400  # history rows propose among the first 400 cards of the bank


# -- peak memory of the process tree ----------------------------------------------
_NOT_MEASURED: set[int] = set()  # child processes left out of the tree (a baseline's run)


def _tree_rss() -> int:
    """Summed RSS (bytes) of this process and its descendants (from /proc), without the
    processes of ``_NOT_MEASURED`` and theirs."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(name))
            except (OSError, ValueError, IndexError):
                continue
    total, stack = 0, [os.getpid()]
    while stack:
        pid = stack.pop()
        if pid in _NOT_MEASURED:
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
        stack.extend(children.get(pid, []))
    return total


class PeakSampler:
    """Samples ``_tree_rss`` every 0.5 s in a thread; ``peak`` is the largest seen."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, _tree_rss())

    def __enter__(self) -> PeakSampler:
        self.peak = _tree_rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# -- part 1: a real run -------------------------------------------------------------
def rates(events: Path) -> tuple[list[float], float]:
    """Mutants/s in each successive 1,000 mutants and the wall time, from events.jsonl."""
    times: dict[int, float] = {}
    start = None
    for line in events.read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "initial" and start is None:
            start = float(e["time"])
        elif e.get("event") == "mutant":
            times[int(e["attempt"])] = float(e["time"])
    order = sorted(times)
    assert start is not None and order
    out, prev = [], start
    for k in range(1000, len(order) + 1, 1000):
        t = max(times[a] for a in order[:k])
        out.append(1000.0 / (t - prev))
        prev = t
    return out, max(times.values()) - start


class MemoryCalls:
    """Times every ``decide`` and ``observe`` of the v2 provider in a run (in whatever
    thread the engine calls them): CPU of that thread and wall, summed per kind."""

    def __init__(self) -> None:
        self.cpu = {"decide": 0.0, "observe": 0.0}
        self.wall = {"decide": 0.0, "observe": 0.0}
        self.n = {"decide": 0, "observe": 0}
        self.decide_cpu: list[float] = []  # each decide's thread CPU, in call order
        self.observe_cpu: list[float] = []  # each observe's
        # CPU seconds of this process (every thread: engine, memory lane, model calls) before
        # the first observation and after the 1,000th, 2,000th ...: the run's own cost per
        # 1,000 mutants, which a loaded machine stretches far less than the wall (the
        # sandboxed evaluations run in worker processes: not counted)
        self.run_cpu: list[float] = []
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> MemoryCalls:
        from gigaevo.memory.v2.provider import CardBankMemory

        for name in ("decide", "observe"):
            self._saved[name] = original = getattr(CardBankMemory, name)
            setattr(CardBankMemory, name, self._timed(name, original))
        return self

    def __exit__(self, *exc: object) -> None:
        from gigaevo.memory.v2.provider import CardBankMemory

        for name, original in self._saved.items():
            setattr(CardBankMemory, name, original)

    def _timed(self, name: str, original: Any) -> Any:
        def call(provider: Any, *args: Any) -> Any:
            if name == "observe" and not self.n["observe"]:
                self.run_cpu.append(_run_cpu())
            c0, w0 = time.thread_time(), time.perf_counter()
            try:
                return original(provider, *args)
            finally:
                spent = time.thread_time() - c0
                (self.decide_cpu if name == "decide" else self.observe_cpu).append(spent)
                self.cpu[name] += spent
                self.wall[name] += time.perf_counter() - w0
                self.n[name] += 1
                if name == "observe" and self.n[name] % 1000 == 0:
                    self.run_cpu.append(_run_cpu())

        return call

    def line(self) -> str:
        per = {k: (1e3 * self.cpu[k] / max(1, self.n[k]), 1e3 * self.wall[k] / max(1, self.n[k]))
               for k in self.cpu}  # fmt: skip
        return ", ".join(f"{k} cpu {c:.1f} wall {w:.1f}" for k, (c, w) in per.items())

    def decide_per_k(self) -> list[float]:
        """Mean thread CPU of a decide, ms, in each successive 1,000 calls."""
        return _per_k(self.decide_cpu)

    def observe_per_k(self) -> list[float]:
        """Mean thread CPU of an observe, ms, in each successive 1,000 calls."""
        return _per_k(self.observe_cpu)

    def run_cpu_per_k(self) -> list[float]:
        """CPU ms of this process (every thread) per mutant, in each successive complete
        1,000 observations."""
        c = self.run_cpu
        return [(b - a) for a, b in itertools.pairwise(c)]


def _per_k(cpu: list[float]) -> list[float]:
    return [1e3 * float(np.mean(cpu[i : i + 1000])) for i in range(0, len(cpu), 1000)]


def _run_cpu() -> float:
    """CPU seconds of this process, all threads (not its evaluator worker processes)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


class WindowProfiles:
    """cProfile of the memory thread (``CardBankMemory.decide``'s caller) and of the engine's
    main thread (``MemoryLane.decide``'s caller), each on only while its count of decisions
    is inside a window [a, b): the first against the last 1,000 mutants, say. Prints, per
    window and thread, the wall and thread CPU seconds and the largest cumulative terms;
    with ``out``, dumps each profile there (``pstats``)."""

    def __init__(self, windows: list[tuple[int, int]], out: Path | None) -> None:
        self.windows, self.out = windows, out
        self.lines: list[str] = []
        self._saved: list[tuple[Any, Any]] = []
        self._open: dict[str, Any] = {}  # thread -> (state, window) of a profile still on

    def __enter__(self) -> WindowProfiles:
        from gigaevo.evolution.memory_lane import MemoryLane
        from gigaevo.memory.v2.provider import CardBankMemory

        for cls, thread in ((CardBankMemory, "memory"), (MemoryLane, "main")):
            self._saved.append((cls, cls.decide))
            cls.decide = self._counted(cls.decide, thread)  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        for cls, original in self._saved:
            cls.decide = original
        for thread, (state, (a, _)) in self._open.items():  # the run ended inside a window
            if state["on"] is not None:
                self._report(thread, (a, state["n"]), *state["on"], ended=True)
        for line in self.lines:
            print(line)

    def _counted(self, original: Any, thread: str) -> Any:
        import cProfile

        state: dict[str, Any] = {"n": 0, "on": None}

        def call(obj: Any, *args: Any) -> Any:
            n = state["n"]
            for a, b in self.windows:
                if n == a:
                    state["on"] = (cProfile.Profile(), time.perf_counter(), time.thread_time())
                    state["on"][0].enable()
                    self._open[thread] = (state, (a, b))
                elif n == b and state["on"] is not None:
                    self._report(thread, (a, b), *state["on"])
                    state["on"] = None
            state["n"] += 1
            return original(obj, *args)

        return call

    def _report(self, thread: str, window: tuple[int, int], prof: Any, w0: float, c0: float,
                ended: bool = False) -> None:  # fmt: skip
        """``ended``: the run ended inside the window (called from another thread: its wall
        runs to the run's end and its thread CPU is not known)."""
        import pstats

        prof.disable()
        wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
        self.lines.append(
            f"  profile, {thread} thread, decisions {window[0]}-{window[1]}: wall {wall:.1f} s,"
            + (" to the run's end" if ended else f" thread CPU {cpu:.1f} s (profiler on)")
        )
        stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        terms = sorted(
            ((v[3], v[0], f"{Path(k[0]).name}:{k[1]}({k[2]})") for k, v in stats.items()
             if "gigaevo" in k[0]),
            reverse=True,
        )  # fmt: skip
        for cum, calls, name in terms[:14]:
            self.lines.append(f"    {cum:7.2f} s {calls:7d} calls  {name}")
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            prof.dump_stats(str(self.out / f"{thread}_{window[0]}_{window[1]}.pstats"))


def real_run(
    mutants: int, *overrides: str, profile: WindowProfiles | None = None
) -> dict[str, Any]:
    # imported here: a --child of an older checkout imports this file with its own _config
    from _config import describe, memory_description

    with tempfile.TemporaryDirectory() as tmp:
        cfg = run_config(tmp, "problem=rastrigin", f"max_mutants={mutants}", *overrides)
        print(f"config: {describe(cfg)}", flush=True)
        if overrides:
            print(f"overrides: {' '.join(overrides)}", flush=True)
        started = time.perf_counter()
        with PeakSampler() as sampler, MemoryCalls() as calls, profile or nullcontext():
            run_from_config(cfg, show_progress=False)
        wall = time.perf_counter() - started
        per_k, _ = rates(Path(tmp) / "events.jsonl")
        sizes = {p.name: p.stat().st_size for p in Path(tmp).iterdir() if p.is_file()}
        files = sum(p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file())
    label = memory_description(cfg)  # what ran, not what was asked for
    print(f"\nreal run, rastrigin, {mutants} mutants, {label}: wall {wall:.0f} s")
    print("  mutants/s per 1,000:", ", ".join(f"{r:.1f}" for r in per_k))
    if len(per_k) > 1:
        print(f"  last / first 1,000: {per_k[-1] / per_k[0]:.2f} (goal >= 0.9)")
    print(f"  peak RSS of the process tree: {sampler.peak / 1e6:.0f} MB")
    if calls.n["decide"]:
        print(f"  memory calls, ms per call (thread CPU, wall): {calls.line()}")
        per = calls.decide_per_k()
        print("  decide CPU ms per call, per 1,000:", ", ".join(f"{c:.1f}" for c in per))
        per = calls.observe_per_k()
        print("  observe CPU ms per call, per 1,000:", ", ".join(f"{c:.1f}" for c in per))
        run = calls.run_cpu_per_k()
        if run:
            print("  CPU of the run process (all threads) ms per mutant, per 1,000:",
                  ", ".join(f"{c:.1f}" for c in run))  # fmt: skip
        if len(run) > 1:
            print(f"  first / last 1,000 of that CPU: {run[0] / run[-1]:.2f} (the cost behind the"
                  " rates: a busy machine stretches the wall, far less the CPU)")  # fmt: skip
    for name in ("cards.json", "cards.trials.jsonl", "memory_v2_selection_evidence.sqlite3"):
        if name in sizes:
            wal = sizes.get(f"{name}-wal", 0)
            print(f"  {name}: {sizes[name] / 1e6:.2f} MB" + (f" + WAL {wal / 1e6:.2f}" * bool(wal)))
    print(f"  files at the end: {files / 1e6:.1f} MB in the run directory", flush=True)
    decide = 1e3 * calls.cpu["decide"] / max(1, calls.n["decide"])
    return {"wall": wall, "per_k": per_k, "decide": decide, "decide_per_k": calls.decide_per_k(),
            "run_cpu_per_k": calls.run_cpu_per_k()}  # fmt: skip


def _real_in_checkout(tree: Path, mutants: int, overrides: list[str]) -> subprocess.Popen[str]:
    """Part 1 on the package of checkout ``tree`` (this script's code), started now in a
    child so that it runs at the same time as this checkout's: its report, then its figures
    as JSON on the last line."""
    tree = tree.resolve()
    cmd = [sys.executable, __file__, "--child", str(tree), "--child-run", "--mutants", str(mutants)]
    cmd += [a for o in overrides for a in ("--set", o)]
    child = subprocess.Popen(cmd, cwd=tree, stdout=subprocess.PIPE, text=True)
    _NOT_MEASURED.add(child.pid)  # its own peak RSS is in its report
    return child


def _ratios(this: dict[str, Any], base: dict[str, Any]) -> None:
    """Baseline / this checkout: wall and decide CPU, per 1,000 where both have them."""
    per = [f"{b / t:.2f}" for t, b in zip(this["decide_per_k"], base["decide_per_k"], strict=False)]
    print(
        f"baseline / this: wall {base['wall'] / this['wall']:.2f}, decide CPU per call"
        f" {base['decide'] / this['decide']:.2f}; per 1,000: {', '.join(per)}",
        flush=True,
    )


def _medians(label: str, runs: list[dict[str, Any]]) -> None:
    """The ratios of repeated real runs, each and their median: last / first 1,000 of the
    rates, first / last 1,000 of the run process's CPU per mutant, and decide CPU per call."""
    rates = [r["per_k"][-1] / r["per_k"][0] for r in runs if len(r["per_k"]) > 1]
    cpu = [r["run_cpu_per_k"][0] / r["run_cpu_per_k"][-1] for r in runs
           if len(r.get("run_cpu_per_k", ())) > 1]  # fmt: skip
    decide = [r["decide"] for r in runs]

    def each(values: list[float], fmt: str) -> str:
        if not values:
            return "-"
        median = format(float(np.median(values)), fmt)
        return f"{', '.join(format(v, fmt) for v in values)} (median {median})"

    print(
        f"{label}, {len(runs)} runs in turn: last / first 1,000 {each(rates, '.2f')};"
        f" run CPU per mutant first / last {each(cpu, '.2f')};"
        f" decide CPU ms per call {each(decide, '.1f')}",
        flush=True,
    )


# -- part 3: a small bank's card writes, a store's default against a run's store -----------
def bank_writes(writes: int, rounds: int = 6, n_cards: int = 8) -> dict[str, list[float]]:
    """Pooled outcomes written into a small bank (``n_cards`` synthetic cards, a few tens of
    KB, as in a real run's bank), one transaction each: a store with its default settings
    (a ``cards.json`` under 64 KiB is rewritten whole: temporary file, fsync, replace,
    directory fsync) against a run's store (``RUN_JOURNAL_FROM_BYTES``: one journal line
    appended and fsynced, compacted past 256 KiB and at ``compact``), in interleaved blocks
    of ``writes`` in one process. Per write: [CPU ms, wall ms] per store, and the
    compactions."""
    from gigaevo.memory.v2.bank.cards import pool_into
    from gigaevo.memory.v2.bank.recordjournal import RUN_COMPACT_FROM_BYTES, RUN_JOURNAL_FROM_BYTES

    rng = np.random.default_rng(3)
    cards = [synthetic_card(i, rng) for i in range(n_cards)]
    out: dict[str, list[float]] = {"default": [0.0, 0.0], "run": [0.0, 0.0]}
    with tempfile.TemporaryDirectory() as tmp:
        stores = {
            "default": LocalMemoryStore(Path(tmp) / "a", embedder=HashingEmbedder()).open(),
            "run": LocalMemoryStore(
                Path(tmp) / "b",
                embedder=HashingEmbedder(),
                journal_from_bytes=RUN_JOURNAL_FROM_BYTES,
                compact_from_bytes=RUN_COMPACT_FROM_BYTES,
            ).open(),
        }
        for store in stores.values():
            store.transaction(lambda w: w.update({c.id: c for c in cards}))
        for r in range(rounds):
            for name in ("default", "run") if r % 2 == 0 else ("run", "default"):
                store = stores[name]
                c0, w0 = time.process_time(), time.perf_counter()
                for i in range(writes):
                    cid = cards[int(rng.integers(n_cards))].id
                    ev = cards[0].evidence[0]
                    store.transaction(
                        lambda w, c=cid, e=ev, p=f"{r}-{i}": w.update(
                            {c: pool_into(w[c], e, (p,), 1.0)}
                        )
                    )
                out[name][0] += time.process_time() - c0
                out[name][1] += time.perf_counter() - w0
        stores["run"].compact()
        total = writes * rounds // 2
        out = {k: [1e3 * v / total for v in vals] for k, vals in out.items()}
        for name, store in stores.items():
            out[name].append(float(store.stats.compactions))
        out["size_kb"] = [store.path.stat().st_size / 1e3 for store in stores.values()]
    return out


# -- part 2: the memory alone at a given ledger length -------------------------------
def _snapshot(card_id: str) -> CardSnapshot:
    text = f"[{card_id}] text"
    return CardSnapshot(card_id, (), "insight", text, hashlib.sha256(text.encode()).hexdigest())


def synthesise(root: Path, problem: Any, n_cards: int, n_rows: int) -> list[str]:
    """A bank of ``n_cards`` and a ledger of ``n_rows`` history decisions; the child ids."""
    rng = np.random.default_rng(n_cards + n_rows)
    task = problem.name
    store = LocalMemoryStore(root, embedder=HashingEmbedder()).open()
    cards = [synthetic_card(i, rng, task=task) for i in range(n_cards)]
    store.transaction(lambda working: working.update({c.id: c for c in cards}))
    ids = [c.id for c in cards]
    m = problem.metrics
    reward = reward_definition(m, depth=3, budget=32)
    causal = CausalReward(m.lower_bound, m.upper_bound, m.higher_is_better)
    span = m.upper_bound - m.lower_bound
    evidence = SelectionEvidence(root).open()
    evidence._db().execute("PRAGMA synchronous = OFF")  # only while synthesising history
    owner = session_owner()
    children: list[str] = []
    for a in range(n_rows):
        parent = float(rng.uniform(m.lower_bound + 0.05 * span, m.lower_bound + 0.5 * span))
        coords = rng.uniform(0, 1, size=2)
        x = context_features(causal, parent, float(a), coords)
        island = int(rng.integers(2))
        pid = children[-int(rng.integers(1, min(50, len(children)) + 1))] if children else "seed"
        ctx = FrozenContext(
            task, pid, parent, island, (int(coords[0] * 10), int(coords[1] * 8)),
            tuple(coords.tolist()), a / n_rows, tuple(x.tolist()),
        )  # fmt: skip
        base: dict[str, Any] = dict(
            decision_id=decision_key_id(HISTORY, a), run_id=HISTORY, seed=1, attempt=a,
            event_ordinal=a, owner=owner, context=ctx, reward=reward, pending=(), fit=(),
            fitted_row_ids=(), evidence_version="history",
        )  # fmt: skip
        u = rng.random()
        status = "censored" if u < 0.04 else ("invalid" if u < 0.12 else "valid")
        cited = False
        if rng.random() < 0.45:
            d = DecisionRow(**base, universe=(), candidates=(), abstain=True, rho0=1.0)
        else:
            prop = ids[int(rng.integers(min(CITED_CARDS, len(ids))))]
            z = int(rng.random() < 0.7)
            cited = bool(z and status != "censored" and rng.random() < 0.35)
            rho, e = 0.5, 0.7
            d = DecisionRow(
                **base, universe=(_snapshot(prop),),
                candidates=(Candidate(prop, rho, e, rho * e, rho * (1 - e), True),),
                abstain=False, rho0=1 - rho, proposed_id=prop, z=z, offer=e, rho=rho,
                joint=rho * (e if z else 1 - e), q0=0.0, q1=0.01, r0=0.05, r1=0.05,
            )  # fmt: skip
        evidence.append_decision(d)
        gain = None
        if status == "valid":
            lo, hi = causal.feasible_interval(parent)
            gain = float(np.clip(rng.normal(0.0, 0.02), lo, hi) * span)
        child = f"child-{a}"
        terminal = TerminalRow(
            decision_id=d.decision_id, child_id=child if status != "censored" else "no-child:x",
            base_id=pid, metric=reward.metric, direction=reward.direction, status=status,  # type: ignore[arg-type]
            cited_ids=(d.proposed_id,) if cited and d.proposed_id else (), gain=gain,
            measurement="scalar" if status == "valid" else None,
            censor_reason="bench" if status == "censored" else None,
        )  # fmt: skip
        disposition = None
        if status == "valid":
            disposition = "improved" if rng.random() < 0.3 else "rejected"
        edge = EdgeRow(
            child,
            HISTORY,
            a,
            pid,
            child,
            island,
            0,
            status,
            gain,
            disposition,
            d.decision_id,  # type: ignore[arg-type]
        )
        evidence.record_outcome(terminal, edge)
        children.append(child)
    evidence.close()
    return children


def drive(
    memory: Any, problem: Any, start: int, n: int, children: list[str], seed: int = 1
) -> tuple[list[float], list[float]]:
    """``n`` mutants through the provider; (CPU s, wall s) of decide + observe each."""
    rng = np.random.default_rng(seed)
    m = problem.metrics
    span = m.upper_bound - m.lower_bound
    cpu, wall = [], []
    for a in range(start, start + n):
        parent = float(rng.uniform(m.lower_bound + 0.05 * span, m.lower_bound + 0.5 * span))
        coords = tuple(float(c) for c in rng.uniform(0, 1, size=2))
        pid = children[-int(rng.integers(1, min(50, len(children)) + 1))]
        island = int(rng.integers(2))
        ctx = MutationContext(problem.name, a, pid, parent, island, (1, 1), coords, 0.5)
        c0, w0 = time.process_time(), time.perf_counter()
        decision = memory.decide(ctx)
        c1, w1 = time.process_time(), time.perf_counter()
        valid = rng.random() > 0.1
        gain = float(rng.normal(0.0, 0.02)) * span
        child_f = float(np.clip(parent + (gain if m.higher_is_better else -gain),
                                m.lower_bound, m.upper_bound))  # fmt: skip
        cited = tuple(decision.card_ids) if decision.card_ids and rng.random() < 0.5 else ()
        child = f"live-{a}"
        result = MutationResult(
            attempt=a, child_id=child, parent_id=pid, status="accepted", valid=valid,
            parent_fitness=parent, child_fitness=child_f if valid else 0.0,
            normalised_gain=gain / span if valid else None, cited_card_ids=cited,
            accepted=valid, island=island,
            archive_status=("improved" if rng.random() < 0.3 else "rejected") if valid else None,
        )  # fmt: skip
        c2, w2 = time.process_time(), time.perf_counter()
        memory.observe(result)
        c3, w3 = time.process_time(), time.perf_counter()
        children.append(child)
        cpu.append((c1 - c0) + (c3 - c2))
        wall.append((w1 - w0) + (w3 - w2))
    return cpu, wall


def _warm_up(cfg: Any) -> int:
    """Mutants before the timed ones: through the first OPE summary and retirement sweep,
    whose first call reads every historical row once (``OpeColumns``, the evictor's kept
    supports) and is then incremental; timing that catch-up would charge a one-off
    O(ledger) cost to the steady per-mutant figure (issue 16, session 8)."""
    from omegaconf import OmegaConf

    ope = OmegaConf.select(cfg, "memory.ope_every", default=None)
    sweep = OmegaConf.select(cfg, "memory.evictor.sweep_every", default=None)
    return max(10, *(int(v) for v in (ope, sweep) if v))


def synthetic(n_cards: int, n_rows: int, measure: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cfg = run_config(tmp, "problem=rastrigin", "memory.writer.authoring_enabled=false")
        problem = resolve_problem(cfg)
        t0 = time.perf_counter()
        children = synthesise(root, problem, n_cards, n_rows)
        built = time.perf_counter() - t0
        runtime = MemoryRuntime(
            problem.name, problem.description, problem.metrics, root, root, 0, 10**6
        )
        memory = instantiate(cfg.memory)(runtime=runtime)
        warm = _warm_up(cfg)
        drive(memory, problem, n_rows, warm, children)  # warm up: first fits, OPE, sweep
        # the first full collection after building the history is a one-off of the build
        # (about 180 ms at 10,000 rows, 9 ms on a 20-mutant mean): not in the timed window
        gc.collect()
        rss = _tree_rss()
        fits = memory.reader.fits
        heads = getattr(memory.reader.heads, "head_fits", 0)  # 0: a checkout without it
        cpu, wall = drive(memory, problem, n_rows + warm, measure, children)
        fits = memory.reader.fits - fits
        heads = getattr(memory.reader.heads, "head_fits", 0) - heads
        memory.close()
    return {
        "built_s": built,
        "cpu_mean": 1e3 * statistics.mean(cpu),
        "cpu_p50": 1e3 * statistics.median(cpu),
        "wall_mean": 1e3 * statistics.mean(wall),
        "wall_p50": 1e3 * statistics.median(wall),
        "fits": fits,
        "head_fits": heads,
        "rss_mb": rss / 1e6,
    }


def components(n_cards: int, n_rows: int, reps: int = 5) -> dict[str, float]:
    """CPU ms of two fitting components on the same ledger, interleaved in one process
    (issue 16, session 6): a retirement sweep judging every card (memory-model.md's
    reference rule, the sweep at close) against a bounded one on the cadence, and the
    immediate head's fit with adaptive residual-scale integration against the planned one
    (memory-model.md "Incremental fits"). Medians over ``reps``."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cfg = run_config(tmp, "problem=rastrigin", "memory.writer.authoring_enabled=false")
        problem = resolve_problem(cfg)
        children = synthesise(root, problem, n_cards, n_rows)
        runtime = MemoryRuntime(
            problem.name, problem.description, problem.metrics, root, root, 0, 10**6
        )
        memory = instantiate(cfg.memory)(runtime=runtime)
        drive(memory, problem, n_rows, 10, children)
        heads, cards = memory.reader.heads, memory.store.cards()
        heads.rows.sync()
        space = heads.fitted(heads.rows.last_width, cards).space
        rows = heads.rows.rows(heads.rows.last_width)
        alias = {a: c.id for c in cards for a in (c.id, *c.aliases)}
        keys = rows.immediate.keys() | rows.lineage.keys() | set(rows.invalidity.keys)
        block_of = {k: space.lineage_position(alias.get(k, k)) for k in keys}
        view = rows.immediate.fit_view(block_of, len(space.lineages))
        plan = heads._plan("immediate", rows.plan_rows, heads.rows.last_width, alias)
        times: dict[str, list[float]] = {k: [] for k in ("full", "bounded", "adaptive", "planned")}

        def cpu(key: str, work: Any) -> Any:
            c0 = time.process_time()
            out = work()
            times[key].append(time.process_time() - c0)
            return out

        for rep in range(reps):
            cpu("full", lambda: memory.evictor.sweep())
            cpu("bounded", lambda rep=rep: memory.evictor.sweep(1000 + rep))
            cpu("adaptive", lambda: heads._utility_head(space).fit_statistics(view))
            if plan is not None:
                cpu("planned", lambda: heads._utility_head(space).fit_statistics(view, plan))
        memory.close()
    return {k: 1e3 * statistics.median(v) for k, v in times.items() if v}


def _line(r: dict[str, float]) -> str:
    return (
        f"cpu mean {r['cpu_mean']:7.1f} p50 {r['cpu_p50']:7.1f} | wall mean"
        f" {r['wall_mean']:7.1f} p50 {r['wall_p50']:7.1f} | fits {r['fits']:>3}"
        f" (heads {r.get('head_fits') or '-':>3})"
        f" | rss {r['rss_mb']:6.0f} MB (history built in {r['built_s']:.0f} s)"
    )


def _in_checkout(tree: Path, n_cards: int, n_rows: int, measure: int) -> dict[str, float]:
    """One setting of part 2 on the package of checkout ``tree`` (this script's code)."""
    tree = tree.resolve()
    cmd = [sys.executable, __file__, "--child", str(tree), "--cards", str(n_cards)]
    cmd += ["--rows", str(n_rows), "--measure", str(measure)]
    out = subprocess.run(cmd, check=True, cwd=tree, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mutants", type=int, default=10_000, help="mutants of the real run")
    ap.add_argument("--rows", type=int, nargs="+", default=[1000, 10_000, 50_000])
    ap.add_argument("--cards", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--measure", type=int, default=150, help="mutants timed per setting")
    ap.add_argument("--skip-run", action="store_true", help="no real run (part 1)")
    ap.add_argument("--skip-synthetic", action="store_true", help="no synthetic part (part 2)")
    ap.add_argument("--none", action="store_true", help="also run memory=none side by side")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="part 1: run it N times in turn (with --baseline, each time beside the baseline's)"
        " and print the ratios' medians: one run's last / first moves by about 0.15",
    )
    ap.add_argument("--baseline", type=Path, help="another checkout: part 2 side by side")
    ap.add_argument("--baseline-measure", type=int, default=30, help="its mutants per setting")
    ap.add_argument(
        "--components",
        action="store_true",
        help="also time a full against a bounded retirement sweep, and the immediate head's"
        " adaptive against its planned fit, on each ledger (this checkout only)",
    )
    ap.add_argument(
        "--bank-writes",
        type=int,
        default=0,
        help="part 3: this many pooled-outcome writes per block into a small bank, a store's"
        " default against a run's store, interleaved (6 blocks)",
    )
    ap.add_argument(
        "--profile",
        default="",
        help="part 1 (memory=v2): cProfile the memory and main threads in windows of"
        " decisions, e.g. 200:1200,8800:9800 (prints the largest cumulative terms)",
    )
    ap.add_argument("--profile-out", type=Path, help="also dump those profiles here (pstats)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="part 1: a Hydra override of the memory=v2 run (repeatable)",
    )
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--child-run", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:  # part 1, or one setting of part 2, on this package
        import gigaevo

        assert Path(gigaevo.__file__).is_relative_to(args.child.resolve()), gigaevo.__file__
        if args.child_run:
            r = real_run(args.mutants, *args.set)
        else:
            r = synthetic(args.cards[0], args.rows[0], args.measure)
        print(json.dumps(r), flush=True)  # JSON on the last line
        return
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    if not args.skip_synthetic:
        print("memory cost per mutant (decide + observe + write), ms; goal <= 20 at 1,000 cards")
        for n_cards in args.cards:
            rows = []
            for n_rows in args.rows:
                # beside a baseline, this checkout also measures each setting in a fresh
                # process: run in this one, a later setting carries the earlier ones' objects
                # (RSS and garbage collections) while the baseline's start clean
                if args.baseline is not None:
                    r = _in_checkout(
                        Path(__file__).resolve().parents[1], n_cards, n_rows, args.measure
                    )
                else:
                    r = synthetic(n_cards, n_rows, args.measure)
                rows.append((n_rows, r))
                print(f"  cards {n_cards:>5}  ledger {n_rows:>6}: {_line(r)}", flush=True)
                if args.components:
                    c = components(n_cards, n_rows)
                    print(
                        f"    sweep cpu ms: every card {c['full']:.0f}, bounded"
                        f" {c['bounded']:.0f} (ratio {c['full'] / c['bounded']:.2f});"
                        f" immediate fit cpu ms: adaptive {c['adaptive']:.1f}, planned "
                        + (
                            f"{c['planned']:.1f} (ratio {c['adaptive'] / c['planned']:.2f})"
                            if "planned" in c
                            else "- (below the first plan point)"
                        ),
                        flush=True,
                    )
                if args.baseline is not None:
                    b = _in_checkout(args.baseline, n_cards, n_rows, args.baseline_measure)
                    print(
                        f"    baseline {' ' * 14}: {_line(b)}\n    baseline / this"
                        f" (cpu mean): {b['cpu_mean'] / r['cpu_mean']:.2f}",
                        flush=True,
                    )
            (n0, r0), (n1, r1) = rows[0], rows[-1]
            slope = (r1["rss_mb"] - r0["rss_mb"]) * 1e6 / max(1, n1 - n0)
            print(
                f"  cards {n_cards:>5}: cpu mean at {n1} rows / at {n0} rows ="
                f" {r1['cpu_mean'] / r0['cpu_mean']:.2f} (flat: 1.0);"
                f" RSS slope {slope:,.0f} bytes per ledger decision",
                flush=True,
            )
    if args.bank_writes:
        b = bank_writes(args.bank_writes)
        print(
            f"small bank ({b['size_kb'][0]:.0f} KB), ms per pooled-outcome write: store default"
            f" CPU {b['default'][0]:.2f} wall {b['default'][1]:.2f}"
            f" ({b['default'][2]:.0f} rewrites of cards.json); run store CPU {b['run'][0]:.2f}"
            f" wall {b['run'][1]:.2f} ({b['run'][2]:.0f}); default / run: CPU"
            f" {b['default'][0] / b['run'][0]:.2f}, wall {b['default'][1] / b['run'][1]:.2f}",
            flush=True,
        )
    if not args.skip_run:
        windows = [tuple(map(int, w.split(":"))) for w in args.profile.split(",") if w]
        profile = WindowProfiles(windows, args.profile_out) if windows else None  # type: ignore[arg-type]
        runs: list[dict[str, Any]] = []
        base_runs: list[dict[str, Any]] = []
        for i in range(max(1, args.repeat)):
            child = None
            if args.baseline is not None:  # the baseline's run at the same time (same load)
                child = _real_in_checkout(args.baseline, args.mutants, args.set)
            this = real_run(args.mutants, *args.set, profile=profile if i == 0 else None)
            runs.append(this)
            if child is not None:
                out, _ = child.communicate()
                lines = out.strip().splitlines()
                print(f"\nbaseline {args.baseline} (run at the same time):")
                print("\n".join(line for line in lines[:-1] if line.startswith("  ")))
                base_runs.append(json.loads(lines[-1]))
                _ratios(this, base_runs[-1])
        if len(runs) > 1:
            print()
            _medians("this checkout", runs)
            if base_runs:
                _medians(f"baseline {args.baseline}", base_runs)
        if args.none:  # in a fresh process: this one still holds the memory=v2 run's heap
            here = Path(__file__).resolve().parents[1]
            child = _real_in_checkout(here, args.mutants, ["memory=none", "pipeline=guided"])
            out, _ = child.communicate()
            print("\n".join(out.strip().splitlines()[:-1]), flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
