"""The residual-duplicate audit finds what online dedup missed, and only that."""

from __future__ import annotations

from pathlib import Path

from gigaevo.memory.v2 import audit_duplicates, writer_outcome
from tests.memory.fakes import ScriptedMemoryLLM
from tests.memory.helpers import METRICS, librarian, result
from tests.memory.test_offline_memory_llm import judge


def _fill(bank: Path, tmp_path: Path, llm: object | None) -> None:
    lib = librarian(bank, tmp_path / "l.jsonl", llm=llm, exemplars={"enabled": False})
    for i in range(9):  # three treatments, three outcomes each
        lib.submit(writer_outcome(result(i, scope=f"f{i % 3}"), METRICS))
        lib.drain()


def test_no_residue_when_the_judge_worked(bank: Path, tmp_path: Path) -> None:
    _fill(bank, tmp_path, None)
    lib = librarian(bank, tmp_path / "x.jsonl")
    audit = audit_duplicates(lib.store, judge(), task_key="toy", k=5, max_cards=100, seed=0)
    assert (audit.n_cards, audit.n_redundant, audit.residual_duplicate_rate) == (3, 0, 0.0)


def test_fail_open_duplicates_are_found_and_counted(bank: Path, tmp_path: Path) -> None:
    _fill(bank, tmp_path, ScriptedMemoryLLM({"equivalence_judge": "garbage"}))
    lib = librarian(bank, tmp_path / "x.jsonl")
    assert len(lib.store) == 9  # every judge call failed open to NEW
    audit = audit_duplicates(lib.store, judge(), task_key="toy", k=5, max_cards=100, seed=0)
    assert audit.n_redundant == 6 and audit.residual_duplicate_rate == 6 / 9
    assert audit.judge_failures == 0 and len(audit.pairs) >= 6
