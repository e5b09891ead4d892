"""One mutation attempt owns exactly one decision and one terminal; terminals match decisions."""

from __future__ import annotations

import dataclasses

import pytest

from gigaevo.memory.v2.evidence import (
    DuplicateRowError,
    EdgeRow,
    LineageRow,
    RowRejectedError,
    SelectionEvidence,
)
from tests.memory.evidence.factories import make_decision, make_terminal


def test_second_decision_for_an_attempt_is_refused(ledger: SelectionEvidence) -> None:
    ledger.append_decision(make_decision(0))
    with pytest.raises(DuplicateRowError, match="attempt 0"):
        ledger.append_decision(make_decision(0, z=0))
    assert len(ledger.decisions()) == 1


def test_second_terminal_is_refused(ledger: SelectionEvidence) -> None:
    d = make_decision(0)
    ledger.append_decision(d)
    ledger.append_terminal(make_terminal(d))
    with pytest.raises(DuplicateRowError, match="already has a terminal"):
        ledger.append_terminal(make_terminal(d, "invalid"))
    assert [t.status for t in ledger.terminals()] == ["valid"]


def test_decision_id_must_be_the_key_digest(ledger: SelectionEvidence) -> None:
    with pytest.raises(RowRejectedError, match="digest"):
        ledger.append_decision(dataclasses.replace(make_decision(0), decision_id="d-forged"))


def test_terminal_for_unknown_decision_is_refused(ledger: SelectionEvidence) -> None:
    with pytest.raises(RowRejectedError, match="unknown decision"):
        ledger.append_terminal(make_terminal(make_decision(3)))


@pytest.mark.parametrize(
    ("z", "cited", "match"),
    [
        (0, ("c1",), "nothing was shown"),
        (None, ("c1",), "nothing was shown"),
        (1, ("c2",), "is not"),
        (1, ("c1", "c2"), "is not"),
    ],
)
def test_cited_set_must_be_within_the_proposed_id_and_only_if_shown(
    ledger: SelectionEvidence, z: int | None, cited: tuple[str, ...], match: str
) -> None:
    d = make_decision(0, z=z)
    ledger.append_decision(d)
    with pytest.raises(RowRejectedError, match=match):
        ledger.append_terminal(make_terminal(d, cited=cited))
    assert ledger.terminal(d.decision_id) is None


def test_gain_outside_feasible_interval_is_rejected(ledger: SelectionEvidence) -> None:
    d = make_decision(0, parent_fitness=0.5)  # bounds [0, 1]: g in [-0.5, 0.5]
    ledger.append_decision(d)
    with pytest.raises(RowRejectedError, match="outside the feasible"):
        ledger.append_terminal(make_terminal(d, gain=0.6))
    ledger.append_terminal(make_terminal(d, gain=0.5 + 1e-12))


def test_terminal_must_match_base_and_metric(ledger: SelectionEvidence) -> None:
    d = make_decision(0)
    ledger.append_decision(d)
    with pytest.raises(RowRejectedError, match="base id"):
        ledger.append_terminal(dataclasses.replace(make_terminal(d), base_id="other"))
    with pytest.raises(RowRejectedError, match="metric"):
        ledger.append_terminal(dataclasses.replace(make_terminal(d), direction="lower"))


def test_row_invariants() -> None:
    d = make_decision(0)
    with pytest.raises(ValueError, match="gain"):
        dataclasses.replace(make_terminal(d), status="invalid")
    with pytest.raises(ValueError, match="joint"):
        dataclasses.replace(d, joint=0.99)
    with pytest.raises(ValueError, match="universe"):
        dataclasses.replace(d, proposed_id="ghost")
    with pytest.raises(ValueError, match="no treatment"):
        dataclasses.replace(make_decision(1, z=None), z=1)
    with pytest.raises(ValueError, match="not 1"):
        dataclasses.replace(d, rho0=0.5)
    with pytest.raises(ValueError, match="candidate's rho"):
        dataclasses.replace(d, rho=0.4, joint=0.4 * 0.7)


def test_lineage_version_out_of_sequence_is_refused(ledger: SelectionEvidence) -> None:
    d = make_decision(0)
    ledger.append_decision(d)
    with pytest.raises(RowRejectedError, match="expected 1"):
        ledger.append_lineage(LineageRow(d.decision_id, 2, "pending", 3, 32))
    with pytest.raises(RowRejectedError, match="unknown root"):
        ledger.append_lineage(LineageRow("d-none", 1, "pending", 3, 32))


def test_edges_get_per_island_ordinals_and_are_unique(ledger: SelectionEvidence) -> None:
    def edge(child: str, island: int) -> EdgeRow:
        return EdgeRow(child, "run", 0, "p", child, island, 0, "valid", 0.1, "improved")

    assert ledger.record_edge(edge("a", 0)).ordinal == 1
    assert ledger.record_edge(edge("b", 1)).ordinal == 1
    assert ledger.record_edge(edge("c", 0)).ordinal == 2
    with pytest.raises(DuplicateRowError):
        ledger.record_edge(edge("a", 0))
    assert [e.edge_id for e in ledger.edges(island=0)] == ["a", "c"]
