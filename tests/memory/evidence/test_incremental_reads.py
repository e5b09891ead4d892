"""Steady-state reads are incremental, yet every row is hash-checked when first read."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from gigaevo.memory.v2.evidence import (
    EVIDENCE_FILE,
    LedgerIntegrityError,
    LineageRow,
    SelectionEvidence,
)
from gigaevo.memory.v2.evidence.bodies import body_text
from gigaevo.memory.v2.evidence.queries import head_rows
from tests.memory.evidence.factories import make_decision, make_terminal


def _add(ledger: SelectionEvidence, attempt: int, z: int | None, run: str = "run") -> None:
    d = make_decision(attempt, z=z, run_id=run)
    ledger.append_decision(d)
    ledger.append_terminal(make_terminal(d))


def _fresh_views(ledger: SelectionEvidence) -> tuple[object, ...]:
    """The views computed from scratch on a re-verified copy (no memo)."""
    other = SelectionEvidence(ledger.path.parent).open(censor_orphans=False)
    obs = other.observations()
    return (
        obs,
        head_rows(obs, "invalidity"),
        head_rows(obs, "immediate"),
        other.evidence_version(),
    )


def test_views_are_reused_until_a_terminal_or_lineage_row_lands(
    ledger: SelectionEvidence,
) -> None:
    for a in range(6):
        _add(ledger, a, z=a % 2)
    rows = ledger.head_rows("invalidity")
    version = ledger.evidence_version()
    assert ledger.head_rows("invalidity") is rows  # nothing new: the same object
    # a decision without a terminal changes neither the rows nor V
    ledger.append_decision(make_decision(50, z=0))
    assert ledger.head_rows("invalidity") is rows and ledger.evidence_version() == version
    # a new eligible terminal (written by another session) moves both
    other = SelectionEvidence(ledger.path.parent).open(censor_orphans=False)
    _add(other, 60, z=0, run="other")
    assert len(ledger.head_rows("invalidity")) == len(rows) + 1
    assert ledger.evidence_version() != version
    version = ledger.evidence_version()
    # a lineage row moves V but not the head rows
    rows = ledger.head_rows("invalidity")
    other.append_lineage(LineageRow(rows[0].decision.decision_id, 1, "pending", 3, 32))
    assert ledger.evidence_version() != version
    assert ledger.head_rows("invalidity") is rows
    # and the memoised views equal a from-scratch computation
    fresh = _fresh_views(ledger)
    assert ledger.observations() == fresh[0]
    assert ledger.head_rows("invalidity") == fresh[1]
    assert ledger.head_rows("immediate") == fresh[2]
    assert ledger.evidence_version() == fresh[3]


def test_row_written_after_caching_is_verified_on_first_read(
    ledger: SelectionEvidence, tmp_path: Path
) -> None:
    _add(ledger, 0, z=0)
    ledger.evidence_version()  # everything so far is cached
    other = SelectionEvidence(tmp_path).open(censor_orphans=False)
    _add(other, 1, z=0, run="other")
    # corrupt the new terminal before this session has read it
    conn = sqlite3.connect(tmp_path / EVIDENCE_FILE, isolation_level=None)
    conn.execute("DROP TRIGGER terminals_no_UPDATE")
    seq, body = conn.execute("SELECT seq, body FROM terminals ORDER BY seq DESC LIMIT 1").fetchone()
    data = json.loads(body_text(body))
    data["created_at"] = 99.0
    conn.execute("UPDATE terminals SET body = ? WHERE seq = ?", (json.dumps(data), seq))
    conn.close()
    with pytest.raises(LedgerIntegrityError, match="hash mismatch"):
        ledger.evidence_version()
    with pytest.raises(LedgerIntegrityError):  # the instance stays stopped
        ledger.head_rows("invalidity")


def test_each_sync_feeds_only_the_new_rows_in_commit_order(tmp_path: Path) -> None:
    """The tally takes exactly the rows read since its last sync, oldest first, taken
    from the end of the read cache (O(new rows), issue 16), whatever the batch sizes."""
    with SelectionEvidence(tmp_path).open() as ledger:
        attempt = 0
        fed: list[str] = []
        for batch in (1, 0, 3, 1, 7, 2):
            for _ in range(batch):
                _add(ledger, attempt, z=attempt % 2 if attempt % 3 else None)
                attempt += 1
            new = ledger._new_rows("decisions")
            assert [row.attempt for row, _ in new] == list(range(len(fed), attempt))
            fed.extend(sha for _, sha in new)
            assert ledger._new_rows("decisions") == []
        assert fed == [sha for _, sha in ledger._rows("decisions").values()]


def test_latest_lineages_are_each_roots_latest_row_read_once(
    ledger: SelectionEvidence, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``latest_lineages`` (the lineage maturation's one read per observe) gives what
    ``latest_lineage`` gives root by root, rows of another session included, from one read."""
    for a in range(5):
        _add(ledger, a, z=a % 2)
    roots = [o.decision.decision_id for o in ledger.observations()]
    other = SelectionEvidence(ledger.path.parent).open(censor_orphans=False)
    ledger.append_lineage(LineageRow(roots[0], 1, "pending", 3, 32))
    other.append_lineage(LineageRow(roots[0], 2, "outcome", 3, 32, 40, residual=0.1))
    other.append_lineage(LineageRow(roots[2], 1, "pending", 3, 32))
    syncs = []
    real = SelectionEvidence._sync
    monkeypatch.setattr(SelectionEvidence, "_sync", lambda self: syncs.append(1) or real(self))
    got = ledger.latest_lineages([*roots, "no-such-root"])
    assert len(syncs) == 1
    assert got == {r: ledger.latest_lineage(r) for r in [*roots, "no-such-root"]}
    assert got[roots[0]] is not None and got[roots[0]].version == 2
    assert got[roots[2]] is not None and got[roots[1]] is None and got["no-such-root"] is None


