"""Packed candidates (``candidate_pack``): bit-exact, small, and mixed with the column form.

A decision over ``PACK_FROM`` candidates or more stores them packed; smaller ones
and every row written before the packed form keep ``candidate_columns``. Both
decode to the same ``CandidateTable``, in the ledger and in ``load_evidence``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from gigaevo.analysis import load_evidence
from gigaevo.memory.v2.evidence import Candidate, CandidateTable, SelectionEvidence
from gigaevo.memory.v2.evidence import candidates as candidates_module
from gigaevo.memory.v2.evidence import sqlite as db
from gigaevo.memory.v2.evidence.candidates import PackError, pack, unpack
from gigaevo.memory.v2.evidence.errors import LedgerIntegrityError
from gigaevo.memory.v2.evidence.rows import CardSnapshot, DecisionRow, canonical_json, sha256_hex
from tests.memory.evidence.factories import card, decision_over, raw_ledger
from tests.memory.evidence.test_candidate_table import _bits, _random_candidates


def _subset_decision(
    attempt: int, universe: tuple[CardSnapshot, ...], rng: np.random.Generator, k: int
) -> DecisionRow:
    """A decision over ``universe`` whose candidates are ``k`` of its cards (in order),
    some unsafe (no offer, rho 0), masses of several distinct values, one proposed."""
    keep = np.sort(rng.choice(len(universe), size=k, replace=False))
    safe = rng.random(k) < 0.9
    safe[0] = True
    weights = np.where(safe, rng.choice([1.0, 1.0, 1.0, 2.5, 7.0], size=k), 0.0)
    rho = (weights / weights.sum() * 0.75).tolist()
    cands = tuple(
        Candidate(
            universe[j].card_id,
            r if s else 0.0,
            0.7 if s else None,
            (r if s else 0.0) * 0.7,
            (r if s else 0.0) * (1 - 0.7),
            bool(s),
            mean_effect=0.01 * attempt if i == 0 else None,
            rag="applicable" if i % 5 == 0 else "unassessed",
        )
        for i, (j, r, s) in enumerate(zip(keep.tolist(), rho, safe.tolist(), strict=True))
    )
    base = decision_over(attempt, universe)
    table = CandidateTable.of(cands)
    m = cands[0].rho
    return dataclasses.replace(
        base,
        candidates=cands,
        rho0=1.0 - table.rho_sum(),
        proposed_id=cands[0].card_id,
        rho=m,
        joint=m * 0.7,
    )


def _body(tmp_path: Path, attempt: int) -> dict:
    with raw_ledger(tmp_path) as conn:
        (body,) = conn.execute(
            "SELECT body FROM decisions WHERE attempt = ?", (attempt,)
        ).fetchone()
    return json.loads(body)


@pytest.mark.parametrize("seed", range(8))
def test_pack_round_trips_random_tables_bit_exactly(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cands = _random_candidates(rng, int(rng.integers(0, 300)))
    table = CandidateTable.of(cands)
    ids = [c.card_id for c in cands]
    extra = [f"other-{i}" for i in range(int(rng.integers(0, 50)))]
    subsequence = sorted(ids + extra)  # the candidates in order among other cards
    shuffled = list(rng.permutation(subsequence))  # not a subsequence: ids are listed
    for universe in (subsequence, shuffled, []):
        back = unpack(pack(table, universe), universe)
        assert [_bits(c) for c in back] == [_bits(c) for c in cands]
        assert back == table and back.columns() == table.columns()


def test_packed_ids_are_the_universe_strings() -> None:
    universe = [f"ins-{i:05d}" for i in range(100)]
    table = CandidateTable.from_columns(
        [f"ins-{i:05d}" for i in range(0, 100, 3)], np.full(34, 0.01), np.ones(34, bool), 0.7
    )
    text = pack(table, universe)
    candidates_module._RECENT_IDS.clear()  # no id tuple of the writer to share
    back = unpack(text, universe)
    assert all(a is universe[3 * i] for i, a in enumerate(back.card_ids))


def test_a_decision_over_many_cards_is_packed_and_small(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    universe = tuple(card(i) for i in range(1000))
    rows = [_subset_decision(a, universe, rng, 950) for a in range(4)]
    with SelectionEvidence(tmp_path).open() as ledger:
        for row in rows:
            ledger.append_decision(row)
        assert ledger.decisions() == tuple(rows)
    with SelectionEvidence(tmp_path).open(censor_orphans=False) as fresh:
        back = fresh.decisions()
    assert back == tuple(rows)
    for row, got in zip(rows, back, strict=True):
        assert [_bits(c) for c in got.candidates] == [_bits(c) for c in row.candidates]
    data = _body(tmp_path, 0)
    assert "candidate_pack" in data and "candidate_columns" not in data
    columns = canonical_json(CandidateTable.of(rows[0].candidates).columns())
    with raw_ledger(tmp_path) as conn:
        (longest,) = conn.execute("SELECT MAX(LENGTH(body)) FROM decisions").fetchone()
    # 950 candidates as columns: ~115,000 characters; the whole packed body: a few thousand
    assert len(columns) > 100_000 and longest < 0.05 * len(columns)


def test_a_column_form_ledger_opens_and_takes_packed_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger written before the packed form (every decision with its columns) reads
    back unchanged, takes packed rows next to its old ones, and loads in the notebooks'
    reader with every row intact and the same candidates frame."""
    rng = np.random.default_rng(5)
    universe = tuple(card(i) for i in range(200))
    rows = [_subset_decision(a, universe, rng, int(rng.integers(40, 200))) for a in range(6)]
    monkeypatch.setattr(db, "PACK_FROM", 10**9)  # as the code before the packed form wrote
    with SelectionEvidence(tmp_path).open() as ledger:
        for row in rows[:3]:
            ledger.append_decision(row)
    with raw_ledger(tmp_path) as conn:
        before = conn.execute("SELECT seq, body, sha256 FROM decisions").fetchall()
    columns_only = load_evidence(tmp_path).candidates
    monkeypatch.undo()
    with SelectionEvidence(tmp_path).open(censor_orphans=False) as ledger:
        assert ledger.decisions() == tuple(rows[:3])
        for row in rows[3:]:
            ledger.append_decision(row)
    with SelectionEvidence(tmp_path).open(censor_orphans=False) as fresh:
        assert fresh.decisions() == tuple(rows)
    with raw_ledger(tmp_path) as conn:
        after = conn.execute("SELECT seq, body, sha256 FROM decisions").fetchall()
    assert after[:3] == before  # old rows are never rewritten
    assert ["candidate_pack" in json.loads(b) for _, b, _ in after] == [False] * 3 + [True] * 3
    ev = load_evidence(tmp_path)
    assert ev.decisions["sha_ok"].all() and len(ev.decisions) == 6
    assert ev.decisions["n_candidates"].tolist() == [len(r.candidates) for r in rows]
    old = ev.candidates[ev.candidates["attempt"] < 3].reset_index(drop=True)
    assert old.equals(columns_only)
    new = ev.candidates[ev.candidates["attempt"] >= 3]
    want = [c.rho for r in rows[3:] for c in r.candidates]
    assert new["rho"].tolist() == want  # exact floats
    assert new["card_id"].tolist() == [c.card_id for r in rows[3:] for c in r.candidates]


