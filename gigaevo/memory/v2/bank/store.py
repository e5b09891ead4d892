"""``LocalMemoryStore``: the durable card bank and its process-local vector index.

One instance per process owns ``cards.json`` under ``memory_bank_dir``; the
read and write paths share it. Files beside the bank:

- ``cards.json.lock``: held for every change, a short transaction: re-read the
  bank if another process wrote, apply the change, then persist only what changed:
  use trials stamped onto cards are appended to ``cards.trials.jsonl`` (one fsynced
  line each, ``trialjournal``), and the records of changed cards are appended to
  ``cards.records.jsonl`` (one fsynced line per transaction, ``recordjournal``),
  which is compacted into ``cards.json`` (temporary file, fsync, ``os.replace``,
  directory fsync) once it outgrows it; by default a small ``cards.json`` is simply
  rewritten. A run's store journals every write and compacts when the run stops
  (``compact``), so a run that ended leaves its whole bank in ``cards.json``.
  So a stamp costs O(1) and a card write O(the cards it changed), amortised, never
  O(run) or O(bank). A reader (or a SIGKILL at any instant) sees the old bank or
  the new one, never half; a journal line torn by a kill is cut by the next writer.
  A bank written before the journals existed (trials inside ``cards.json``) is
  migrated by its first write; one without ``cards.records.jsonl`` needs nothing. Changes
  nobody waits for (use-trial stamps) can be ``stage``d: they are applied first in
  this process's next transaction, so they cost no transaction of their own.
- ``cards.json.authoring.lock``: held by the librarian across its semantic
  retrieve -> judge -> admit transaction, so two processes never admit the
  same treatment twice.

Change detection is cheap: ``refresh`` compares the file's (inode, size,
mtime) and the journals' (inode, size) with what was last loaded and re-reads only
what differs (journal lines from where it stopped); inside a transaction the header
line's generation and write id are compared, which is exact (the record journal only
grows between compactions, and a compaction gives ``cards.json`` a new write id). A
``cards.json`` (or a journal line) that does not parse raises ``CorruptBankError``, is
never overwritten, and every later call raises the same error.

Locks: ``lock="os"`` uses ``filelock.FileLock`` (``flock``; released by the
kernel when a holder dies). On NFS use ``lock="soft"`` (``filelock.SoftFileLock``,
an exclusively created marker file): a marker left by a killed process on the
same host is reclaimed automatically; one left by another host must be
removed by hand once that host's run is known to be dead.
"""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import filelock

from gigaevo.memory.v2.bank.bankfile import (
    EMPTY,
    BankHeader,
    FileSignature,
    apply_batches,
    card_line,
    read_bank,
    read_header,
    render_bank,
    signature,
    utc_now,
)
from gigaevo.memory.v2.bank.cards import Card, UseTrial
from gigaevo.memory.v2.bank.embed import Embedder
from gigaevo.memory.v2.bank.index import CardIndex
from gigaevo.memory.v2.bank.recordjournal import (
    COMPACT_FROM_BYTES,
    JOURNAL_FROM_BYTES,
    RecordJournal,
    batch_line,
)
from gigaevo.memory.v2.bank.trialjournal import (
    JOURNAL_FILE,
    TrialEntry,
    TrialIdSets,
    TrialJournal,
    appended,
    journal_entries,
    stamped,
)
from gigaevo.memory.v2.errors import BankLockTimeout, CorruptBankError
from gigaevo.util import atomic_write_text

T = TypeVar("T")

BANK_FILE = "cards.json"
LOCK_KINDS = ("os", "soft")


@dataclass
class StoreStats:
    """Counters of one store instance (for the stats file and the benchmark)."""

    reloads: int = 0
    writes: int = 0
    embedded: int = 0
    last_refresh_s: float = 0.0
    journaled: int = 0  # writes appended to cards.records.jsonl
    compactions: int = 0  # writes that rewrote cards.json whole


