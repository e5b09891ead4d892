"""Use-trial stamps: the live updater's compact usefulness trials on shared cards (memory-model.md
"Rows and eligibility" and "Multitask transfer").

On each usefulness-eligible terminal (a withheld control, valid or invalid, or
a cited delivery; never an uncited delivery, an abstention or a censored
terminal) the owning card (the proposed id resolved through absorbed aliases)
gets one ``UseTrial`` (decision id, run id, task, Z, success = valid and g > 0),
deduplicated by decision id, inside a bank transaction (one line appended to
``cards.trials.jsonl``, see ``bank.trialjournal``), so processes sharing a bank
never lose each other's stamps.

``check_bank_writable`` and ``check_shared_bank`` are the startup checks of a
bank that trial stamps and leases must be able to write (memory=v2_multitask).

``TrialStamper`` stages a run's stamps in the store and writes them with the
next bank transaction or in batches (a bank-lock timeout leaves them staged for
the next write); ``recover`` (at startup) stamps what a killed process recorded
in its ledger but never stamped, in one transaction.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gigaevo.memory.base import MemoryRuntime
from gigaevo.memory.v2.bank.cards import Card, UseTrial, with_use_trial
from gigaevo.memory.v2.bank.store import BANK_FILE, LocalMemoryStore
from gigaevo.memory.v2.bank.trialjournal import JOURNAL_FILE, TrialIdSets
from gigaevo.memory.v2.causal.transfer import TransferConfig, TransferTrial
from gigaevo.memory.v2.errors import BankLockTimeout, CardFormatError, MemoryConfigError
from gigaevo.memory.v2.evidence import (
    DecisionRow,
    Observation,
    SelectionEvidence,
    TerminalRow,
    usefulness_eligible,
)
from gigaevo.memory.v2.read.leases import LEASE_FILE
from gigaevo.memory.v2.records import from_json
from gigaevo.memory.v2.settings import MemorySettings

log = logging.getLogger(__name__)

StampOutcome = Literal["stamped", "duplicate", "orphan"]


def trial_of(decision: DecisionRow, terminal: TerminalRow) -> UseTrial | None:
    """The trial of a decision's terminal, or None when it is not usefulness-eligible."""
    obs = Observation(decision, terminal, "", "")
    if not usefulness_eligible(obs) or decision.z is None:
        return None
    success = obs.valid and terminal.gain is not None and terminal.gain > 0
    return UseTrial(
        decision_id=decision.decision_id,
        run_id=decision.run_id,
        task_key=decision.context.task_key,
        z=decision.z,
        success=success,
    )


def owner_id(cards: Mapping[str, Card], card_id: str) -> str | None:
    """The card holding ``card_id`` as its id or as an absorbed alias (None: gone)."""
    if card_id in cards:
        return card_id
    return next((c.id for c in cards.values() if card_id in c.aliases), None)


def stamp_trial(
    store: LocalMemoryStore, proposed_id: str, trial: UseTrial, now: float | None = None
) -> StampOutcome:
    """Stamp ``trial`` onto the owner of ``proposed_id`` in one bank transaction.

    Returns ``duplicate`` when the owner already holds this decision id, and
    ``orphan`` when no card holds ``proposed_id`` any more (nothing is written).

    Raises:
        BankLockTimeout: the bank lock was not acquired in time (nothing written).
        CorruptBankError: the bank does not parse.
    """
    return stamp_trials(store, [(proposed_id, trial)], now)[0]


def stamp_trials(
    store: LocalMemoryStore, items: Sequence[tuple[str, UseTrial]], now: float | None = None
) -> list[StampOutcome]:
    """``stamp_trial`` for each (proposed id, trial), all in one bank transaction."""
    stamped_at = time.time() if now is None else now

    def mutate(cards: dict[str, Card]) -> list[StampOutcome]:
        ids = TrialIdSets()  # this transaction's cards: each set built once, on first use
        return [_stamp_into(cards, pid, trial, stamped_at, ids) for pid, trial in items]

    return store.transaction(mutate)


