"""``SelectionEvidence``: the causal ledger ``memory_v2_selection_evidence.sqlite3``.

Append-only SQLite in ``checkpoint_dir`` holding decisions, terminals,
mutation edges and delayed-lineage rows (MODEL.md section 1). Rows are never
updated or deleted (triggers refuse it); a lineage row changes by appending
a higher ``version`` for the same root. Every row carries the SHA-256 of its
canonical JSON, checked whenever it is read; a mismatch raises
``LedgerIntegrityError`` and the instance refuses every later call.

Every read-then-write is one ``BEGIN IMMEDIATE`` transaction under the busy
timeout, so writers in several processes serialise and lose nothing. One
attempt owns one decision (UNIQUE run id + attempt) and one terminal (UNIQUE
decision id). Rows already verified are cached by table sequence number (they
are immutable); ``verify`` re-reads everything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sqlite3
from collections.abc import Collection
from pathlib import Path
from typing import Any

from gigaevo.memory.v2.evidence import sqlite as db
from gigaevo.memory.v2.evidence.errors import (
    DuplicateRowError,
    LedgerIntegrityError,
    RowRejectedError,
)
from gigaevo.memory.v2.evidence.owner import owner_dead, session_owner
from gigaevo.memory.v2.evidence.queries import (
    Head,
    Observation,
    evidence_version,
    head_rows,
    lineage_rows,
    ope_eligible,
)
from gigaevo.memory.v2.evidence.rows import (
    STARTUP_ORPHAN,
    DecisionRow,
    EdgeRow,
    LineageRow,
    TerminalRow,
    censored_terminal,
    decision_key_id,
)
from gigaevo.memory.v2.evidence.validate import check_terminal

EVIDENCE_FILE = "memory_v2_selection_evidence.sqlite3"


class SelectionEvidence:
    """The causal ledger of one run (see the module docstring).

    Args:
        checkpoint_dir: directory of the sqlite file.
        busy_timeout_s: how long a writer waits for another's transaction.
        owner: ``host:pid:nonce`` of this session (fresh by default).
    """

    def __init__(
        self, checkpoint_dir: str | Path, *, busy_timeout_s: float = 30.0, owner: str | None = None
    ) -> None:
        self.path = Path(checkpoint_dir) / EVIDENCE_FILE
        self.busy_timeout_s = busy_timeout_s
        self.owner = owner or session_owner()
        self._conn: sqlite3.Connection | None = None
        self._failure: LedgerIntegrityError | None = None
        self._cache: dict[str, dict[int, tuple[Any, str]]] = {t: {} for t in db.TABLES}

    def open(self, *, censor_orphans: bool = True) -> SelectionEvidence:
        """Create or open the ledger, verify every row, censor startup orphans.

        Raises:
            LedgerIntegrityError: a stored row fails its hash or schema check.
        """
        if self._conn is not None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = db.connect(str(self.path), self.busy_timeout_s)
        db.create_schema(self._conn)
        self.verify()
        if censor_orphans:
            self.censor_orphans()
        return self

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> SelectionEvidence:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- writes -----------------------------------------------------------------

    def append_decision(self, row: DecisionRow) -> None:
        """Commit a decision (before its prompt is exposed).

        Raises:
            DuplicateRowError: the attempt (run id, attempt) already has a decision.
            RowRejectedError: ``decision_id`` is not the digest of (run id, attempt).
        """
        if row.decision_id != decision_key_id(row.run_id, row.attempt):
            raise RowRejectedError(f"decision id {row.decision_id!r} is not its key's digest")
        body, sha = db.encode(row)
        sql = (
            "INSERT INTO decisions (decision_id, run_id, attempt, proposed_id, body, sha256)"
            " VALUES (?, ?, ?, ?, ?, ?)"
        )
        args = (row.decision_id, row.run_id, row.attempt, row.proposed_id, body, sha)
        with db.immediate(self._db()) as conn:
            try:
                conn.execute(sql, args)
            except sqlite3.IntegrityError as exc:
                raise DuplicateRowError(
                    f"attempt {row.attempt} of run {row.run_id!r} already has a decision"
                ) from exc

    def append_terminal(self, row: TerminalRow) -> None:
        """Commit the one terminal of a decision.

        Raises:
            DuplicateRowError: the decision already has a terminal.
            RowRejectedError: unknown decision, or the row contradicts it
                (base id, metric, cited set, gain outside the feasible interval).
        """
        body, sha = db.encode(row)
        with db.immediate(self._db()) as conn:
            decision = self._decision_in(conn, row.decision_id)
            if decision is None:
                raise RowRejectedError(f"terminal for unknown decision {row.decision_id!r}")
            check_terminal(decision, row)
            try:
                conn.execute(
                    "INSERT INTO terminals (decision_id, body, sha256) VALUES (?, ?, ?)",
                    (row.decision_id, body, sha),
                )
            except sqlite3.IntegrityError as exc:
                raise DuplicateRowError(
                    f"decision {row.decision_id!r} already has a terminal"
                ) from exc

    def record_edge(self, row: EdgeRow) -> EdgeRow:
        """Append a mutation edge; its per-island completion ordinal is assigned here.

        Returns:
            The row as stored (``ordinal`` = 1 + the island's last ordinal).

        Raises:
            DuplicateRowError: an edge with this ``edge_id`` exists.
        """
        with db.immediate(self._db()) as conn:
            (last,) = conn.execute(
                "SELECT COALESCE(MAX(ordinal), 0) FROM edges WHERE island = ?", (row.island,)
            ).fetchone()
            stored = dataclasses.replace(row, ordinal=int(last) + 1)
            body, sha = db.encode(stored)
            try:
                conn.execute(
                    "INSERT INTO edges (edge_id, island, ordinal, body, sha256)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (stored.edge_id, stored.island, stored.ordinal, body, sha),
                )
            except sqlite3.IntegrityError as exc:
                raise DuplicateRowError(f"edge {row.edge_id!r} already recorded") from exc
        return stored

    def append_lineage(self, row: LineageRow) -> None:
        """Append a lineage row version; it must be 1 + the root's latest version.

        Raises:
            RowRejectedError: unknown root decision or a version out of sequence.
        """
        body, sha = db.encode(row)
        with db.immediate(self._db()) as conn:
            if self._decision_in(conn, row.root_decision_id) is None:
                raise RowRejectedError(f"lineage row for unknown root {row.root_decision_id!r}")
            (last,) = conn.execute(
                "SELECT COALESCE(MAX(version), 0) FROM lineage WHERE root_decision_id = ?",
                (row.root_decision_id,),
            ).fetchone()
            if row.version != last + 1:
                raise RowRejectedError(
                    f"lineage row of {row.root_decision_id!r}: version {row.version}, "
                    f"expected {last + 1}"
                )
            conn.execute(
                "INSERT INTO lineage (root_decision_id, version, body, sha256) VALUES (?, ?, ?, ?)",
                (row.root_decision_id, row.version, body, sha),
            )

    def censor_orphans(self, reason: str = STARTUP_ORPHAN) -> int:
        """Give every decision without a terminal whose session is dead a censored terminal.

        Returns:
            How many decisions were censored.
        """
        count = 0
        with db.immediate(self._db()) as conn:
            for decision in self._open_decisions_in(conn):
                if not owner_dead(decision.owner, self.owner):
                    continue
                row = censored_terminal(decision, reason)
                body, sha = db.encode(row)
                conn.execute(
                    "INSERT INTO terminals (decision_id, body, sha256) VALUES (?, ?, ?)",
                    (row.decision_id, body, sha),
                )
                count += 1
        return count

    # ---- reads ------------------------------------------------------------------

    def verify(self) -> int:
        """Re-read and re-check every row (dropping the cache). Returns the row count.

        Raises:
            LedgerIntegrityError: a row fails its hash or schema check.
        """
        self._cache = {t: {} for t in db.TABLES}
        return sum(len(self._rows(t)) for t in db.TABLES)

    def decisions(self) -> tuple[DecisionRow, ...]:
        return tuple(row for row, _ in self._rows("decisions").values())

    def terminals(self) -> tuple[TerminalRow, ...]:
        return tuple(row for row, _ in self._rows("terminals").values())

    def edges(self, island: int | None = None) -> tuple[EdgeRow, ...]:
        rows = (row for row, _ in self._rows("edges").values())
        return tuple(r for r in rows if island is None or r.island == island)

    def lineage(self, *, latest: bool = True) -> tuple[LineageRow, ...]:
        """Lineage rows; with ``latest`` only each root's highest version."""
        return tuple(row for row, _ in self._lineage_with_sha(latest))

    def decision(self, decision_id: str) -> DecisionRow | None:
        """The decision with this id (hash-checked), or None."""
        return self._decision_in(self._db(), decision_id)

    def terminal(self, decision_id: str) -> TerminalRow | None:
        """The terminal of this decision (hash-checked), or None."""
        found = (
            self._db()
            .execute(
                "SELECT seq, body, sha256, decision_id FROM terminals WHERE decision_id = ?",
                (decision_id,),
            )
            .fetchone()
        )
        if found is None:
            return None
        seq, body, sha, *keys = found
        row: TerminalRow = self._decode("terminals", seq, body, sha, keys)
        return row

    def open_decisions(self) -> tuple[DecisionRow, ...]:
        """Decisions still waiting for their terminal."""
        closed = {t.decision_id for t in self.terminals()}
        return tuple(d for d in self.decisions() if d.decision_id not in closed)

    def observations(self) -> tuple[Observation, ...]:
        """Every decision that has a terminal, with both rows' hashes."""
        terms = {row.decision_id: (row, sha) for row, sha in self._rows("terminals").values()}
        out = []
        for decision, dsha in self._rows("decisions").values():
            if decision.decision_id in terms:
                term, tsha = terms[decision.decision_id]
                out.append(Observation(decision, term, dsha, tsha))
        return tuple(out)

    def head_rows(self, head: Head) -> tuple[Observation, ...]:
        """Usefulness-eligible rows of the ``immediate`` or ``invalidity`` head."""
        return head_rows(self.observations(), head)

    def lineage_head_rows(self) -> tuple[tuple[Observation, LineageRow], ...]:
        """Matured lineage rows of usefulness-eligible valid roots (the delayed head)."""
        return lineage_rows(self.observations(), self.lineage())

    def ope_rows(self) -> tuple[Observation, ...]:
        """All randomised, non-censored rows (both arms, cited or not)."""
        return tuple(o for o in self.observations() if ope_eligible(o))

    def pending_count(self, lineage_ids: Collection[str]) -> int:
        """Decisions proposing any of ``lineage_ids`` (card + aliases) with no terminal yet."""
        ids = set(lineage_ids)
        return sum(1 for d in self.open_decisions() if d.proposed_id in ids)

    def pending_by_proposal(self) -> dict[str, int]:
        """Pending decisions per proposed card id."""
        counts: dict[str, int] = {}
        for d in self.open_decisions():
            if d.proposed_id is not None:
                counts[d.proposed_id] = counts.get(d.proposed_id, 0) + 1
        return counts

    def evidence_version(self) -> str:
        """V over usefulness-eligible rows and each root's latest lineage row."""
        latest = [(row.root_decision_id, sha) for row, sha in self._lineage_with_sha(True)]
        return evidence_version(self.observations(), latest)

    def full_evidence_version(self) -> str:
        """Digest of every row of every table (audit; unlike V it moves with any row)."""
        h = hashlib.sha256(b"gigaevo.memory.v2.full-evidence.1\n")
        for table in db.TABLES:
            for seq, (_, sha) in sorted(self._rows(table).items()):
                h.update(f"{table} {seq} {sha}\n".encode())
        return h.hexdigest()

    # ---- internals --------------------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        if self._failure is not None:
            raise self._failure
        if self._conn is None:
            raise RuntimeError("SelectionEvidence is not open (call open())")
        return self._conn

    def _rows(self, table: str) -> dict[int, tuple[Any, str]]:
        """Verified (row, sha) of ``table`` by sequence number, reading only new rows."""
        cache = self._cache[table]
        last = max(cache, default=0)
        query = db.READ[table]
        for seq, body, sha, *keys in self._db().execute(query, (last,)):
            cache[seq] = (self._decode(table, seq, body, sha, keys), sha)
        return cache

    def _decode(self, table: str, seq: int, body: str, sha: str, keys: list[Any]) -> Any:
        cls, names = db.ROW_TYPES[table]
        try:
            return db.decode(cls, body, sha, f"{table}#{seq}", dict(zip(names, keys, strict=True)))
        except LedgerIntegrityError as exc:
            self._failure = exc
            raise

    def _lineage_with_sha(self, latest: bool) -> list[tuple[LineageRow, str]]:
        rows = list(self._rows("lineage").values())
        if not latest:
            return rows
        best: dict[str, tuple[LineageRow, str]] = {}
        for row, sha in rows:
            cur = best.get(row.root_decision_id)
            if cur is None or row.version > cur[0].version:
                best[row.root_decision_id] = (row, sha)
        return list(best.values())

    def _decision_in(self, conn: sqlite3.Connection, decision_id: str) -> DecisionRow | None:
        found = conn.execute(
            "SELECT seq, body, sha256, decision_id, run_id, attempt FROM decisions"
            " WHERE decision_id = ?",
            (decision_id,),
        ).fetchone()
        if found is None:
            return None
        seq, body, sha, *keys = found
        row: DecisionRow = self._decode("decisions", seq, body, sha, keys)
        return row

    def _open_decisions_in(self, conn: sqlite3.Connection) -> list[DecisionRow]:
        found = conn.execute(
            "SELECT seq, body, sha256, decision_id, run_id, attempt FROM decisions WHERE"
            " decision_id NOT IN (SELECT decision_id FROM terminals) ORDER BY seq"
        ).fetchall()
        return [self._decode("decisions", s, b, h, list(k)) for s, b, h, *k in found]
