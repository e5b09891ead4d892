"""The card bank under load: ingest latency per outcome and index refresh time.

Usage:
    .venv/bin/python benchmarks/bench_memory_bank.py [--sizes 1000 10000] [--outcomes 60]

For each bank size N (synthetic insight cards of one task, written in one
transaction to a local temp directory) it prints:

- open: load ``cards.json`` and embed every card into a fresh faiss index;
- refresh, unchanged: ``refresh()`` when nobody wrote (one ``stat``);
- refresh after a foreign write: another ``LocalMemoryStore`` (as another
  process would) admits one card, then this store's ``refresh()`` notices,
  re-reads the bank and embeds the new card;
- ingest: the librarian with the offline memory LLM on ``--outcomes`` strictly
  valid outcomes (author, retrieve, judge, admit or pool, ledger row), per
  outcome, including the fsynced atomic rewrite of the bank.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gigaevo.memory.v2 import Card, Evidence, HashingEmbedder, LocalMemoryStore, writer_outcome
from tests.memory.helpers import METRICS, librarian, result

TACTICS = ("perturb_constants", "change_loop_bounds", "change_operators", "crossover")
WORDS = ("radius", "spacing", "offset", "grid", "angle", "ring", "jitter", "margin", "scale")


def synthetic_card(i: int, rng: np.random.Generator, *, task: str = "toy") -> Card:
    """A plausible insight card of ``task`` (distinct text per index)."""
    tactic = TACTICS[i % len(TACTICS)]
    words = " ".join(rng.choice(WORDS, size=4))
    evidence = Evidence(task, "bench", i, f"p{i}", f"c{i}", 5.0, 5.1, 0.01, "improved", "x", 0.0)
    return Card(
        id=f"ins-bench{i:07d}",
        kind="insight",
        revision=1,
        task_key=task,
        task_context="Maximise the score of the toy task.",
        description=f"When the {words} literals in `g{i}` set the result, try a small change "
        f"(tactic: {tactic}) because the {words} trade-off shifts.",
        explanation_summary=f"Hypothesis {i}: the {words} balance moves the score.",
        provenance=(f"p{i}", f"c{i}"),
        evidence=(evidence,),
        n_evidence=1,
        derived_from=(),
        aliases=(),
        representatives=(),
        use_trials=(),
        author_model="bench",
        created_by="bench",
        created_at=float(i),
        updated_at=float(i),
    )


def build_bank(bank: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    cards = [synthetic_card(i, rng) for i in range(n)]
    store = LocalMemoryStore(bank, embedder=HashingEmbedder()).open()
    store.transaction(lambda working: working.update({c.id: c for c in cards}))


def bench_refresh(bank: Path, repeats: int) -> dict[str, float]:
    started = time.perf_counter()
    reader = LocalMemoryStore(bank, embedder=HashingEmbedder()).open()
    opened = time.perf_counter() - started
    writer = LocalMemoryStore(bank, embedder=HashingEmbedder()).open()
    unchanged, foreign = [], []
    template = next(iter(reader.cards()))
    for r in range(repeats):
        t0 = time.perf_counter()
        reader.refresh()
        unchanged.append(time.perf_counter() - t0)
        card = replace(template, id=f"ins-foreign{r:04d}", description=f"Foreign card {r}.")
        writer.transaction(lambda working, c=card: working.__setitem__(c.id, c))
        t0 = time.perf_counter()
        assert reader.refresh()
        foreign.append(time.perf_counter() - t0)
        assert card.id in reader
    return {
        "open_s": opened,
        "refresh_unchanged_s": statistics.median(unchanged),
        "refresh_foreign_s": statistics.median(foreign),
    }


def bench_ingest(bank: Path, ledger: Path, n: int) -> dict[str, float]:
    lib = librarian(bank, ledger)
    times = []
    for a in range(n):
        outcome = writer_outcome(
            result(a, tactic=TACTICS[a % len(TACTICS)], scope=f"f{a % 10}"), METRICS
        )
        t0 = time.perf_counter()
        lib.submit(outcome)
        lib.drain()
        times.append(time.perf_counter() - t0)
    counts = lib.ledger.outcome_counts("insight")
    return {
        "ingest_median_s": statistics.median(times),
        "ingest_p90_s": float(np.quantile(times, 0.9)),
        "ingest_mean_s": statistics.fmean(times),
        "added": counts["added"],
        "updated": counts["updated"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--outcomes", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    print(
        f"{'cards':>7} {'open':>9} {'refresh=':>9} {'refresh+1':>10} "
        f"{'ingest med':>11} {'p90':>9} {'mean':>9}  added/updated"
    )
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            bank = Path(tmp) / "bank"
            build_bank(bank, n)
            size_mb = (bank / "cards.json").stat().st_size / 1e6
            refresh = bench_refresh(bank, args.repeats)
            ingest = bench_ingest(bank, Path(tmp) / "ledger.jsonl", args.outcomes)
        print(
            f"{n:>7} {refresh['open_s'] * 1e3:>7.1f}ms "
            f"{refresh['refresh_unchanged_s'] * 1e6:>7.1f}us "
            f"{refresh['refresh_foreign_s'] * 1e3:>8.1f}ms "
            f"{ingest['ingest_median_s'] * 1e3:>9.1f}ms {ingest['ingest_p90_s'] * 1e3:>7.1f}ms "
            f"{ingest['ingest_mean_s'] * 1e3:>7.1f}ms  {ingest['added']}/{ingest['updated']}"
            f"   (cards.json {size_mb:.1f} MB)"
        )


if __name__ == "__main__":
    main()