def _stamp_into(
    cards: dict[str, Card],
    proposed_id: str,
    trial: UseTrial,
    now: float,
    ids: TrialIdSets,
) -> StampOutcome:
    """Stamp ``trial`` onto the card that owns ``proposed_id`` in ``cards`` (duplicate:
    already there, by the kept ``ids``: a set lookup, not a walk over up to
    ``MAX_USE_TRIALS`` trials; orphan: no owner)."""
    owner = owner_id(cards, proposed_id)
    if owner is None:
        return "orphan"
    card = cards[owner]
    if trial.decision_id in ids.of(card.id, card.use_trials):
        return "duplicate"
    cards[owner] = stamped = with_use_trial(card, trial, now)
    ids.advance(card.id, card.use_trials, stamped.use_trials, [trial])
    return "stamped"


def transfer_trials(cards: Iterable[Card]) -> list[TransferTrial]:
    """Every stamped trial of ``cards``, labelled with the card that holds it."""
    return [
        TransferTrial(t.decision_id, t.task_key, t.run_id, c.id, t.z, t.success)
        for c in cards
        for t in c.use_trials
    ]


# -- startup checks of a shared bank -------------------------------------------


def parse_transfer(raw: dict[str, Any] | None) -> TransferConfig:
    """``memory.transfer`` as a ``TransferConfig``.

    Raises:
        MemoryConfigError: an unknown key or a bad value, naming the key.
    """
    try:
        return from_json(TransferConfig, dict(raw or {}), "memory.transfer")
    except (CardFormatError, ValueError) as exc:
        raise MemoryConfigError(str(exc)) from exc


def check_shared_bank(runtime: MemoryRuntime, settings: MemorySettings) -> None:
    """Startup checks of memory=v2_multitask (``memory.transfer.enabled``).

    A bank that is the run's own ``checkpoint_dir`` (the default) is shared with
    nobody and, with authoring off, stays empty: that is warned, not refused.

    Raises:
        MemoryConfigError: ``memory/write=none`` (it removes the trial updater and
            lease release).
    """
    if settings.write.cadence == "none":
        raise MemoryConfigError(
            "memory.write.cadence=none (memory/write=none) is refused with memory=v2_multitask: "
            "it removes the trial updater and lease release; use memory/write=live"
        )
    if Path(runtime.bank_dir).resolve() == Path(runtime.checkpoint_dir).resolve():
        log.warning(
            "memory_bank_dir is this run's checkpoint_dir: memory=v2_multitask shares nothing; "
            "set memory_bank_dir=/abs/path/to/shared_bank"
        )


