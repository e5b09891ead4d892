"""Schema version 4: row bodies stored compressed against a fixed dictionary
(``evidence.bodies``), hashed and read back as their exact canonical JSON text."""

from __future__ import annotations

import hashlib
import sqlite3
import warnings
from pathlib import Path

import pytest

from gigaevo.analysis.evidence import load_evidence
from gigaevo.memory.v2.evidence import (
    EVIDENCE_FILE,
    EdgeRow,
    LedgerIntegrityError,
    LineageRow,
    SelectionEvidence,
)
from gigaevo.memory.v2.evidence.bodies import DICTIONARY_V1, body_text, pack_body
from gigaevo.memory.v2.evidence.rows import canonical_json, sha256_hex
from gigaevo.memory.v2.records import to_json
from tests.memory.evidence.factories import (
    card,
    decision_over,
    make_decision,
    make_terminal,
    write_v1_ledger,
)

TABLES = ("decisions", "terminals", "edges", "lineage")


def _fill(ledger: SelectionEvidence, attempt: int = 0) -> None:
    d = make_decision(attempt, z=0)
    ledger.append_decision(d)
    ledger.append_terminal(make_terminal(d))
    ledger.append_lineage(LineageRow(d.decision_id, 1, "pending", 3, 32))
    kid = f"kid{attempt}"
    ledger.record_edge(EdgeRow(kid, "run", attempt, "p0", kid, 0, 0, "valid", 0.1, "improved"))


def _stored(path: Path, table: str) -> list[tuple[object, str]]:
    conn = sqlite3.connect(path / EVIDENCE_FILE)  # plain: bodies as stored
    try:
        return list(conn.execute(f"SELECT body, sha256 FROM {table} ORDER BY rowid"))
    finally:
        conn.close()


def test_dictionary_is_pinned() -> None:
    """Rows compressed against it decode only with these exact bytes."""
    digest = hashlib.sha256(DICTIONARY_V1).hexdigest()
    assert digest == "bb01cec9fb618b8ca84927d91bbdc814e11363e6a9c38259de4fbc00177d4fea"


def test_new_rows_are_stored_compressed_and_decode_to_their_hashed_text(
    ledger: SelectionEvidence, tmp_path: Path
) -> None:
    _fill(ledger)
    rows = {
        "decisions": ledger.decisions()[0],
        "terminals": ledger.terminals()[0],
        "edges": ledger.edges()[0],
        "lineage": ledger.lineage()[0],
    }
    for table in TABLES:
        ((stored, sha),) = _stored(tmp_path, table)
        assert isinstance(stored, bytes), table
        text = body_text(stored)
        assert sha256_hex(text) == sha
        assert len(stored) < len(text) / 2, (table, len(stored), len(text))
        if table != "decisions":  # (a decision body holds its universe by reference)
            assert text == canonical_json(to_json(rows[table]))
    for stored, sha in _stored(tmp_path, "fit_sets"):
        assert sha256_hex(body_text(stored)) == sha
    again = SelectionEvidence(tmp_path).open(censor_orphans=False)
    assert again.decisions() == ledger.decisions()
    assert again.terminals() == ledger.terminals()
    assert again.edges() == ledger.edges() and again.lineage() == ledger.lineage()
    assert again.verify() == 4
    again.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no row flagged
        ev = load_evidence(tmp_path)
    assert len(ev.decisions) == 1 and ev.decisions["sha_ok"].all()
    assert ev.terminals["sha_ok"].all() and len(ev.edges) == 1 and len(ev.lineage) == 1


def test_a_body_compression_does_not_shrink_stays_text() -> None:
    assert pack_body("{}") == "{}"
    packed = pack_body(canonical_json({"status": "valid", "gain": 0.5, "metric": "fitness"}))
    assert isinstance(packed, bytes)


def test_an_old_ledger_keeps_its_text_rows_and_takes_compressed_ones(tmp_path: Path) -> None:
    cards = tuple(card(i) for i in range(3))
    old = [decision_over(a, cards) for a in range(2)]
    write_v1_ledger(tmp_path, old)
    before = _stored(tmp_path, "decisions")
    with SelectionEvidence(tmp_path).open(censor_orphans=False) as ledger:
        ledger.append_terminal(make_terminal(old[0], cited=(cards[0].card_id,)))
        ledger.append_decision(decision_over(2, cards))
    after = _stored(tmp_path, "decisions")
    assert after[:2] == before and all(isinstance(b, str) for b, _ in before)
    assert isinstance(after[2][0], bytes)
    (terminal,) = _stored(tmp_path, "terminals")
    assert isinstance(terminal[0], bytes)
    with SelectionEvidence(tmp_path).open(censor_orphans=False) as again:
        assert again.decisions()[:2] == tuple(old) and len(again.decisions()) == 3
    ev = load_evidence(tmp_path)
    assert len(ev.decisions) == 3 and ev.decisions["sha_ok"].all()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda b: b[:-3] + bytes([b[-3] ^ 0xFF]) + b[-2:], r"terminals#1: "),
        (lambda b: bytes([7]) + b[1:], r"terminals#1: unknown body format 7"),
        (lambda b: b[:-4], r"terminals#1: "),
    ],
)
def test_a_damaged_compressed_body_is_refused_naming_the_row(
    ledger: SelectionEvidence, tmp_path: Path, edit, match: str
) -> None:
    _fill(ledger)
    conn = sqlite3.connect(tmp_path / EVIDENCE_FILE, isolation_level=None)
    conn.execute("DROP TRIGGER terminals_no_UPDATE")
    ((stored, _),) = list(conn.execute("SELECT body, sha256 FROM terminals"))
    conn.execute("UPDATE terminals SET body = ?", (edit(stored),))
    conn.close()
    with pytest.raises(LedgerIntegrityError, match=match):
        SelectionEvidence(tmp_path).open(censor_orphans=False)
    with pytest.warns(Warning):
        ev = load_evidence(tmp_path)
    assert len(ev.terminals) == 0 or not ev.terminals["sha_ok"].all()
