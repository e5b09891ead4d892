"""Program exemplars: new-best trigger, best representative per task, bounded families."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gigaevo.memory.base import MutationResult
from gigaevo.memory.v2 import Representative, read_ledger, writer_outcome
from gigaevo.memory.v2.write.edits import admit, pool
from tests.memory.helpers import METRICS, librarian, result
from tests.memory.test_card_model import card, evidence


def program_rows(ledger: Path) -> list:
    return [r for r in read_ledger(ledger) if r.item == "program"]


def grown(r: MutationResult, extra: str) -> MutationResult:
    """``r`` whose child has one more statement (another strategy family)."""
    return replace(
        r, child_code=r.child_code.replace("# EVOLVE-BLOCK-END", f"{extra}\n# EVOLVE-BLOCK-END")
    )


def test_only_a_new_best_accepted_child_triggers_an_exemplar(bank: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "write_ledger.jsonl"
    lib = librarian(bank, ledger)
    for r in [
        result(0, gain=0.05),  # new best: 5.5
        result(1, gain=0.01),  # 5.1 < 5.5
        result(2, gain=0.02, archive_status="rejected", status="rejected", parent_fitness=6.0),
        result(3, gain=0.15, parent_fitness=5.0),  # 6.5: new best
    ]:
        lib.submit(writer_outcome(r, METRICS))
        lib.drain()
    rows = program_rows(ledger)
    assert [r.attempt for r in rows] == [0, 3]
    assert [r.outcome for r in rows] == ["added", "updated"]
    assert rows[1].reason == "representative_replaced"
    (family,) = lib.store.cards(kind="program")
    rep = family.representative("toy")
    assert rep is not None and rep.program_id == "child-3" and rep.fitness == 6.5
    assert rep.code is None  # store_code=false keeps no source
    assert family.n_evidence == 2 and "strategy family `" in family.description


def test_store_code_keeps_the_representative_source(bank: Path, tmp_path: Path) -> None:
    lib = librarian(bank, tmp_path / "l.jsonl", exemplars={"store_code": True})
    r = result(0)
    lib.submit(writer_outcome(r, METRICS))
    lib.drain()
    (family,) = lib.store.cards(kind="program")
    assert family.representatives[0].code == r.child_code


def test_a_full_task_budget_evicts_the_weakest_family_only_for_a_better_one(
    bank: Path, tmp_path: Path
) -> None:
    ledger = tmp_path / "write_ledger.jsonl"
    lib = librarian(bank, ledger, exemplars={"max_per_task": 1})
    steps = [
        result(0, gain=0.05),
        grown(result(1, gain=0.1), "y = 2"),
    ]
    for r in steps:
        lib.submit(writer_outcome(r, METRICS))
        lib.drain()
    rows = program_rows(ledger)
    assert [r.outcome for r in rows] == ["added", "added"]
    (evicted,) = [r for r in read_ledger(ledger) if r.item == "card"]
    assert evicted.outcome == "evicted" and evicted.card_id == rows[0].card_id
    assert [c.id for c in lib.store.cards(kind="program")] == [rows[1].card_id]


def test_admit_refuses_a_weaker_family_when_the_budget_is_full() -> None:
    strong = Representative("toy", "r", "a", 9.0, True)
    weak = Representative("toy", "r", "b", 1.0, True)
    cards = {"prg-a": card("program", id="prg-a", representatives=(strong,))}
    newcomer = card("program", id="prg-b", representatives=(weak,))
    edit = admit(cards, newcomer, max_cards=1, rep=weak)
    assert edit.outcome == "rejected_capacity" and list(cards) == ["prg-a"]
    insight_cap = admit({"ins-a": card(id="ins-a")}, card(id="ins-b"), max_cards=1, rep=None)
    assert insight_cap.outcome == "rejected_capacity"


def test_pool_compares_fitness_only_within_one_task() -> None:
    toy = Representative("toy", "r", "a", 9.0, True)
    cards = {"prg-a": card("program", id="prg-a", representatives=(toy,))}
    worse = Representative("toy", "r", "b", 1.0, True)
    edit = pool(cards, "prg-a", evidence(1), ("p1", "c1"), rep=worse, now=2.0)
    assert edit is not None and edit.reason == "evidence_pooled"
    assert cards["prg-a"].representative("toy") == toy
    other = Representative("other", "r", "c", 0.5, False)
    edit = pool(cards, "prg-a", evidence(2, "other"), ("p2", "c2"), rep=other, now=3.0)
    assert edit is not None and edit.reason == "representative_added"
    assert cards["prg-a"].representative("toy") == toy
    assert cards["prg-a"].representative("other") == other
    assert pool(cards, "prg-gone", evidence(3), (), rep=None, now=4.0) is None


def test_multitask_scope_pools_equivalent_families_across_tasks(bank: Path, tmp_path: Path) -> None:
    a = librarian(
        bank, tmp_path / "a.jsonl", task="alpha", run_id="run-a", writer={"scope": "bank"}
    )
    b = librarian(bank, tmp_path / "b.jsonl", task="beta", run_id="run-b", writer={"scope": "bank"})
    a.submit(writer_outcome(result(0, gain=0.05), METRICS))
    a.drain()
    b.submit(writer_outcome(result(0, gain=0.01, parent_fitness=1.0), METRICS))
    b.drain()
    (family,) = b.store.cards(kind="program")
    assert family.task_key == "alpha"
    assert {r.task_key for r in family.representatives} == {"alpha", "beta"}
    (row,) = program_rows(tmp_path / "b.jsonl")
    assert row.outcome == "updated" and row.reason == "representative_added"
    insights = b.store.cards(kind="insight")
    assert len(insights) == 1 and {e.task_key for e in insights[0].evidence} == {"alpha", "beta"}