def _rehash(tmp_path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    conn = raw_ledger(tmp_path)
    conn.execute("DROP TRIGGER decisions_no_UPDATE")
    (body,) = conn.execute("SELECT body FROM decisions").fetchone()
    data = json.loads(body)
    edit(data)
    new = canonical_json(data)
    conn.execute("UPDATE decisions SET body = ?, sha256 = ?", (new, sha256_hex(new)))
    conn.close()


def _repack(data: dict, change) -> None:  # type: ignore[no-untyped-def]
    raw = bytearray(zlib.decompress(base64.b64decode(data["candidate_pack"])))
    change(raw)
    data["candidate_pack"] = base64.b64encode(zlib.compress(bytes(raw))).decode()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d.update(candidate_pack="not base64!"), "not a packed candidate table"),
        (lambda d: _repack(d, lambda r: r.__delitem__(slice(-3, None))), "truncated"),
        (lambda d: _repack(d, lambda r: r.extend(b"\0")), "bytes after"),
        (lambda d: _repack(d, lambda r: r.__setitem__(0, 9)), "version 9"),
        (lambda d: _repack(d, lambda r: r.__setitem__(slice(5, 6), b"\7")), "id mode 7"),
        (lambda d: _repack(d, lambda r: r.__setitem__(slice(1, 5), struct.pack("<I", 3))), "ids"),
        (lambda d: d.update(candidate_columns={}), "both"),
        (lambda d: d.update(candidate_pack=7), "expected a string"),
    ],
)
def test_a_rehashed_bad_pack_is_refused_naming_the_row(tmp_path: Path, edit, match) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    with SelectionEvidence(tmp_path).open() as ledger:
        ledger.append_decision(_subset_decision(0, tuple(card(i) for i in range(60)), rng, 40))
    _rehash(tmp_path, edit)
    with pytest.raises(LedgerIntegrityError, match=rf"decisions#1.*{match}"):
        SelectionEvidence(tmp_path).open()
    ev = load_evidence_quietly(tmp_path)
    assert not ev.decisions["sha_ok"].any()


