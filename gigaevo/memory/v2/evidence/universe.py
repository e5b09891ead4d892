"""Content-addressed card snapshots and universes of the causal ledger (schema version 2+).

A decision freezes its whole eligible universe (memory-model.md "Rows and eligibility"), which is
nearly the same from one decision to the next. Each snapshot is stored once in
``snapshots`` keyed by the SHA-256 of its canonical JSON, each universe once in
``universes`` keyed by the SHA-256 of its body (the canonical JSON list of its
snapshot hashes, in universe order); a decision body holds the universe hash
(``universe_ref``), which its own SHA-256 covers. Every referenced body is
checked against its key when first read; a mismatch or a missing row raises
``LedgerIntegrityError`` naming it.

A universe that differs from its base (the universe of the ledger's newest decision,
see ``UniverseStore``) by a few cards is stored as a difference from it
(``{"base": <its hash>, "ops": [[i, j, [hashes]], ...]}``: the base's hashes ``[i:j]``
replaced by those listed, positions ascending), when that is under half the full list
and the base's chain is under ``DELTA_DEPTH`` differences deep (the depth is read from
the chain, so a resumed session continues it exactly as an uninterrupted one would).
A universe whose whole list the ledger already holds refers to that row instead.
At 1,000 cards a full universe is ~67 KB (a hash per card), a card added or re-texted
~0.2 KB.
"""

from __future__ import annotations

import difflib
import json
import sqlite3
from collections.abc import Sequence
from typing import Any, NamedTuple

from gigaevo.memory.v2.errors import CardFormatError
from gigaevo.memory.v2.evidence.errors import LedgerIntegrityError
from gigaevo.memory.v2.evidence.rows import CardSnapshot, canonical_json, sha256_hex
from gigaevo.memory.v2.records import from_json, to_json

_CHUNK = 500  # hashes per "IN (...)" query, under SQLite's bound-parameter limit
DELTA_DEPTH = 32  # links of a universe difference chain before a whole list again


class EncodedUniverse(NamedTuple):
    """A universe as stored: its hash, its body and its snapshots' (hash, body) rows,
    with the universe, its snapshot hashes and its chain depth (differences down to a
    whole list) kept as the base of the next one."""

    sha: str
    body: str
    snapshots: tuple[tuple[str, str], ...]
    universe: tuple[CardSnapshot, ...]
    hashes: list[str]
    depth: int


