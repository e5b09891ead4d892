"""The process-local vector index over the card bank (faiss, one flat index per scope).

A scope is (card kind, task key). Task-scoped retrieval searches one index;
whole-bank retrieval (multitask mode) searches every index of the kind and
merges. ``sync`` is incremental: only cards whose retrieval text is new are
embedded, removed cards leave their index, so refreshing after another
process wrote costs little more than reading the bank.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gigaevo.memory.v2.bank.cards import Card
from gigaevo.memory.v2.bank.embed import Embedder

Scope = tuple[str, str]  # (kind, task_key)


def _faiss() -> Any:
    """faiss, imported on first use; its loader's INFO lines about CPU builds are silenced.

    Searches run single-threaded: the flat indexes hold at most a few thousand
    small vectors, where OpenMP start-up costs far more than it saves (about
    19 ms against 1 ms per search at 1,000 cards on a busy 2-core machine) and
    competes with the sandbox workers for the cores.
    """
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    import faiss

    faiss.omp_set_num_threads(1)
    return faiss


@dataclass(frozen=True)
class Hit:
    """One retrieved card id with its cosine similarity to the query."""

    card_id: str
    score: float


class CardIndex:
    """Inner-product faiss indexes of card briefs, kept in step with the bank.

    Args:
        embedder: turns briefs (and queries) into unit vectors.
    """

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._indexes: dict[Scope, Any] = {}  # faiss.IndexIDMap2 over IndexFlatIP
        self._ids: dict[str, tuple[int, Scope, Card]] = {}  # card id -> (faiss id, scope, card)
        self._names: dict[int, str] = {}
        self._next = 0

    def __len__(self) -> int:
        return len(self._ids)

    def sync(self, cards: Iterable[Card]) -> int:
        """Make the index hold exactly ``cards``; returns how many briefs were embedded."""
        current = {c.id: c for c in cards}
        return self.update(current, [*current, *(i for i in self._ids if i not in current)])

    def update(self, cards: Mapping[str, Card], ids: Iterable[str]) -> int:
        """``sync`` for the ids ``ids`` only (the cards a write changed, added or removed:
        ``cards`` is the whole bank by id); returns how many briefs were embedded.

        New vectors are added in the order of ``ids`` (give bank order: faiss breaks
        ties between equal scores by insertion order)."""
        stale: list[str] = []
        fresh: list[Card] = []
        for cid in ids:
            card, held = cards.get(cid), self._ids.get(cid)
            if held is None:
                if card is not None:
                    fresh.append(card)
                continue
            fid, scope, seen = held
            if card is None or (
                card is not seen and (_scope(card) != scope or not _same_text(card, seen))
            ):
                stale.append(cid)
                if card is not None:
                    fresh.append(card)
            elif card is not seen:
                self._ids[cid] = (fid, scope, card)  # same text: it keeps its vector
        self._remove(stale)
        self._add(fresh)
        return len(fresh)

    def search(self, query: str, *, kind: str, task_key: str | None, k: int) -> list[Hit]:
        """The ``k`` nearest cards of ``kind``; ``task_key=None`` searches every task."""
        if k <= 0:
            return []
        scopes = [
            s for s in self._indexes if s[0] == kind and (task_key is None or s[1] == task_key)
        ]
        if not scopes:
            return []
        vector = self.embedder.embed([query])
        hits: list[Hit] = []
        for scope in scopes:
            index = self._indexes[scope]
            n = min(k, index.ntotal)
            if n == 0:
                continue
            scores, ids = index.search(vector, n)
            hits += [
                Hit(self._names[int(i)], float(s))
                for s, i in zip(scores[0], ids[0], strict=True)
                if i >= 0
            ]
        hits.sort(key=lambda h: (-h.score, h.card_id))
        return hits[:k]

    def _add(self, cards: list[Card]) -> None:
        if not cards:
            return
        vectors = self.embedder.embed([c.brief for c in cards])
        by_scope: dict[Scope, list[int]] = {}
        for row, card in enumerate(cards):
            fid = self._next
            self._next += 1
            self._ids[card.id] = (fid, _scope(card), card)
            self._names[fid] = card.id
            by_scope.setdefault(_scope(card), []).append(row)
        for scope, rows in by_scope.items():
            index = self._indexes.get(scope)
            if index is None:
                faiss = _faiss()
                index = self._indexes[scope] = faiss.IndexIDMap2(
                    faiss.IndexFlatIP(self.embedder.dim)
                )
            fids = np.array([self._ids[cards[r].id][0] for r in rows], dtype=np.int64)
            index.add_with_ids(np.ascontiguousarray(vectors[rows]), fids)

    def _remove(self, card_ids: list[str]) -> None:
        by_scope: dict[Scope, list[int]] = {}
        for cid in card_ids:
            fid, scope, _ = self._ids.pop(cid)
            del self._names[fid]
            by_scope.setdefault(scope, []).append(fid)
        for scope, fids in by_scope.items():
            self._indexes[scope].remove_ids(np.array(fids, dtype=np.int64))


def _scope(card: Card) -> Scope:
    return (card.kind, card.task_key)


def _same_text(a: Card, b: Card) -> bool:
    return a.description == b.description and a.explanation_summary == b.explanation_summary
