"""Decision latency of the memory v2 read side: ``CausalReader.decide`` against bank size.

Usage:
    .venv/bin/python benchmarks/bench_decision_latency.py [--sizes 100 1000 10000]
        [--ledger 3000] [--repeats 15] [--quick] [--profile N]

For each bank size N (synthetic insight cards of one task in a temp bank) it
builds a causal ledger of ``--ledger`` historical decisions with terminals in a
realistic mix (~45 % abstentions; randomised rows delivered with e = 0.7, so
controls are ~30 % of them; a few hundred cited deliveries spread over up to
400 cards; ~8 % invalid and ~4 % censored terminals; edges for every attempt and
matured lineage rows for a share of the eligible valid roots) and times:

- cached: ``decide`` while V is unchanged (the head fits come from the cache);
- refit: ``decide`` right after a new usefulness-eligible terminal (a withheld
  control of another run) landed, so V moved and both heads are refitted.

Each decision's lease is released outside the timed region; BLAS is limited to one
thread around each decision, as the provider does in a run. Prints p50 / p95
per size (wall time, and the CPU time of all the process's threads, the fairer
figure on a shared machine) and the growth of p50 relative to the smallest size next
to N itself (linear growth would track the N ratio). ``--profile N`` runs cProfile over a
few decisions of each kind at size N and prints the top functions.
"""

from __future__ import annotations

import os

# as run.py sets it for a run (numpy reads it at its import, below): no huge-page advice
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")

import argparse
import cProfile
import hashlib
import pstats
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_memory_bank import synthetic_card
from gigaevo.memory.base import MemoryRuntime, MutationContext
from gigaevo.memory.v2 import HashingEmbedder, LocalMemoryStore
from gigaevo.memory.v2.causal import RewardDefinition as CausalReward
from gigaevo.memory.v2.causal import context_features
from gigaevo.memory.v2.evidence import (
    Candidate,
    CardSnapshot,
    DecisionRow,
    EdgeRow,
    FrozenContext,
    LineageRow,
    SelectionEvidence,
    TerminalRow,
    decision_key_id,
    reward_definition,
)
from gigaevo.memory.v2.evidence.owner import session_owner
from gigaevo.memory.v2.provider import one_blas_thread
from gigaevo.memory.v2.read.reader import CausalReader
from tests.memory.helpers import METRICS

TASK = "toy"
HISTORY_RUN = "history"
CITED_CARDS = 400


def snapshot(card_id: str) -> CardSnapshot:
    text = f"text of {card_id}"
    return CardSnapshot(card_id, (), "insight", text, hashlib.sha256(text.encode()).hexdigest())


