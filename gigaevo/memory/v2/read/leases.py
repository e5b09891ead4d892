"""Selection leases (``selection_leases.json`` under the bank dir), shared across processes.

A lease reserves one offered card (its whole lineage: id plus absorbed
aliases) for one mutation attempt until that attempt or its child resolves,
so processes sharing a bank count each other's pending outcomes. At most
``max_pending`` (2) live leases may touch one lineage (ids are closed over
the alias sets other leases recorded); a further ``acquire`` raises
``LeaseCapReachedError``.

Every change is one short transaction under ``selection_leases.json.lock``
(``filelock``): read, reclaim dead leases, change, atomic replace. A lease is
reclaimed when it is past its expiry, or its owner ran on this host and its
pid is no longer alive. A file that does not parse raises
``LeaseFileCorruptError`` and is never overwritten.

Releases ride along (issue 16): ``release_attempt(..., later=True)`` (an outcome resolved)
does not write the file; the release is owed by this process (a process-wide set per file,
``_OWED``) and goes into the file with the next change it writes (the next ``acquire``, a
reclaim, a release now, ``flush``), or by the first read once it is ``RELEASE_LAG_S``
old (a decision reads the leases). Until then every
reader of this process (any ``SelectionLeases`` of the file) leaves the lease out, so this
process decides exactly as if it had been written; other processes sharing the bank see it
held a little longer (until this process's next lease, or its first decision
``RELEASE_LAG_S`` later, or its close), which
can only make them count it as pending. A kill loses the owed releases with the process:
its leases are then reclaimed as those of a dead pid, as before. One write per leased
mutant instead of two.

Durability (issue 16): a change is not fsynced (neither the file nor the directory).
A SIGKILL at any instant still leaves the old file or the new one, whole (the kernel
holds the written data; the replace is atomic), so a kill loses and duplicates
nothing. Only a power loss or a kernel crash can skip the last changes or leave the
file empty or zero-filled, and it also kills every process whose leases the file
holds: such a file is read as holding no leases. (A bank shared over NFS is written
through to the server when the file is closed.) The fsyncs cost two per mutant
(acquire at the decision, release at the outcome): see docs/benchmarks-history.md, issue 16.

CPU per transaction (session 12): a read that finds the very bytes this instance last read
or wrote reuses their parse (in a run alone on its bank, every read), and a write renders
the file from each lease's block, encoded once when the lease is taken (byte for byte the
``json.dumps`` of the whole file). What is left is the lock and the replace.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import filelock

from gigaevo.memory.v2.errors import CardFormatError
from gigaevo.memory.v2.evidence.errors import (
    LeaseCapReachedError,
    LeaseFileCorruptError,
    LeaseLockTimeoutError,
)
from gigaevo.memory.v2.evidence.owner import pid_alive
from gigaevo.memory.v2.records import from_json, to_json
from gigaevo.util import atomic_write_bytes

T = TypeVar("T")

LEASE_FILE = "selection_leases.json"
LEASE_FORMAT = 1
RELEASE_LAG_S = 2.0  # an owed release is written at the first transaction after this long

# releases owed by this process, per lease file: (pid, host, run id, attempt) -> since when
_OWED: dict[Path, dict[tuple[int, str, str, int], float]] = {}
_OWED_LOCK = threading.Lock()


def _forget_owed_in_child() -> None:
    """A forked child owes none of its parent's releases (they name the parent's pid)."""
    global _OWED_LOCK
    _OWED.clear()
    _OWED_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_owed_in_child)


def _release_due(owed: dict[tuple[int, str, str, int], float], now: float) -> bool:
    """Whether any owed release is ``RELEASE_LAG_S`` old: the next transaction writes it."""
    return any(now - since >= RELEASE_LAG_S for since in owed.values())


@dataclass(frozen=True)
class Lease:
    """One reservation of a card lineage by one attempt of one process."""

    lease_id: str
    card_id: str
    lineage_ids: tuple[str, ...]  # card id and its absorbed aliases
    pid: int
    host: str
    run_id: str
    attempt: int
    created: float
    expires: float

    def touches(self, ids: Collection[str]) -> bool:
        return not set(self.lineage_ids).isdisjoint(ids)


@dataclass(frozen=True)
class LeaseFile:
    format: int
    leases: tuple[Lease, ...]


class SelectionLeases:
    """The lease file of one bank, used by one process (see the module docstring).

    Args:
        bank_dir: directory of ``selection_leases.json``.
        run_id: this run's id (recorded in every lease).
        ttl_s: a lease expires this long after it was taken.
        max_pending: live leases allowed per card lineage.
        lock_timeout_s: wait for the lock file at most this long.
        clock: seconds since the epoch (injectable for tests).
    """

    def __init__(
        self,
        bank_dir: str | Path,
        *,
        run_id: str,
        ttl_s: float = 6 * 3600.0,
        max_pending: int = 2,
        lock_timeout_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(bank_dir) / LEASE_FILE
        self.run_id = run_id
        self.ttl_s = ttl_s
        self.max_pending = max_pending
        self.lock_timeout_s = lock_timeout_s
        self.clock = clock
        self.host = socket.gethostname()
        self._lock = filelock.FileLock(str(self.path) + ".lock")
        self._owed_key = Path(os.path.abspath(self.path))  # one entry of ``_OWED`` per file
        # the bytes last read or written and their leases: a read that finds the same bytes
        # reuses them instead of parsing the file again (``_read``)
        self._known: tuple[bytes, tuple[Lease, ...]] = (b"", ())
        self._texts: dict[Lease, str] = {}  # each lease's block of the file (``_render``)

    def acquire(self, card_id: str, lineage_ids: Collection[str], attempt: int) -> Lease:
        """Reserve ``card_id`` (and its aliases) for ``attempt`` of this process.

        Raises:
            LeaseCapReachedError: its lineage already holds ``max_pending`` live leases.
            LeaseFileCorruptError: the lease file does not parse.
            LeaseLockTimeoutError: the lock was not acquired in time.
        """
        ids = tuple(sorted({card_id, *lineage_ids}))
        now = self.clock()
        lease = Lease(
            lease_id=uuid.uuid4().hex,
            card_id=card_id,
            lineage_ids=ids,
            pid=os.getpid(),
            host=self.host,
            run_id=self.run_id,
            attempt=attempt,
            created=now,
            expires=now + self.ttl_s,
        )

        def change(leases: list[Lease]) -> Lease:
            lineage = lineage_closure(ids, leases)
            pending = sum(1 for held in leases if held.touches(lineage))
            if pending >= self.max_pending:
                raise LeaseCapReachedError(card_id, pending)
            leases.append(lease)
            return lease

        return self._transaction(change)

    def release(self, lease_id: str) -> bool:
        """Drop one lease. Returns whether it was still held.

        Raises:
            LeaseFileCorruptError, LeaseLockTimeoutError: as for ``acquire``.
        """

        def change(leases: list[Lease]) -> bool:
            before = len(leases)
            leases[:] = [held for held in leases if held.lease_id != lease_id]
            return len(leases) < before

        return self._transaction(change)

    def release_attempt(self, attempt: int, *, later: bool = False) -> int:
        """Drop every lease this process and run holds for ``attempt``; returns how many
        (``later``: owe the release, see the module docstring; returns 0, nothing is read).
        """
        if later:
            with _OWED_LOCK:
                owed = _OWED.setdefault(self._owed_key, {})
                owed.setdefault((os.getpid(), self.host, self.run_id, attempt), self.clock())
            return 0

        def change(leases: list[Lease]) -> int:
            before = len(leases)
            leases[:] = [held for held in leases if not self._mine(held, attempt)]
            return before - len(leases)

        return self._transaction(change)

    def flush(self) -> None:
        """Write the releases this process owes on the file now."""
        if self._owed():
            self._transaction(lambda leases: None, write=True)

    def active(self) -> tuple[Lease, ...]:
        """Live leases (dead ones are reclaimed and written back first).

        Read without the lock when there is nothing to write (no dead lease, no owed release
        due): every change replaces the file whole, so an unlocked read sees the leases as
        one transaction left them, as a read under the lock released before returning does.
        """
        leases = self._read()
        now = self.clock()
        owed = self._owed()
        if any(self._dead(held, now) for held in leases) or _release_due(owed, now):
            return self._transaction(lambda alive: tuple(alive))
        return tuple(held for held in leases if _owner(held) not in owed)

    def pending(self, lineage_ids: Collection[str]) -> int:
        """Live leases of the lineage of ``lineage_ids`` (closed over held leases' aliases)."""
        leases = self.active()
        ids = lineage_closure(lineage_ids, leases)
        return sum(1 for held in leases if held.touches(ids))

    def _mine(self, lease: Lease, attempt: int) -> bool:
        return (lease.pid, lease.host, lease.run_id, lease.attempt) == (
            os.getpid(),
            self.host,
            self.run_id,
            attempt,
        )

    def _dead(self, lease: Lease, now: float) -> bool:
        if now >= lease.expires:
            return True
        return lease.host == self.host and not pid_alive(lease.pid)

    def _owed(self) -> dict[tuple[int, str, str, int], float]:
        """A copy of the releases this process owes on this file (owner -> since when)."""
        with _OWED_LOCK:
            return dict(_OWED.get(self._owed_key, {}))

    def _transaction(self, change: Callable[[list[Lease]], T], *, write: bool = False) -> T:
        with self._locked():
            leases = list(self._read())
            now = self.clock()
            owed = self._owed()
            alive = [held for held in leases if not self._dead(held, now)]
            # the releases this process owes are out of every view, written with a change
            view = [held for held in alive if _owner(held) not in owed] if owed else alive
            before = list(view)
            result = change(view)
            due = write or view != before or len(alive) != len(leases)
            due = due or _release_due(owed, now)
            if due and view != leases:
                data = self._render(view).encode("utf-8")
                # no fsync (module docstring): a kill leaves the old or the new file
                atomic_write_bytes(self.path, data, durable=False, synced=False)
                self._known = (data, tuple(view))
            if due and owed:  # written (or not on file any more): no longer owed
                with _OWED_LOCK:
                    mine = _OWED.get(self._owed_key, {})
                    for key in owed:
                        mine.pop(key, None)
            return result

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=self.lock_timeout_s)
        except filelock.Timeout as exc:
            raise LeaseLockTimeoutError(f"{self._lock.lock_file} not acquired in time") from exc
        try:
            yield
        finally:
            self._lock.release()

    def _read(self) -> tuple[Lease, ...]:
        """The leases on file (none if it does not exist).

        Raises:
            LeaseFileCorruptError: not JSON, unknown key, wrong type or format.
        """
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return ()
        known = self._known  # one read of the attribute: another thread may replace it
        if raw == known[0]:  # the bytes last read or written: the same leases
            return known[1]
        if not raw.strip(b"\0"):  # what a power loss can leave of an unsynced replace
            return ()
        text = raw.decode("utf-8", "replace")
        try:
            parsed = from_json(LeaseFile, json.loads(text), LEASE_FILE)
        except (ValueError, CardFormatError) as exc:
            raise LeaseFileCorruptError(f"{self.path}: {exc} (left untouched)") from exc
        if parsed.format != LEASE_FORMAT:
            raise LeaseFileCorruptError(f"{self.path}: unknown format {parsed.format}")
        self._known = (raw, parsed.leases)
        return parsed.leases

    def _render(self, leases: Sequence[Lease]) -> str:
        """The file's text for ``leases``: ``json.dumps`` of the whole ``LeaseFile`` (indent 2,
        sorted keys), byte for byte, from each lease's block encoded once (a lease never
        changes; the file is rewritten at every decision and holds a few leases)."""
        if not leases:
            return f'{{\n  "format": {LEASE_FORMAT},\n  "leases": []\n}}\n'
        known, texts = self._texts, {}
        for lease in leases:
            block = known.get(lease)
            if block is None:
                block = json.dumps(to_json(lease), indent=2, sort_keys=True)
                block = "\n".join("    " + line for line in block.split("\n"))
            texts[lease] = block
        self._texts = texts
        body = ",\n".join(texts[lease] for lease in leases)
        return f'{{\n  "format": {LEASE_FORMAT},\n  "leases": [\n{body}\n  ]\n}}\n'


def _owner(lease: Lease) -> tuple[int, str, str, int]:
    return (lease.pid, lease.host, lease.run_id, lease.attempt)


def lineage_closure(ids: Collection[str], leases: Iterable[Lease]) -> frozenset[str]:
    """``ids`` grown by the lineage ids of every lease that shares an id with them.

    So a caller that names a lineage only partially (one alias) still counts
    every lease on that lineage, through the fuller sets other leases recorded.
    """
    held = list(leases)
    closure = set(ids)
    grown = True
    while grown:
        grown = False
        for lease in held:
            if lease.touches(closure) and not closure.issuperset(lease.lineage_ids):
                closure.update(lease.lineage_ids)
                grown = True
    return frozenset(closure)