def load_evidence_quietly(path: Path):  # type: ignore[no-untyped-def]
    with pytest.warns(Warning):
        return load_evidence(path)


def test_a_non_finite_packed_mass_is_refused() -> None:
    table = CandidateTable.from_columns(["a", "b"], [0.5, 0.25], [True, True], 0.7)
    raw = bytearray(zlib.decompress(base64.b64decode(pack(table, ["a", "b"]))))
    at = raw.index(struct.pack("<d", 0.25))
    raw[at : at + 8] = struct.pack("<d", float("nan"))
    text = base64.b64encode(zlib.compress(bytes(raw))).decode()
    with pytest.raises(PackError, match="non-finite"):
        unpack(text, ["a", "b"])
    with pytest.raises(PackError, match="mask over 2 cards"):
        unpack(pack(table, ["a", "b"]), ["a", "b", "c"])


def test_repeated_masses_are_held_as_codes_and_come_back_bit_exactly() -> None:
    """A large table whose masses repeat keeps one byte a card in memory; -0.0, 0.0,
    subnormal and ordinary masses all come back with their bits."""
    import pickle

    rng = np.random.default_rng(11)
    pool = [0.0, -0.0, 5e-324, 1 / 3, 0.1 + 0.2, 2.0**-30]
    n = 500
    rho = [pool[i] for i in rng.integers(len(pool), size=n)]
    safe = rng.random(n) < 0.8
    cands = tuple(
        Candidate(f"ins-{i:05d}", r, 0.7 if s else None, r * 0.7, r * (1 - 0.7), bool(s))
        for i, (r, s) in enumerate(zip(rho, safe.tolist(), strict=True))
    )
    table = CandidateTable.of(cands)
    assert table._codes is not None and table._codes.nbytes == n  # type: ignore[attr-defined]
    assert [_bits(c) for c in table] == [_bits(c) for c in cands]
    assert table.rho.tobytes() == np.array(rho).tobytes()
    assert not table.rho.flags.writeable and table == cands
    back = pickle.loads(pickle.dumps(table))
    assert [_bits(c) for c in back] == [_bits(c) for c in cands]
    distinct = CandidateTable.of(_random_candidates(rng, 200))
    assert distinct._codes is None  # type: ignore[attr-defined]  # masses all differ: kept as they are