class LocalMemoryStore:
    """The card bank in ``bank_dir`` and its faiss index (see the module docstring).

    Not thread-safe: one thread uses an instance (the engine's main thread,
    which runs both ``decide`` and ``observe``); processes coordinate through
    the lock files.

    Args:
        bank_dir: directory of ``cards.json`` and its lock files.
        embedder: embeds card briefs and retrieval queries.
        lock: ``"os"`` (kernel file lock) or ``"soft"`` (marker file; for NFS).
        lock_timeout_s: wait for ``cards.json.lock`` at most this long.
        authoring_lock_timeout_s: default wait for the authoring lock.
        soft_lock_lifetime_s: with ``lock="soft"``, a ``cards.json.lock`` marker
            older than this is broken whatever it holds (see ``_soft_locks``).
        journal_from_bytes: a ``cards.json`` smaller than this is rewritten whole on every
            write instead of journaled (``recordjournal``).
        compact_from_bytes: the record journal may grow to this size before a compaction
            even when ``cards.json`` is smaller.
    """

    def __init__(
        self,
        bank_dir: str | Path,
        *,
        embedder: Embedder,
        lock: str = "os",
        lock_timeout_s: float = 30.0,
        authoring_lock_timeout_s: float = 300.0,
        soft_lock_lifetime_s: float = 5.0,
        journal_from_bytes: int = JOURNAL_FROM_BYTES,
        compact_from_bytes: int = COMPACT_FROM_BYTES,
    ) -> None:
        self.bank_dir = Path(bank_dir)
        self.embedder = embedder
        self.lock = lock
        self.lock_timeout_s = lock_timeout_s
        self.authoring_lock_timeout_s = authoring_lock_timeout_s
        self.soft_lock_lifetime_s = soft_lock_lifetime_s
        self.stats = StoreStats()
        self._loaded: dict[str, Card] = {}  # merged with their journal trials (``_cards``)
        self._cards_version = 0  # moves whenever ``_cards`` is replaced or changed
        self._lines: dict[str, tuple[Card, str]] = {}  # id -> (cards.json record, its line)
        self._journal = TrialJournal(self.bank_dir)
        # per card: the decision ids of its loaded trials (``_persist``'s O(added) checks)
        self._trial_ids = TrialIdSets()
        self._records: dict[str, tuple[Card, Card]] = {}  # card -> its record without trials
        self._legacy = False  # cards.json holds trials inline (a bank from before the journal)
        self._revisions = RecordJournal(self.bank_dir)  # cards.records.jsonl
        self._header: BankHeader = EMPTY  # the bank's identity, after the record journal
        self._base: BankHeader = EMPTY  # cards.json's header
        self.journal_from_bytes = journal_from_bytes
        self.compact_from_bytes = compact_from_bytes
        self._signature: FileSignature | None = None
        self._index = CardIndex(embedder)
        self._failure: CorruptBankError | None = None
        self._write_lock: filelock.BaseFileLock | None = None
        self._authoring_lock: filelock.BaseFileLock | None = None
        self._staged: list[tuple[Callable[[dict[str, Card]], Any], Callable[[Any], None]]] = []

    @property
    def path(self) -> Path:
        return self.bank_dir / BANK_FILE

    @property
    def _cards(self) -> dict[str, Card]:
        return self._loaded

    @_cards.setter
    def _cards(self, cards: dict[str, Card]) -> None:
        self._loaded = cards
        self._cards_version += 1

    @property
    def cards_version(self) -> int:
        """A number that moves whenever the loaded cards change (a reload, a write, another
        process's records or trials taken in); while it stands, ``cards`` lists the same card
        objects in the same order, so a reader can keep what it built from them."""
        return self._cards_version

    @property
    def generation(self) -> int:
        """Generation of the bank version this process last loaded or wrote."""
        return self._header.generation

    def open(self) -> LocalMemoryStore:
        """Create the directory and lock files, drop orphaned temp files, load the bank.

        Raises:
            ValueError: ``lock`` is not one of ``LOCK_KINDS``.
            CorruptBankError: ``cards.json`` exists and does not parse.
            BankLockTimeout: the bank lock was not acquired in time.
        """
        if self.lock not in LOCK_KINDS:
            raise ValueError(f"lock must be one of {LOCK_KINDS}, got {self.lock!r}")
        self.bank_dir.mkdir(parents=True, exist_ok=True)
        write_lock = str(self.path) + ".lock"
        authoring_lock = str(self.path) + ".authoring.lock"
        if self.lock == "os":
            self._write_lock = filelock.FileLock(write_lock)
            self._authoring_lock = filelock.FileLock(authoring_lock)
        else:
            self._write_lock, self._authoring_lock = self._soft_locks(write_lock, authoring_lock)
        with self._locked():
            # a temp file can only be an orphan while we hold the lock: writers hold it too
            for pattern in (f".{BANK_FILE}.*.tmp", f".{JOURNAL_FILE}.*.tmp"):
                for orphan in self.bank_dir.glob(pattern):
                    orphan.unlink(missing_ok=True)
            self._reload()
        return self

    # -- reading -------------------------------------------------------------
    def refresh(self) -> bool:
        """Re-read the bank if another process replaced it; True when it did.

        Costs one ``stat`` when nothing changed.

        Raises:
            CorruptBankError: the new file does not parse (latched: later calls raise too).
        """
        self._raise_if_failed()
        if signature(self.path) != self._signature:
            self._reload()
            return True
        changed = False
        if self._revisions.changed():
            self._apply_revisions()
            changed = True
        if self._journal.changed():
            self._remerge()
            changed = True
        return changed

    def __len__(self) -> int:
        return len(self._cards)

    def __contains__(self, card_id: object) -> bool:
        return card_id in self._cards

    def get(self, card_id: str) -> Card | None:
        """The loaded card ``card_id`` (call ``refresh`` first for the newest bank)."""
        return self._cards.get(card_id)

    def cards(self, *, kind: str | None = None, task_key: str | None = None) -> list[Card]:
        """Loaded cards in bank order, optionally of one kind and one task."""
        return [
            c
            for c in self._cards.values()
            if (kind is None or c.kind == kind) and (task_key is None or c.task_key == task_key)
        ]

    def search(
        self, query: str, *, kind: str, task_key: str | None, k: int
    ) -> list[tuple[Card, float]]:
        """The ``k`` cards of ``kind`` nearest to ``query`` (``task_key=None``: whole bank)."""
        hits = self._index.search(query, kind=kind, task_key=task_key, k=k)
        return [(self._cards[h.card_id], h.score) for h in hits if h.card_id in self._cards]

    # -- writing -------------------------------------------------------------
    @contextmanager
    def authoring(self, timeout_s: float | None = None) -> Iterator[None]:
        """Hold ``cards.json.authoring.lock`` (the retrieve -> judge -> admit transaction).

        Raises:
            BankLockTimeout: not acquired within ``timeout_s`` (default
                ``authoring_lock_timeout_s``).
        """
        lock = self._require_open(self._authoring_lock)
        wait = self.authoring_lock_timeout_s if timeout_s is None else timeout_s
        try:
            lock.acquire(timeout=max(0.0, wait))
        except filelock.Timeout as exc:
            raise BankLockTimeout(f"{lock.lock_file} not acquired in {wait:.1f}s") from exc
        try:
            yield
        finally:
            lock.release()

    def transaction(self, mutate: Callable[[dict[str, Card]], T]) -> T:
        """Apply ``mutate`` to the newest bank and persist it atomically, under the bank lock.

        ``mutate`` receives a copy of the cards by id and edits it in place; if
        it raises, nothing is written. Nothing is written either when it
        leaves the cards unchanged. The changes ``stage`` queued are applied
        first, in order, in the same transaction.

        Raises:
            CorruptBankError: the bank on disk does not parse (it is not touched).
            BankLockTimeout: ``cards.json.lock`` was not acquired in time.
        """
        self._raise_if_failed()
        with self._locked():
            self._catch_up()
            working = dict(self._cards)
            staged = list(self._staged)
            outcomes = [change(working) for change, _ in staged]
            result = mutate(working)
            old = self._cards
            changed = [k for k, c in working.items() if old.get(k) is not c]
            changed += [k for k in old.keys() - working.keys()]
            if changed:
                self._persist(working, changed)
        del self._staged[: len(staged)]
        for (_, done), outcome in zip(staged, outcomes, strict=True):
            if done is not None:
                done(outcome)
        return result

    def stage(self, change: Callable[[dict[str, Card]], Any], done: Callable[[Any], None]) -> None:
        """Queue ``change`` for this process's next transaction (``flush`` writes it now).

        For changes nobody else waits for (use-trial stamps): they ride along
        with the next write instead of paying a transaction each. ``change``
        is applied to the newest cards inside that transaction and ``done``
        receives what it returned once the write landed; if the transaction
        fails the change stays staged. Staged changes are not in ``get`` or
        ``cards`` until written, and a kill loses them (the caller must be
        able to redo them: the stamper's ``recover``).
        """
        self._staged.append((change, done))

    @property
    def staged(self) -> int:
        """Changes staged and not yet written."""
        return len(self._staged)

    def flush(self) -> None:
        """Write the staged changes now, in one transaction (none staged: nothing happens).

        Raises:
            CorruptBankError, BankLockTimeout: as ``transaction`` (the changes stay staged).
        """
        if self._staged:
            self.transaction(lambda cards: None)

    def _catch_up(self) -> None:
        """Under the lock: this store's view brought to the files (a whole reload when
        ``cards.json`` was replaced, else the new revision and journal lines)."""
        if self._stale():
            self._reload()
        else:
            if self._revisions.changed():
                self._apply_revisions()
            if self._journal.changed():
                self._remerge()

    def compact(self) -> bool:
        """Fold ``cards.records.jsonl`` into ``cards.json`` now, under the bank lock (the
        provider calls it when it closes, so a bank left by a run that ended is whole in
        ``cards.json``); True when it rewrote the file. The cards do not change: the same
        generation under a new write id. Nothing happens without journal lines on the base.

        Raises:
            CorruptBankError, BankLockTimeout: as ``transaction``.
        """
        self._raise_if_failed()
        with self._locked():
            self._catch_up()
            if not self._revisions.size or self._legacy:
                return False
            header = replace(self._header, write_id=uuid.uuid4().hex, written_at=utc_now())
            self._compact(self._cards, header)
        return True

    # -- internals -----------------------------------------------------------
    def _persist(self, working: dict[str, Card], changed: list[str]) -> None:
        """Write what ``working`` changed (the ids ``changed``, in bank order then removed):
        journal lines for stamped trials, the changed records when a record changed (a
        removal of trials, or a bank still holding trials inline, rewrites both)."""
        entries: list[TrialEntry] = []
        records = self._legacy  # a bank with inline trials is migrated by its first write
        compact = self._legacy
        revised: list[str] = []
        extended: list[tuple[str, tuple[UseTrial, ...], tuple[UseTrial, ...], list[UseTrial]]] = []
        for cid in changed:
            old, new = self._cards.get(cid), working.get(cid)
            base = old.use_trials if old is not None else ()
            known = self._trial_ids.of(cid, base) if old is not None else set()
            added = stamped(old, new, known) if old is not None and new is not None else None
            pure = added is not None  # only stamps changed this card
            if added is None:
                records = True
                revised.append(cid)
                trials = new.use_trials if new is not None else ()
                # trials are unique by decision id: the appended ones, or all those ``old``
                # lacks when some were removed (O(n), not O(n^2))
                added = appended(base, trials, known) if new is not None else []
                if added is None:
                    compact = True  # trials removed: the journal is rewritten whole
                    added = [t for t in trials if t.decision_id not in known]
                elif new is not None and old is not None:
                    extended.append((cid, base, trials, added))
            elif new is not None and old is not None:
                extended.append((cid, base, new.use_trials, added))
            if new is not None and added:
                # each line carries the card's revision after its own stamp: a stamp makes one
                # revision, and staged stamps are applied before the transaction's other
                # changes. So when a kill lands between these lines and the record they go
                # with, the bank reads as if the stamps had been written alone, and the
                # record change, redone on resume, gets the revision it got uninterrupted
                # (lines carrying the revision after the record change made it one too many).
                before = 0 if old is None else old.revision
                first = max(new.revision - len(added), before) if pure else before
                entries += [
                    TrialEntry(cid, min(first + i + 1, new.revision), new.updated_at, t)
                    for i, t in enumerate(added)
                ]
        if compact:
            # the whole journal, each line at the revision it has without this write's record
            # changes (the stamps' own, as above): a kill before the records land must not
            # leave a card a revision ahead of its contents here either
            capped = {cid: self._cards[cid].revision for cid in revised if cid in self._cards}
            for e in entries:
                capped[e.card] = max(capped.get(e.card, 0), e.revision)
            self._journal.rewrite(journal_entries(working, capped))
        elif entries:
            self._journal.append(entries)
        if records:
            header = BankHeader(
                generation=self._header.generation + 1,
                write_id=uuid.uuid4().hex,
                written_at=utc_now(),
                n_cards=len(working),
            )
            if not self._journal_records(working, revised, header):
                self._compact(working, header)
        self._cards = working
        for cid, base, trials, added in extended:  # written: the kept ids follow the trials
            self._trial_ids.advance(cid, base, trials, added)
        for cid in changed:
            if cid not in working:
                self._trial_ids.forget(cid)
        self.stats.writes += 1
        self.stats.embedded += self._index.update(working, changed)

    def _journal_records(
        self, working: dict[str, Card], revised: list[str], header: BankHeader
    ) -> bool:
        """Append the records ``revised`` (set or removed) as one ``cards.records.jsonl`` line;
        False (nothing written) when ``cards.json`` must be rewritten instead: it is missing,
        smaller than ``journal_from_bytes`` or holds trials inline, the journal would outgrow
        it (and ``compact_from_bytes``), or the order changed."""
        if (
            self._legacy
            or self._signature is None
            or self._signature.size < self.journal_from_bytes
        ):
            return False
        removed = [cid for cid in revised if cid not in working]
        kept = [cid for cid in self._cards if cid in working]
        new = [cid for cid in working if cid not in self._cards]
        if list(working) != kept + new:
            return False  # the replay (in place, new ones last) would not give this order
        set_pairs: dict[str, tuple[Card, str]] = {}
        for cid in revised:
            card = working.get(cid)
            if card is None:
                continue
            record = self._record(card)
            known = self._lines.get(cid)
            if known is None or known[0] is not record:  # a record not yet rendered
                known = (record, card_line(record))
            set_pairs[cid] = known
        texts = [ln for _, ln in set_pairs.values()]
        line = batch_line(self._base.write_id, header, texts, removed)
        if self._revisions.size + len(line) > max(self._signature.size, self.compact_from_bytes):
            return False  # compaction: its bytes are at most the journal's since the last one
        self._revisions.append(line)
        for cid, pair in set_pairs.items():
            self._lines[cid] = pair
        for cid in removed:
            self._lines.pop(cid, None)
        self._header = header
        self.stats.journaled += 1
        return True

    def _compact(self, working: dict[str, Card], header: BankHeader) -> None:
        """Rewrite ``cards.json`` whole as ``working`` under ``header``, then empty the record
        journal (a kill in between leaves lines on the old base, which readers ignore)."""
        text, lines = render_bank(header, [self._record(c) for c in working.values()], self._lines)
        atomic_write_text(self.path, text)
        self._revisions.clear()
        self._lines, self._header, self._base = lines, header, header
        self._signature = signature(self.path)
        self._legacy = False
        self.stats.compactions += 1

    def _apply_revisions(self) -> None:
        """Take new ``cards.records.jsonl`` lines (another process's writes): update the
        records they set or removed, and the index for those cards.

        Raises:
            CorruptBankError: a line does not parse (latched, as for cards.json).
        """
        try:
            batches = self._revisions.read(self._base.write_id, self._lines, restart=False)
            if batches is None:  # compacted or replaced since we read it: start again
                self._reload()
                return
            if not batches:
                return
            self._header = apply_batches(self._header, self._lines, batches, self.path)
        except CorruptBankError as exc:
            self._failure = exc
            raise
        touched = {card.id for b in batches for card, _ in b.set}
        touched.update(cid for b in batches for cid in b.removed)
        old = self._cards
        self._cards = {
            cid: old[cid] if cid in old and cid not in touched else self._journal.merge(rec)
            for cid, (rec, _) in self._lines.items()
        }
        order = [cid for cid in self._cards if cid in touched] + sorted(
            touched - self._cards.keys()
        )
        self.stats.embedded += self._index.update(self._cards, order)  # bank order

    def _record(self, card: Card) -> Card:
        """The ``cards.json`` record of a card: without its trials (they are in the journal);
        the record written last is reused while the card is the same."""
        if not card.use_trials:
            return card
        known = self._records.get(card.id)
        if known is not None and known[0] is card:
            return known[1]
        record = replace(card, use_trials=())
        self._records[card.id] = (card, record)
        return record

    def _remerge(self) -> None:
        """Take new journal lines and merge them into the cards they stamp.

        Raises:
            CorruptBankError: a journal line does not parse (latched, as for cards.json).
        """
        try:
            touched = self._journal.refresh_cards()
        except CorruptBankError as exc:
            self._failure = exc
            raise
        if touched is None:  # the journal was replaced: merge every card again
            self._cards = {cid: self._journal.merge(rec) for cid, (rec, _) in self._lines.items()}
            return
        for cid in touched:
            if cid in self._lines:
                self._loaded[cid] = self._journal.merge(self._lines[cid][0])
        self._cards_version += 1

    def _soft_locks(
        self, write_lock: str, authoring_lock: str
    ) -> tuple[filelock.BaseFileLock, filelock.BaseFileLock]:
        """Marker-file locks for NFS that a killed holder cannot strand.

        A holder killed between creating its marker and writing its pid into
        it leaves an empty marker naming no owner; filelock never breaks such
        a marker by owner checks (it may be an old-version holder), so the
        markers get an age limit. filelock warns that age-based expiry can
        overlap a live holder: that needs a hold longer than the limit, which
        the limits rule out (bank transactions last milliseconds against
        ``soft_lock_lifetime_s``; the authoring chain is bounded by
        ``ingest_call_timeout_s``, which the settings keep below
        ``authoring_lock_timeout_s``).
        """
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", filelock.SoftFileLockLifetimeWarning)
            return (
                filelock.SoftFileLock(write_lock, lifetime=self.soft_lock_lifetime_s),
                filelock.SoftFileLock(authoring_lock, lifetime=self.authoring_lock_timeout_s),
            )

    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self._require_open(self._write_lock)
        try:
            lock.acquire(timeout=self.lock_timeout_s)
        except filelock.Timeout as exc:
            raise BankLockTimeout(
                f"{lock.lock_file} not acquired in {self.lock_timeout_s:.1f}s"
            ) from exc
        try:
            yield
        finally:
            lock.release()

    def _reload(self) -> None:
        started = time.perf_counter()
        try:
            loaded = read_bank(self.path, self._lines, self._journal, self._revisions)
        except CorruptBankError as exc:
            self._failure = exc
            raise
        self._cards = {c.id: c for c in loaded.cards}
        self._lines = loaded.lines
        self._legacy = any(rec.use_trials for rec, _ in self._lines.values())
        self._header, self._signature = loaded.header, loaded.signature
        self._base = loaded.base
        self.stats.embedded += self._index.sync(loaded.cards)
        self.stats.reloads += 1
        self.stats.last_refresh_s = time.perf_counter() - started

    def _stale(self) -> bool:
        """Exact check under the lock: did anyone replace or touch the file since we loaded it?"""
        try:
            if signature(self.path) != self._signature:
                return True
            return read_header(self.path) != self._base
        except CorruptBankError as exc:
            self._failure = exc
            raise

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _require_open(self, lock: filelock.BaseFileLock | None) -> filelock.BaseFileLock:
        if lock is None:
            raise RuntimeError("LocalMemoryStore.open() must be called first")
        return lock