class UniverseStore:
    """Writes and verified reads of the ``snapshots`` and ``universes`` tables.

    The base of a new universe is the universe of the newest decision committed
    through this store, or, before its first commit, of the ledger's newest decision
    (``seed``, at open): a function of the ledger's rows, not of the session, so a
    killed and resumed run stores the same universe rows and decision bodies as an
    uninterrupted one. A universe equal to its base is its base (no new row);
    a changed one serialises only its new cards. Reads keep every universe and
    snapshot already checked, by hash, so decisions sharing a universe share one tuple.
    """

    def __init__(self) -> None:
        self._base: EncodedUniverse | None = None
        self._hash_lists: dict[str, list[str]] = {}  # read back and checked, by hash
        self._depths: dict[str, int] = {}  # chain depth of the universes read back
        self._snap_rows: dict[CardSnapshot, tuple[str, str]] = {}  # of the last universe
        self._stored: set[str] = set()  # universe and snapshot hashes known committed
        self._universes: dict[str, tuple[CardSnapshot, ...]] = {}  # read back and checked
        self._snapshots: dict[str, CardSnapshot] = {}  # read back and checked
        self.refs: dict[str, str] = {}  # decision body SHA-256 -> its universe hash
        # card id -> the id string of its checked snapshot (decoded candidate ids are
        # replaced by it, so all decisions share one string per card)
        self.card_ids: dict[str, str] = {}

    # ---- writes -----------------------------------------------------------------

    def encode(
        self, universe: tuple[CardSnapshot, ...], conn: sqlite3.Connection | None = None
    ) -> EncodedUniverse:
        """The stored form of ``universe``: its base when equal to it, its whole list
        when the ledger (``conn``) already holds that, else a whole list or a
        difference from the base (see the module docstring)."""
        last = self._base
        if last is not None and (universe is last.universe or universe == last.universe):
            return last
        rows = {}
        for snap in universe:
            row = self._snap_rows.get(snap)
            if row is None:
                body = canonical_json(to_json(snap))
                row = (sha256_hex(body), body)
            rows[snap] = row
        hashes = [rows[s][0] for s in universe]
        body, depth = canonical_json(hashes), 0
        if last is not None and last.depth < DELTA_DEPTH and not _has(conn, sha256_hex(body)):
            delta = canonical_json({"base": last.sha, "ops": _difference(last.hashes, hashes)})
            if 2 * len(delta) < len(body):
                body, depth = delta, last.depth + 1
        self._snap_rows = rows
        return EncodedUniverse(
            sha256_hex(body), body, tuple(rows.values()), universe, hashes, depth
        )

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
        """Record that the transaction holding ``write(encoded)`` committed (its
        universe, that of the newest decision, is the next one's base)."""
        if encoded is self._base and encoded.sha in self._stored:
            return  # the base again (an unchanged universe): its hashes are known
        self._stored.add(encoded.sha)
        self._stored.update(sha for sha, _ in encoded.snapshots)
        self._base = encoded

    def seed(self, conn: sqlite3.Connection, ref: str, where: str) -> None:
        """Take universe ``ref`` (the ledger's newest decision's, checked) as the base
        of the next universe encoded, as the session that wrote it would have."""
        universe = self.resolve(conn, ref, where)
        hashes = self._hash_lists[ref]
        self._stored.add(ref)
        self._stored.update(hashes)
        self._base = EncodedUniverse(ref, "", (), universe, hashes, self._depths[ref])

    # ---- reads ------------------------------------------------------------------

    def reset(self) -> None:
        """Forget what was read back (``verify`` then re-checks every referenced row)."""
        self._universes = {}
        self._snapshots = {}
        self._hash_lists = {}
        self._depths = {}
        self._base = None
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
        hashes = self._hashes(conn, ref, uwhere, 0)
        self._read_snapshots(conn, [h for h in set(hashes) if h not in self._snapshots], uwhere)
        universe = tuple(self._snapshots[h] for h in hashes)
        self._universes[ref] = universe
        return universe

    def _hashes(self, conn: sqlite3.Connection, ref: str, where: str, depth: int) -> list[str]:
        """The snapshot hashes of universe ``ref`` (a difference applied to its base),
        every row of the chain checked against its hash once."""
        known = self._hash_lists.get(ref)
        if known is not None:
            return known
        if depth > DELTA_DEPTH:
            raise LedgerIntegrityError(f"ledger row {where}: difference chain too long")
        found = conn.execute("SELECT body FROM universes WHERE sha256 = ?", (ref,)).fetchone()
        if found is None:
            raise LedgerIntegrityError(f"ledger row {where}: missing")
        data = _checked_body(found[0], ref, where)
        if isinstance(data, dict):
            parent = str(data.get("base"))
            bwhere = f"universes#{parent[:16]} (base of {where})"
            base = self._hashes(conn, parent, bwhere, depth + 1)
            hashes = apply_difference(base, data, where)
            self._depths[ref] = self._depths[parent] + 1
        else:
            hashes = data
            self._depths[ref] = 0
        self._hash_lists[ref] = hashes
        return hashes

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


def _has(conn: sqlite3.Connection | None, sha: str) -> bool:
    """Whether the ledger already holds the universe row ``sha``."""
    if conn is None:
        return False
    return conn.execute("SELECT 1 FROM universes WHERE sha256 = ?", (sha,)).fetchone() is not None


def _checked_body(body: str, ref: str, where: str) -> list[str] | dict[str, Any]:
    """A universe body checked against its hash: a list of snapshot hashes, or a
    difference (an object with ``base`` and ``ops``)."""
    if sha256_hex(body) != ref:
        raise LedgerIntegrityError(f"ledger row {where}: content hash mismatch (tampered)")
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise LedgerIntegrityError(f"ledger row {where}: {exc}") from exc
    if isinstance(data, dict) and set(data) == {"base", "ops"} and isinstance(data["base"], str):
        return data
    if not isinstance(data, list) or not all(isinstance(h, str) for h in data):
        raise LedgerIntegrityError(f"ledger row {where}: expected a list of snapshot hashes")
    return data


def _difference(old: list[str], new: list[str]) -> list[list[Any]]:
    """The ops turning ``old`` into ``new``: [i, j, hashes] replaces ``old[i:j]``."""
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return [[i1, i2, new[j1:j2]] for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def apply_difference(base: list[str], data: dict[str, Any], where: str) -> list[str]:
    """``base`` with the ops of a universe difference applied.

    Raises:
        LedgerIntegrityError: ops that are not [i, j, [hashes]] with ascending,
            non-overlapping positions inside ``base``.
    """
    out: list[str] = []
    at = 0
    ops = data.get("ops")
    if not isinstance(ops, list):
        raise LedgerIntegrityError(f"ledger row {where}: ops must be a list")
    for op in ops:
        i, j, hashes = op if isinstance(op, list) and len(op) == 3 else (None, None, None)
        if not (
            type(i) is int
            and type(j) is int
            and at <= i <= j <= len(base)
            and isinstance(hashes, list)
            and all(isinstance(h, str) for h in hashes)
        ):
            raise LedgerIntegrityError(f"ledger row {where}: bad difference op {op!r}")
        out += base[at:i]
        out += hashes
        at = j
    return out + base[at:]
