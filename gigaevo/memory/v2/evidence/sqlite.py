"""SQLite plumbing of the causal ledger: schema, immutability triggers, verified row reads."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from gigaevo.memory.v2.errors import CardFormatError
from gigaevo.memory.v2.evidence.errors import LedgerIntegrityError
from gigaevo.memory.v2.evidence.rows import (
    Candidate,
    CardSnapshot,
    DecisionRow,
    EdgeRow,
    LineageRow,
    TerminalRow,
    canonical_json,
    sha256_hex,
)
from gigaevo.memory.v2.records import from_json, to_json

R = TypeVar("R")

# "1": every decision body holds its universe inline and its candidates as a list of
# objects. "2": new decision bodies hold the universe by reference (``universe_ref``,
# tables ``snapshots`` / ``universes``) and the candidates as columns
# (``candidate_columns``). A version-1 file opened by this code gets the two new tables
# and is marked "2"; its old rows are never rewritten and still decode (the body's keys
# say which form it has), its new rows take the new form.
SCHEMA_VERSION = "2"
KNOWN_VERSIONS = ("1", "2")
TABLES = ("decisions", "terminals", "edges", "lineage")
CONTENT_TABLES = ("snapshots", "universes")  # keyed by the SHA-256 of their body

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
CREATE TABLE IF NOT EXISTS snapshots (sha256 TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS universes (sha256 TEXT PRIMARY KEY, body TEXT NOT NULL);
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
    """Create tables, indexes and the UPDATE/DELETE-refusing triggers (idempotent);
    a version-1 file is marked version 2 (see ``SCHEMA_VERSION``).

    Raises:
        LedgerIntegrityError: the file has a schema version this code does not know.
    """
    statements = [part.strip() for part in SCHEMA.split(";") if part.strip()]
    statements += [
        _TRIGGER.format(table=t, op=op)
        for t in (*TABLES, *CONTENT_TABLES)
        for op in ("UPDATE", "DELETE")
    ]
    with immediate(conn):
        for statement in statements:
            conn.execute(statement)
        found = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if found is not None and found[0] not in KNOWN_VERSIONS:
            raise LedgerIntegrityError(
                f"ledger schema version {found[0]!r} is not one of {list(KNOWN_VERSIONS)}"
            )
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
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
    """(canonical JSON body, its SHA-256) of a row dataclass (the version-1 form)."""
    body = canonical_json(to_json(row))
    return body, sha256_hex(body)


_CANDIDATE_FIELDS = tuple(f.name for f in dataclasses.fields(Candidate))


def encode_decision(row: DecisionRow, universe_ref: str) -> tuple[str, str]:
    """(canonical JSON body, its SHA-256) of a decision in the version-2 form.

    The universe is replaced by ``universe_ref`` (the hash of its ``universes`` row)
    and the candidates by ``candidate_columns``, one list per ``Candidate`` field
    (every field is a JSON scalar, so floats round-trip exactly as in version 1).
    """
    data = to_json(row, exclude=("universe", "candidates"))
    data["universe_ref"] = universe_ref
    data["candidate_columns"] = {
        name: [getattr(c, name) for c in row.candidates] for name in _CANDIDATE_FIELDS
    }
    body = canonical_json(data)
    return body, sha256_hex(body)


def decision_from_body(
    body: str, where: str, resolve: Callable[[str], tuple[CardSnapshot, ...]]
) -> tuple[DecisionRow, str | None]:
    """A decision of either form and its universe reference (None in the version-1 form).

    ``resolve`` gives the checked snapshots of a universe hash.

    Raises:
        CardFormatError: the body does not match ``DecisionRow`` (unknown or
            missing key, wrong type, ragged candidate columns).
        LedgerIntegrityError: from ``resolve``.
    """
    data = json.loads(body)
    if not isinstance(data, dict) or "universe_ref" not in data:
        return from_json(DecisionRow, data, where), None
    for key in ("universe", "candidates"):
        if key in data:
            raise CardFormatError(f"{where}: unknown key {key!r} next to 'universe_ref'")
    ref = data.pop("universe_ref")
    if not isinstance(ref, str):
        raise CardFormatError(f"{where}.universe_ref: expected a string, got {ref!r}")
    columns = data.pop("candidate_columns", None)
    if not isinstance(columns, dict) or not all(isinstance(v, list) for v in columns.values()):
        raise CardFormatError(f"{where}.candidate_columns: expected an object of lists")
    names = list(columns)
    try:
        rows = zip(*columns.values(), strict=True)
        data["candidates"] = [dict(zip(names, v, strict=True)) for v in rows]
    except ValueError as exc:
        raise CardFormatError(f"{where}.candidate_columns: columns differ in length") from exc
    data["universe"] = resolve(ref)
    return from_json(DecisionRow, data, where), ref


def decode(
    cls: type[R],
    body: str,
    sha: str,
    where: str,
    keys: dict[str, Any],
    known: R | None = None,
    parse: Callable[[str, str], R] | None = None,
) -> R:
    """Verify ``body`` against ``sha`` and its key columns, then build ``cls``.

    ``known`` is the row already decoded from a body with this SHA-256 (rows are
    content-addressed): the hash and the key columns are still checked, the
    JSON is not parsed again. ``parse(body, where)`` builds the row in place of
    ``from_json`` (a decision whose universe is stored by reference).

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
            row = parse(body, where) if parse else from_json(cls, json.loads(body), where)
        except (ValueError, CardFormatError) as exc:
            raise LedgerIntegrityError(f"ledger row {where}: {exc}") from exc
    for name, value in keys.items():
        if getattr(row, name) != value:
            raise LedgerIntegrityError(f"ledger row {where}: column {name} disagrees with body")
    return row


def decode_known(
    cls: type[R], row: R, body: str, parse: Callable[[str, str], R] | None = None
) -> R:
    """The row a read of ``body`` (its own encoding) gives back, without parsing it.

    The first row of each type (and ``parse``) in a process is parsed and compared,
    so a row type whose encoding does not round-trip (equal values, equal structure)
    is caught and always parsed; later rows of a type that round-trips are taken as
    built. ``parse`` as in ``decode``.
    """
    key = (cls, parse is None)
    if key not in _ROUND_TRIPS:
        parsed = parse(body, cls.__name__) if parse else from_json(cls, json.loads(body))
        _ROUND_TRIPS[key] = parsed == row
        return parsed
    if _ROUND_TRIPS[key]:
        return row
    return parse(body, cls.__name__) if parse else from_json(cls, json.loads(body))


_ROUND_TRIPS: dict[tuple[type, bool], bool] = {}


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
