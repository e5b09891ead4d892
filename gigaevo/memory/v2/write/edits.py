"""Bank edits of the write path: admit a NEW card, pool an EQUIVALENT one, evict for capacity.

Each function here runs inside ``LocalMemoryStore.transaction``: it receives
the newest cards by id, edits them in place and returns what it did. Program
families are bounded per task; a family keeps its best representative per
task, and raw fitness is compared within one task only.
"""

from __future__ import annotations

from dataclasses import dataclass

from gigaevo.memory.v2.bank.cards import (
    Card,
    Evidence,
    Representative,
    pool_into,
    with_representative,
)


@dataclass(frozen=True)
class Edit:
    """What one transaction did: the outcome, the card concerned, why, and any eviction."""

    outcome: str
    card_id: str | None
    revision: int | None
    reason: str
    evicted: Card | None = None


def admit(
    cards: dict[str, Card],
    card: Card,
    *,
    max_cards: int | None,
    rep: Representative | None,
) -> Edit:
    """Add ``card`` unless its task's budget of its kind is full.

    Insight cards over ``max_cards`` are refused. A program card over budget
    replaces the task's weakest family when its representative ``rep`` beats
    that family's (fitness within the task only); otherwise it is refused.
    """
    if card.id in cards:
        return Edit("discarded", card.id, cards[card.id].revision, "already_ingested")
    evicted = None
    same = [] if max_cards is None else _same_scope(cards, card)
    if max_cards is not None and len(same) >= max_cards:
        weakest = _weakest(same, card.task_key) if card.kind == "program" else None
        weakest_rep = weakest.representative(card.task_key) if weakest else None
        if weakest is None or rep is None or weakest_rep is None or not rep.beats(weakest_rep):
            return Edit("rejected_capacity", None, None, f"{card.kind} budget {max_cards} full")
        evicted = cards.pop(weakest.id)
    cards[card.id] = card
    return Edit("added", card.id, card.revision, "new treatment", evicted)


def pool(
    cards: dict[str, Card],
    target_id: str,
    evidence: Evidence,
    provenance: tuple[str, ...],
    *,
    rep: Representative | None,
    now: float,
) -> Edit | None:
    """Pool an equivalent candidate's evidence into ``target_id``; None when the target is gone.

    The banked treatment text is never rewritten. For a program family, the
    candidate's representative replaces this task's one only when it is
    better (or when the family has none for this task yet).
    """
    target = cards.get(target_id)
    if target is None:
        return None
    updated = pool_into(target, evidence, provenance, now)
    reason = "evidence_pooled"
    if rep is not None:
        current = updated.representative(rep.task_key)
        if current is None or rep.beats(current):
            reason = "representative_added" if current is None else "representative_replaced"
            updated = with_representative(updated, rep, now)
    cards[target_id] = updated
    return Edit("updated", target_id, updated.revision, reason)


def retire(cards: dict[str, Card], card_ids: list[str]) -> list[Card]:
    """Remove ``card_ids`` (those still present); returns the removed cards."""
    return [cards.pop(cid) for cid in card_ids if cid in cards]


def _same_scope(cards: dict[str, Card], card: Card) -> list[Card]:
    return [c for c in cards.values() if c.kind == card.kind and c.task_key == card.task_key]


def _weakest(same: list[Card], task_key: str) -> Card | None:
    """The family whose representative for ``task_key`` is worst; families without one first."""
    worst: Card | None = None
    for card in same:
        rep = card.representative(task_key)
        if rep is None:
            return card
        current = worst.representative(task_key) if worst else None
        if current is None or current.beats(rep):
            worst = card
    return worst
