"""Universes stored once by content hash, candidates as columns, version-1 files still read."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest

from gigaevo.memory.v2.evidence import (
    Candidate,
    CardSnapshot,
    LedgerIntegrityError,
    SelectionEvidence,
)
from gigaevo.memory.v2.evidence import universe as universe_module
from gigaevo.memory.v2.evidence.rows import canonical_json, sha256_hex
from gigaevo.memory.v2.records import to_json
from tests.memory.evidence.factories import (
    append_to_old_ledger,
    card,
    decision_over,
    raw_ledger,
    reopen_ledger,
    write_v1_ledger,
    written_and_reopened,
)


def _count(tmp_path: Path, table: str) -> int:
    with raw_ledger(tmp_path) as conn:
        (n,) = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
    return int(n)


@pytest.mark.parametrize("n_cards", [0, 1, 40])
def test_decisions_round_trip_with_any_number_of_cards(tmp_path: Path, n_cards: int) -> None:
    cards = tuple(card(i) for i in range(n_cards))
    rows = [decision_over(a, cards) for a in range(3)]
    with written_and_reopened(tmp_path, rows) as fresh:
        back = fresh.decisions()
        assert all(isinstance(s, CardSnapshot) for d in back for s in d.universe)
        # decisions sharing a universe share one decoded tuple
        assert all(d.universe is back[0].universe for d in back)
        assert fresh.decision(rows[1].decision_id) == rows[1]


def test_candidate_floats_round_trip_exactly(tmp_path: Path) -> None:
    cards = tuple(card(i) for i in range(3))
    row = decision_over(0, cards)
    odd = (1 / 3, 5e-324, 1e-300, 0.1 + 0.2)
    cands = tuple(
        Candidate(c.card_id, c.rho, c.offer, c.offer_joint, c.control_joint, c.safe, x, x, x, x)
        for c, x in zip(row.candidates, odd, strict=False)
    )
    row = dataclasses.replace(row, candidates=cands)
    with SelectionEvidence(tmp_path).open() as ledger:
        ledger.append_decision(row)
    with reopen_ledger(tmp_path) as fresh:
        (back,) = fresh.decisions()
    got = [repr(getattr(c, f)) for c in back.candidates for f in c.__dataclass_fields__]
    assert got == [repr(getattr(c, f)) for c in cands for f in c.__dataclass_fields__]


def test_a_shared_universe_is_stored_once(tmp_path: Path) -> None:
    cards = tuple(card(i) for i in range(5))
    with SelectionEvidence(tmp_path).open() as ledger:
        ledger.append_decision(decision_over(0, cards))
        same = tuple(card(i) for i in range(5))  # equal, not the same objects
        ledger.append_decision(decision_over(1, same))
        assert (_count(tmp_path, "universes"), _count(tmp_path, "snapshots")) == (1, 5)
        ledger.append_decision(decision_over(2, (*cards, card(5))))  # a card joins the bank
        assert (_count(tmp_path, "universes"), _count(tmp_path, "snapshots")) == (2, 6)
    # another session writing the same universe adds nothing
    with SelectionEvidence(tmp_path).open() as other:
        other.append_decision(decision_over(3, cards))
    assert (_count(tmp_path, "universes"), _count(tmp_path, "snapshots")) == (2, 6)


def test_an_unchanged_universe_is_not_serialised_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[object] = []
    real = universe_module.to_json

    def counting(record: object) -> dict:
        calls.append(record)
        return real(record)

    monkeypatch.setattr(universe_module, "to_json", counting)
    with SelectionEvidence(tmp_path).open() as ledger:
        ledger.append_decision(decision_over(0, tuple(card(i) for i in range(20))))
        assert len(calls) == 20
        ledger.append_decision(decision_over(1, tuple(card(i) for i in range(20))))
        assert len(calls) == 20
        ledger.append_decision(decision_over(2, tuple(card(i) for i in range(21))))
        assert len(calls) == 21  # only the new card


def test_a_failed_decision_leaves_no_universe_behind(tmp_path: Path) -> None:
    cards = tuple(card(i) for i in range(4))
    with SelectionEvidence(tmp_path).open() as ledger:
        ledger.append_decision(decision_over(0, cards[:2]))
        with pytest.raises(ValueError, match="already has a decision"):
            ledger.append_decision(decision_over(0, cards))  # duplicate attempt: rolled back
        assert (_count(tmp_path, "universes"), _count(tmp_path, "snapshots")) == (1, 2)
        ledger.append_decision(decision_over(1, cards))  # the same universe is written this time
    with reopen_ledger(tmp_path) as fresh:
        assert fresh.decisions()[1].universe == cards


def _tamper(tmp_path: Path, table: str, edit: str = "body") -> None:
    """Change the first row of ``table`` (``body``: its content; ``delete``: drop it)."""
    conn = raw_ledger(tmp_path)
    conn.execute(f"DROP TRIGGER {table}_no_UPDATE")
    conn.execute(f"DROP TRIGGER {table}_no_DELETE")
    if edit == "delete":
        conn.execute(f"DELETE FROM {table} WHERE rowid = (SELECT MIN(rowid) FROM {table})")
    else:
        rowid, body = conn.execute(f"SELECT rowid, body FROM {table} LIMIT 1").fetchone()
        data = json.loads(body)
        if isinstance(data, list):
            data.reverse()
        else:
            data["text" if "text" in data else "seed"] = 9
        conn.execute(f"UPDATE {table} SET body = ? WHERE rowid = ?", (canonical_json(data), rowid))
    conn.close()


@pytest.mark.parametrize(
    ("table", "edit", "match"),
    [
        ("snapshots", "body", r"snapshots#\w+ \(in universes#\w+ .*decisions#1\)\): content"),
        ("universes", "body", r"universes#\w+ \(universe of decisions#1\): content hash"),
        ("decisions", "body", r"decisions#1: content hash mismatch"),
        ("snapshots", "delete", r"snapshots#\w+ .*: missing"),
        ("universes", "delete", r"universes#\w+ \(universe of decisions#1\): missing"),
    ],
)
def test_a_tampered_or_missing_part_raises_on_read(
    tmp_path: Path, table: str, edit: str, match: str
) -> None:
    cards = tuple(card(i) for i in range(3))
    ledger = SelectionEvidence(tmp_path).open()
    for a in range(2):
        ledger.append_decision(decision_over(a, cards))
    _tamper(tmp_path, table, edit)
    with pytest.raises(LedgerIntegrityError, match=match):
        SelectionEvidence(tmp_path).open()
    with pytest.raises(LedgerIntegrityError, match=match):
        ledger.verify()
    with pytest.raises(LedgerIntegrityError):  # the instance stays stopped
        ledger.append_decision(decision_over(5, cards))
    ledger.close()


def test_a_rehashed_decision_with_ragged_candidate_columns_is_refused(tmp_path: Path) -> None:
    with SelectionEvidence(tmp_path).open() as ledger:
        ledger.append_decision(decision_over(0, tuple(card(i) for i in range(3))))
    conn = raw_ledger(tmp_path)
    conn.execute("DROP TRIGGER decisions_no_UPDATE")
    (body,) = conn.execute("SELECT body FROM decisions").fetchone()
    data = json.loads(body)
    data["candidate_columns"]["rho"].pop()
    new = canonical_json(data)
    conn.execute("UPDATE decisions SET body = ?, sha256 = ?", (new, sha256_hex(new)))
    conn.close()
    with pytest.raises(LedgerIntegrityError, match="columns differ in length"):
        SelectionEvidence(tmp_path).open()


@pytest.mark.parametrize("table", ["snapshots", "universes"])
def test_content_tables_refuse_update_and_delete(tmp_path: Path, table: str) -> None:
    with SelectionEvidence(tmp_path).open() as ledger:
        ledger.append_decision(decision_over(0, (card(0),)))
    conn = raw_ledger(tmp_path)
    with pytest.raises(sqlite3.IntegrityError, match="immutable"):
        conn.execute(f"UPDATE {table} SET body = body")
    with pytest.raises(sqlite3.IntegrityError, match="immutable"):
        conn.execute(f"DELETE FROM {table}")
    conn.close()


def test_a_version_1_ledger_still_decodes_and_takes_new_rows(tmp_path: Path) -> None:
    cards = tuple(card(i) for i in range(4))
    old = [decision_over(0, cards), decision_over(1, cards[:3]), decision_over(2, ())]
    write_v1_ledger(tmp_path, old)
    new = decision_over(3, cards)
    _, after, version = append_to_old_ledger(tmp_path, old, new, cards[0].card_id)
    assert "universe_ref" in after[3][1] and "universe_ref" not in after[0][1]
    assert version == "4"


def test_an_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    write_v1_ledger(tmp_path, [])
    with raw_ledger(tmp_path) as conn:
        conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    with pytest.raises(LedgerIntegrityError, match="schema version '5'"):
        SelectionEvidence(tmp_path).open()


def test_a_decision_over_1000_cards_takes_far_fewer_bytes(tmp_path: Path) -> None:
    """At 1,000 cards of ~400 characters a version-1 body is ~0.7 MB; the universe is
    then written once and each decision holds its reference and candidate columns."""
    cards = tuple(card(i, text_chars=400) for i in range(1000))
    rows = [decision_over(a, cards) for a in range(5)]
    v1 = [len(canonical_json(to_json(r))) for r in rows]
    with SelectionEvidence(tmp_path).open() as ledger:
        for row in rows:
            ledger.append_decision(row)
    with raw_ledger(tmp_path) as conn:
        bodies = [n for (n,) in conn.execute("SELECT LENGTH(body) FROM decisions")]
        (shared,) = conn.execute(
            "SELECT (SELECT SUM(LENGTH(body)) FROM snapshots)"
            " + (SELECT SUM(LENGTH(body)) FROM universes)"
        ).fetchone()
    assert min(v1) > 500_000
    assert max(bodies) < 0.25 * min(v1)  # the decision row itself
    assert sum(bodies) + shared < 0.5 * sum(v1)  # everything, the universe written once
