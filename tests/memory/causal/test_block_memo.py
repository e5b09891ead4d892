"""What a decision keeps while the fit and the cards stand (issue 16, decision latency):
``exchangeable_blocks``' memo of the candidate rows and blocks, and the read side's lineage
owners index. Each is checked against the same computation without anything kept."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal import (
    BayesianLinearHead,
    BlockDesign,
    CandidateCard,
    DesignSpace,
    LogisticLaplaceHead,
)
from gigaevo.memory.v2.causal import selection as selection_module
from gigaevo.memory.v2.causal.selection import CandidateSet, card_rows, exchangeable_blocks
from gigaevo.memory.v2.evidence import CardSnapshot
from gigaevo.memory.v2.read.snapshots import lineage_owners

C = 5  # context width
TREATED = 6  # cards with rows; the others are steady (their prior) in every head


def _fit(
    n_cards: int, seed: int, first: int = 0
) -> tuple[DesignSpace, tuple[BayesianLinearHead, LogisticLaplaceHead]]:
    """Immediate and invalidity heads on 300 rows touching ``TREATED`` cards from ``first``."""
    rng = np.random.default_rng(seed)
    space = DesignSpace(C, tuple(f"L{i:04d}" for i in range(n_cards)), rag_contrast=True)
    rows, y, d = [], [], []
    for _ in range(300):
        x = np.r_[1.0, rng.uniform(-1, 1, C - 1)]
        j = first + int(rng.integers(TREATED))
        treated = rng.random() < 0.6
        rows.append(space.row(x, 1, space.lineages[j], "insight") if treated else space.row(x, 0))
        y.append(rng.normal(0.1 * treated, 0.1))
        d.append(float(rng.random() < 0.1))
    z, layout = np.array(rows), (space.shared_size, C)
    immediate = BayesianLinearHead(space.utility_prior_variance(), block_layout=layout)
    mu, v = space.invalidity_prior()
    invalidity = LogisticLaplaceHead(mu, v, layout).fit(z, np.array(d))
    return space, (immediate.fit(z, np.array(y), np.zeros(len(y))), invalidity)


def _cards(space: DesignSpace, seed: int) -> CandidateSet:
    """One card per lineage, each with one of two kinds and four RAG labels."""
    rng = np.random.default_rng(seed)
    kinds, rags = ("insight", "program"), (None, "applicable", "not_applicable", "unassessed")
    return CandidateSet.of([
        CandidateCard(f"c{i:04d}", lin, kinds[int(rng.integers(2))], rags[int(rng.integers(4))])
        for i, lin in enumerate(space.lineages)
    ])  # fmt: skip


def _fresh(heads, z1: BlockDesign, codes: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """``exchangeable_blocks`` with nothing kept: writable copies are never memoised."""
    copy = BlockDesign(z1.shared.copy(), z1.lineage.copy(), z1.lineage_part.copy(), z1.n_lineages)
    return exchangeable_blocks(heads, copy, codes.copy())


def _same(got: tuple[list[np.ndarray], np.ndarray], want: tuple[list[np.ndarray], np.ndarray]):
    assert len(got[0]) == len(want[0])
    for a, b in zip(got[0], want[0], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[1], want[1])


def test_kept_blocks_equal_fresh_ones_across_contexts_fits_and_thresholds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decisions at many contexts on one fit and one card set reuse the kept rows and
    blocks: the same blocks as computed afresh each time, whichever contexts make two
    (kind, label) rows equal; a new fit, a new card set and a new EXCHANGEABLE_MIN are
    each seen."""
    space, heads = _fit(160, 3)
    cards = _cards(space, 4)
    codes = cards.codes()[0]
    rng = np.random.default_rng(5)
    contexts = [np.r_[1.0, rng.uniform(-1, 1, C - 1)] for _ in range(6)]
    contexts.append(np.r_[1.0, np.zeros(C - 1)])  # every kind's row equal: one big block
    singles = []  # the fits and cards the candidate rows were looked for on
    found = selection_module._steady_singles

    def counted(z1: BlockDesign, steady: list[np.ndarray]) -> np.ndarray:
        singles.append(z1.lineage)
        return found(z1, steady)

    monkeypatch.setattr(selection_module, "_steady_singles", counted)
    for x in contexts * 2:  # each context twice: the second from the kept blocks
        z1 = card_rows(space, x, cards)
        assert isinstance(z1, BlockDesign) and not z1.lineage.flags.writeable
        got = exchangeable_blocks(heads, z1, codes)
        _same(got, _fresh(heads, z1, codes))
        assert got[0], "no exchangeable block: the check would be empty"
        assert all(not m.flags.writeable for m in (*got[0], got[1]))  # shared: read-only
    # the copies looked once per call, the kept blocks once for all 14 calls
    assert sum(lin.flags.writeable for lin in singles) == 14 and len(singles) == 15
    x = contexts[0]
    z1 = card_rows(space, x, cards)
    _, refitted = _fit(160, 6, first=TREATED)  # another fit: other cards hold rows
    got = exchangeable_blocks(refitted, z1, codes)
    _same(got, _fresh(refitted, z1, codes))
    assert [len(m) for m in got[0]] != [len(m) for m in _fresh(heads, z1, codes)[0]]
    exchangeable_blocks(heads, z1, codes)
    other = _cards(space, 7)  # other kinds and labels on the same lineage column
    z2 = card_rows(space, x, other)
    assert isinstance(z2, BlockDesign)
    np.testing.assert_array_equal(z2.lineage, z1.lineage)
    z2 = BlockDesign(z2.shared, z1.lineage, z2.lineage_part, z2.n_lineages)
    _same(exchangeable_blocks(heads, z2, other.codes()[0]), _fresh(heads, z2, other.codes()[0]))
    before = exchangeable_blocks(heads, z1, codes)
    monkeypatch.setattr(selection_module, "EXCHANGEABLE_MIN", 10**6)  # nobody is a block
    assert exchangeable_blocks(heads, z1, codes)[0] == []
    monkeypatch.setattr(selection_module, "EXCHANGEABLE_MIN", 32)
    _same(exchangeable_blocks(heads, z1, codes), before)


def test_lineage_owners_index_every_lineage_id_in_ascending_positions() -> None:
    """Each card id and absorbed id maps to the positions of every snapshot holding it, in
    order; an id absorbed by several cards, and a card listed twice, included."""
    rng = np.random.default_rng(9)
    universe = []
    for i in range(300):
        absorbed = tuple(f"a{int(k)}" for k in rng.integers(0, 40, size=int(rng.integers(0, 3))))
        cid = f"c{i:03d}" if i % 50 else "c000"  # c000 listed several times
        universe.append(CardSnapshot(cid, absorbed, "insight", "text", "0" * 64))
    want: dict[str, list[int]] = {}
    for i, snap in enumerate(universe):
        for lid in sorted({snap.card_id, *snap.absorbed_ids}):
            want.setdefault(lid, []).append(i)
    got = lineage_owners(universe)
    assert got == {lid: tuple(at) for lid, at in want.items()}
    assert all(isinstance(at, tuple) for at in got.values())
    assert lineage_owners([]) == {}
