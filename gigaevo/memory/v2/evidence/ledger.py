"""``SelectionEvidence``: the causal ledger ``memory_v2_selection_evidence.sqlite3``.

Append-only SQLite in ``checkpoint_dir`` holding decisions, terminals,
mutation edges and delayed-lineage rows (memory-model.md "Rows and eligibility"). Rows are never
updated or deleted (triggers refuse it); a lineage row changes by appending
a higher ``version`` for the same root. Every row carries the SHA-256 of its
canonical JSON, checked whenever it is read; a mismatch raises
``LedgerIntegrityError`` and the instance refuses every later call. A
decision's universe is stored once per distinct content (``universe``: card
snapshots and universes keyed by their SHA-256, referenced from the decision
body and checked when first read), and so are the ids its heads were fitted on
(``fitsets``: one delta-chain link per fit); the in-memory ``DecisionRow`` keeps
its candidates as columns (``CandidateTable``) and shares one ``RowIdSet`` per fit.

Every read-then-write is one ``BEGIN IMMEDIATE`` transaction under the busy
timeout, so writers in several processes serialise and lose nothing. One
attempt owns one decision (UNIQUE run id + attempt) and one terminal (UNIQUE
decision id). Rows already verified are cached by table sequence number (they
are immutable), and decisions, terminals and edges also by their unique id, so a
lookup of a row already read costs no query (an absent one is looked up each time);
``verify`` re-reads everything. The views (``views``) read the tables only when a row
may have been committed since their last read (``_stamp``: ``PRAGMA data_version`` and
the connection's ``total_changes``).
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gigaevo.memory.v2.evidence import sqlite as db
from gigaevo.memory.v2.evidence.bodies import pack_body
from gigaevo.memory.v2.evidence.errors import (
    DuplicateRowError,
    LedgerIntegrityError,
    RowRejectedError,
)
from gigaevo.memory.v2.evidence.fitsets import FitSetStore, RowIdSet
from gigaevo.memory.v2.evidence.owner import owner_dead, session_owner
from gigaevo.memory.v2.evidence.rows import (
    STARTUP_ORPHAN,
    CardSnapshot,
    DecisionRow,
    EdgeRow,
    LineageRow,
    TerminalRow,
    censored_terminal,
    decision_key_id,
)
from gigaevo.memory.v2.evidence.tally import LedgerTally
from gigaevo.memory.v2.evidence.universe import UniverseStore
from gigaevo.memory.v2.evidence.validate import check_terminal
from gigaevo.memory.v2.evidence.views import LedgerViews

EVIDENCE_FILE = "memory_v2_selection_evidence.sqlite3"
# the tables whose rows ``_one`` answers from memory once read, and their unique id column
_UNIQUE_ID = {"decisions": "decision_id", "terminals": "decision_id", "edges": "edge_id"}


class SelectionEvidence(LedgerViews):
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
        self._last: dict[str, int] = dict.fromkeys(db.TABLES, 0)
        # derived views: the tally is fed each row once (see ``views``); whole-ledger
        # tuples built from it are memoised by the row counts they depend on
        self._memo: dict[str, tuple[tuple[int, ...], Any]] = {}
        self._tally = LedgerTally()
        self._fed: dict[str, int] = dict.fromkeys(db.TABLES, 0)
        self._applied: dict[str, frozenset[str]] = {}  # program id -> cards cited on its ancestry
        # decoded rows by the SHA-256 of their body (content-addressed, so a hit is exact once
        # the body read back hashes to it); the decisions this session wrote are entered at
        # commit, which spares decoding a 1,000-candidate row just written (~40 ms)
        self._by_sha: dict[str, Any] = {}
        # verified decisions and terminals by decision id, edges by edge id (``_one``): each
        # is unique per id and immutable, so a row once read and checked is that id's for good
        self._by_id: dict[str, dict[str, Any]] = {t: {} for t in _UNIQUE_ID}
        # card snapshots and universes, stored once by content hash (see ``universe``)
        self._universes = UniverseStore()
        self._fits = FitSetStore()  # fitted row ids, one chain link per fit (see ``fitsets``)

    def open(
        self, *, censor_orphans: bool = True, resume_run: str | None = None
    ) -> SelectionEvidence:
        """Create or open the ledger, verify every row, censor startup orphans.

        Args:
            censor_orphans: censor the open decisions of dead sessions.
            resume_run: the run being resumed: its own orphans stay open (their
                attempts are re-dispatched and their terminals arrive once);
                see ``resumable``.

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
            self.censor_orphans(keep_run=resume_run)
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
        universe = self._universes.encode(row.universe, self._db())
        fits = self._fits.encode(row.fitted_row_ids)
        if fits is not None and fits is not row.fitted_row_ids:  # kept: one object per fit
            row = dataclasses.replace(row, fitted_row_ids=fits)
        # `is not None`, not truthiness: len() of a link rebuilds and sorts its whole id
        # set (O(ledger) per decision); a link is never empty (empty sets stay inline)
        body, sha = db.encode_decision(row, universe.sha, fits.sha if fits is not None else None)
        sql = (
            "INSERT INTO decisions (decision_id, run_id, attempt, proposed_id, body, sha256)"
            " VALUES (?, ?, ?, ?, ?, ?)"
        )
        args = (row.decision_id, row.run_id, row.attempt, row.proposed_id, pack_body(body), sha)
        with db.immediate(self._db()) as conn:
            self._universes.write(conn, universe)
            links = self._fits.write(conn, fits) if fits is not None else []
            try:
                conn.execute(sql, args)
            except sqlite3.IntegrityError as exc:
                raise DuplicateRowError(
                    f"attempt {row.attempt} of run {row.run_id!r} already has a decision"
                ) from exc
        self._universes.committed(universe)
        self._universes.refs[sha] = universe.sha
        self._fits.committed(links)
        if fits is not None:
            self._fits.refs[sha] = fits.sha
        known = db.decode_known(DecisionRow, row, body, self._decision_parser(sha))
        self._by_sha[sha] = known
        self._by_id["decisions"][row.decision_id] = known  # the row committed under its id

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
                    (row.decision_id, pack_body(body), sha),
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
            return self._insert_edge(conn, row)

    def record_outcome(
        self, terminal: TerminalRow | None, edge: EdgeRow
    ) -> tuple[TerminalRow | None, EdgeRow]:
        """Commit an attempt's terminal (if any) and its mutation edge in one transaction.

        A crash therefore never leaves a terminal without its edge (or the
        reverse). A decision that already has a terminal keeps it (a resumed
        attempt) and ``None`` is returned in place of ``terminal``.

        Returns:
            (the terminal committed or None, the edge as stored with its ordinal).

        Raises:
            DuplicateRowError: the edge exists (nothing is committed).
            RowRejectedError: ``terminal`` contradicts its decision (nothing is committed).
        """
        with db.immediate(self._db()) as conn:
            stored_terminal = None
            if terminal is not None:
                stored_terminal = self._insert_terminal(conn, terminal)
            stored = self._insert_edge(conn, edge)
        return stored_terminal, stored

    def _insert_edge(self, conn: sqlite3.Connection, edge: EdgeRow) -> EdgeRow:
        """Insert ``edge`` with ordinal 1 + its island's last (inside the caller's transaction).

        Raises:
            DuplicateRowError: an edge with this ``edge_id`` exists.
        """
        (last,) = conn.execute(
            "SELECT COALESCE(MAX(ordinal), 0) FROM edges WHERE island = ?", (edge.island,)
        ).fetchone()
        stored = dataclasses.replace(edge, ordinal=int(last) + 1)
        body, sha = db.encode(stored)
        try:
            conn.execute(
                "INSERT INTO edges (edge_id, island, ordinal, body, sha256) VALUES (?, ?, ?, ?, ?)",
                (stored.edge_id, stored.island, stored.ordinal, pack_body(body), sha),
            )
        except sqlite3.IntegrityError as exc:
            raise DuplicateRowError(f"edge {edge.edge_id!r} already recorded") from exc
        self._known_body(EdgeRow, stored, body, sha)
        return stored

    def _insert_terminal(self, conn: sqlite3.Connection, row: TerminalRow) -> TerminalRow | None:
        decision = self._decision_in(conn, row.decision_id)
        if decision is None:
            raise RowRejectedError(f"terminal for unknown decision {row.decision_id!r}")
        check_terminal(decision, row)
        body, sha = db.encode(row)
        try:
            conn.execute(
                "INSERT INTO terminals (decision_id, body, sha256) VALUES (?, ?, ?)",
                (row.decision_id, pack_body(body), sha),
            )
        except sqlite3.IntegrityError:
            return None  # already terminated: the first terminal stands
        self._known_body(TerminalRow, row, body, sha)
        return row

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
                (row.root_decision_id, row.version, pack_body(body), sha),
            )
        self._known_body(LineageRow, row, body, sha)

    def _known_body(self, cls: type[Any], row: Any, body: str, sha: str) -> None:
        """Enter a row this session wrote by the SHA-256 of its body (content-addressed, as
        the decisions at commit): reading it back then checks its hash and key columns but
        does not parse it again (``db.decode_known`` parses the first row of each type)."""
        self._by_sha.setdefault(sha, db.decode_known(cls, row, body))

    def censor_orphans(self, reason: str = STARTUP_ORPHAN, *, keep_run: str | None = None) -> int:
        """Give every decision without a terminal whose session is dead a censored terminal.

        Args:
            reason: the censor reason written on each terminal.
            keep_run: decisions of this run id are left open (a resume).

        Returns:
            How many decisions were censored.
        """
        count = 0
        with db.immediate(self._db()) as conn:
            for decision in self._open_decisions_in(conn):
                if decision.run_id == keep_run or not owner_dead(decision.owner, self.owner):
                    continue
                row = censored_terminal(decision, reason)
                body, sha = db.encode(row)
                conn.execute(
                    "INSERT INTO terminals (decision_id, body, sha256) VALUES (?, ?, ?)",
                    (row.decision_id, pack_body(body), sha),
                )
                count += 1
        return count

    def fitted_row_link(
        self,
        base: RowIdSet | None,
        ids: set[str],
        delta: tuple[tuple[str, ...], tuple[str, ...]],
    ) -> RowIdSet | tuple[str, ...]:
        """The fitted row ids of a fit as a link of the fit-set chain, built from the
        change since ``base``'s set (``delta`` = (added, removed), each sorted) in
        O(change), not from the whole set (see ``fitsets``); () when empty."""
        return self._fits.link(base, ids, delta)

    # ---- reads ------------------------------------------------------------------

    def verify(self) -> int:
        """Re-read and re-check every row (dropping the cache). Returns the row count.

        Raises:
            LedgerIntegrityError: a row fails its hash or schema check.
        """
        self._cache = {t: {} for t in db.TABLES}
        self._last = dict.fromkeys(db.TABLES, 0)
        self._memo = {}
        self._tally = LedgerTally()
        self._fed = dict.fromkeys(db.TABLES, 0)
        self._synced_at = None
        self._by_sha = {}
        self._by_id = {t: {} for t in _UNIQUE_ID}
        self._universes.reset()
        self._fits.reset()
        count = sum(len(self._rows(t)) for t in db.TABLES)
        self._seed_fit_chain()
        self._seed_universe()
        return count

    def _seed_fit_chain(self) -> None:
        """Hand the fit-set store the link of the newest decision stored with one."""
        for _, sha in reversed(self._cache["decisions"].values()):
            ref = self._fits.refs.get(sha)
            if ref is not None:
                self._fits.seed(self._fits.resolve(self._db(), ref, "the newest fit"))
                return

    def _seed_universe(self) -> None:
        """Hand the universe store the universe of the newest decision (the base of the
        next one, as in the session that wrote it); none when it is stored inline."""
        if self._cache["decisions"]:
            sha = next(reversed(self._cache["decisions"].values()))[1]
            ref = self._universes.refs.get(sha)
            if ref is not None:
                self._universes.seed(self._db(), ref, "the newest decision")

    def decisions(self) -> tuple[DecisionRow, ...]:
        return tuple(row for row, _ in self._rows("decisions").values())

    def terminals(self) -> tuple[TerminalRow, ...]:
        return tuple(row for row, _ in self._rows("terminals").values())

    def edges(self, island: int | None = None) -> tuple[EdgeRow, ...]:
        rows = (row for row, _ in self._rows("edges").values())
        return tuple(r for r in rows if island is None or r.island == island)

    def since(self, table: str, seq: int) -> list[tuple[int, Any]]:
        """(sequence number, row) of the rows of ``table`` after ``seq``, oldest first;
        O(rows after ``seq``) once the cache holds the table (``open`` reads it)."""
        cache = self._rows(table)
        out = []
        for at in reversed(cache):
            if at <= seq:
                break
            out.append((at, cache[at][0]))
        return out[::-1]

    def seq_of(self, table: str, decision_id: str) -> int | None:
        """The sequence number of the decision (``decisions``) or terminal (``terminals``)
        of ``decision_id``, or None (an index lookup; the row is not read)."""
        if table not in ("decisions", "terminals"):
            raise ValueError(f"no decision id in table {table!r}")
        found = (
            self._db()
            .execute(f"SELECT seq FROM {table} WHERE decision_id = ?", (decision_id,))
            .fetchone()
        )
        return None if found is None else int(found[0])

    def last_seq(self, table: str) -> int:
        """The largest sequence number of ``table`` read so far (0 when empty)."""
        self._rows(table)
        return self._last[table]

    def decision(self, decision_id: str) -> DecisionRow | None:
        """The decision with this id (hash-checked), or None."""
        return self._decision_in(self._db(), decision_id)

    def terminal(self, decision_id: str) -> TerminalRow | None:
        """The terminal of this decision (hash-checked), or None."""
        row: TerminalRow | None = self._one(self._db(), "terminals", "decision_id", decision_id)
        return row

    def edge(self, edge_id: str) -> EdgeRow | None:
        """The mutation edge with this id (the child's program id; hash-checked), or None."""
        row: EdgeRow | None = self._one(self._db(), "edges", "edge_id", edge_id)
        return row

    def _db(self) -> sqlite3.Connection:
        if self._failure is not None:
            raise self._failure
        if self._conn is None:
            raise RuntimeError("SelectionEvidence is not open (call open())")
        return self._conn

    def _stamp(self) -> tuple[int, int]:
        """(``PRAGMA data_version``, ``total_changes``): the first moves when another
        connection (another process, another instance) commits, the second with every
        row this connection writes; while both stand no row can have been committed."""
        conn = self._db()
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        return int(version), conn.total_changes

    def _rows(self, table: str) -> dict[int, tuple[Any, str]]:
        """Verified (row, sha) of ``table`` by sequence number, reading only new rows."""
        cache = self._cache[table]
        query = db.READ[table]
        for seq, body, sha, *keys in self._db().execute(query, (self._last[table],)):
            cache[seq] = (self._decode(table, seq, body, sha, keys), sha)
            self._last[table] = max(self._last[table], seq)
        return cache

    def _decode(self, table: str, seq: int, body: str, sha: str, keys: list[Any]) -> Any:
        cls, names = db.ROW_TYPES[table]
        where, columns = f"{table}#{seq}", dict(zip(names, keys, strict=True))
        known = self._by_sha.get(sha)
        parse = self._decision_parser(sha) if table == "decisions" else None
        try:
            row = db.decode(cls, body, sha, where, columns, known=known, parse=parse)
            ref, fits = self._universes.refs.get(sha), self._fits.refs.get(sha)
            if known is not None and ref is not None:  # the body was not parsed: check its
                self._universes.resolve(self._db(), ref, where)  # universe rows (once each)
            if known is not None and fits is not None:  # and its fit-set chain
                self._fits.resolve(self._db(), fits, where)
        except LedgerIntegrityError as exc:
            self._failure = exc
            raise
        self._by_sha[sha] = row
        by_id = self._by_id.get(table)
        if by_id is not None:
            by_id[getattr(row, _UNIQUE_ID[table])] = row
        return row

    def _decision_parser(self, sha: str) -> Callable[[str, str], DecisionRow]:
        """``parse`` of ``db.decode`` for the decision body with SHA-256 ``sha``."""

        def parse(body: str, where: str) -> DecisionRow:
            def universe(ref: str) -> tuple[CardSnapshot, ...]:
                return self._universes.resolve(self._db(), ref, where)

            def fits(ref: str) -> RowIdSet:
                return self._fits.resolve(self._db(), ref, where)

            parts = db.Parts(universe, fits, self._universes.card_ids)
            row, ref, fits_ref = db.decision_from_body(body, where, parts)
            if ref is not None:
                self._universes.refs[sha] = ref
            if fits_ref is not None:
                self._fits.refs[sha] = fits_ref
            return row

        return parse

    def _decision_in(self, conn: sqlite3.Connection, decision_id: str) -> DecisionRow | None:
        row: DecisionRow | None = self._one(conn, "decisions", "decision_id", decision_id)
        return row

    def _one(self, conn: sqlite3.Connection, table: str, column: str, value: str) -> Any:
        """The row of ``table`` whose unique ``column`` is ``value`` (hash-checked), or None.

        A decision, terminal or edge already read (and checked) is returned by its id without
        a query (``_by_id``); an absent one is looked up every time (it may come later)."""
        if _UNIQUE_ID.get(table) == column:
            known = self._by_id[table].get(value)
            if known is not None:
                return known
        keys = ", ".join(db.ROW_TYPES[table][1])
        found = conn.execute(
            f"SELECT seq, body, sha256, {keys} FROM {table} WHERE {column} = ?", (value,)
        ).fetchone()
        if found is None:
            return None
        seq, body, sha, *key_values = found
        return self._decode(table, seq, body, sha, key_values)

    def _open_decisions_in(self, conn: sqlite3.Connection) -> list[DecisionRow]:
        found = conn.execute(
            "SELECT seq, body, sha256, decision_id, run_id, attempt FROM decisions WHERE"
            " decision_id NOT IN (SELECT decision_id FROM terminals) ORDER BY seq"
        ).fetchall()
        return [self._decode("decisions", s, b, h, list(k)) for s, b, h, *k in found]
