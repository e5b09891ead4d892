"""SQLite plumbing of the causal ledger: schema, immutability triggers, verified row reads."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from gigaevo.memory.v2.errors import CardFormatError
from gigaevo.memory.v2.evidence.errors import LedgerIntegrityError
from gigaevo.memory.v2.evidence.rows import (
    DecisionRow,
    EdgeRow,
    LineageRow,
    TerminalRow,
    canonical_json,
    sha256_hex,
)
from gigaevo.memory.v2.records import from_json, to_json

R = TypeVar("R")

SCHEMA_VERSION = "1"
TABLES = ("decisions", "terminals", "edges", "lineage")

# Each table keeps the canonical JSON body and its SHA-256; a few key columns
# are copies of body fields for indexing and are checked against the body on read.
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS decisions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    decision_id TEXT NOT NULL UNIQUE,
    run_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    proposed_id TEXT,
    body TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    UNIQUE (run_id, attempt)
);
CREATE TABLE IF NOT EXISTS terminals (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    decision_id TEXT NOT NULL UNIQUE REFERENCES decisions (decision_id),
    body TEXT NOT NULL,
    sha256 TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS edges (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    edge_id TEXT NOT NULL UNIQUE,
    island INTEGER NOT NULL,
    ordinal INTEGER NOT NULL,
    body TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    UNIQUE (island, ordinal)
);
CREATE TABLE IF NOT EXISTS lineage (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    root_decision_id TEXT NOT NULL REFERENCES decisions (decision_id),
    version INTEGER NOT NULL,
    body TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    UNIQUE (root_decision_id, version)
);
CREATE INDEX IF NOT EXISTS decisions_proposed ON decisions (proposed_id);
"""

_TRIGGER = """
CREATE TRIGGER IF NOT EXISTS {table}_no_{op} BEFORE {op} ON {table}
BEGIN SELECT RAISE(ABORT, 'ledger rows are immutable: {table} refuses {op}'); END
"""


def connect(path: str, busy_timeout_s: float) -> sqlite3.Connection:
    """Open the ledger in autocommit mode (transactions are explicit), WAL, busy timeout."""
    conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def create_schema(conn: sqlite3.Connection) -> None:
    """Create tables, indexes and the UPDATE/DELETE-refusing triggers (idempotent)."""
    statements = [part.strip() for part in SCHEMA.split(";") if part.strip()]
    statements += [_TRIGGER.format(table=t, op=op) for t in TABLES for op in ("UPDATE", "DELETE")]
    with immediate(conn):
        for statement in statements:
            conn.execute(statement)
        conn.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
            (SCHEMA_VERSION,),
        )


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on any error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def encode(row: Any) -> tuple[str, str]:
    """(canonical JSON body, its SHA-256) of a row dataclass."""
    body = canonical_json(to_json(row))
    return body, sha256_hex(body)


def decode(
    cls: type[R], body: str, sha: str, where: str, keys: dict[str, Any], known: R | None = None
) -> R:
    """Verify ``body`` against ``sha`` and its key columns, then build ``cls``.

    ``known`` is the row already decoded from a body with this SHA-256 (rows are
    content-addressed): the hash and the key columns are still checked, the
    JSON is not parsed again.

    Raises:
        LedgerIntegrityError: hash mismatch, unparsable body, unknown or
            missing key, wrong type, or a key column that disagrees with the body.
    """
    if sha256_hex(body) != sha:
        raise LedgerIntegrityError(f"ledger row {where}: content hash mismatch (tampered)")
    if known is not None:
        row = known
    else:
        try:
            row = from_json(cls, json.loads(body), where)
        except (ValueError, CardFormatError) as exc:
            raise LedgerIntegrityError(f"ledger row {where}: {exc}") from exc
    for name, value in keys.items():
        if getattr(row, name) != value:
            raise LedgerIntegrityError(f"ledger row {where}: column {name} disagrees with body")
    return row


def decode_known(cls: type[R], row: R, body: str) -> R:
    """The row a read of ``body`` (its own encoding) gives back, without parsing it.

    The first row of each type in a process is parsed and compared, so a row type
    whose encoding does not round-trip (equal values, equal structure) is caught
    and always parsed; later rows of a type that round-trips are taken as built.
    """
    if cls not in _ROUND_TRIPS:
        parsed = from_json(cls, json.loads(body), cls.__name__)
        _ROUND_TRIPS[cls] = parsed == row
        return parsed
    return row if _ROUND_TRIPS[cls] else from_json(cls, json.loads(body), cls.__name__)


_ROUND_TRIPS: dict[type, bool] = {}


READ = {
    "decisions": "SELECT seq, body, sha256, decision_id, run_id, attempt FROM decisions"
    " WHERE seq > ? ORDER BY seq",
    "terminals": "SELECT seq, body, sha256, decision_id FROM terminals WHERE seq > ? ORDER BY seq",
    "edges": "SELECT seq, body, sha256, edge_id, island, ordinal FROM edges"
    " WHERE seq > ? ORDER BY seq",
    "lineage": "SELECT seq, body, sha256, root_decision_id, version FROM lineage"
    " WHERE seq > ? ORDER BY seq",
}
ROW_TYPES: dict[str, tuple[type, tuple[str, ...]]] = {
    "decisions": (DecisionRow, ("decision_id", "run_id", "attempt")),
    "terminals": (TerminalRow, ("decision_id",)),
    "edges": (EdgeRow, ("edge_id", "island", "ordinal")),
    "lineage": (LineageRow, ("root_decision_id", "version")),
}
