"""The universe of a decision as card snapshots, rendered once per card revision.

A decision freezes every eligible card as it stood (memory-model.md "Rows and eligibility": id,
absorbed ids, kind,
delivered text and its digest). Rendering a thousand cards per decision costs more than
the rest of the row, so ``SnapshotCache`` keeps each card's snapshot until the card
changes, and hands back the very same universe tuple while nothing changed (the ledger
then reuses its serialised universe). ``lease_counts`` counts pending outcomes per card.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from gigaevo.memory.v2.bank.cards import Card, render_card
from gigaevo.memory.v2.evidence import CardSnapshot
from gigaevo.memory.v2.read.leases import Lease


def card_snapshot(card: Card) -> CardSnapshot:
    """The card as a decision freezes it: ids, kind, the text a prompt shows and its digest."""
    text = render_card(card)
    return CardSnapshot(
        card_id=card.id,
        absorbed_ids=tuple(card.aliases),
        kind=card.kind,
        text=text,
        text_digest=hashlib.sha256(text.encode()).hexdigest(),
    )


class SnapshotCache:
    """Snapshots by card id, each with the card object and the key it was rendered from."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[Card, tuple[Any, ...], CardSnapshot]] = {}
        self.current: tuple[CardSnapshot, ...] = ()  # the last universe handed out

    def universe(self, cards: Sequence[Card]) -> tuple[CardSnapshot, ...]:
        """The universe's snapshots, rendered once per card revision.

        The same tuple object comes back while no snapshot changed, so the ledger can
        reuse its serialised universe.
        """
        snaps = []
        for card in cards:
            hit = self._cache.get(card.id)
            if hit is None or (hit[0] is not card and hit[1] != _snapshot_key(card)):
                hit = (card, _snapshot_key(card), card_snapshot(card))
                self._cache[card.id] = hit
            snaps.append(hit[2])
        if len(snaps) != len(self.current) or any(
            a is not b for a, b in zip(snaps, self.current, strict=True)
        ):
            self.current = tuple(snaps)
        if len(self._cache) > 2 * max(len(cards), 64):  # drop retired cards
            live = {c.id for c in cards}
            self._cache = {k: v for k, v in self._cache.items() if k in live}
        return self.current


def _snapshot_key(card: Card) -> tuple[Any, ...]:
    """What a card's snapshot depends on (its rendered text, aliases and kind)."""
    return (card.id, card.revision, card.kind, card.aliases, card.description,
            card.explanation_summary)  # fmt: skip


def lineage_owners(universe: Sequence[CardSnapshot]) -> dict[str, tuple[int, ...]]:
    """Lineage id (a card's id or an absorbed id) -> positions of the snapshots holding it,
    ascending.

    One tuple per id, and no set or list per snapshot: a card without absorbed ids (most
    of them) is its own one-id lineage. At 10,000 cards the lists and sets made a bank
    change allocate three containers a card, enough to set off a full collection of the
    process's heap (about 80 ms there).
    """
    owners: dict[str, tuple[int, ...]] = {}
    get = owners.get
    for i, snap in enumerate(universe):
        for lid in snap.lineage_ids if snap.absorbed_ids else (snap.card_id,):
            at = get(lid)
            owners[lid] = (i,) if at is None else (*at, i)
    return owners


def lease_counts(universe: Sequence[CardSnapshot], leases: Sequence[Lease]) -> dict[str, int]:
    """Pending outcomes per card: the active leases touching its lineage (id or alias)."""
    pending = dict.fromkeys((s.card_id for s in universe), 0)
    pending.update(pending_counts(universe, leases))
    return pending


def pending_counts(
    universe: Sequence[CardSnapshot],
    leases: Sequence[Lease],
    owners: dict[str, tuple[int, ...]] | None = None,
) -> dict[str, int]:
    """``lease_counts`` of the cards that have pending outcomes (a card left out has none),
    looked up from the leases' lineage ids. ``owners``: ``lineage_owners(universe)`` when
    the caller keeps it."""
    if not leases:
        return {}
    touched = {i for lease in leases for i in lease.lineage_ids}
    owners = lineage_owners(universe) if owners is None else owners
    pending: dict[str, int] = {}
    for at in sorted({p for lid in touched for p in owners.get(lid, ())}):
        ids = universe[at].lineage_ids
        pending[universe[at].card_id] = sum(1 for lease in leases if lease.touches(ids))
    return pending
