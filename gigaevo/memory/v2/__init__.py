"""Memory v2: the causal card memory (``memory=v2``).

Map of the package (imports point down this list only; ``tests/test_layering.py``
checks it):

- ``errors``, ``records``: named error conditions; strict record <-> JSON conversion.
- ``blas``: one BLAS thread while a provider is open (a counted, process-wide limit).
- ``causal/``: the pure statistics (no I/O): context features and designs, the
  utility, lineage and invalidity heads, the chance constraint, the policy and
  its propensities, OPE, retirement, multitask transfer.
- ``evidence/``: the causal ledger ``memory_v2_selection_evidence.sqlite3``:
  immutable decision, terminal, edge and lineage rows, hash-checked, and the views
  over them that train the heads.
- ``settings``: the ``memory.*`` settings and their start-up validation.
- ``bank/``: the card bank shared between runs: the card model (``cards``), the
  ``cards.json`` file format (``bankfile``), ``LocalMemoryStore`` with its locks and
  faiss index (``store``, ``index``, ``embed``), tombstones of retired cards.
- ``write/``: the write side: the librarian (author DROP or one card, judge NEW or
  EQUIVALENT, admit or pool, program exemplars), its LLM agents and their prompts
  (``prompts/*.txt``), ``write_ledger.jsonl``, the duplicate audit.
- ``read/``: the read side: ``CausalReader`` (head fits, randomised offer or
  withhold, decision rows), applicability labels, selection leases, the outcome
  recorder (terminals, edges, lineage rows, ``ope_summary.json``), use-trial
  stamps, causal retirement (``evictor``) and ``memory_events.jsonl``.
- ``provider``: ``CardBankMemory``, the provider the engine talks to; it wires the
  write and read sides (``selection="none"``: its ``decide`` abstains).
"""

from gigaevo.memory.v2.bank.bankfile import BankHeader, read_bank
from gigaevo.memory.v2.bank.cards import (
    Card,
    Evidence,
    Representative,
    UseTrial,
    card_brief,
    payload_digest,
    render_card,
)
from gigaevo.memory.v2.bank.embed import Embedder, HashingEmbedder
from gigaevo.memory.v2.bank.store import LocalMemoryStore
from gigaevo.memory.v2.bank.tombstones import Tombstones
from gigaevo.memory.v2.errors import (
    AgentAnswerError,
    BankLockTimeout,
    CardFormatError,
    CorruptBankError,
    IngestTimeout,
    MemoryConfigError,
)
from gigaevo.memory.v2.provider import STATS_FILE, CardBankMemory
from gigaevo.memory.v2.settings import MemorySettings
from gigaevo.memory.v2.write.agents import AuthoredCard, CardAuthor, EquivalenceJudge, Verdict
from gigaevo.memory.v2.write.audit import DuplicateAudit, audit_duplicates
from gigaevo.memory.v2.write.ledger import OUTCOMES, LedgerRow, WriteLedger, read_ledger
from gigaevo.memory.v2.write.librarian import Librarian
from gigaevo.memory.v2.write.outcome import WriterOutcome, is_strictly_valid, writer_outcome

# The causal package imports scipy inside the functions that use it (an offline run that
# makes no decision never loads it); the first decision's head fits need these, so the
# pipeline imports them in its background thread while the sandbox workers start
# (gigaevo.llm.preload).
BACKGROUND_IMPORTS = ("scipy.special", "scipy.linalg", "scipy.sparse.linalg", "scipy.optimize")

__all__ = [
    "BACKGROUND_IMPORTS",
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
