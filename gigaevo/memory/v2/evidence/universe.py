"""Content-addressed card snapshots and universes of the causal ledger (schema version 2+).

A decision freezes its whole eligible universe (memory-model.md "Rows and eligibility"), which is
nearly the same from one decision to the next. Each snapshot is stored once in
``snapshots`` keyed by the SHA-256 of its canonical JSON, each universe once in
``universes`` keyed by the SHA-256 of its body (the canonical JSON list of its
snapshot hashes, in universe order); a decision body holds the universe hash
(``universe_ref``), which its own SHA-256 covers. Every referenced body is
checked against its key when first read; a mismatch or a missing row raises
``LedgerIntegrityError`` naming it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import NamedTuple

from gigaevo.memory.v2.errors import CardFormatError
from gigaevo.memory.v2.evidence.errors import LedgerIntegrityError
from gigaevo.memory.v2.evidence.rows import CardSnapshot, canonical_json, sha256_hex
from gigaevo.memory.v2.records import from_json, to_json

_CHUNK = 500  # hashes per "IN (...)" query, under SQLite's bound-parameter limit


class EncodedUniverse(NamedTuple):
    """A universe as stored: its hash, its body and its snapshots' (hash, body) rows."""

    sha: str
    body: str
    snapshots: tuple[tuple[str, str], ...]


class UniverseStore:
    """Writes and verified reads of the ``snapshots`` and ``universes`` tables.

    Encoding keeps the last universe (a decision whose universe equals it is not
    serialised again) and the hashes of its snapshots (a changed universe
    serialises only its new cards). Reads keep every universe and snapshot
    already checked, by hash, so decisions sharing a universe share one tuple.
    """

    def __init__(self) -> None:
        self._last: tuple[tuple[CardSnapshot, ...], EncodedUniverse] | None = None
        self._snap_rows: dict[CardSnapshot, tuple[str, str]] = {}  # of the last universe
        self._stored: set[str] = set()  # universe and snapshot hashes known committed
        self._universes: dict[str, tuple[CardSnapshot, ...]] = {}  # read back and checked
        self._snapshots: dict[str, CardSnapshot] = {}  # read back and checked
        self.refs: dict[str, str] = {}  # decision body SHA-256 -> its universe hash
        # card id -> the id string of its checked snapshot (decoded candidate ids are
        # replaced by it, so all decisions share one string per card)
        self.card_ids: dict[str, str] = {}

    # ---- writes -----------------------------------------------------------------

    def encode(self, universe: tuple[CardSnapshot, ...]) -> EncodedUniverse:
        """The stored form of ``universe`` (reused when it equals the previous one)."""
        last = self._last
        if last is not None and (universe is last[0] or universe == last[0]):
            return last[1]
        rows = {}
        for snap in universe:
            row = self._snap_rows.get(snap)
            if row is None:
                body = canonical_json(to_json(snap))
                row = (sha256_hex(body), body)
            rows[snap] = row
        body = canonical_json([rows[s][0] for s in universe])
        encoded = EncodedUniverse(sha256_hex(body), body, tuple(rows.values()))
        self._last, self._snap_rows = (universe, encoded), rows
        return encoded

    def write(self, conn: sqlite3.Connection, encoded: EncodedUniverse) -> None:
        """Insert the universe and its snapshots not yet stored (inside the caller's
        transaction; rows already present, from any process, are left as they are)."""
        if encoded.sha in self._stored:
            return
        conn.executemany(
            "INSERT OR IGNORE INTO snapshots (sha256, body) VALUES (?, ?)",
            [row for row in encoded.snapshots if row[0] not in self._stored],
        )
        conn.execute(
            "INSERT OR IGNORE INTO universes (sha256, body) VALUES (?, ?)",
            (encoded.sha, encoded.body),
        )

    def committed(self, encoded: EncodedUniverse) -> None:
        """Record that the transaction holding ``write(encoded)`` committed."""
        self._stored.add(encoded.sha)
        self._stored.update(sha for sha, _ in encoded.snapshots)

    # ---- reads ------------------------------------------------------------------

    def reset(self) -> None:
        """Forget what was read back (``verify`` then re-checks every referenced row)."""
        self._universes = {}
        self._snapshots = {}
        self.refs = {}
        self.card_ids = {}

    def resolve(self, conn: sqlite3.Connection, ref: str, where: str) -> tuple[CardSnapshot, ...]:
        """The universe with hash ``ref``, every body checked against its hash once.

        Raises:
            LedgerIntegrityError: the universe row or one of its snapshot rows is
                missing, fails its hash, or does not parse.
        """
        known = self._universes.get(ref)
        if known is not None:
            return known
        uwhere = f"universes#{ref[:16]} (universe of {where})"
        found = conn.execute("SELECT body FROM universes WHERE sha256 = ?", (ref,)).fetchone()
        if found is None:
            raise LedgerIntegrityError(f"ledger row {uwhere}: missing")
        hashes = _hash_list(found[0], ref, uwhere)
        self._read_snapshots(conn, [h for h in set(hashes) if h not in self._snapshots], uwhere)
        universe = tuple(self._snapshots[h] for h in hashes)
        self._universes[ref] = universe
        return universe

    def _read_snapshots(self, conn: sqlite3.Connection, wanted: Sequence[str], where: str) -> None:
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            query = f"SELECT sha256, body FROM snapshots WHERE sha256 IN ({marks})"
            for sha, body in conn.execute(query, chunk):
                swhere = f"snapshots#{sha[:16]} (in {where})"
                if sha256_hex(body) != sha:
                    raise LedgerIntegrityError(f"ledger row {swhere}: content hash mismatch")
                try:
                    snap = from_json(CardSnapshot, json.loads(body), swhere)
                except (ValueError, CardFormatError) as exc:
                    raise LedgerIntegrityError(f"ledger row {swhere}: {exc}") from exc
                self._snapshots[sha] = snap
                self.card_ids.setdefault(snap.card_id, snap.card_id)
        gone = [h for h in wanted if h not in self._snapshots]
        if gone:
            raise LedgerIntegrityError(f"ledger row snapshots#{gone[0][:16]} (in {where}): missing")


def _hash_list(body: str, ref: str, where: str) -> list[str]:
    """The snapshot hashes of a universe body, checked against the universe hash."""
    if sha256_hex(body) != ref:
        raise LedgerIntegrityError(f"ledger row {where}: content hash mismatch (tampered)")
    try:
        hashes = json.loads(body)
    except ValueError as exc:
        raise LedgerIntegrityError(f"ledger row {where}: {exc}") from exc
    if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
        raise LedgerIntegrityError(f"ledger row {where}: expected a list of snapshot hashes")
    return hashes
