"""Rows are append-only and hash-checked: tampering stops the run loudly."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from gigaevo.memory.v2.evidence import (
    EdgeRow,
    LedgerIntegrityError,
    LineageRow,
    SelectionEvidence,
)
from gigaevo.memory.v2.evidence.rows import canonical_json, sha256_hex
from tests.memory.evidence.factories import make_decision, make_terminal, raw_ledger


def _fill(ledger: SelectionEvidence) -> None:
    d = make_decision(0, z=0)
    ledger.append_decision(d)
    ledger.append_terminal(make_terminal(d))
    ledger.append_lineage(LineageRow(d.decision_id, 1, "pending", 3, 32))
    ledger.record_edge(EdgeRow("kid", "run", 0, "p0", "kid", 0, 0, "valid", 0.1, "improved"))


def test_rows_round_trip_and_reopen(ledger: SelectionEvidence, tmp_path: Path) -> None:
    _fill(ledger)
    again = SelectionEvidence(tmp_path).open()
    assert again.decisions() == ledger.decisions()
    assert again.terminals() == ledger.terminals()
    assert again.lineage() == ledger.lineage()
    assert again.edges() == ledger.edges()
    assert again.verify() == 4
    assert again.evidence_version() == ledger.evidence_version()


@pytest.mark.parametrize("table", ["decisions", "terminals", "lineage", "edges"])
def test_update_and_delete_are_refused_by_the_database(
    ledger: SelectionEvidence, tmp_path: Path, table: str
) -> None:
    _fill(ledger)
    conn = raw_ledger(tmp_path)
    with pytest.raises(sqlite3.IntegrityError, match="immutable"):
        conn.execute(f"UPDATE {table} SET body = body")
    with pytest.raises(sqlite3.IntegrityError, match="immutable"):
        conn.execute(f"DELETE FROM {table}")


def _tamper(tmp_path: Path, table: str, edit: str, rehash: bool) -> None:
    conn = raw_ledger(tmp_path)
    conn.execute(f"DROP TRIGGER {table}_no_UPDATE")
    seq, body = conn.execute(f"SELECT seq, body FROM {table} ORDER BY seq LIMIT 1").fetchone()
    data = json.loads(body)
    if edit == "value":
        data["created_at"] = 123.0
    else:
        data["surprise"] = 1
    new = canonical_json(data)
    sha = sha256_hex(new) if rehash else None
    if sha is None:
        conn.execute(f"UPDATE {table} SET body = ? WHERE seq = ?", (new, seq))
    else:
        conn.execute(f"UPDATE {table} SET body = ?, sha256 = ? WHERE seq = ?", (new, sha, seq))
    conn.close()


@pytest.mark.parametrize("table", ["decisions", "terminals", "lineage", "edges"])
def test_tampered_row_raises_on_next_read(
    ledger: SelectionEvidence, tmp_path: Path, table: str
) -> None:
    _fill(ledger)
    _tamper(tmp_path, table, "value", rehash=False)
    with pytest.raises(LedgerIntegrityError, match="hash mismatch"):
        SelectionEvidence(tmp_path).open()
    with pytest.raises(LedgerIntegrityError):
        ledger.verify()
    with pytest.raises(LedgerIntegrityError):  # and the instance stays stopped
        ledger.append_decision(make_decision(5))


def test_extra_key_is_refused_even_with_a_matching_hash(tmp_path: Path) -> None:
    _fill(SelectionEvidence(tmp_path).open())
    _tamper(tmp_path, "decisions", "extra", rehash=True)
    with pytest.raises(LedgerIntegrityError, match="unknown key 'surprise'"):
        SelectionEvidence(tmp_path).open()


def test_key_column_must_agree_with_body(tmp_path: Path) -> None:
    _fill(SelectionEvidence(tmp_path).open())
    conn = raw_ledger(tmp_path)
    conn.execute("DROP TRIGGER decisions_no_UPDATE")
    conn.execute("UPDATE decisions SET attempt = 99")
    conn.close()
    with pytest.raises(LedgerIntegrityError, match="column attempt"):
        SelectionEvidence(tmp_path).open()


def test_lineage_versions_append_and_supersede(ledger: SelectionEvidence) -> None:
    d = make_decision(0, z=0)
    ledger.append_decision(d)
    ledger.append_terminal(make_terminal(d))
    ledger.append_lineage(LineageRow(d.decision_id, 1, "pending", 3, 32))
    ledger.append_lineage(
        LineageRow(d.decision_id, 2, "outcome", 3, 32, 40, "x", 2, 0.3, 0.2, d.decision_id)
    )
    assert [r.version for r in ledger.lineage(latest=False)] == [1, 2]
    (latest,) = ledger.lineage()
    assert latest.status == "outcome" and latest.residual == 0.2


@pytest.mark.parametrize("rehash", [False, True])
def test_a_row_this_session_wrote_is_checked_when_first_read(
    ledger: SelectionEvidence, tmp_path: Path, rehash: bool
) -> None:
    """The writer keeps its decoded decision, yet a body changed on disk still stops it."""
    ledger.append_decision(make_decision(0, z=0))
    _tamper(tmp_path, "decisions", "value" if not rehash else "extra", rehash=rehash)
    with pytest.raises(LedgerIntegrityError, match=r"hash mismatch|unknown key 'surprise'"):
        ledger.decisions()


def test_rows_kept_by_the_writer_equal_rows_read_back(
    ledger: SelectionEvidence, tmp_path: Path
) -> None:
    for a in range(3):
        ledger.append_decision(make_decision(a, z=a % 2))
    with SelectionEvidence(tmp_path).open(censor_orphans=False) as fresh:
        assert ledger.decisions() == fresh.decisions()
        assert [d.candidates for d in ledger.decisions()] == [
            d.candidates for d in fresh.decisions()
        ]
