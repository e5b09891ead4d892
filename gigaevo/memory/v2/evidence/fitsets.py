"""The row ids a decision's heads were fitted on, stored once per fit (schema version 3).

A decision logs the ids of every ledger row its heads were fitted on (memory-model.md
"Rows and eligibility"): O(ledger) ids, the same for every decision of one fit and nearly
the same from one fit to the next. Each distinct id set is a link of a
content-addressed delta chain in the ``fit_sets`` table, keyed by the SHA-256
of its body ``{"parent": <link hash> | null, "added": [...], "removed": [...]}``:
the set is ``(parent's set - removed) | added`` in ascending order, and a link
with no parent holds its whole set. The parent hash is inside the body, so a
link's hash covers its whole chain; a decision body holds the hash of its link
(``fitted_rows_ref``), which the decision's own SHA-256 covers. From schema version 4
a new link's body is stored compressed (``bodies``), its key still the text's hash.

A writer starts a new whole set once the ids changed since its last whole set
outnumber the set (so the stored ids total O(distinct ids) and rebuilding a set
reads at most about twice its size). In memory a link is a ``RowIdSet``: a
``Sequence[str]`` equal to (and hashing like) the tuple of its ids, built on
demand through the chain, the last few kept. Id tuples that are empty or not
strictly ascending are stored inline in the decision body as before.
"""

from __future__ import annotations

import json
import sqlite3
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from itertools import pairwise
from typing import Any, overload

from gigaevo.memory.v2.evidence.bodies import body_text, pack_body
from gigaevo.memory.v2.evidence.errors import LedgerIntegrityError
from gigaevo.memory.v2.evidence.rows import canonical_json, sha256_hex

_MEMO_SIZE = 8  # id tuples built through a chain and kept (the latest few fits)


class _Memo:
    """The id tuples of the last few links built (shared by the links of one store)."""

    def __init__(self, size: int = _MEMO_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    def get(self, sha: str) -> tuple[str, ...] | None:
        hit = self._items.get(sha)
        if hit is not None:
            self._items.move_to_end(sha)
        return hit

    def put(self, sha: str, ids: tuple[str, ...]) -> None:
        self._items[sha] = ids
        self._items.move_to_end(sha)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


class RowIdSet(Sequence[str]):
    """One link of a fit-set chain: the ascending ids of the rows a fit used.

    Attributes:
        sha: the link's hash (its ``fit_sets`` key).
        parent: the previous link, None for a whole set.
        added, removed: the ids this link adds to / removes from its parent's set.
    """

    __slots__ = ("_hash", "_memo", "_size", "added", "parent", "removed", "sha", "weight")

    sha: str
    parent: RowIdSet | None
    added: tuple[str, ...]
    removed: tuple[str, ...]
    weight: int  # ids changed since the last whole set of the chain
    _memo: _Memo
    _hash: int | None
    _size: int | None  # the number of ids, once known

    def __init__(
        self,
        parent: RowIdSet | None,
        added: tuple[str, ...],
        removed: tuple[str, ...],
        memo: _Memo,
        sha: str | None = None,
        size: int | None = None,
    ) -> None:
        """``sha``: the hash of the link's body when already known (a checked read);
        ``size``: the number of ids in the set when known (the writer holds the set), so
        ``len`` and truthiness cost O(1) instead of rebuilding the set."""
        weight = 0 if parent is None else parent.weight + len(added) + len(removed)
        if sha is None:
            sha = sha256_hex(link_body(parent.sha if parent is not None else None, added, removed))
        for name, value in (
            ("sha", sha),
            ("parent", parent),
            ("added", added),
            ("removed", removed),
            ("weight", weight),
            ("_memo", memo),
            ("_hash", None),
            ("_size", size),
        ):
            object.__setattr__(self, name, value)

    def body(self) -> str:
        """The canonical JSON body stored under ``sha``."""
        parent = self.parent.sha if self.parent is not None else None  # not len(): O(1)
        return link_body(parent, self.added, self.removed)

    def ids(self) -> tuple[str, ...]:
        """The whole ascending id tuple (rebuilt from the nearest kept or whole link)."""
        chain: list[RowIdSet] = []
        node: RowIdSet | None = self
        base: tuple[str, ...] = ()
        while node is not None:
            hit = node._memo.get(node.sha)
            if hit is not None:
                base = hit
                break
            chain.append(node)
            node = node.parent
        if not chain:
            return base
        current = set(base)
        for link in reversed(chain):
            if link.parent is None:
                current = set(link.added)
            else:
                current.difference_update(link.removed)
                current.update(link.added)
        out = tuple(sorted(current))
        self._memo.put(self.sha, out)
        return out

    def __len__(self) -> int:
        if self._size is None:  # a link read back: counted once, through its ids
            object.__setattr__(self, "_size", len(self.ids()))
        assert self._size is not None
        return self._size

    def __bool__(self) -> bool:
        return len(self) > 0

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        return self.ids()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids())

    def __contains__(self, value: object) -> bool:
        return value in self.ids()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RowIdSet):
            return self.sha == other.sha or self.ids() == other.ids()
        if isinstance(other, tuple | list):
            return self.ids() == tuple(other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        if self._hash is None:  # as the tuple of ids it equals
            object.__setattr__(self, "_hash", hash(self.ids()))
        assert self._hash is not None
        return self._hash

    def __repr__(self) -> str:
        return f"RowIdSet(fit_sets#{self.sha[:16]}, {len(self)} ids)"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"RowIdSet is immutable (cannot set {name!r})")

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return tuple, (self.ids(),)  # unpickles as the plain tuple it equals


