"""memory-model.md "Rows and eligibility", row by row, and the evidence version V."""

from __future__ import annotations

import dataclasses
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


def _twin(tmp_path: Path, name: str, *, owner: str, clock: float, **change: object) -> str:
    """V of a small ledger written by session ``owner`` at times around ``clock``."""
    led = SelectionEvidence(tmp_path / name, owner=owner).open()
    try:
        for attempt, (z, cited) in enumerate([(0, False), (1, True), (0, False)]):
            d = make_decision(attempt, z=z, owner=owner)
            d = dataclasses.replace(d, created_at=clock + attempt)
            if attempt == 1 and "digest" in change:  # the proposed card at another revision
                snap = dataclasses.replace(d.universe[0], text_digest=str(change["digest"]))
                d = dataclasses.replace(d, universe=(snap, *d.universe[1:]))
            led.append_decision(d)
            t = make_terminal(d, cited=("c1",) if cited else (), gain=0.1 + 0.01 * attempt)
            if attempt == 1:
                t = dataclasses.replace(
                    t, gain=change.get("gain", t.gain), se=change.get("se"), created_at=clock
                )
            led.append_terminal(dataclasses.replace(t, created_at=clock + 0.5 + attempt))
        root = make_decision(0, z=0).decision_id
        residual = float(change.get("residual", 0.02))  # type: ignore[arg-type]
        led.append_lineage(LineageRow(root, 1, "outcome", 3, 32, 40, residual=residual))
        return led.evidence_version()
    finally:
        led.close()


def test_v_is_the_rows_content_not_their_times_or_writing_session(tmp_path: Path) -> None:
    """The same evidence written by another session at another time has the same V
    (retirement draws are keyed by V, so a seeded run retires identically); any value a
    head or the sweep reads moves it."""
    base = _twin(tmp_path, "a", owner="host-a:11:aaaa", clock=1_000.0)
    assert _twin(tmp_path, "b", owner="host-b:22:bbbb", clock=9_999.0) == base
    moved = [
        _twin(tmp_path, "gain", owner="h:1:x", clock=0.0, gain=0.3),
        _twin(tmp_path, "se", owner="h:1:x", clock=0.0, se=0.01),
        _twin(tmp_path, "revision", owner="h:1:x", clock=0.0, digest="digest-c1-v2"),
        _twin(tmp_path, "lineage", owner="h:1:x", clock=0.0, residual=0.03),
    ]
    assert base not in moved and len(set(moved)) == len(moved)
