"""Two processes deciding at once over one ``memory_bank_dir``, each with its own checkpoint.

The selection leases in the shared ``selection_leases.json`` cap pending outcomes at 2
per card lineage across both processes; the file always parses; each run's causal
ledger holds only its own rows, one terminal per decision, and verifies.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gigaevo.llm.offline_memory import OfflineMemoryLLM
from gigaevo.memory.base import MutationContext
from gigaevo.memory.v2 import CardBankMemory, HashingEmbedder
from gigaevo.memory.v2.evidence import SelectionEvidence
from gigaevo.memory.v2.read.leases import (
    LEASE_FILE,
    Lease,
    LeaseFile,
    SelectionLeases,
    lineage_closure,
)
from gigaevo.memory.v2.records import from_json
from tests.conftest import ROOT
from tests.memory.helpers import open_store, result, runtime, toy_card

N_ATTEMPTS = 30
IN_FLIGHT = 3  # outstanding attempts per process: 6 across both, against a cap of 2 per card

WORKER = """
import json, sys, time
from pathlib import Path
from gigaevo.memory.base import MutationContext
from gigaevo.memory.v2 import CardBankMemory, HashingEmbedder
from tests.memory.helpers import result, runtime

home, bank, n, window = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
mem = CardBankMemory(
    runtime(home, bank=bank), llm=None, embedder=HashingEmbedder(),
    write={"cadence": "none"}, selection="causal",
)
(home / "ready").touch()  # start together: wait for the parent's go (both are ready)
while not (bank / "go").exists():
    time.sleep(0.005)
proposals = 0
for a in range(n + window):
    if a < n:
        c = 0.1 + 0.8 * ((a * 37) % 100) / 100
        d = mem.decide(MutationContext("toy", a, f"parent-{a}", 5.0, 0, (0,), (c,), 0.0))
        proposals += bool(d.record["proposed_id"])
    if a >= window:  # the attempt decided `window` steps ago resolves now
        b = a - window
        mem.observe(result(b, scope="f0", gain=0.01 * ((b * 7) % 5 - 2), child_id=f"c-{b}"))
