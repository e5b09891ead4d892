"""Memory v2: the causal card memory. This package holds its write side.

- ``cards``: the card model (insight and program cards, pooled evidence,
  representatives, compact use trials), ids and payload digests.
- ``store``: ``LocalMemoryStore``, the durable ``cards.json`` bank with its
  locks and atomic replace, and its process-local faiss index (``index``,
  ``embed``); ``bankfile`` is the file format.
- ``librarian``: the writer: author DROP or one card, retrieve same-kind
  neighbours, judge NEW or EQUIVALENT, admit or pool (``edits``); program
  exemplars bounded per task; ``agents`` holds the LLM agents and their
  prompts (``prompts/*.txt``).
- ``ledger``: ``write_ledger.jsonl``; ``tombstones``: retired ids and payloads.
- ``provider``: ``CardBankMemory``, the memory=v2 provider; with
  ``selection="causal"`` it delegates to ``reader`` (``CausalReader``: head
  fits, randomised offer/withhold, decision rows, leases) and ``outcomes``
  (``OutcomeRecorder``: terminals, edges, lineage rows, ``ope_summary.json``);
  with ``selection="none"`` its ``decide`` abstains.
"""

from gigaevo.memory.v2.agents import AuthoredCard, CardAuthor, EquivalenceJudge, Verdict
from gigaevo.memory.v2.audit import DuplicateAudit, audit_duplicates
from gigaevo.memory.v2.bankfile import BankHeader, read_bank
from gigaevo.memory.v2.cards import (
    Card,
    Evidence,
    Representative,
    UseTrial,
    card_brief,
    payload_digest,
    render_card,
)
from gigaevo.memory.v2.embed import Embedder, HashingEmbedder
from gigaevo.memory.v2.errors import (
    AgentAnswerError,
    BankLockTimeout,
    CardFormatError,
    CorruptBankError,
    IngestTimeout,
    MemoryConfigError,
)
from gigaevo.memory.v2.ledger import OUTCOMES, LedgerRow, WriteLedger, read_ledger
from gigaevo.memory.v2.librarian import Librarian
from gigaevo.memory.v2.outcome import WriterOutcome, is_strictly_valid, writer_outcome
from gigaevo.memory.v2.provider import STATS_FILE, CardBankMemory
from gigaevo.memory.v2.settings import MemorySettings
from gigaevo.memory.v2.store import LocalMemoryStore
from gigaevo.memory.v2.tombstones import Tombstones

__all__ = [
    "OUTCOMES",
    "STATS_FILE",
    "AgentAnswerError",
    "AuthoredCard",
    "BankHeader",
    "BankLockTimeout",
    "Card",
    "CardAuthor",
    "CardBankMemory",
    "CardFormatError",
    "CorruptBankError",
    "DuplicateAudit",
    "Embedder",
    "EquivalenceJudge",
    "Evidence",
    "HashingEmbedder",
    "IngestTimeout",
    "LedgerRow",
    "Librarian",
    "LocalMemoryStore",
    "MemoryConfigError",
    "MemorySettings",
    "Representative",
    "Tombstones",
    "UseTrial",
    "Verdict",
    "WriteLedger",
    "WriterOutcome",
    "audit_duplicates",
    "card_brief",
    "is_strictly_valid",
    "payload_digest",
    "read_bank",
    "read_ledger",
    "render_card",
    "writer_outcome",
]
