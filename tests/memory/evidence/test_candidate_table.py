"""Candidates held as columns behave as the tuple of Candidate they replace, bit for bit."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
import sqlite3
import struct
from pathlib import Path

import numpy as np
import pytest

from gigaevo.memory.v2.evidence import (
    EVIDENCE_FILE,
    Candidate,
    CandidateTable,
    SelectionEvidence,
)
from gigaevo.memory.v2.evidence import candidates as candidates_module
from gigaevo.memory.v2.evidence.bodies import body_text
from gigaevo.memory.v2.evidence.candidates import RAG_CODES
from tests.memory.evidence.factories import card, decision_over

EDGE = (5e-324, -0.0, 1e308, 0.0, 1 / 3, 0.1 + 0.2, 1e-300, -1e308, 2.0**-1074 * 3)


def _bits(c: Candidate) -> list[object]:
    """Every field, floats by their bit pattern (so -0.0 differs from 0.0)."""
    out: list[object] = []
    for f in dataclasses.fields(c):
        v = getattr(c, f.name)
        out.append(struct.pack("<d", v) if isinstance(v, float) else v)
    return out


def _random_candidates(rng: np.random.Generator, n: int) -> tuple[Candidate, ...]:
    """Candidates with edge floats, mixed offers, unsafe cards, labels and sparse fields."""

    def num(edge: tuple[float, ...] = EDGE) -> float:
        return float(edge[rng.integers(len(edge))]) if rng.random() < 0.3 else float(rng.random())

    def maybe() -> float | None:
        return num() if rng.random() < 0.2 else None

    out = []
    for i in range(n):
        safe = bool(rng.random() < 0.8)
        rho = num(tuple(x for x in EDGE if abs(x) <= 1))  # masses stay summable
        offer = 0.7 if rng.random() < 0.8 else (None if rng.random() < 0.5 else num())
        joint = rho * 0.7 if rng.random() < 0.7 else num()
        control = rho * (1 - 0.7) if rng.random() < 0.7 else num()
        rag = RAG_CODES[rng.integers(len(RAG_CODES))]
        out.append(
            Candidate(
                f"ins-{i:05d}",
                rho,
                offer,
                joint,
                control,
                safe,
                maybe(),
                maybe(),
                maybe(),
                maybe(),
                rag,
            )
        )
    return tuple(out)


@pytest.fixture
def cands() -> tuple[Candidate, ...]:
    return tuple(
        Candidate(f"c{i}", 0.1 * i, 0.7 if i != 2 else None, 0.07 * i, 0.03 * i, i != 2)
        for i in range(5)
    )


def test_a_table_is_the_tuple_it_stands_for(cands: tuple[Candidate, ...]) -> None:
    table = CandidateTable.of(cands)
    assert len(table) == 5 and bool(table) and not CandidateTable.of(())
    assert tuple(table) == cands and list(table) == list(cands)
    assert table[0] == cands[0] and table[-1] == cands[-1] and table[-5] == cands[0]
    assert table[1:3] == cands[1:3] and table[::-1] == cands[::-1]
    with pytest.raises(IndexError):
        table[5]
    with pytest.raises(IndexError):
        table[-6]
    assert table == cands and cands == table
    assert not table.__ne__(cands)
    assert table != cands[:4] and cands[:4] != table and table != cands[::-1]
    assert table == CandidateTable.of(list(cands)) and hash(table) == hash(cands)
    assert {table: 1}[cands] == 1  # equal, so the same dictionary key
    assert cands[3] in table and table.index(cands[3]) == 3 and table.count(cands[0]) == 1
    assert "c4" in repr(table) and "Candidate(" in repr(CandidateTable.of(cands[:2]))
    assert table.card_ids == ("c0", "c1", "c2", "c3", "c4")
    assert table.get("c3") == cands[3] and table.get("nope") is None


def test_a_table_is_immutable_and_pickles(cands: tuple[Candidate, ...]) -> None:
    table = CandidateTable.of(cands)
    with pytest.raises(AttributeError, match="immutable"):
        table.card_ids = ()  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        table.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="immutable"):
        del table.rho
    with pytest.raises(ValueError, match="read-only"):
        table.rho[0] = 1.0
    with pytest.raises(TypeError):
        CandidateTable()
    back = pickle.loads(pickle.dumps(table))
    assert isinstance(back, CandidateTable) and back == table and tuple(back) == cands
    assert copy.deepcopy(table) == table


@pytest.mark.parametrize("seed", range(6))
def test_random_candidates_round_trip_bit_exactly(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    cands = _random_candidates(rng, int(rng.integers(1, 40)))
    table = CandidateTable.of(cands)
    assert [_bits(c) for c in table] == [_bits(c) for c in cands]
    assert [_bits(table[i]) for i in range(len(cands))] == [_bits(c) for c in cands]
    base = decision_over(0, tuple(card(i) for i in range(len(cands))))
    # masses of random candidates do not sum to 1: give the difference to rho_0
    rho0 = 1.0 - table.rho_sum()
    row = dataclasses.replace(
        base,
        candidates=cands,
        rho0=rho0,
        abstain=True,
        proposed_id=None,
        z=None,
        offer=None,
        rho=None,
        joint=None,
        q0=None,
        q1=None,
        r0=None,
        r1=None,
    )
    with SelectionEvidence(tmp_path).open() as ledger:
        ledger.append_decision(row)
    with SelectionEvidence(tmp_path).open(censor_orphans=False) as fresh:
        (back,) = fresh.decisions()
    assert back == row
    assert isinstance(back.candidates, CandidateTable)
    assert [_bits(c) for c in back.candidates] == [_bits(c) for c in cands]


def test_the_reader_constructor_derives_joints_exactly() -> None:
    rho = np.array([0.1, 1 / 3, 0.0, 5e-324, 0.2])
    safe = np.array([True, True, False, True, True])
    table = CandidateTable.from_columns(
        ["a", "b", "c", "d", "e"],
        rho,
        safe,
        0.7,
        rag=["applicable", None, None, None, None],
        extra={"mean_effect": {1: 0.25}, "mc_se": {4: None}},
    )
    want = tuple(
        Candidate(
            cid,
            r,
            0.7 if s else None,
            r * 0.7,
            r * (1.0 - 0.7),
            bool(s),
            mean_effect=0.25 if cid == "b" else None,
            rag="applicable" if cid == "a" else None,
        )
        for cid, r, s in zip("abcde", rho.tolist(), safe, strict=True)
    )
    assert [_bits(c) for c in table] == [_bits(c) for c in want]
    assert table == want and table.columns()["offer_joint"] == [c.offer_joint for c in want]
    with pytest.raises(ValueError, match="differ in length"):
        CandidateTable.from_columns(["a"], [0.1, 0.2], [True], 0.7)
    with pytest.raises(ValueError, match="RAG label"):
        CandidateTable.from_columns(["a"], [0.1], [True], 0.7, rag=["maybe"])  # type: ignore[list-item]


def test_tables_with_equal_ids_share_one_id_tuple() -> None:
    ids = [f"ins-{i}" for i in range(100)]
    one = CandidateTable.from_columns(ids, np.zeros(100), np.ones(100, bool), 0.7)
    two = CandidateTable.from_columns(list(ids), np.zeros(100), np.ones(100, bool), 0.7)
    assert one.card_ids is two.card_ids


def test_decoded_candidate_ids_are_the_universe_strings(tmp_path: Path) -> None:
    cards = tuple(card(i) for i in range(30))
    with SelectionEvidence(tmp_path).open() as ledger:
        for a in range(3):
            ledger.append_decision(decision_over(a, cards))
    candidates_module._RECENT_IDS.clear()  # no id tuple of the writer to share
    with SelectionEvidence(tmp_path).open(censor_orphans=False) as fresh:
        back = fresh.decisions()
    first = back[0]
    assert all(
        c.card_id is s.card_id for c, s in zip(first.candidates, first.universe, strict=True)
    )
    assert all(d.candidates.card_ids is first.candidates.card_ids for d in back)  # type: ignore[attr-defined]


def test_version_2_candidate_columns_are_unchanged(tmp_path: Path) -> None:
    """The ``candidate_columns`` body format of schema version 2 is kept as it was."""
    row = decision_over(0, tuple(card(i) for i in range(3)))
    with SelectionEvidence(tmp_path).open() as ledger:
        ledger.append_decision(row)
    conn = sqlite3.connect(tmp_path / EVIDENCE_FILE)
    (body,) = conn.execute("SELECT body FROM decisions").fetchone()
    conn.close()
    columns = json.loads(body_text(body))["candidate_columns"]
    assert list(columns) == sorted(f.name for f in dataclasses.fields(Candidate))
    assert columns["rho"] == [c.rho for c in row.candidates]
    assert columns["offer"] == [0.7] * 3 and columns["rag"] == [None] * 3
