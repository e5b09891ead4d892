"""Fitted row ids stored once per fit (schema version 3): delta chain, checks, memory."""

from __future__ import annotations

import dataclasses
import gc
import json
import pickle
import sqlite3
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from gigaevo.memory.v2.evidence import (
    CandidateTable,
    DecisionRow,
    LedgerIntegrityError,
    RowIdSet,
    SelectionEvidence,
    decision_key_id,
)
from gigaevo.memory.v2.evidence.rows import canonical_json, sha256_hex
from tests.memory.evidence.factories import (
    append_to_old_ledger,
    card,
    decision_over,
    make_decision,
    raw_ledger,
    reopen_ledger,
    write_v1_ledger,
    write_v2_ledger,
    written_and_reopened,
)


def _fitted(row: DecisionRow, ids: tuple[str, ...]) -> DecisionRow:
    return dataclasses.replace(row, fitted_row_ids=ids)


def _ids(n: int, lineage_version: int = 1) -> tuple[str, ...]:
    """Ids as a fit lists them: n decision ids, then a lineage row id (sorted after them)."""
    return (*(f"d-{i:024d}" for i in range(n)), f"lineage:d-0:v{lineage_version}")


def _stored_ids(tmp_path: Path) -> tuple[int, int]:
    """(fit_sets rows, ids written in all their bodies)."""
    with raw_ledger(tmp_path) as conn:
        bodies = [json.loads(b) for (b,) in conn.execute("SELECT body FROM fit_sets")]
    return len(bodies), sum(len(b["added"]) + len(b["removed"]) for b in bodies)


