"""A universe that differs from the previous one by a few cards is stored as a difference
from it; it reads back the same (ledger and notebooks' reader), and a broken chain is
refused naming the row."""

from __future__ import annotations

import itertools
import json

import pytest

from gigaevo.analysis import load_evidence
from gigaevo.memory.v2.evidence import SelectionEvidence
from gigaevo.memory.v2.evidence.errors import LedgerIntegrityError
from gigaevo.memory.v2.evidence.rows import canonical_json, sha256_hex
from gigaevo.memory.v2.evidence.universe import DELTA_DEPTH
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


def _stored_universes(path) -> tuple[list[str], set[tuple[str, str]]]:  # type: ignore[no-untyped-def]
    """(the universe reference of each decision, the universe rows)."""
    with raw_ledger(path) as conn:
        refs = [
            json.loads(b)["universe_ref"] for (b,) in conn.execute("SELECT body FROM decisions")
        ]
        rows = set(conn.execute("SELECT sha256, body FROM universes"))
    return refs, rows


@pytest.mark.parametrize("cuts", [(3,), (1, 2, 4), (5,)])
def test_a_resumed_session_continues_the_chain_as_one_session_would(tmp_path, cuts) -> None:  # type: ignore[no-untyped-def]
    """The base of a session's first universe is the ledger's newest decision's, so a run
    cut into sessions stores the same universe rows and references as an uncut one."""
    universes = _universes(100) + _universes(100)[1:]
    rows = [decision_over(a, u) for a, u in enumerate(universes)]
    whole, split = tmp_path / "whole", tmp_path / "split"
    whole.mkdir()
    split.mkdir()
    with SelectionEvidence(whole).open() as ledger:
        for row in rows:
            ledger.append_decision(row)
    bounds = [0, *cuts, len(rows)]
    for lo, hi in itertools.pairwise(bounds):
        with SelectionEvidence(split).open(censor_orphans=False) as ledger:
            for row in rows[lo:hi]:
                ledger.append_decision(row)
    with SelectionEvidence(split).open(censor_orphans=False) as fresh:
        assert fresh.decisions() == tuple(rows)
    assert _stored_universes(split) == _stored_universes(whole)
    _refs, stored = _stored_universes(whole)
    assert sum(isinstance(json.loads(b), list) for _, b in stored) == 1  # one whole list


def test_the_chain_restarts_whole_at_its_depth_bound_also_across_sessions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cards = [card(i) for i in range(60)]
    universes = []
    for i in range(DELTA_DEPTH + 3):
        cards.append(card(1_000 + i))
        universes.append(tuple(cards))
    rows = [decision_over(a, u) for a, u in enumerate(universes)]
    for lo, hi in ((0, 20), (20, len(rows))):
        with SelectionEvidence(tmp_path).open(censor_orphans=False) as ledger:
            for row in rows[lo:hi]:
                ledger.append_decision(row)
    refs, stored = _stored_universes(tmp_path)
    bodies = dict(stored)
    kinds = [isinstance(json.loads(bodies[r]), list) for r in refs]
    assert kinds == [True] + [False] * DELTA_DEPTH + [True, False]


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