@dataclass
class Ledger:
    """Writes synthetic history rows of ``HISTORY_RUN`` (another process's run, say)."""

    evidence: SelectionEvidence
    card_ids: list[str]
    rng: np.random.Generator
    attempt: int = 0
    island_ordinal: int = 0
    # share of matured lineage rows whose best descendant beat the direct child (residual
    # g^L = |N(0, 0.05)| R, drawn from a stream of their own so that every other row is the
    # same); 0: every residual is exactly 0, which on a deterministic problem (omega = 0)
    # puts the lineage head's residual scale at its 1e-4 floor (M- = 1)
    improving_lineages: float = 0.0

    def __post_init__(self) -> None:
        self.reward = reward_definition(METRICS, depth=3, budget=32)
        self.causal = CausalReward(METRICS.lower_bound, METRICS.upper_bound, True)
        self.owner = session_owner()
        self.lineage_rng = np.random.default_rng(2)

    def _context(self, attempt: int) -> tuple[FrozenContext, float]:
        parent = float(self.rng.uniform(3.0, 8.0))
        coords = self.rng.uniform(0.0, 1.0, size=2)
        x = context_features(self.causal, parent, float(attempt), coords)
        ctx = FrozenContext(
            TASK, f"p{attempt}", parent, 0, (int(coords[0] * 10), int(coords[1] * 10)),
            tuple(float(c) for c in coords), 0.5, tuple(float(v) for v in x),
        )  # fmt: skip
        return ctx, parent

    def decision(self, z: int | None, proposed: str) -> DecisionRow:
        a = self.attempt
        self.attempt += 1
        ctx, _ = self._context(a)
        base = dict(
            decision_id=decision_key_id(HISTORY_RUN, a),
            run_id=HISTORY_RUN, seed=1, attempt=a, event_ordinal=a, owner=self.owner,
            context=ctx, reward=self.reward, pending=(), fit=(), fitted_row_ids=(),
            evidence_version="history",
        )  # fmt: skip
        if z is None:
            return DecisionRow(**base, universe=(), candidates=(), abstain=True, rho0=1.0)  # type: ignore[arg-type]
        rho, e = 0.5, 0.7
        cand = Candidate(proposed, rho, e, rho * e, rho * (1 - e), True)
        return DecisionRow(
            **base,  # type: ignore[arg-type]
            universe=(snapshot(proposed),), candidates=(cand,), abstain=False, rho0=1 - rho,
            proposed_id=proposed, z=z, offer=e, rho=rho, joint=rho * (e if z else 1 - e),
            q0=0.0, q1=0.01, r0=0.05, r1=0.05,
        )  # fmt: skip

    def terminal(self, d: DecisionRow, status: str, cited: bool) -> TerminalRow:
        gain = None
        if status == "valid":
            lo, hi = d.reward.gain_interval(d.context.parent_fitness)
            r = METRICS.upper_bound - METRICS.lower_bound
            gain = float(np.clip(self.rng.normal(0.01, 0.05), lo, hi) * r)
        return TerminalRow(
            decision_id=d.decision_id,
            child_id=f"child-{d.attempt}" if status != "censored" else "no-child:bench",
            base_id=d.context.parent_id, metric=d.reward.metric, direction=d.reward.direction,
            status=status,  # type: ignore[arg-type]
            cited_ids=(d.proposed_id,) if cited and d.proposed_id else (), gain=gain,
            measurement="deterministic" if status == "valid" else None,
            censor_reason="bench" if status == "censored" else None,
        )  # fmt: skip

    def add(self, z: int | None, proposed: str, status: str, cited: bool) -> DecisionRow:
        d = self.decision(z, proposed)
        self.evidence.append_decision(d)
        self.evidence.append_terminal(self.terminal(d, status, cited))
        self.island_ordinal += 1
        self.evidence.record_edge(
            EdgeRow(
                f"child-{d.attempt}", HISTORY_RUN, d.attempt, d.context.parent_id,
                f"child-{d.attempt}", 0, 0, "valid" if status == "valid" else "invalid",
                0.0, "improved", d.decision_id,
            )
        )  # fmt: skip
        return d

    def lineage(self, d: DecisionRow) -> LineageRow:
        """The matured lineage row of root ``d`` (``improving_lineages``)."""
        residual, best, depth = 0.0, f"child-{d.attempt}", 1
        if self.lineage_rng.random() < self.improving_lineages:
            r = METRICS.upper_bound - METRICS.lower_bound
            residual = abs(float(self.lineage_rng.normal(0.0, 0.05))) * r
            best, depth = f"grandchild-{d.attempt}", 2
        return LineageRow(
            d.decision_id, 1, "outcome", 3, 32, self.island_ordinal + 32, best, depth,
            residual, residual, d.decision_id,
        )  # fmt: skip

    def history(self, n: int) -> dict[str, int]:
        counts = {"abstain": 0, "control": 0, "cited": 0, "uncited": 0, "lineage": 0}
        for _ in range(n):
            u = self.rng.random()
            status = "censored" if u < 0.04 else ("invalid" if u < 0.12 else "valid")
            if self.rng.random() < 0.45:
                self.add(None, "", status if status == "censored" else "valid", False)
                counts["abstain"] += 1
                continue
            proposed = self.card_ids[int(self.rng.integers(min(CITED_CARDS, len(self.card_ids))))]
            z = int(self.rng.random() < 0.7)
            cited = bool(z and status != "censored" and self.rng.random() < 0.35)
            d = self.add(z, proposed, status, cited)
            counts["cited" if cited else ("control" if z == 0 else "uncited")] += 1
            if (z == 0 or cited) and status == "valid" and self.rng.random() < 0.5:
                self.evidence.append_lineage(self.lineage(d))
                counts["lineage"] += 1
        return counts


def runtime(ckpt: Path) -> MemoryRuntime:
    return MemoryRuntime(
        task_key=TASK, task_description="Maximise the score of the toy task.", metrics=METRICS,
        checkpoint_dir=ckpt, bank_dir=ckpt, seed=0, max_mutants=100_000,
    )  # fmt: skip


