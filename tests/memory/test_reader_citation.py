"""memory-model.md "Ground-truth tests" (7) through the provider: uncited deliveries move neither V
nor the draws."""

from __future__ import annotations

import json
from pathlib import Path

from gigaevo.memory.base import MutationContext
from gigaevo.memory.v2 import CardBankMemory
from gigaevo.memory.v2.evidence import DecisionRow
from gigaevo.memory.v2.read.leases import LEASE_FILE
from gigaevo.memory.v2.read.outcomes import OPE_FILE
from gigaevo.memory.v2.read.reader import CausalReader
from tests.memory.helpers import memory_provider, result
from tests.memory.ledger_rows import commit_delivered


def provider(tmp_path: Path) -> CardBankMemory:
    return memory_provider(tmp_path, selection="causal")


def context(attempt: int, coordinate: float = 0.5) -> MutationContext:
    return MutationContext("toy", attempt, f"parent-{attempt}", 5.0, 0, (0,), (coordinate,), 0.0)


def _draws(row: DecisionRow) -> tuple[object, ...]:
    return (
        row.proposed_id,
        row.z,
        row.rho0,
        row.rho,
        row.joint,
        row.candidates,
        row.fit,
        row.fitted_row_ids,
        row.evidence_version,
    )


def _delivered_uncited(reader: CausalReader, attempt: int, gain: float) -> None:
    """Commit a delivered (Z = 1) decision whose child cites nothing, with its terminal."""
    commit_delivered(
        reader,
        range(attempt, attempt + 200),
        lambda a: context(a, 0.1 + 0.8 * ((a * 37) % 100) / 100),
        cite=False,
        gain=gain,
        child_prefix="uncited-",
    )


def test_uncited_deliveries_change_neither_v_nor_the_draws(tmp_path: Path) -> None:
    mem = provider(tmp_path)
    assert mem.reader is not None and mem.recorder is not None
    # a bank with cards, and some committed evidence
    for a, scope in enumerate(["f0", "f1", "f2", "f0", "f1", "f2"]):
        mem.decide(context(a))
        mem.observe(result(a, scope=scope, gain=0.01 * (a + 1)))
    reader = mem.reader
    assert mem.store.cards(task_key="toy")
    probe = context(1000, 0.3)
    before = reader.draft(probe)
    v_before = reader.evidence.evidence_version()
    ope_before = mem.recorder.ope_summary()
    # any number of delivered-but-uncited rows, with any outcome
    for i, gain in enumerate((0.5, -0.3, 0.0, 0.2)):
        _delivered_uncited(reader, 2000 + 300 * i, gain)
    after = reader.draft(probe)
    assert reader.evidence.evidence_version() == v_before
    assert _draws(after) == _draws(before)
    # ... but they are offer/uptake observations: the ITT sees them
    assert mem.recorder.ope_summary()["n"] == ope_before["n"] + 4
    mem.close()
    assert (tmp_path / "run" / OPE_FILE).exists()
    assert json.loads((tmp_path / "run" / LEASE_FILE).read_text())["leases"] == []


def test_decide_commits_before_returning_and_leases_the_proposal(tmp_path: Path) -> None:
    mem = provider(tmp_path)
    assert mem.reader is not None
    for a, scope in enumerate(["f0", "f1", "f2"]):
        mem.decide(context(a))
        mem.observe(result(a, scope=scope))
    held = 0
    for a in range(3, 40):
        decision = mem.decide(context(a, (a % 10) / 10))
        row = mem.reader.evidence.decision(str(decision.record["decision_id"]))
        assert row is not None and row.attempt == a
        if row.abstain:
            assert decision.slate == "" and decision.card_ids == ()
            continue
        held += 1
        assert a in mem.reader.held  # leased whether delivered or withheld
        if row.z == 1:
            assert decision.card_ids == (row.proposed_id,)
            assert decision.slate.startswith(f"[{row.proposed_id}]")
        else:
            assert decision.slate == "" and decision.card_ids == ()
        mem.observe(result(a, scope="f0"))
        assert a not in mem.reader.held
    assert held
    mem.close()