def link_body(parent: str | None, added: Sequence[str], removed: Sequence[str]) -> str:
    return canonical_json({"added": list(added), "parent": parent, "removed": list(removed)})


def strictly_ascending(ids: tuple[str, ...]) -> bool:
    return all(a < b for a, b in pairwise(ids))


class FitSetStore:
    """Writes and verified reads of the ``fit_sets`` table (one per ledger instance).

    The writer chains each new id set to the previous one it wrote; a decision
    whose ids equal the previous decision's reuses its link (one object in memory).
    Reads keep every link already checked, by hash.
    """

    def __init__(self) -> None:
        self._memo = _Memo()
        # (ids object last encoded, its link, its set)
        self._last: tuple[Sequence[str], RowIdSet, frozenset[str]] | None = None
        self._stored: set[str] = set()  # link hashes known committed
        self._written: dict[str, RowIdSet] = {}  # links built here, by hash
        self._links: dict[str, RowIdSet] = {}  # read back and checked
        self.refs: dict[str, str] = {}  # decision body SHA-256 -> its link hash
        # the link of the ledger's newest stored decision, read at open: a resumed
        # writer's first fit chains to it instead of starting a whole set (used once)
        self._seed: RowIdSet | None = None

    # ---- writes -----------------------------------------------------------------

    def encode(self, ids: Sequence[str]) -> RowIdSet | None:
        """The link storing ``ids``; None when they stay inline (empty, not ascending)."""
        if isinstance(ids, RowIdSet):
            return ids
        last = self._last
        if last is not None and (ids is last[0] or last[1].ids() == tuple(ids)):
            self._last = (ids, last[1], last[2])
            return last[1]
        whole = tuple(ids)
        if not whole or not strictly_ascending(whole):
            return None
        new = frozenset(whole)
        link = None
        if last is None and self._seed is not None:  # a resumed writer's first fit
            last, self._seed = ((), self._seed, frozenset(self._seed.ids())), None
        if last is not None:
            added = tuple(sorted(new - last[2]))
            removed = tuple(sorted(last[2] - new))
            if last[1].weight + len(added) + len(removed) <= len(whole):
                link = RowIdSet(last[1], added, removed, self._memo, size=len(whole))
        if link is None:
            link = RowIdSet(None, whole, (), self._memo, size=len(whole))
        link = self._written.setdefault(link.sha, link)
        self._memo.put(link.sha, whole)
        self._last = (ids, link, new)
        return link

    def link(
        self,
        base: RowIdSet | None,
        ids: set[str],
        delta: tuple[tuple[str, ...], tuple[str, ...]],
    ) -> RowIdSet | tuple[str, ...]:
        """The link of the id set ``ids``, which differs from ``base``'s set by ``delta`` =
        (added, removed); O(change) unless a whole set is due (the same rule as
        ``encode``), or ``base`` is None. Empty sets stay inline: ()."""
        if not ids:
            return ()
        added, removed = delta
        if base is None and self._seed is not None:  # a resumed writer's first fit
            base, self._seed = self._seed, None
            old = set(base.ids())
            added, removed = tuple(sorted(ids - old)), tuple(sorted(old - ids))
        last = base
        if last is not None and not added and not removed:
            return last
        if last is not None and last.weight + len(added) + len(removed) <= len(ids):
            link = RowIdSet(last, added, removed, self._memo, size=len(ids))
        else:
            whole = tuple(sorted(ids))
            link = RowIdSet(None, whole, (), self._memo, size=len(whole))
            self._memo.put(link.sha, whole)
        return self._written.setdefault(link.sha, link)

    def write(self, conn: sqlite3.Connection, link: RowIdSet) -> list[str]:
        """Insert ``link`` and its ancestors not yet stored (inside the caller's
        transaction); returns their hashes for ``committed``."""
        rows = []
        node: RowIdSet | None = link
        while node is not None and node.sha not in self._stored:
            rows.append((node.sha, pack_body(node.body())))
            node = node.parent
        conn.executemany("INSERT OR IGNORE INTO fit_sets (sha256, body) VALUES (?, ?)", rows)
        return [sha for sha, _ in rows]

    def committed(self, hashes: Sequence[str]) -> None:
        """Record that the transaction holding ``write`` committed."""
        self._stored.update(hashes)

    def seed(self, link: RowIdSet) -> None:
        """Chain the next fit built from no base to ``link`` (a checked, stored link: the
        newest decision's, at open), so a resumed run continues its chain."""
        self._seed = link
        node: RowIdSet | None = link
        while node is not None and node.sha not in self._stored:  # read back: stored
            self._stored.add(node.sha)
            node = node.parent

    # ---- reads ------------------------------------------------------------------

    def reset(self) -> None:
        """Forget what was read back (every referenced link is then checked again)."""
        self._links = {}
        self.refs = {}
        self._seed = None

    def resolve(self, conn: sqlite3.Connection, ref: str, where: str) -> RowIdSet:
        """The link with hash ``ref``, every body of its chain checked against its hash once.

        Raises:
            LedgerIntegrityError: a link of the chain is missing, fails its hash or
                does not parse (the message names it and the decision ``where``).
        """
        found: list[tuple[str, str | None, tuple[str, ...], tuple[str, ...]]] = []
        sha: str | None = ref
        while sha is not None and sha not in self._links:
            lwhere = f"fit_sets#{sha[:16]} (fitted rows of {where})"
            row = conn.execute("SELECT body FROM fit_sets WHERE sha256 = ?", (sha,)).fetchone()
            if row is None:
                raise LedgerIntegrityError(f"ledger row {lwhere}: missing")
            body = body_text(row[0], lwhere)
            if sha256_hex(body) != sha:
                raise LedgerIntegrityError(f"ledger row {lwhere}: content hash mismatch (tampered)")
            parent, added, removed = _parse(body, lwhere)
            found.append((sha, parent, added, removed))
            sha = parent
        for sha, parent, added, removed in reversed(found):
            link = self._written.get(sha)  # same hash, same content: share the object
            if link is None:
                up = self._links[parent] if parent else None
                link = RowIdSet(up, added, removed, self._memo, sha)
            self._links[sha] = link
        return self._links[ref]


def _parse(body: str, where: str) -> tuple[str | None, tuple[str, ...], tuple[str, ...]]:
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise LedgerIntegrityError(f"ledger row {where}: {exc}") from exc
    if not isinstance(data, dict) or set(data) != {"added", "parent", "removed"}:
        raise LedgerIntegrityError(f"ledger row {where}: expected keys added, parent, removed")
    parent, added, removed = data["parent"], data["added"], data["removed"]
    lists_ok = all(
        isinstance(v, list) and all(isinstance(s, str) for s in v) for v in (added, removed)
    )
    if not (parent is None or isinstance(parent, str)) or not lists_ok:
        raise LedgerIntegrityError(f"ledger row {where}: expected a parent hash and id lists")
    return parent, tuple(added), tuple(removed)
