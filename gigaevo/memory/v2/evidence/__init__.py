"""The causal ledger of memory v2 (``memory_v2_selection_evidence.sqlite3``).

- ``rows``: the immutable row records (decision, terminal, mutation edge,
  lineage) and their canonical JSON / SHA-256.
- ``ledger``: ``SelectionEvidence``, the append-only SQLite ledger with hash
  checks on read, ``BEGIN IMMEDIATE`` writes and startup-orphan censoring.
- ``universe``: card snapshots and universes stored once by content hash
  (schema version 2), referenced from decision bodies.
- ``candidates``: ``Candidate`` and ``CandidateTable``, a decision's candidates
  held as columns (a tuple of ``Candidate`` to its callers).
- ``fitsets``: the fitted row ids stored once per fit as a content-addressed
  delta chain (schema version 3), ``RowIdSet`` in memory.
- ``build``: rows from the engine's ``MutationContext`` / ``MutationResult``
  (grounded cited set, raw oriented gain, censoring of discarded children).
- ``queries``: which rows train which head (memory-model.md "Rows and eligibility"), OPE rows and
  the evidence version V.
- ``errors``: ``LedgerIntegrityError`` and the other named conditions (also
  those of the selection leases, ``gigaevo.memory.v2.read.leases``).
"""

from gigaevo.memory.v2.evidence.build import (
    edge_from_result,
    frozen_context,
    raw_gain,
    reward_definition,
    terminal_from_result,
)
from gigaevo.memory.v2.evidence.candidates import CandidateTable
from gigaevo.memory.v2.evidence.errors import (
    DuplicateRowError,
    LeaseCapReachedError,
    LeaseFileCorruptError,
    LeaseLockTimeoutError,
    LedgerIntegrityError,
    RowRejectedError,
)
from gigaevo.memory.v2.evidence.fitsets import RowIdSet
from gigaevo.memory.v2.evidence.ledger import EVIDENCE_FILE, SelectionEvidence
from gigaevo.memory.v2.evidence.queries import (
    HEADS,
    Head,
    Observation,
    evidence_version,
    head_rows,
    lineage_rows,
    ope_eligible,
    usefulness_eligible,
)
from gigaevo.memory.v2.evidence.rows import (
    NO_CHILD,
    STARTUP_ORPHAN,
    Candidate,
    CardSnapshot,
    DecisionRow,
    Diagnostic,
    EdgeRow,
    FrozenContext,
    LineageRow,
    PendingCount,
    RewardDefinition,
    TerminalRow,
    canonical_json,
    censored_terminal,
    decision_key_id,
)

__all__ = [
    "EVIDENCE_FILE",
    "HEADS",
    "NO_CHILD",
    "STARTUP_ORPHAN",
    "Candidate",
    "CandidateTable",
    "CardSnapshot",
    "DecisionRow",
    "Diagnostic",
    "DuplicateRowError",
    "EdgeRow",
    "FrozenContext",
    "Head",
    "LeaseCapReachedError",
    "LeaseFileCorruptError",
    "LeaseLockTimeoutError",
    "LedgerIntegrityError",
    "LineageRow",
    "Observation",
    "PendingCount",
    "RewardDefinition",
    "RowIdSet",
    "RowRejectedError",
    "SelectionEvidence",
    "TerminalRow",
    "canonical_json",
    "censored_terminal",
    "decision_key_id",
    "edge_from_result",
    "evidence_version",
    "frozen_context",
    "head_rows",
    "lineage_rows",
    "ope_eligible",
    "raw_gain",
    "reward_definition",
    "terminal_from_result",
    "usefulness_eligible",
]