def check_bank_writable(bank_dir: Path) -> None:
    """Refuse a bank whose ``cards.json``, ``selection_leases.json`` or lock files can't be written.

    Use-trial stamps rewrite ``cards.json`` and every decision takes a lease in
    ``selection_leases.json``; both are replaced atomically (a temporary file
    in ``bank_dir``) under lock files beside them, so the directory must be
    writable too.

    Raises:
        MemoryConfigError: naming ``memory_bank_dir`` and the offending path.
    """
    bank_dir = Path(bank_dir)
    why = "memory=v2 stamps trials into cards.json and leases into selection_leases.json"
    if bank_dir.exists() and not bank_dir.is_dir():
        raise MemoryConfigError(f"memory_bank_dir: {bank_dir} is not a directory ({why})")
    existing = next(p for p in (bank_dir, *bank_dir.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise MemoryConfigError(
            f"memory_bank_dir: {existing} is not writable ({why}, with lock files beside them)"
        )
    names = (BANK_FILE, JOURNAL_FILE, f"{BANK_FILE}.lock", f"{BANK_FILE}.authoring.lock")
    for name in (*names, LEASE_FILE, f"{LEASE_FILE}.lock"):
        path = bank_dir / name
        if path.exists() and not (path.is_file() and os.access(path, os.W_OK)):
            raise MemoryConfigError(
                f"memory_bank_dir: {path} is not a writable file ({why}); "
                "the shared bank must stay writable"
            )


@dataclass
class StampCounts:
    stamped: int = 0
    duplicate: int = 0
    orphan: int = 0
    lock_timeouts: int = 0
    recovered: int = 0


class TrialStamper:
    """Stamps the trials of one run's terminals onto the shared bank.

    A stamp is staged in the store (``LocalMemoryStore.stage``) and written with
    this process's next bank transaction (a librarian admission, a retirement),
    or by a transaction of its own once ``batch`` stamps are waiting, the oldest
    has waited ``max_age_s``, before a retirement sweep (``flush``) and at close.
    So an observation costs no bank transaction of its own: a transaction (lock,
    fsynced journal append, index sync) cost about 5 ms wall per eligible
    terminal, far more under load. Nothing is lost by waiting: the run's
    ledger holds every terminal, and ``recover`` at start-up stamps what a kill
    left staged. The run's own trials inform nobody in this run (the transfer
    prior and the retirement veto read other runs' and other tasks' trials), so
    decisions do not depend on when stamps are written, and neither do the cards'
    revisions (each stamp still makes one, in terminal order).

    Args:
        store: the card bank.
        evidence: the run's selection ledger (decisions and terminals).
        batch: staged stamps that trigger a write.
        max_age_s: age of the oldest staged stamp that triggers a write (other
            runs sharing the bank see this run's trials at most this late, give
            or take one observation).
    """

    def __init__(
        self,
        store: LocalMemoryStore,
        evidence: SelectionEvidence,
        *,
        batch: int = 16,
        max_age_s: float = 5.0,
    ) -> None:
        self.store = store
        self.evidence = evidence
        self.batch = batch
        self.max_age_s = max_age_s
        self.counts = StampCounts()
        self._waiting = 0  # stamps staged in the store, not yet written
        self._oldest = 0.0  # monotonic time the oldest of them was staged
        self._ids = TrialIdSets()  # the duplicate check of each stamp (``_stamp_into``)

    def observe(self, decision_id: str) -> None:
        """Stage this decision's trial if its terminal is usefulness-eligible; write the
        staged stamps when enough have waited, or long enough."""
        self._stage(decision_id)
        if self._waiting and (
            self._waiting >= self.batch or time.monotonic() - self._oldest >= self.max_age_s
        ):
            self.flush()

    def flush(self) -> None:
        """Write the staged stamps now (a lock timeout leaves them staged for the next write)."""
        if not self._waiting:
            return
        try:
            self.store.flush()
        except BankLockTimeout as exc:
            self.counts.lock_timeouts += 1
            log.warning("memory v2: %d trial stamp(s) deferred: %s", self._waiting, exc)

    def recover(self) -> int:
        """Stamp every eligible terminal of the ledger its card lacks (a killed run's tail).

        Returns how many trials were stamped. A lock timeout leaves them to the
        next ``recover`` (the next start of the run).
        """
        items = []
        for obs in self.evidence.observations():
            trial = trial_of(obs.decision, obs.terminal)
            if trial is not None and obs.decision.proposed_id is not None:
                items.append((obs.decision.proposed_id, trial))
        if not items:
            return 0
        try:
            outcomes = stamp_trials(self.store, items)
        except BankLockTimeout as exc:
            log.warning("memory v2 trial recovery deferred: %s", exc)
            return 0
        self.counts.recovered += outcomes.count("stamped")
        return self.counts.recovered

    @property
    def deferred(self) -> int:
        """Stamps staged and not written yet."""
        return self._waiting

    def _stage(self, decision_id: str) -> None:
        decision = self.evidence.decision(decision_id)
        terminal = self.evidence.terminal(decision_id)
        if decision is None or terminal is None or decision.proposed_id is None:
            return
        trial = trial_of(decision, terminal)
        if trial is None:
            return
        proposed, now, ids = decision.proposed_id, time.time(), self._ids

        def change(cards: dict[str, Card]) -> StampOutcome:
            return _stamp_into(cards, proposed, trial, now, ids)

        if not self._waiting:
            self._oldest = time.monotonic()
        self._waiting += 1
        self.store.stage(change, self._written)

    def _written(self, outcome: StampOutcome) -> None:
        self._waiting -= 1
        setattr(self.counts, outcome, getattr(self.counts, outcome) + 1)

    def stats(self) -> dict[str, int]:
        c = self.counts
        return {
            "trials_stamped": c.stamped,
            "trials_duplicate": c.duplicate,
            "trials_orphan": c.orphan,
            "trial_lock_timeouts": c.lock_timeouts,
            "trials_deferred": self.deferred,
            "trials_recovered": c.recovered,
        }
