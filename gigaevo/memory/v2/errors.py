"""Named error conditions of the card memory (memory=v2)."""

from __future__ import annotations

from gigaevo.memory.base import MemoryUsageError


class MemoryConfigError(MemoryUsageError, ValueError):
    """A ``memory.*`` setting is unusable or contradicts another; the message names the key."""


class CorruptBankError(MemoryUsageError):
    """``cards.json`` exists but does not parse as a card bank.

    The file is left exactly as found (never overwritten) and the run stops.
    """


class CardFormatError(ValueError):
    """A card or ledger record does not match its schema (unknown key, wrong type)."""


class BankLockTimeout(TimeoutError):
    """A bank lock (``cards.json.lock`` or the authoring lock) was not acquired in time."""


class AgentAnswerError(RuntimeError):
    """A memory agent (card author, equivalence judge) gave no usable answer.

    Attributes:
        raw: the last raw answer text, kept for the audit trail (never banked).
    """

    def __init__(self, message: str, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw


class IngestTimeout(TimeoutError):
    """One author -> retrieve -> judge chain ran past ``writer.ingest_call_timeout_s``."""
