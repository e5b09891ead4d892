"""Cards leaving the bank: the ``card`` rows of retired and evicted cards, and retirement.

``retire_cards`` deletes cards in one bank transaction whose ``retired`` rows
are one unit with it (``WriteLedger.intend`` / ``commit``), and tombstones them.
"""

from __future__ import annotations

from collections.abc import Callable

from gigaevo.memory.v2.bank.cards import Card
from gigaevo.memory.v2.bank.store import LocalMemoryStore
from gigaevo.memory.v2.bank.tombstones import Tombstones
from gigaevo.memory.v2.write.edits import retire
from gigaevo.memory.v2.write.ledger import CandidateText, LedgerRow, Witness, WriteLedger, stamp


def card_row(card: Card, outcome: str, reason: str, run_id: str) -> LedgerRow:
    """The ``card`` ledger row of a retired or evicted card."""
    ts, when = stamp()
    return LedgerRow(
        ts=ts,
        time=when,
        run_id=run_id,
        task_key=card.task_key,
        item="card",
        outcome=outcome,  # type: ignore[arg-type]
        reason=reason,
        card_id=card.id,
        revision=card.revision,
        candidate=CandidateText(card.description, card.explanation_summary),
    )


def retire_cards(
    store: LocalMemoryStore,
    ledger: WriteLedger,
    tombstones: Tombstones,
    card_ids: list[str],
    reason: str,
    *,
    run_id: str,
    still_retirable: Callable[[Card], bool] | None = None,
) -> list[str]:
    """Delete ``card_ids`` in one bank transaction; tombstone them and ledger ``retired`` rows.

    ``still_retirable`` (the admission gate) is asked about the newest revision
    of each card inside the transaction; a card it refuses stays. It is asked
    only about ids still in the bank. Returns the ids actually removed, in
    ``card_ids`` order. Needs no librarian, so it also serves runs that author
    nothing.
    """

    rows: list[LedgerRow] = []

    def apply(cards: dict[str, Card]) -> list[Card]:
        keep = still_retirable or (lambda card: True)
        removed = retire(cards, [i for i in card_ids if i in cards and keep(cards[i])])
        rows[:] = [card_row(card, "retired", reason, run_id) for card in removed]
        if removed:  # the rows and the deletion are one unit of the ledger
            ledger.intend(rows, Witness(absent=tuple(c.id for c in removed)))
        return removed

    removed = store.transaction(apply)
    for card in removed:
        tombstones.bury(card)
    ledger.commit(rows)
    return [c.id for c in removed]
