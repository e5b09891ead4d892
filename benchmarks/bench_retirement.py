"""One causal retirement sweep (``CausalEvictor.sweep``) at 1,000 cards.

Usage:
    .venv/bin/python benchmarks/bench_retirement.py [--cards 1000] [--ledger 3000]
        [--repeats 3] [--profile] [--improving-lineages 0.3]

Two ledgers over a bank of ``--cards`` insight cards of one task:

- realistic: the decision-latency benchmark's history (``--ledger`` decisions,
  ~45 % abstentions, e = 0.7, cited deliveries over up to 400 cards, ~8 %
  invalid and ~4 % censored terminals, lineage rows for half the eligible
  roots, so many cards still have pending lineage windows), with 30 % of the
  matured lineages beating their direct child (``--improving-lineages``; with 0
  every lineage residual is exactly 0 on this deterministic problem, the lineage
  head's residual scale sits at its 1e-4 floor and every sweep is disabled);
- all judged: every card has 3 cited deliveries in distinct contexts and every
  lineage window is closed, so every card passes the support checks and reaches
  the viability test (4,096 draws per (context, RAG state); a card stops at its
  first viable pair);
- all judged, every pair: the same with the viability level raised to 0.999999
  so no pair keeps the card early: 3 contexts x 2 RAG states evaluated for every
  card (the worst case, as for a bank of cards that are all being retired).

For each it times the first sweep (includes fitting the heads on the ledger)
and further sweeps on the same evidence (the reader's cached fit), and prints
the verdicts and keep reasons.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_decision_latency import Ledger, build  # noqa: E402

from gigaevo.memory.v2.evidence import LineageRow  # noqa: E402
from gigaevo.memory.v2.read.evictor import CausalEvictor, EvictorSettings  # noqa: E402

TASK = "toy"


def all_judged_history(ledger: Ledger, per_card: int = 3, controls: int = 1500) -> None:
    """Every card: ``per_card`` cited deliveries; plus withheld controls; all windows closed."""
    rows = []
    for cid in ledger.card_ids:
        for _ in range(per_card):
            status = "invalid" if ledger.rng.random() < 0.08 else "valid"
            rows.append(ledger.add(1, cid, status, True))
    for i in range(controls):
        rows.append(ledger.add(0, ledger.card_ids[i % len(ledger.card_ids)], "valid", False))
    for d in rows:
        ledger.evidence.append_lineage(
            LineageRow(d.decision_id, 1, "censored", 3, 32, None, None, None, None, None, None)
        )


def evictor(reader, every_pair: bool = False) -> CausalEvictor:  # type: ignore[no-untyped-def]
    raw: dict[str, object] = {"mode": "causal"}
    if every_pair:  # no early keep: every (context, RAG state) pair is evaluated
        raw["max_viability_probability"] = 0.999999
    settings = EvictorSettings.parse(raw)
    return CausalEvictor(reader, settings, retire=lambda ids, reason, gate: [], task_key=TASK)


def measure(
    name: str, root: Path, cards: int, ledger_rows: int, repeats: int, prof: bool, improving: float
) -> None:
    started = time.perf_counter()
    realistic = name == "realistic"
    setup, counts = build(root, cards, ledger_rows if realistic else 0, improving)
    if not realistic:
        all_judged_history(setup.ledger)
    built = time.perf_counter() - started
    ev = evictor(setup.reader, every_pair=name.endswith("every pair"))
    t0 = time.perf_counter()
    verdicts = ev.sweep()
    first = time.perf_counter() - t0
    cached = []
    profiler = cProfile.Profile() if prof else None
    for _ in range(repeats):
        t0 = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        ev.sweep()
        if profiler is not None:
            profiler.disable()
        cached.append(time.perf_counter() - t0)
    n_rows = len(setup.reader.evidence.observations())
    print(f"\n{name}: {cards} cards, {n_rows} terminals (ledger built in {built:.1f} s)")
    if realistic:
        print(f"  history mix: {counts}; improving lineages {improving:.0%}")
    print(f"  first sweep (fits the heads): {first:.2f} s")
    print(f"  sweep with the cached fit: median {statistics.median(cached):.2f} s "
          f"(min {min(cached):.2f}, max {max(cached):.2f}, {repeats} sweeps)")  # fmt: skip
    print(f"  verdicts: {len(verdicts)}; keep reasons: {dict(ev.counts.keep_reasons)}")
    sweeps = ev.counts.sweeps
    print(f"  per sweep: {ev.counts.judged // sweeps} cards judged, "
          f"{ev.counts.evaluations // sweeps} (context, RAG state) evaluations")  # fmt: skip
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(15)
    setup.reader.evidence.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=1000)
    parser.add_argument("--ledger", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--improving-lineages",
        type=float,
        default=0.3,
        help="share of the realistic ledger's matured lineages that beat their direct child",
    )
    args = parser.parse_args()
    np.random.default_rng(0)
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() else None
    for name in ("realistic", "all judged", "all judged, every pair"):
        root = Path(tempfile.mkdtemp(prefix="bench-retire-", dir=base))
        try:
            measure(
                name, root, args.cards, args.ledger, args.repeats, args.profile,
                args.improving_lineages,
            )  # fmt: skip
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
