"""The program store: every program, pending dispatches and the archive checkpoint, in SQLite.

One file, ``programs.sqlite3`` in ``checkpoint_dir``. Each committed mutant is
one transaction that writes the program row, deletes its dispatch row and
replaces the island checkpoint, so after a SIGKILL the store is exactly the
state after the last complete commit. The same transaction adds the commit's
outbox entry (its events and the memory's observation), removed once they are
delivered, so a commit's effects outside the store are never lost. The
engine's main thread commits while its memory thread adds dispatches: one lock
serialises every use of the connection, so a dispatch never lands inside a
commit's transaction.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from gigaevo.evolution.records import Dispatch
from gigaevo.programs import Program

__all__ = ["SCHEMA_VERSION", "Dispatch", "ProgramStore", "StoreError"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS programs (
    ordinal INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    digest TEXT NOT NULL,
    status TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS programs_digest ON programs(digest);
CREATE TABLE IF NOT EXISTS dispatches (
    attempt INTEGER PRIMARY KEY,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
    key INTEGER PRIMARY KEY,
    seq INTEGER NOT NULL,
    data TEXT NOT NULL
);
"""


class StoreError(RuntimeError):
    """The program store is unreadable or belongs to a different run."""


class StoreWriteError(StoreError):
    """A write to the store failed (disk full, read-only, I/O error); nothing was half-written.

    The message names the file and SQLite's cause; the failed transaction is
    rolled back, so the store holds exactly the commits before it.
    """


class ProgramStore:
    """SQLite-backed store of programs and run state.

    Args:
        path: the database file; created with its schema when missing.

    Raises:
        StoreError: the file is not a readable store of this schema.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=10000")
            self._db.executescript(_SCHEMA)
            version = self.get_meta("schema_version")
        except sqlite3.OperationalError as exc:  # cannot open or create: disk, permissions
            raise StoreWriteError(f"{self.path}: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a readable program store ({exc})") from exc
        if version is None:
            self.set_meta("schema_version", SCHEMA_VERSION)
        elif version != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {version}, expected {SCHEMA_VERSION}")

    # -- meta -----------------------------------------------------------------
    def get_meta(self, key: str) -> Any:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        with self._lock, self._writing():
            self._db.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, json.dumps(value))
            )

    # -- programs -------------------------------------------------------------
    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM programs").fetchone()[0])

    def get(self, program_id: str) -> Program:
        with self._lock:
            row = self._db.execute(
                "SELECT data FROM programs WHERE id = ?", (program_id,)
            ).fetchone()
        if row is None:
            raise KeyError(program_id)
        return Program.from_dict(json.loads(row[0]))

    def iter_programs(self, batch: int = 512) -> Iterator[Program]:
        """All programs by ordinal: the initial ones, then mutants by attempt number.

        Read ``batch`` rows at a time, so a long run's programs are never all in memory.
        """
        last = -1
        while True:
            with self._lock:
                rows = self._db.execute(
                    "SELECT ordinal, data FROM programs WHERE ordinal > ? ORDER BY ordinal LIMIT ?",
                    (last, batch),
                ).fetchall()
            for ordinal, data in rows:
                last = ordinal
                yield Program.from_dict(json.loads(data))
            if len(rows) < batch:
                return

    def digests(self) -> dict[str, str]:
        """Normalised-code digest -> id of the first program with it (evaluated ones only)."""
        out: dict[str, str] = {}
        with self._lock:
            rows = self._db.execute(
                "SELECT digest, id FROM programs WHERE status != 'duplicate' ORDER BY ordinal"
            ).fetchall()
        for digest, pid in rows:
            out.setdefault(digest, pid)
        return out

    def commit(
        self,
        program: Program,
        digest: str,
        *,
        attempt: int | None,
        state: dict[str, Any] | str,
        outbox: dict[str, Any] | None = None,
    ) -> None:
        """Write one program, retire its dispatch and replace the run state, atomically.

        ``state``: the run state, or its JSON text (keys sorted) when the caller made it.

        ``outbox``: what the commit must still cause outside the store (its
        events, the memory's observation) under its ``key`` (the attempt; a
        negative number for an initial program), kept until ``outbox_done``;
        an entry a kill left is delivered again on resume (``outbox_entries``).

        Raises:
            StoreWriteError: the transaction failed and was rolled back.
        """
        with self._lock, self._writing():
            self._commit(program, digest, attempt, state, outbox)

    def _commit(
        self,
        program: Program,
        digest: str,
        attempt: int | None,
        state: dict[str, Any] | str,
        outbox: dict[str, Any] | None,
    ) -> None:
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            cur.execute(
                "INSERT INTO programs(ordinal, id, digest, status, data) VALUES (?, ?, ?, ?, ?)",
                (
                    program.ordinal,
                    program.id,
                    digest,
                    str(program.status),
                    json.dumps(program.to_dict(), sort_keys=True),
                ),
            )
            if attempt is not None:
                cur.execute("DELETE FROM dispatches WHERE attempt = ?", (attempt,))
            if outbox is not None:
                cur.execute(
                    "INSERT INTO outbox(key, seq, data) "
                    "SELECT ?, COALESCE(MAX(seq), 0) + 1, ? FROM outbox",
                    (int(outbox["key"]), json.dumps(outbox, sort_keys=True)),
                )
            cur.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('state', ?)",
                (state if isinstance(state, str) else json.dumps(state, sort_keys=True),),
            )
            cur.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        """Undo an open transaction; never hides the error that made it fail.

        SQLite may already have rolled back on its own (disk full, I/O error):
        a second ROLLBACK would then fail with "no transaction is active".
        """
        if not self._db.in_transaction:
            return
        with suppress(sqlite3.Error):  # the caller re-raises the real error
            self._db.execute("ROLLBACK")

    @contextmanager
    def _writing(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            raise StoreWriteError(f"{self.path}: {exc}") from exc

    # -- outbox ---------------------------------------------------------------
    def outbox_entries(self) -> list[dict[str, Any]]:
        """Entries of commits whose effects outside the store may be missing, in commit order."""
        with self._lock:
            rows = self._db.execute("SELECT data FROM outbox ORDER BY seq").fetchall()
        return [json.loads(data) for (data,) in rows]

    def outbox_done(self, key: int) -> None:
        """Every effect of the commit with this outbox key is delivered: forget its entry."""
        with self._lock, self._writing():
            self._db.execute("DELETE FROM outbox WHERE key = ?", (key,))

    # -- dispatches -----------------------------------------------------------
    def add_dispatch(self, dispatch: Dispatch) -> None:
        with self._lock, self._writing():
            self._db.execute(
                "INSERT INTO dispatches(attempt, data) VALUES (?, ?)",
                (dispatch.attempt, dispatch.to_json()),
            )

    def pending_dispatches(self) -> list[Dispatch]:
        with self._lock:
            rows = self._db.execute("SELECT data FROM dispatches ORDER BY attempt").fetchall()
        return [Dispatch.from_json(data) for (data,) in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