def test_fitted_ids_round_trip_through_a_chain(tmp_path: Path) -> None:
    rows = []
    for a in range(30):  # a fit per 3 decisions; lineage rows replaced as they mature
        rows.append(_fitted(make_decision(a), _ids(a // 3, lineage_version=1 + a // 6)))
    rows.append(_fitted(make_decision(30), ()))  # empty: inline
    rows.append(_fitted(make_decision(31), ("b", "a")))  # not ascending: inline, order kept
    with written_and_reopened(tmp_path, rows) as fresh:
        back = fresh.decisions()
        assert [tuple(d.fitted_row_ids) for d in back] == [r.fitted_row_ids for r in rows]
        assert back[-1].fitted_row_ids == ("b", "a")
        # decisions of one fit share one object; equal to and hashing like the tuple
        first = back[3].fitted_row_ids
        assert isinstance(first, RowIdSet) and back[4].fitted_row_ids is first
        assert first == rows[3].fitted_row_ids and rows[3].fitted_row_ids == first
        assert hash(first) == hash(rows[3].fitted_row_ids) and len(first) == 2
        assert first[-1] == "lineage:d-0:v1" and "d-" + "0" * 24 in first
        assert pickle.loads(pickle.dumps(first)) == first
        assert pickle.loads(pickle.dumps(back[3])) == back[3] == rows[3]
        assert fresh.decision(rows[7].decision_id) == rows[7]
    with raw_ledger(tmp_path) as conn:
        bodies = [b for (b,) in conn.execute("SELECT body FROM decisions ORDER BY seq")]
    assert all("fitted_rows_ref" in b for b in bodies[3:30])
    assert '"fitted_row_ids":[]' in bodies[30] and '"fitted_row_ids":["b","a"]' in bodies[31]


def test_many_decisions_of_one_fit_store_its_ids_once(tmp_path: Path) -> None:
    ids = _ids(500)
    with SelectionEvidence(tmp_path).open() as ledger:
        for a in range(40):
            ledger.append_decision(_fitted(make_decision(a), ids))
    assert _stored_ids(tmp_path) == (1, len(ids))
    with raw_ledger(tmp_path) as conn:
        (longest,) = conn.execute("SELECT MAX(LENGTH(body)) FROM decisions").fetchone()
    assert longest < 2_000  # the ids are not in the decision bodies
    with reopen_ledger(tmp_path) as fresh:
        back = fresh.decisions()
    assert all(d.fitted_row_ids is back[0].fitted_row_ids for d in back)


def test_a_growing_ledger_stores_its_ids_linearly(tmp_path: Path) -> None:
    """One new fit per decision, each over every earlier decision: ~n^2/2 ids written
    inline, O(n) in the chain (whole sets only at doubling sizes)."""
    n = 300
    with SelectionEvidence(tmp_path).open() as ledger:
        for a in range(n):
            ledger.append_decision(_fitted(make_decision(a), _ids(a, lineage_version=1 + a // 10)))
    links, written = _stored_ids(tmp_path)
    assert links == n
    assert written < 6 * n  # inline: n^2 / 2 = 45,000
    with reopen_ledger(tmp_path) as fresh:
        back = fresh.decisions()
    assert all(tuple(d.fitted_row_ids) == _ids(a, 1 + a // 10) for a, d in enumerate(back))


def test_a_resumed_writer_continues_the_chain(tmp_path: Path) -> None:
    """After a resume the first fit chains to the newest stored link (O(change) ids),
    by either way of building a link, instead of storing its whole set again."""
    n = 200
    with SelectionEvidence(tmp_path).open() as ledger:
        ledger.append_decision(_fitted(make_decision(0), _ids(n)))
    with SelectionEvidence(tmp_path).open() as resumed:  # encode: a plain id tuple
        resumed.append_decision(_fitted(make_decision(1), _ids(n + 1)))
    with SelectionEvidence(tmp_path).open() as resumed:  # link: the head fitter's way
        ids = set(_ids(n + 2))
        link = resumed.fitted_row_link(None, ids, (tuple(sorted(ids)), ()))
        assert isinstance(link, RowIdSet) and link.parent is not None
        assert link.added == (f"d-{n + 1:024d}",) and link.removed == ()
        resumed.append_decision(_fitted(make_decision(2), link))
    links, written = _stored_ids(tmp_path)
    assert links == 3 and written == (n + 1) + 1 + 1  # whole set, then one id each
    with reopen_ledger(tmp_path) as fresh:
        assert [tuple(d.fitted_row_ids) for d in fresh.decisions()] == [
            _ids(n),
            _ids(n + 1),
            _ids(n + 2),
        ]


def test_writes_from_two_sessions_chain_separately(tmp_path: Path) -> None:
    one, two = SelectionEvidence(tmp_path).open(), SelectionEvidence(tmp_path).open()
    for a in range(6):
        (one if a % 2 else two).append_decision(_fitted(make_decision(a), _ids(a)))
    one.close()
    two.close()
    with reopen_ledger(tmp_path) as fresh:
        assert [tuple(d.fitted_row_ids) for d in fresh.decisions()] == [_ids(a) for a in range(6)]


def test_a_rolled_back_decision_does_not_lose_a_link(tmp_path: Path) -> None:
    with SelectionEvidence(tmp_path).open() as ledger:
        ledger.append_decision(_fitted(make_decision(0), _ids(5)))
        with pytest.raises(ValueError, match="already has a decision"):
            ledger.append_decision(_fitted(make_decision(0), _ids(6)))  # rolled back
        ledger.append_decision(_fitted(make_decision(1), _ids(7)))  # chains on the lost link
    with reopen_ledger(tmp_path) as fresh:
        assert tuple(fresh.decisions()[1].fitted_row_ids) == _ids(7)


def _tamper_link(tmp_path: Path, edit: str) -> None:
    """Edit the oldest (whole) link of the chain: ``body`` or ``delete``."""
    conn = raw_ledger(tmp_path)
    conn.execute("DROP TRIGGER fit_sets_no_UPDATE")
    conn.execute("DROP TRIGGER fit_sets_no_DELETE")
    rowid, body = next(  # bodies read as text (raw_ledger), so matched here, not in SQL
        (r, b) for r, b in conn.execute("SELECT rowid, body FROM fit_sets") if '"parent":null' in b
    )
    if edit == "delete":
        conn.execute("DELETE FROM fit_sets WHERE rowid = ?", (rowid,))
    else:
        data = json.loads(body)
        data["added"] = data["added"][1:]
        conn.execute("UPDATE fit_sets SET body = ? WHERE rowid = ?", (canonical_json(data), rowid))
    conn.close()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        ("body", r"fit_sets#\w+ \(fitted rows of decisions#1\): content hash mismatch"),
        ("delete", r"fit_sets#\w+ \(fitted rows of decisions#1\): missing"),
    ],
)
def test_a_tampered_or_missing_link_raises_on_read(tmp_path: Path, edit: str, match: str) -> None:
    ledger = SelectionEvidence(tmp_path).open()
    for a in range(4):
        ledger.append_decision(_fitted(make_decision(a), _ids(20 + a)))
    _tamper_link(tmp_path, edit)
    with pytest.raises(LedgerIntegrityError, match=match):
        SelectionEvidence(tmp_path).open()
    with pytest.raises(LedgerIntegrityError, match=match):
        ledger.verify()
    with pytest.raises(LedgerIntegrityError):  # the instance stays stopped
        ledger.append_decision(make_decision(9))
    ledger.close()


def test_a_rehashed_decision_with_both_id_forms_is_refused(tmp_path: Path) -> None:
    with SelectionEvidence(tmp_path).open() as ledger:
        ledger.append_decision(_fitted(make_decision(0), _ids(3)))
    conn = raw_ledger(tmp_path)
    conn.execute("DROP TRIGGER decisions_no_UPDATE")
    (body,) = conn.execute("SELECT body FROM decisions").fetchone()
    data = json.loads(body)
    data["fitted_row_ids"] = ["x"]
    new = canonical_json(data)
    conn.execute("UPDATE decisions SET body = ?, sha256 = ?", (new, sha256_hex(new)))
    conn.close()
    with pytest.raises(LedgerIntegrityError, match="fitted_rows_ref"):
        SelectionEvidence(tmp_path).open()


def test_fit_sets_refuse_update_and_delete(tmp_path: Path) -> None:
    with SelectionEvidence(tmp_path).open() as ledger:
        ledger.append_decision(_fitted(make_decision(0), _ids(2)))
    conn = raw_ledger(tmp_path)
    with pytest.raises(sqlite3.IntegrityError, match="immutable"):
        conn.execute("UPDATE fit_sets SET body = body")
    with pytest.raises(sqlite3.IntegrityError, match="immutable"):
        conn.execute("DELETE FROM fit_sets")
    conn.close()


@pytest.mark.parametrize("writer", [write_v1_ledger, write_v2_ledger])
def test_version_1_and_2_ledgers_decode_and_take_new_rows(tmp_path: Path, writer: object) -> None:
    cards = tuple(card(i) for i in range(4))
    old = [_fitted(decision_over(a, cards), _ids(a)) for a in range(3)]
    writer(tmp_path, old)  # type: ignore[operator]
    new = _fitted(decision_over(3, cards), _ids(3))
    before, after, version = append_to_old_ledger(tmp_path, old, new, cards[0].card_id)
    assert all('"fitted_row_ids":[' in b for _, b, _ in before)
    assert "fitted_rows_ref" in after[3][1] and version == "4"


def _reader_like(
    base: DecisionRow, attempt: int, rng: np.random.Generator, n_fit: int
) -> DecisionRow:
    """A decision as the reader writes it over ``base``'s cards: random masses, a fresh fit."""
    rho = rng.dirichlet(np.ones(len(base.universe))) * 0.75
    ids = [c.card_id for c in base.universe]
    table = CandidateTable.from_columns(ids, rho, np.ones(len(ids), bool), 0.7)
    m = float(rho[0])
    return dataclasses.replace(
        base,
        decision_id=decision_key_id(base.run_id, attempt),
        attempt=attempt,
        candidates=table,
        rho=m,
        joint=m * 0.7,
        fitted_row_ids=_ids(n_fit, 1 + n_fit // 10),
    )


def _held_by_two_ledgers(tmp_path: Path, base: DecisionRow, n: int) -> int:
    """Bytes held by a writer that appended ``n`` decisions over ``base``'s cards (a fresh
    fit each) and a reader that decoded them again (tracemalloc, from before the open)."""
    rng = np.random.default_rng(3)
    with SelectionEvidence(tmp_path).open() as warm:  # imports, first-row round-trip check
        warm.append_decision(_reader_like(base, 0, rng, 300))
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        ledger = SelectionEvidence(tmp_path).open(censor_orphans=False)
        for a in range(1, n + 1):
            ledger.append_decision(_reader_like(base, a, rng, 300 + a))
        reader = reopen_ledger(tmp_path)  # every row decoded again
        assert len(reader.decisions()) == n + 1 and len(ledger.decisions()) == n + 1
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    ledger.close()
    reader.close()
    return used


def test_decisions_at_1000_cards_keep_a_small_footprint(tmp_path: Path) -> None:
    """Before the columns and fit sets a decision over 1,000 cards kept ~0.5 MB in memory
    (1,000 Candidate objects and its own fitted-id tuple); written and read back, each
    decision (a fresh fit each) now keeps well under 50 KB. Measured as the slope between
    two ledger lengths (the fixed cost of opening a ledger, ~2 MB, left out), which needs
    far fewer decisions under tracemalloc than one long ledger did; the fixed cost is
    bounded too."""
    base = decision_over(0, tuple(card(i) for i in range(1000)))
    short, long = 8, 40
    held_short = _held_by_two_ledgers(tmp_path / "short", base, short)
    held_long = _held_by_two_ledgers(tmp_path / "long", base, long)
    per_decision = (held_long - held_short) / (2 * (long - short))  # two ledgers hold each
    assert per_decision < 50_000, f"{per_decision / 1000:.1f} KB per decision"
    fixed = held_short - 2 * short * per_decision
    assert fixed < 8_000_000, f"{fixed / 1e6:.1f} MB to open two ledgers"


def test_appending_a_decision_of_a_fit_does_not_rebuild_its_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writing a decision whose fitted rows are a link costs O(change), not O(ledger):
    the link's whole id tuple is never rebuilt (issue 16: it was, through ``len`` of the
    link, a sort of every ledger row id per decision). What is stored is unchanged: the
    same link hashes and the same ids read back."""
    n = 300
    rebuilt = []
    ids_of = RowIdSet.ids

    def counted(self: RowIdSet) -> tuple[str, ...]:
        rebuilt.append(self.sha)
        return ids_of(self)

    with SelectionEvidence(tmp_path).open() as ledger:
        base = None
        expected, links = [], []
        for a in range(6):
            ids = set(_ids(n + a, lineage_version=1 + a // 3))
            old = set() if base is None else set(expected[-1])
            delta = (tuple(sorted(ids - old)), tuple(sorted(old - ids)))
            link = ledger.fitted_row_link(base, ids, delta)
            assert isinstance(link, RowIdSet)
            ledger._fits._memo._items.clear()  # a set no longer kept
            monkeypatch.setattr(RowIdSet, "ids", counted)
            ledger.append_decision(_fitted(make_decision(a), link))
            monkeypatch.setattr(RowIdSet, "ids", ids_of)
            expected.append(tuple(sorted(ids)))
            links.append(link.sha)
            base = link
        assert rebuilt == []
    with raw_ledger(tmp_path) as conn:
        refs = [json.loads(b)["fitted_rows_ref"] for (b,) in conn.execute(
            "SELECT body FROM decisions ORDER BY seq")]  # fmt: skip
    assert refs == links
    with reopen_ledger(tmp_path) as fresh:
        assert [tuple(d.fitted_row_ids) for d in fresh.decisions()] == expected


def test_the_length_of_a_written_link_costs_no_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``len`` and truthiness of a link the writer built are kept with the link (issue 16:
    ``len`` rebuilt and sorted every fitted id, O(ledger)); they equal the rebuilt set's
    after random adds and removes, whole sets included, and a link read back counts its
    ids once."""
    rng = np.random.default_rng(7)
    rebuilt: list[str] = []
    ids_of = RowIdSet.ids

    def counted(self: RowIdSet) -> tuple[str, ...]:
        rebuilt.append(self.sha)
        return ids_of(self)

    with SelectionEvidence(tmp_path).open() as ledger:
        base, current, links = None, set(), []
        for step in range(60):
            new = {f"r{int(i):04d}" for i in rng.integers(0, 2000, size=int(rng.integers(1, 30)))}
            gone = set(rng.choice(sorted(current), size=min(len(current), 5), replace=False)) \
                if current and step % 3 == 0 else set()  # fmt: skip
            ids = (current | new) - gone
            delta = (tuple(sorted(ids - current)), tuple(sorted(current - ids)))
            link = ledger.fitted_row_link(base, ids, delta)
            assert isinstance(link, RowIdSet)
            monkeypatch.setattr(RowIdSet, "ids", counted)
            assert len(link) == len(ids) and bool(link)
            monkeypatch.setattr(RowIdSet, "ids", ids_of)
            assert link.ids() == tuple(sorted(ids))
            ledger.append_decision(_fitted(make_decision(step), link))
            base, current = link, ids
            links.append(len(ids))
        assert rebuilt == []
    with reopen_ledger(tmp_path) as fresh:
        back = [d.fitted_row_ids for d in fresh.decisions()]
        assert [len(b) for b in back] == links and all(back)
