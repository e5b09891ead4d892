"""Decisions over a bank of 10,000 cards pinned to what the reader decided before its per-card
loops became columns (issue 16, session 7): the same proposed card, arm, propensities and
candidate table, bit for bit, on fixed seeds, with leases held (pending counts), an excluded
card (the lineage excluder) and two refits between decisions."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import numpy as np

from gigaevo.memory.base import MemoryRuntime, MutationContext
from gigaevo.memory.v2 import HashingEmbedder, LocalMemoryStore
from gigaevo.memory.v2.bank.cards import Card
from gigaevo.memory.v2.evidence import DecisionRow, decision_key_id
from gigaevo.memory.v2.read.reader import CausalReader
from tests.memory.helpers import METRICS, toy_card
from tests.memory.ledger_rows import decision, edge, fast_dir, observe

N_CARDS = 10_000
CITED = 40  # cards with rows in the heads; the other 9,960 keep their prior


def _card(i: int) -> Card:
    return toy_card(f"card-{i:05d}")


def _context(attempt: int, rng: np.random.Generator, parent: str = "") -> MutationContext:
    coord = float(rng.uniform(0.0, 1.0))
    parent_id = parent or f"parent-{attempt}"
    return MutationContext("toy", attempt, parent_id, float(rng.uniform(3.0, 8.0)), 0,
                           (int(coord * 10),), (coord,), 0.0)  # fmt: skip


def _history(reader: CausalReader, rng: np.random.Generator) -> None:
    """300 randomised rows on the first ``CITED`` cards (gains of a few cards shifted, ~10 %
    invalid); no lineage rows (a lineage head's fit over 10,000 blocks would double the
    test's time; the latency benchmark's replay covers it)."""
    for a in range(300):
        card = f"card-{int(rng.integers(CITED)):05d}"
        z = int(rng.random() < 0.7)
        x = (1.0, float(rng.uniform(0, 1)), float(rng.uniform(0, 1)), float(rng.uniform(0, 1)))
        row = decision(reader, 100_000 + a, x, proposed=card, z=z, parent_id=f"hist-{a}")
        invalid = rng.random() < 0.1
        shift = 0.05 * (int(card[-2:]) % 5 - 2) if z else 0.0
        gain = float(rng.normal(0.01 + shift, 0.03))
        cited = bool(z and rng.random() < 0.5)
        observe(reader, row, gain=gain, cited=cited, status="invalid" if invalid else "valid")


def _digest(row: DecisionRow) -> str:
    h = hashlib.sha256()
    table = row.candidates
    for c in table:
        h.update(c.card_id.encode())
        h.update(struct.pack("<d?", c.rho, c.safe))
    h.update(repr([(p.card_id, p.count) for p in row.pending]).encode())
    h.update(repr(row.excluded_ids).encode())
    return h.hexdigest()[:16]


def _decisions(root: Path) -> list[tuple[object, ...]]:
    store = LocalMemoryStore(root / "bank", embedder=HashingEmbedder()).open()
    cards = [_card(i) for i in range(N_CARDS)]
    store.transaction(lambda working: working.update({c.id: c for c in cards}))
    runtime = MemoryRuntime(
        task_key="toy", task_description="Maximise the score of the toy task.", metrics=METRICS,
        checkpoint_dir=root / "ckpt", bank_dir=root / "bank", seed=0, max_mutants=100_000,
    )  # fmt: skip
    reader = CausalReader(runtime, store, run_id="pinned")
    rng = np.random.default_rng(16)
    _history(reader, rng)
    # the parent of attempt 6 descends from a child whose terminal cites card-00007
    cited = decision(reader, 200_000, (1.0, 0.5, 0.5, 0.5), proposed="card-00007", z=1)
    observe(reader, cited, gain=0.01, cited=True, child_id="cited-child")
    edge(reader, "hist-0", "cited-child", cited)
    out: list[tuple[object, ...]] = []
    for a in range(8):
        ctx = _context(a, rng, parent="cited-child" if a == 6 else "")
        reader.decide(ctx)
        row = reader.evidence.decision(decision_key_id("pinned", a))
        assert row is not None
        out.append((row.proposed_id, row.z, row.rho, row.rho0, len(row.candidates), _digest(row)))
        if a % 3 != 2:  # leases of attempts 2 and 5 stay held: pending counts
            reader.release(a)
        if a in (1, 4):  # a new row: the next decision refits
            x = (1.0, float(rng.uniform(0, 1)), 0.5, 0.5)
            extra = decision(reader, 300_000 + a, x, proposed="card-00003", z=0)
            observe(reader, extra, gain=float(rng.normal(0.0, 0.03)), cited=False)
    reader.release_all()
    return out


# decided by the per-card path (main at the start of session 7, 216fca1)
PINNED: list[tuple[object, ...]] = [  # (proposed, Z, rho, rho_0, candidates, digest)
    ("card-02920", 0, 0.0018602252187975646, 0.0, 10000, "4ebe0800d5f04d0c"),
    ("card-02750", 1, 0.0018602252187975646, 0.0, 10000, "0347b5bb57b65593"),
    ("card-06315", 1, 0.0018602252187975646, 0.0, 10000, "68432711c5eb0124"),
    ("card-06909", 0, 0.0018602254838689296, 0.0, 10000, "3983e5929f205328"),
    ("card-04529", 0, 0.001860225351329554, 0.0, 10000, "6eb2202b1aa50a48"),
    ("card-04357", 1, 0.001860225351329554, 0.0, 10000, "abf7d941de3a4121"),
    ("card-03009", 1, 0.001860225936442327, 0.0, 9999, "c4d45e68153303fa"),
    ("card-06638", 0, 0.0018602254838689296, 0.0, 10000, "6f9385ad1fda2982"),
]


def test_decisions_over_10000_cards_are_those_of_the_per_card_path(tmp_path: Path) -> None:
    with fast_dir(tmp_path) as root:
        got = _decisions(root)
    assert any(row[0] is not None for row in got)  # the decisions propose cards
    assert got == PINNED
