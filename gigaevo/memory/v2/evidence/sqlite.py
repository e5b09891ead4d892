"""SQLite plumbing of the causal ledger: schema, immutability triggers, verified row reads."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple, TypeVar

import numpy as np

from gigaevo.memory.v2.errors import CardFormatError
from gigaevo.memory.v2.evidence.bodies import body_text
from gigaevo.memory.v2.evidence.candidates import (
    FIELDS,
    RAG_CODES,
    SPARSE,
    CandidateTable,
    PackError,
    pack,
    unpack,
)
from gigaevo.memory.v2.evidence.errors import LedgerIntegrityError
from gigaevo.memory.v2.evidence.rows import (
    CardSnapshot,
    DecisionRow,
    EdgeRow,
    LineageRow,
    TerminalRow,
    canonical_json,
    sha256_hex,
    universe_ids,
)
from gigaevo.memory.v2.records import from_json, to_json

R = TypeVar("R")

# "1": every decision body holds its universe inline and its candidates as a list of
# objects. "2": new decision bodies hold the universe by reference (``universe_ref``,
# tables ``snapshots`` / ``universes``) and the candidates as columns
# (``candidate_columns``). A version-1 file opened by this code gets the two new tables
# and is marked "2"; its old rows are never rewritten and still decode (the body's keys
# say which form it has), its new rows take the new form. "3": new decision bodies hold
# their fitted row ids by reference (``fitted_rows_ref``, table ``fit_sets``, see
# ``fitsets``) unless they are empty or not ascending (then inline, as before); version-1
# and version-2 files are marked "3" and get the table the same way. Within version 3, a
# decision over ``PACK_FROM`` candidates or more holds them packed (``candidate_pack``, see
# ``candidates.pack``: ~1 % of the columns' bytes at 1,000 cards) instead of as columns;
# smaller ones keep the columns (readable, and a few hundred bytes). Both decode; the
# version is not raised, so ``meta`` does not tell whether a file holds packed rows (a
# gigaevo older than the packed form refuses such a row as not parsing, naming it).
# "4": the body column of new rows of the four row tables and ``fit_sets`` holds the
# canonical JSON compressed against a fixed dictionary (a BLOB, see ``bodies``; ~30 % of
# the text's bytes) unless that is not shorter; the hash is still the text's. Older files
# are marked "4" on open, their rows stay TEXT and read as before; an older gigaevo
# refuses a version-4 file by its version instead of failing on its first BLOB.
SCHEMA_VERSION = "4"
PACK_FROM = 32
KNOWN_VERSIONS = ("1", "2", "3", "4")
TABLES = ("decisions", "terminals", "edges", "lineage")
CONTENT_TABLES = ("snapshots", "universes", "fit_sets")  # keyed by the SHA-256 of their body

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
CREATE TABLE IF NOT EXISTS fit_sets (sha256 TEXT PRIMARY KEY, body TEXT NOT NULL);
"""

_TRIGGER = """
CREATE TRIGGER IF NOT EXISTS {table}_no_{op} BEFORE {op} ON {table}
BEGIN SELECT RAISE(ABORT, 'ledger rows are immutable: {table} refuses {op}'); END
"""


