"""memory-model.md "Rows and eligibility", row by row, and the evidence version V."""

from __future__ import annotations

from pathlib import Path

import pytest

from gigaevo.memory.v2.evidence import LineageRow, SelectionEvidence
from tests.memory.evidence.factories import make_decision, make_terminal

# (z, status, cited, immediate, invalidity, lineage-root, ope)
TABLE = [
    pytest.param(0, "valid", False, True, True, True, True, id="Z=0 valid"),
    pytest.param(0, "invalid", False, False, True, False, True, id="Z=0 invalid"),
    pytest.param(1, "valid", True, True, True, True, True, id="Z=1 U=1 valid"),
    pytest.param(1, "invalid", True, False, True, False, True, id="Z=1 U=1 invalid"),
    pytest.param(1, "valid", False, False, False, False, True, id="Z=1 U=0 valid"),
    pytest.param(1, "invalid", False, False, False, False, True, id="Z=1 U=0 invalid"),
    pytest.param(None, "valid", False, False, False, False, False, id="abstain"),
    pytest.param(0, "censored", False, False, False, False, False, id="Z=0 censored"),
    pytest.param(1, "censored", False, False, False, False, False, id="Z=1 censored"),
]


@pytest.mark.parametrize(
    ("z", "status", "cited", "immediate", "invalidity", "lineage", "ope"), TABLE
)
def test_row_trains_exactly_the_heads_of_the_table(
    ledger: SelectionEvidence,
    z: int | None,
    status: str,
    cited: bool,
    immediate: bool,
    invalidity: bool,
    lineage: bool,
    ope: bool,
) -> None:
    d = make_decision(0, z=z)
    ledger.append_decision(d)
    ledger.append_terminal(make_terminal(d, status, cited=("c1",) if cited else ()))
    if status == "valid":
        ledger.append_lineage(LineageRow(d.decision_id, 1, "outcome", 3, 32, 40, residual=0.0))
    assert bool(ledger.head_rows("immediate")) is immediate
    assert bool(ledger.head_rows("invalidity")) is invalidity
    assert bool(ledger.lineage_head_rows()) is lineage
    assert bool(ledger.ope_rows()) is ope


def test_pending_lineage_rows_do_not_train_the_delayed_head(ledger: SelectionEvidence) -> None:
    d = make_decision(0, z=0)
    ledger.append_decision(d)
    ledger.append_terminal(make_terminal(d))
    ledger.append_lineage(LineageRow(d.decision_id, 1, "pending", 3, 32))
    assert ledger.lineage_head_rows() == ()


def test_head_rows_refuses_lineage() -> None:
    from gigaevo.memory.v2.evidence import head_rows

    with pytest.raises(ValueError, match="lineage"):
        head_rows((), "lineage")


def _add(ledger: SelectionEvidence, attempt: int, z: int | None, cited: bool, status: str) -> None:
    d = make_decision(attempt, z=z)
    ledger.append_decision(d)
    ledger.append_terminal(make_terminal(d, status, cited=("c1",) if cited else ()))


def test_v_ignores_uncited_abstained_and_censored_rows(ledger: SelectionEvidence) -> None:
    _add(ledger, 0, 0, False, "valid")
    before = ledger.evidence_version()
    _add(ledger, 1, 1, False, "valid")  # delivered but uncited
    _add(ledger, 2, 1, False, "invalid")
    _add(ledger, 3, None, False, "valid")  # abstention
    _add(ledger, 4, 0, False, "censored")
    ledger.append_decision(make_decision(5, z=0))  # pending: no terminal yet
    assert ledger.evidence_version() == before


def test_v_moves_with_a_cited_delivery_a_control_and_a_lineage_row(
    ledger: SelectionEvidence,
) -> None:
    _add(ledger, 0, 0, False, "valid")
    v0 = ledger.evidence_version()
    _add(ledger, 1, 1, True, "valid")
    v1 = ledger.evidence_version()
    assert v1 != v0
    _add(ledger, 2, 0, False, "invalid")
    v2 = ledger.evidence_version()
    assert v2 != v1
    root = make_decision(0, z=0).decision_id
    ledger.append_lineage(LineageRow(root, 1, "pending", 3, 32))
    v3 = ledger.evidence_version()
    assert v3 != v2
    ledger.append_lineage(LineageRow(root, 2, "outcome", 3, 32, 40, residual=0.1))
    assert ledger.evidence_version() not in (v0, v1, v2, v3)


def test_v_is_the_same_for_the_same_rows_in_another_ledger(tmp_path: Path) -> None:
    versions = []
    for name, order in (("a", [0, 1]), ("b", [1, 0])):
        led = SelectionEvidence(tmp_path / name).open()
        decisions = [make_decision(0, z=0, owner="h:1:n"), make_decision(1, z=0, owner="h:1:n")]
        for i in order:
            led.append_decision(decisions[i])
        for i in order:
            led.append_terminal(make_terminal(decisions[i]))
        versions.append(led.evidence_version())
    assert versions[0] == versions[1]


def test_pending_counts_follow_card_lineage(ledger: SelectionEvidence) -> None:
    ledger.append_decision(make_decision(0, proposed="c1"))
    ledger.append_decision(make_decision(1, z=0, proposed="c1"))
    done = make_decision(2, proposed="c1")
    ledger.append_decision(done)
    ledger.append_terminal(make_terminal(done))
    ledger.append_decision(make_decision(3, proposed="c2"))
    ledger.append_decision(make_decision(4, z=None))
    assert ledger.pending_by_proposal() == {"c1": 2, "c2": 1}  # a lineage sums its ids