mem.close()
print(json.dumps({"proposals": proposals, **mem.stats()["decide"]}), flush=True)
"""


def _seed_bank(tmp_path: Path, bank: Path) -> set[str]:
    """A few cards authored by an earlier run into the shared bank."""
    mem = CardBankMemory(
        runtime(tmp_path / "seed", bank=bank),
        llm=OfflineMemoryLLM(seed=0),
        embedder=HashingEmbedder(),
        write={"cadence": "live"},
    )
    for a, scope in enumerate(("f0", "f1", "f2", "f3", "f4", "f5")):
        mem.observe(result(a, scope=scope, gain=0.01 * (a + 1)))
    mem.close()
    return {c.id for c in mem.store.cards(task_key="toy")}


def _per_lineage(leases: tuple[Lease, ...]) -> int:
    """The largest number of live leases touching one card lineage."""
    return max(
        (
            sum(1 for held in leases if held.touches(lineage_closure({x.card_id}, leases)))
            for x in leases
        ),
        default=0,
    )


def _read_leases(path: Path) -> tuple[Lease, ...]:
    if not path.exists():
        return ()
    text = path.read_text(encoding="utf-8")  # written atomically: always a whole file
    parsed = from_json(LeaseFile, json.loads(text), LEASE_FILE)
    return parsed.leases


@pytest.mark.slow
def test_two_processes_share_leases_and_keep_separate_ledgers(tmp_path: Path) -> None:
    bank = tmp_path / "bank"
    cards = _seed_bank(tmp_path, bank)
    assert len(cards) >= 2, cards
    homes = [tmp_path / "a", tmp_path / "b"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(h), str(bank), str(N_ATTEMPTS), str(IN_FLIGHT)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for h in homes
    ]
    lease_path = bank / LEASE_FILE
    deadline = time.monotonic() + 240
    while not all((h / "ready").exists() for h in homes) and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), "a worker died before deciding"
        time.sleep(0.01)
    (bank / "go").touch()
    snapshots, peak, both_runs = 0, 0, False
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        leases = _read_leases(lease_path)
        snapshots += 1
        peak = max(peak, _per_lineage(leases))
        both_runs |= len({lease.run_id for lease in leases}) == 2
        time.sleep(0.01)
    outs: list[dict[str, Any]] = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))

    assert snapshots > 10 and 1 <= peak <= 2, (snapshots, peak)
    assert both_runs, "the two processes never held leases at the same time"
    assert _read_leases(lease_path) == ()  # all released
    for o in outs:
        assert o["decisions"] == N_ATTEMPTS and o["proposals"] >= 5, o
        assert o["leases_held"] == 0
        # every proposal was leased: a refused lease would be a third pending outcome
        assert o["lease_errors"] == 0, o

    run_ids = []
    for h in homes:
        with SelectionEvidence(h / "run").open(censor_orphans=False) as ev:
            ev.verify()
            decisions, terminals = ev.decisions(), ev.terminals()
            assert sorted(d.attempt for d in decisions) == list(range(N_ATTEMPTS))
            assert len({t.decision_id for t in terminals}) == len(terminals) == N_ATTEMPTS
            assert {t.decision_id for t in terminals} == {d.decision_id for d in decisions}
            assert {t.status for t in terminals} == {"valid"}
            ids = {d.run_id for d in decisions}
            assert len(ids) == 1
            run_ids.append(ids.pop())
            assert {e.run_id for e in ev.edges()} == {run_ids[-1]}
            assert all(d.proposed_id in cards for d in decisions if d.proposed_id)
    assert run_ids[0] != run_ids[1]
    assert not (bank / "memory_v2_selection_evidence.sqlite3").exists()


def test_a_lease_slot_taken_between_draft_and_commit_forces_a_redraft(tmp_path: Path) -> None:
    """Deterministic form of the race: another process fills the card's lineage meanwhile."""
    bank = tmp_path / "bank"
    _seed_bank(tmp_path, bank)
    mem = _reading(tmp_path / "a", bank)
    reader = mem.reader
    assert reader is not None
    other = SelectionLeases(bank, run_id="run-other")
    attempt, first = next(
        (a, row) for a in range(200) if (row := reader.draft(_context(a))).proposed_id is not None
    )
    snap = first.snapshot(first.proposed_id or "")
    assert snap is not None
    acquire = reader.leases.acquire

    def racing_acquire(card_id: str, lineage_ids: Any, at: int) -> Lease:
        if card_id == first.proposed_id and not other.active():  # the other process wins
            for k in range(2):
                other.acquire(card_id, snap.lineage_ids, 1000 + k)
        return acquire(card_id, lineage_ids, at)

    reader.leases.acquire = racing_acquire  # type: ignore[method-assign]
    decision = mem.decide(_context(attempt))
    row = reader.evidence.decision(str(decision.record["decision_id"]))
    assert row is not None and row.proposed_id != first.proposed_id
    assert reader.lease_redrafts == 1 and reader.lease_errors == 0
    pending = dict((p.card_id, p.count) for p in row.pending)
    assert pending[first.proposed_id or ""] == 2  # the redraft saw the cap
    for lease in other.active():
        other.release(lease.lease_id)
    mem.close()
    assert _read_leases(bank / LEASE_FILE) == ()


def _reading(home: Path, bank: Path) -> CardBankMemory:
    """A run's memory on ``bank`` that reads (causal selection) and writes no card."""
    return CardBankMemory(
        runtime(home, bank=bank),
        llm=None,
        embedder=HashingEmbedder(),
        write={"cadence": "none"},
        selection="causal",
    )


def _context(attempt: int) -> MutationContext:
    coordinate = 0.1 + 0.8 * ((attempt * 37) % 100) / 100
    return MutationContext("toy", attempt, f"parent-{attempt}", 5.0, 0, (0,), (coordinate,), 0.0)


def test_a_new_run_on_a_bank_of_many_cards_offers_them_before_its_first_row(
    tmp_path: Path,
) -> None:
    """30 cards shared by earlier runs: the new run's immediate head is wider than the dense
    path's 64 columns before it has a row of its own. Its prior fit must stand (it raised,
    and the run abstained on every decision: abstentions add no eligible row)."""
    bank = tmp_path / "bank"
    cards = [toy_card(f"card-{i:02d}", run_id="run-old") for i in range(30)]
    open_store(bank).transaction(lambda working: working.update({c.id: c for c in cards}))
    mem = _reading(tmp_path / "new", bank)
    try:
        proposed = [bool(mem.decide(_context(a)).record["proposed_id"]) for a in range(20)]
        stats = mem.stats()["decide"]
    finally:
        mem.close()
    assert any(proposed), stats
    assert stats["abstain"] < 20