def context(attempt: int, rng: np.random.Generator) -> MutationContext:
    coords = tuple(float(c) for c in rng.uniform(0.0, 1.0, size=2))
    return MutationContext(
        TASK, attempt, f"parent-{attempt}", float(rng.uniform(3.0, 8.0)), 0,
        (int(coords[0] * 10), int(coords[1] * 10)), coords, 0.5,
    )  # fmt: skip


@dataclass
class Setup:
    reader: CausalReader
    ledger: Ledger
    rng: np.random.Generator
    attempt: int = 0
    cpu: list[float] = field(default_factory=list)  # CPU seconds of each decision

    def decide(self) -> float:
        ctx = context(self.attempt, self.rng)
        self.attempt += 1
        with one_blas_thread():  # as the provider calls the reader
            started, cpu = time.perf_counter(), time.process_time()
            self.reader.decide(ctx)
            elapsed = time.perf_counter() - started
            self.cpu.append(time.process_time() - cpu)
        self.reader.release(ctx.attempt)
        return elapsed

    def new_control(self) -> None:
        """A withheld control of the history run lands: V moves, the next decide refits."""
        self.ledger.add(0, self.ledger.card_ids[0], "valid", False)


def build(
    root: Path, n_cards: int, n_ledger: int, improving_lineages: float = 0.0
) -> tuple[Setup, dict[str, int]]:
    rng = np.random.default_rng(n_cards)
    store = LocalMemoryStore(root, embedder=HashingEmbedder()).open()
    cards = [synthetic_card(i, rng, task=TASK) for i in range(n_cards)]
    store.transaction(lambda working: working.update({c.id: c for c in cards}))
    evidence = SelectionEvidence(root).open()
    ledger = Ledger(evidence, [c.id for c in cards], rng, improving_lineages=improving_lineages)
    counts = ledger.history(n_ledger)
    reader = CausalReader(runtime(root), store, run_id="bench")
    return Setup(reader, ledger, np.random.default_rng(1)), counts


def measure(setup: Setup, repeats: int) -> tuple[list[float], list[float]]:
    setup.decide()  # the first fit
    setup.cpu.clear()
    cached = [setup.decide() for _ in range(repeats)]
    refit = []
    for _ in range(repeats):
        setup.new_control()
        refit.append(setup.decide())
    return cached, refit


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, q))


def profile(setup: Setup, repeats: int) -> None:
    setup.decide()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(repeats):
        setup.decide()
        setup.new_control()
        setup.decide()
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(35)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--ledger", type=int, default=3000, help="historical decisions")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="sizes 100 1000, ledger 600, 5 repeats")
    ap.add_argument("--profile", type=int, default=0, help="cProfile decisions at this size")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.ledger, args.repeats = [100, 1000], 600, 5
    if args.profile:
        with tempfile.TemporaryDirectory() as tmp:
            setup, _ = build(Path(tmp), args.profile, args.ledger)
            profile(setup, max(2, args.repeats // 5))
        return
    rows = []
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            setup, counts = build(Path(tmp), n, args.ledger)
            built = time.perf_counter() - started
            cached, refit = measure(setup, args.repeats)
            cpu_cached, cpu_refit = setup.cpu[: args.repeats], setup.cpu[args.repeats :]
            rows.append((n, cached, refit))
            print(
                f"N={n:>6} cards  ledger {args.ledger} decisions {counts}",
                f"  (built in {built:.1f} s)",
                f"\n  cached (V unchanged): p50 {pct(cached, 50):8.1f} ms",
                f" p95 {pct(cached, 95):8.1f} ms",
                f"\n  refit (new terminal): p50 {pct(refit, 50):8.1f} ms",
                f" p95 {pct(refit, 95):8.1f} ms  fits {setup.reader.fits}",
                f"\n  CPU p50 (all threads): cached {pct(cpu_cached, 50):8.1f} ms"
                f"  refit {pct(cpu_refit, 50):8.1f} ms",
                sep="",
                flush=True,
            )
    n0, c0, r0 = rows[0]
    print(f"\ngrowth of p50 relative to N={n0} (linear would be N/{n0})")
    for n, cached, refit in rows:
        growth_cached = statistics.median(cached) / statistics.median(c0)
        growth_refit = statistics.median(refit) / statistics.median(r0)
        print(
            f"  N={n:>6}  N ratio {n / n0:7.1f}  cached {growth_cached:7.2f}"
            f"  refit {growth_refit:7.2f}"
        )


if __name__ == "__main__":
    main()
