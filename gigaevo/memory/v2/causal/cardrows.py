"""A decision's candidate cards and their treated rows (memory-model.md "Policy"): the cards
as columns kept with them (``CandidateSet``: ids, (kind, RAG label) codes, lineage blocks),
each card's treated row at the decision context (``card_rows``, dense or a ``BlockDesign``)
and P_acc per candidate (``AcceptanceMap``). ``selection`` composes a decision from them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from gigaevo.memory.v2.causal.arrowhead import DENSE_MAX_SIZE, BlockDesign
from gigaevo.memory.v2.causal.chance import AcceptanceArrays
from gigaevo.memory.v2.causal.features import DesignSpace
from gigaevo.memory.v2.causal.invalidity import Acceptance


@dataclass(frozen=True)
class CandidateCard:
    """A candidate card at decision time (treatment id, lineage, kind, current RAG label)."""

    card_id: str
    lineage: str
    kind: str | None = None
    rag: str | None = None


class CandidateSet(Sequence[CandidateCard]):
    """Candidate cards with their per-card columns, computed once and kept.

    A reader builds one per bank state and takes the eligible cards of each decision out of
    it (``take``), so the card ids, the (kind, RAG label) of each card and its lineage block
    in a design space are arrays looked up, not rebuilt card by card in every decision.
    Any sequence of ``CandidateCard`` is taken (``of``); the set behaves as the tuple of its
    cards.
    """

    def __init__(self, cards: Sequence[CandidateCard]) -> None:
        self.cards = tuple(cards)
        self._objects = np.empty(len(self.cards), dtype=object)
        self._objects[:] = self.cards
        self.ids: tuple[str, ...] = tuple(c.card_id for c in self.cards)
        self._id_array = np.empty(len(self.ids), dtype=object)
        self._id_array[:] = self.ids
        self._ascending: bool | None = None
        self._codes: tuple[np.ndarray, tuple[tuple[str | None, str | None], ...]] | None = None
        self._blocks: tuple[DesignSpace, np.ndarray] | None = None  # the last space's

    @classmethod
    def of(cls, cards: Sequence[CandidateCard]) -> CandidateSet:
        """``cards`` as a set (returned as is when it already is one)."""
        return cards if isinstance(cards, CandidateSet) else cls(cards)

    def take(self, positions: np.ndarray) -> CandidateSet:
        """The cards at ``positions`` (ascending), with the columns already computed."""
        out = object.__new__(CandidateSet)
        out.cards = tuple(self._objects[positions].tolist())
        out._objects = self._objects[positions]
        out._id_array = self._id_array[positions]
        out.ids = tuple(out._id_array.tolist())
        out._ascending = True if self._ascending else None  # a subsequence keeps the order
        codes, blocks = self._codes, self._blocks
        out._codes = None if codes is None else (codes[0][positions], codes[1])
        out._blocks = None if blocks is None else (blocks[0], blocks[1][positions])
        return out

    def __len__(self) -> int:
        return len(self.cards)

    @overload
    def __getitem__(self, index: int) -> CandidateCard: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[CandidateCard, ...]: ...
    def __getitem__(self, index: int | slice) -> CandidateCard | tuple[CandidateCard, ...]:
        return self.cards[index]

    def __iter__(self) -> Iterator[CandidateCard]:
        return iter(self.cards)

    def id_list(self, positions: np.ndarray) -> list[str]:
        """The ids of the cards at ``positions``."""
        return self._id_array[positions].tolist()

    @property
    def ascending(self) -> bool:
        """Whether the ids are in ascending order."""
        if self._ascending is None:
            self._ascending = not any(a > b for a, b in itertools.pairwise(self.ids))
        return self._ascending

    def codes(self) -> tuple[np.ndarray, tuple[tuple[str | None, str | None], ...]]:
        """(each card's code, the distinct (kind, RAG label) pairs in order of appearance)."""
        if self._codes is None:
            kinds: dict[tuple[str | None, str | None], int] = {}
            which = np.fromiter(
                (kinds.setdefault((c.kind, c.rag), len(kinds)) for c in self.cards),
                dtype=int,
                count=len(self.cards),
            )
            which.flags.writeable = False
            self._codes = (which, tuple(kinds))
        return self._codes

    def blocks(self, space: DesignSpace) -> np.ndarray:
        """Each card's lineage block in ``space`` (kept for the last space object)."""
        if self._blocks is None or self._blocks[0] is not space:
            index = space.lineage_position
            block = np.fromiter(
                (index(c.lineage) for c in self.cards), dtype=int, count=len(self.cards)
            )
            block.flags.writeable = False
            self._blocks = (space, block)
        return self._blocks[1]


class AcceptanceMap(Mapping[str, Acceptance]):
    """P_acc per candidate id (a read-only mapping in candidate order): the cards of a block
    of exchangeable cards share one ``Acceptance``, so it is kept as each card's
    representative and the representatives' results instead of one dict entry a card."""

    def __init__(self, ids: tuple[str, ...], rep: np.ndarray, accepted: AcceptanceArrays):
        self.ids, self._rep, self._accepted = ids, rep, accepted
        self._index: dict[str, int] | None = None

    def __getitem__(self, card_id: str) -> Acceptance:
        if self._index is None:
            self._index = {cid: i for i, cid in enumerate(self.ids)}
        return self._accepted.at(int(self._rep[self._index[card_id]]))

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)


def card_rows(
    space: DesignSpace, x: np.ndarray, cards: Sequence[CandidateCard]
) -> np.ndarray | BlockDesign:
    """Treated rows z_1 of ``cards`` at context x, in card order.

    Dense (J, P) up to ``DENSE_MAX_SIZE`` columns (the reference path). Wider spaces get a
    ``BlockDesign`` built in O(J (P_s + C)): each row is taken from a one-lineage space with
    the same contrasts (so it matches ``space.row`` exactly), and its block index from
    ``space.lineage_slice``.
    """
    if space.size <= DENSE_MAX_SIZE:
        return np.array([space.row(x, 1, c.lineage, c.kind, c.rag) for c in cards])
    unit = DesignSpace(
        space.n_context, ("",), kind_contrast=space.kind_contrast, rag_contrast=space.rag_contrast
    )
    ps = space.shared_size
    cset = CandidateSet.of(cards)
    which, kinds = cset.codes()  # each card's (kind, RAG label), kept with the cards
    distinct = np.array([unit.row(x, 1, "", kind, rag) for kind, rag in kinds]).reshape(
        len(kinds), ps + space.n_context
    )
    # every card's row, taken from its (kind, label)'s: each part gathered straight into
    # its own contiguous array (one copy of the cards' rows, not two)
    shared = np.ascontiguousarray(distinct[:, :ps])[which]
    part = np.ascontiguousarray(distinct[:, ps:])[which]
    return BlockDesign(shared, cset.blocks(space), part, len(space.lineages))


def _take(rows: np.ndarray | BlockDesign, idx: np.ndarray) -> np.ndarray | BlockDesign:
    """The rows at positions ``idx`` (ints), in that order (a block design taking every row
    in order: itself, not a copy; the designs are never written to). The positions stay an
    array: as lists, 10,000 of them were built and compared element by element."""
    at = np.asarray(idx, dtype=int)
    if isinstance(rows, BlockDesign):
        n = len(rows.lineage)
        if len(at) == n and (n == 0 or (at[0] == 0 and np.all(np.diff(at) == 1))):
            return rows
        return rows.take(at)
    return rows[at]