def connect(path: str, busy_timeout_s: float) -> sqlite3.Connection:
    """Open the ledger in autocommit mode (transactions are explicit), WAL, busy timeout.

    The provider is built and closed on the engine's main thread and used on
    its memory thread (one thread at a time), hence ``check_same_thread=False``.

    ``synchronous=NORMAL`` (issue 16): a commit appends to the WAL without an fsync; the
    WAL is fsynced at checkpoints. A SIGKILL at any instant loses no committed
    transaction (the kernel holds the WAL's pages) and the file is never corrupt, so a
    kill loses and duplicates nothing, as at ``FULL``. Only a power loss or a kernel crash
    can roll back the last commits, as it can the program store (also ``NORMAL``): a
    resumed run then decides those attempts again (decision ids are digests of run and
    attempt, so nothing is doubled). ``FULL`` cost an fsync per transaction: per
    decision, per outcome and per lineage row (docs/benchmarks-history.md, issue 16).
    """
    conn = sqlite3.connect(
        path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
    )
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def create_schema(conn: sqlite3.Connection) -> None:
    """Create tables, indexes and the UPDATE/DELETE-refusing triggers (idempotent);
    a version-1 or version-2 file is marked version 3 (see ``SCHEMA_VERSION``).

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
    """(canonical JSON body, its SHA-256) of a row dataclass (the version-1 form; stored
    as ``pack_body(body)``)."""
    body = canonical_json(to_json(row))
    return body, sha256_hex(body)


def encode_decision(
    row: DecisionRow, universe_ref: str, fits_ref: str | None = None
) -> tuple[str, str]:
    """(canonical JSON body, its SHA-256) of a decision in the version-3 form.

    The universe is replaced by ``universe_ref`` (the hash of its ``universes`` row),
    the candidates by ``candidate_columns``, one list per ``Candidate`` field (every
    field is a JSON scalar, so floats round-trip exactly as in version 1), and the
    fitted row ids by ``fitted_rows_ref`` (the hash of their ``fit_sets`` link) when
    ``fits_ref`` is given (else they stay inline, as in version 2). From ``PACK_FROM``
    candidates on, ``candidate_pack`` (``candidates.pack`` over the universe's card ids)
    replaces ``candidate_columns``.
    """
    data = to_json(row, exclude=("universe", "candidates", "fitted_row_ids"))
    data["universe_ref"] = universe_ref
    table = CandidateTable.of(row.candidates)
    if len(table) >= PACK_FROM:
        data["candidate_pack"] = pack(table, universe_ids(row.universe))
    else:
        data["candidate_columns"] = table.columns()
    if fits_ref is None:
        data["fitted_row_ids"] = list(row.fitted_row_ids)
    else:
        data["fitted_rows_ref"] = fits_ref
    body = canonical_json(data)
    return body, sha256_hex(body)


class Parts(NamedTuple):
    """How a decision body's referenced parts are read back (each checked by hash)."""

    universe: Callable[[str], tuple[CardSnapshot, ...]]  # universe hash -> snapshots
    fits: Callable[[str], Sequence[str]]  # fit-set link hash -> the ids
    card_ids: Mapping[str, str]  # card id -> the universe's own string (interning)


def decision_from_body(
    body: str, where: str, parts: Parts
) -> tuple[DecisionRow, str | None, str | None]:
    """A decision of any form, its universe reference and its fit-set reference
    (None for the parts a version-1 / version-2 body holds inline).

    Raises:
        CardFormatError: the body does not match ``DecisionRow`` (unknown or
            missing key, wrong type, ragged candidate columns).
        LedgerIntegrityError: from ``parts``.
    """
    data = json.loads(body)
    if not isinstance(data, dict) or "universe_ref" not in data:
        return from_json(DecisionRow, data, where), None, None
    for key in ("universe", "candidates"):
        if key in data:
            raise CardFormatError(f"{where}: unknown key {key!r} next to 'universe_ref'")
    ref = data.pop("universe_ref")
    if not isinstance(ref, str):
        raise CardFormatError(f"{where}.universe_ref: expected a string, got {ref!r}")
    fits = data.pop("fitted_rows_ref", None)
    if fits is not None:
        if not isinstance(fits, str) or "fitted_row_ids" in data:
            raise CardFormatError(f"{where}.fitted_rows_ref: expected a string instead of ids")
        data["fitted_row_ids"] = parts.fits(fits)
    data["universe"] = parts.universe(ref)
    packed = data.pop("candidate_pack", None)
    if packed is None:
        columns = data.pop("candidate_columns", None)
        data["candidates"] = _candidate_table(columns, f"{where}.candidate_columns", parts.card_ids)
    elif "candidate_columns" in data:
        raise CardFormatError(f"{where}: both 'candidate_pack' and 'candidate_columns'")
    elif not isinstance(packed, str):
        raise CardFormatError(f"{where}.candidate_pack: expected a string, got {packed!r}")
    else:
        try:
            data["candidates"] = unpack(packed, [s.card_id for s in data["universe"]])
        except PackError as exc:
            raise CardFormatError(f"{where}.candidate_pack: {exc}") from None
    return from_json(DecisionRow, data, where), ref, fits


def _candidate_table(columns: Any, where: str, pool: Mapping[str, str]) -> CandidateTable:
    """The table of a ``candidate_columns`` object (schema version 2 and later).

    ``pool`` maps card ids to the universe's own id strings (decoded ids are
    replaced by them, so decisions share one string per card).

    Raises:
        CardFormatError: not an object of lists, an unknown or missing column,
            columns of different lengths, or a value of the wrong type.
    """
    if not isinstance(columns, dict) or not all(isinstance(v, list) for v in columns.values()):
        raise CardFormatError(f"{where}: expected an object of lists")
    unknown = sorted(set(columns) - set(FIELDS))
    if unknown:
        raise CardFormatError(f"{where}: unknown key {unknown[0]!r} (allowed: {sorted(FIELDS)})")
    missing = [f for f in FIELDS[:6] if f not in columns]
    if missing:
        raise CardFormatError(f"{where}: missing key {missing[0]!r}")
    if len({len(v) for v in columns.values()}) > 1:
        raise CardFormatError(f"{where}: columns differ in length")
    n = len(columns["card_id"])
    _check(columns, where, "card_id", {str})
    for name in ("rho", "offer_joint", "control_joint"):
        _check(columns, where, name, {float, int}, finite=True)
    for name in ("offer", *SPARSE):
        if name in columns:
            _check(columns, where, name, {float, int, type(None)}, finite=True)
    _check(columns, where, "safe", {bool})
    rag = columns.get("rag")
    if rag is not None and not set(rag) <= set(RAG_CODES):
        bad = next(r for r in rag if r not in RAG_CODES)
        raise CardFormatError(f"{where}.rag: expected one of {list(RAG_CODES[1:])}, got {bad!r}")
    ids = [pool.get(c, c) for c in columns["card_id"]]
    extra = {
        name: {i: float(v) for i, v in enumerate(columns[name]) if v is not None}
        for name in SPARSE
        if name in columns and columns[name].count(None) != n
    }
    return CandidateTable.from_columns(
        ids,
        columns["rho"],
        columns["safe"],
        offers=[None if o is None else float(o) for o in columns["offer"]] if n else [],
        offer_joint=columns["offer_joint"],
        control_joint=columns["control_joint"],
        rag=rag,
        extra=extra,
    )


def _check(
    columns: dict[str, list[Any]], where: str, name: str, types: set[type], finite: bool = False
) -> None:
    values = columns[name]
    if not set(map(type, values)) <= types:
        i, bad = next((i, v) for i, v in enumerate(values) if type(v) not in types)
        raise CardFormatError(f"{where}.{name}[{i}]: unexpected value {bad!r}")
    if finite:
        nums = [v for v in values if v is not None]
        if nums and not np.isfinite(np.array(nums, dtype=np.float64)).all():
            raise CardFormatError(f"{where}.{name}: expected finite numbers")


def decode(
    cls: type[R],
    body: str | bytes,
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

    ``body`` is the stored form (TEXT, or a version-4 BLOB: ``bodies.body_text``).

    Raises:
        LedgerIntegrityError: hash mismatch, unparsable body, unknown or
            missing key, wrong type, or a key column that disagrees with the body.
    """
    body = body_text(body, where)
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
