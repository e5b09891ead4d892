"""Named error conditions of the causal ledger and the selection leases."""

from __future__ import annotations

from gigaevo.memory.base import MemoryUsageError


class LedgerIntegrityError(MemoryUsageError):
    """A ledger row failed its content-hash check or its schema on read.

    The ledger is left exactly as found and every later call on the same
    ``SelectionEvidence`` raises again: the run stops loudly.
    """


class DuplicateRowError(ValueError):
    """A second decision for one attempt, or a second terminal for one decision."""


class RowRejectedError(ValueError):
    """A row contradicts the ledger (unknown decision, cited id not proposed, gain out of range)."""


class LeaseFileCorruptError(MemoryUsageError):
    """``selection_leases.json`` exists but does not parse; it is never overwritten."""


class LeaseCapReachedError(RuntimeError):
    """A card lineage already has the maximum number of pending outcomes (leases).

    Attributes:
        card_id: the card asked for.
        pending: how many live leases its lineage holds.
    """

    def __init__(self, card_id: str, pending: int) -> None:
        super().__init__(f"card {card_id!r} already has {pending} pending outcomes (lease refused)")
        self.card_id = card_id
        self.pending = pending


class LeaseLockTimeoutError(TimeoutError):
    """``selection_leases.json.lock`` was not acquired in time."""