def test_a_sync_with_nothing_committed_reads_no_table(ledger: SelectionEvidence) -> None:
    """The views sync from the tables only when a row may have been committed since the
    last sync (this connection's changes, or ``PRAGMA data_version`` for anyone else's):
    otherwise no table is read; a commit by this instance or another is still seen."""
    for a in range(3):
        _add(ledger, a, z=a % 2)
    assert len(ledger.observations_since(0)) == 3
    statements: list[str] = []
    conn = ledger._db()
    conn.set_trace_callback(statements.append)
    try:
        for _ in range(5):
            assert len(ledger.observations_since(0)) == 3
            assert ledger.edges_since(0) == [] and ledger.counts()["terminals"] == 3
        assert not [s for s in statements if s.lstrip().upper().startswith("SELECT")]
        _add(ledger, 3, z=0)  # this connection's commit
        assert len(ledger.observations_since(0)) == 4
        other = SelectionEvidence(ledger.path.parent).open(censor_orphans=False)
        _add(other, 4, z=1, run="other")  # another connection's
        assert len(ledger.observations_since(0)) == 5
        assert ledger.observations() == other.observations()
    finally:
        conn.set_trace_callback(None)


def test_a_decision_or_terminal_read_once_is_not_queried_again(
    ledger: SelectionEvidence,
) -> None:
    """Decisions and terminals are unique per decision id and immutable: once read (and
    hash-checked) they are answered from memory; an absent terminal is looked up again."""
    d = make_decision(0, z=1)
    ledger.append_decision(d)
    assert ledger.decision(d.decision_id) == d
    assert ledger.terminal(d.decision_id) is None
    statements: list[str] = []
    conn = ledger._db()
    conn.set_trace_callback(statements.append)
    try:
        assert ledger.decision(d.decision_id) == d
        assert not [s for s in statements if "FROM decisions" in s]
        t = make_terminal(d)
        ledger.append_terminal(t)
        assert ledger.terminal(d.decision_id) == t
        assert [s for s in statements if "FROM terminals" in s]
        statements.clear()
        assert ledger.terminal(d.decision_id) == t
        assert not [s for s in statements if "FROM terminals" in s]
    finally:
        conn.set_trace_callback(None)


def test_an_edge_read_once_is_not_queried_again(ledger: SelectionEvidence) -> None:
    from gigaevo.memory.v2.evidence import EdgeRow

    edge = ledger.record_edge(
        EdgeRow("child-1", "run", 0, "p0", "child-1", 0, 0, "valid", 0.1, "improved")
    )
    assert ledger.edge("child-2") is None
    assert ledger.edge("child-1") == edge
    statements: list[str] = []
    conn = ledger._db()
    conn.set_trace_callback(statements.append)
    try:
        assert ledger.edge("child-1") == edge
        assert ledger.edge("child-2") is None  # absent: looked up again
        assert len([s for s in statements if "FROM edges" in s]) == 1
    finally:
        conn.set_trace_callback(None)
