"""A universe that differs from the previous one by a few cards is stored as a difference
from it; it reads back the same (ledger and notebooks' reader), and a broken chain is
refused naming the row."""

from __future__ import annotations

import json

import pytest

from gigaevo.analysis import load_evidence
from gigaevo.memory.v2.evidence import SelectionEvidence
from gigaevo.memory.v2.evidence.errors import LedgerIntegrityError
from gigaevo.memory.v2.evidence.rows import canonical_json, sha256_hex
from tests.memory.evidence.factories import card, decision_over, raw_ledger


def _universes(n: int = 400) -> list[tuple]:  # type: ignore[type-arg]
    """Universes as a run sees them: cards added, one retired, one re-texted."""
    cards = [card(i) for i in range(n)]
    out = [tuple(cards)]
    cards.append(card(n))  # added at the end
    out.append(tuple(cards))
    del cards[7]  # retired
    out.append(tuple(cards))
    cards[n // 2] = card(n // 2, text_chars=41)  # re-texted
    out.append(tuple(cards))
    cards.insert(3, card(10_000))
    out.append(tuple(cards))
    out.append(tuple(cards))  # unchanged: no new row
    return out


def test_changed_universes_are_stored_as_differences_and_read_back(tmp_path) -> None:  # type: ignore[no-untyped-def]
    universes = _universes()
    rows = [decision_over(a, u) for a, u in enumerate(universes)]
    with SelectionEvidence(tmp_path).open() as ledger:
        for row in rows:
            ledger.append_decision(row)
        assert ledger.decisions() == tuple(rows)
    with SelectionEvidence(tmp_path).open(censor_orphans=False) as fresh:
        assert fresh.decisions() == tuple(rows)
    with raw_ledger(tmp_path) as conn:
        bodies = [b for (b,) in conn.execute("SELECT body FROM universes ORDER BY rowid")]
    assert len(bodies) == 5
    whole = [b for b in bodies if isinstance(json.loads(b), list)]
    assert len(whole) == 1 and len(whole[0]) > 400 * 60
    assert all(len(b) < 1_000 for b in bodies if b not in whole)  # one card changed each
    ev = load_evidence(tmp_path)
    assert ev.decisions["sha_ok"].all()
    assert ev.decisions["n_universe"].tolist() == [len(u) for u in universes]


def test_a_new_session_starts_its_chain_whole_and_takes_the_old_rows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    universes = _universes(100)
    rows = [decision_over(a, u) for a, u in enumerate(universes)]
    for half in (rows[:3], rows[3:]):
        with SelectionEvidence(tmp_path).open(censor_orphans=False) as ledger:
            for row in half:
                ledger.append_decision(row)
    with SelectionEvidence(tmp_path).open(censor_orphans=False) as fresh:
        assert fresh.decisions() == tuple(rows)
    with raw_ledger(tmp_path) as conn:
        bodies = [json.loads(b) for (b,) in conn.execute("SELECT body FROM universes")]
    assert sum(isinstance(b, list) for b in bodies) == 2  # one whole list per session


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d.update(ops=[[5, 2, []]]), "bad difference op"),
        (lambda d: d.update(ops="x"), "ops must be a list"),
        (lambda d: d.update(base="0" * 64), "missing"),
    ],
)
def test_a_broken_difference_is_refused_naming_the_row(tmp_path, edit, match) -> None:  # type: ignore[no-untyped-def]
    universes = _universes(100)
    with SelectionEvidence(tmp_path).open() as ledger:
        for a, u in enumerate(universes[:2]):
            ledger.append_decision(decision_over(a, u))
    conn = raw_ledger(tmp_path)
    for trigger in ("universes_no_UPDATE", "decisions_no_UPDATE"):
        conn.execute(f"DROP TRIGGER {trigger}")
    ((sha, body),) = [
        (s, b) for s, b in conn.execute("SELECT sha256, body FROM universes") if b.startswith("{")
    ]
    data = json.loads(body)
    edit(data)
    new = canonical_json(data)
    new_sha = sha256_hex(new)
    conn.execute("UPDATE universes SET body = ?, sha256 = ? WHERE sha256 = ?", (new, new_sha, sha))
    (dbody,) = conn.execute("SELECT body FROM decisions WHERE attempt = 1").fetchone()
    dnew = dbody.replace(sha, new_sha)
    conn.execute(
        "UPDATE decisions SET body = ?, sha256 = ? WHERE attempt = 1", (dnew, sha256_hex(dnew))
    )
    conn.commit()
    conn.close()
    with pytest.raises(LedgerIntegrityError, match=match):
        SelectionEvidence(tmp_path).open()
    with pytest.warns(Warning):
        ev = load_evidence(tmp_path)
    assert ev.decisions["sha_ok"].tolist() == [True, False]
