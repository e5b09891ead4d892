"""Retirement tombstones: retired ids and payloads refused for the rest of the process.

When a card is causally retired, its id and the exact normalised authored
payload (kind, description, explanation) are remembered in memory. A later
candidate with the same payload is refused (``rejected_retired``), which stops
a deterministic author from re-admitting what was just retired. A genuinely
different formulation is still eligible. Nothing is persisted: a resumed run
rebuilds its own from the ``retired`` rows of its write ledger (``remember``);
there is no durable compatibility registry.
"""

from __future__ import annotations

from gigaevo.memory.v2.bank.cards import Card, payload_digest


class Tombstones:
    """The process-lifetime set of retired card ids and payload digests."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._payloads: set[str] = set()

    def __len__(self) -> int:
        return len(self._ids)

    def bury(self, card: Card) -> None:
        """Remember a retired card: its id, its aliases and its normalised payload."""
        self._ids.add(card.id)
        self._ids.update(card.aliases)
        self._payloads.add(card.text_digest)

    def remember(self, card_id: str, digest: str) -> None:
        """Remember a card retired earlier in this run (from its ``retired`` ledger row)."""
        self._ids.add(card_id)
        self._payloads.add(digest)

    def is_retired_id(self, card_id: str) -> bool:
        return card_id in self._ids

    def is_retired_payload(self, kind: str, description: str, explanation_summary: str) -> bool:
        """True when this exact normalised payload belongs to a retired card."""
        return payload_digest(kind, description, explanation_summary) in self._payloads
