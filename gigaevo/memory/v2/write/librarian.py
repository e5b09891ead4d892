"""The librarian: the write path from strictly valid outcomes to cards.

For each queued item (an insight from one outcome, or a program exemplar
from a new best child) one attempt runs the chain

    author (DROP | NEW with one card)
      -> tombstone check (rejected_retired)
      -> under cards.json.authoring.lock: refresh, retrieve same-kind
         neighbours in scope, judge NEW | EQUIVALENT(id)
      -> admit the card, or pool provenance and founding evidence into the
         equivalent (its treatment is never rewritten)

within ``writer.ingest_call_timeout_s``. Retrieval or judge failure fails
open to NEW and is counted. An author failure, a timeout or a lock timeout
fails the attempt; the item is retried at the next drain, and after
``writer.max_ingest_attempts`` attempts it is dropped for the run with a
``discarded`` row. Raw mutation notes are never banked. Every item ends in
exactly one ledger row.

Exactly once across kills: a bank write and its rows are one unit of the
write ledger (``WriteLedger.intend`` / ``commit``); an item whose row is in
the ledger (``done``) is never queued again when its outcome is observed
again on resume; ``state`` / ``restore`` carry the exemplar trigger's best
fitness and the items waiting for a retry over a restart.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from gigaevo.memory.v2.bank.cards import (
    Card,
    CardKind,
    Representative,
    bounded_context,
    card_brief,
    founding_card,
    new_card_id,
)
from gigaevo.memory.v2.bank.store import LocalMemoryStore
from gigaevo.memory.v2.bank.tombstones import Tombstones
from gigaevo.memory.v2.errors import AgentAnswerError, BankLockTimeout, IngestTimeout
from gigaevo.memory.v2.records import from_json, to_json
from gigaevo.memory.v2.settings import ExemplarSettings, WriterSettings
from gigaevo.memory.v2.write.agents import AuthoredCard, CardAuthor, EquivalenceJudge, Verdict
from gigaevo.memory.v2.write.cards_out import card_row, retire_cards
from gigaevo.memory.v2.write.deadline import Deadline, call_before
from gigaevo.memory.v2.write.edits import Edit, admit, pool
from gigaevo.memory.v2.write.ledger import (
    CandidateText,
    LedgerRow,
    Pooled,
    Witness,
    WriteLedger,
    stamp,
)
from gigaevo.memory.v2.write.outcome import WriterOutcome, evidence_of
from gigaevo.scratchpad import NoteWriter
from gigaevo.util import derive_seed

log = logging.getLogger("gigaevo")

Stage = Literal["insight", "program"]
FailOpen = Literal["retrieval", "judge"] | None
_ATTEMPT_ERRORS = (AgentAnswerError, IngestTimeout, BankLockTimeout)


@dataclass
class WriterCounters:
    """What the librarian did in this process (reported in ``memory_stats.json``)."""

    queued_insights: int = 0
    queued_exemplars: int = 0
    ingested_insights: int = 0
    ingested_exemplars: int = 0
    failed_attempts: int = 0
    exhausted: int = 0
    fail_open_retrieval: int = 0
    fail_open_judge: int = 0
    judge_calls: int = 0
    ingest_seconds: float = 0.0


@dataclass
class _Item:
    outcome: WriterOutcome
    stage: Stage
    attempts: int = 0
    last_error: str = ""


@dataclass(frozen=True)
class _Candidate:
    id: str
    kind: CardKind
    text: AuthoredCard
    model: str


class Librarian:
    """Turns outcomes into cards (see the module docstring).

    Args:
        store: the shared, opened bank.
        author, judge: the memory agents.
        ledger: this run's write ledger.
        tombstones: retired ids and payloads of this process.
        writer, exemplars: validated settings.
        task_key, task_description: this run's task.
        run_id: this run's identity (stamped on cards and rows).
        seed: the run seed (agent call seeds derive from it).
        notes: the run's scratchpad; each newly admitted card is recorded there
            as a Hypothesis ``card.<id>`` (authored, not yet validated).
        done: (attempt, stage) of the items this run's ledger already holds a
            row for (a resumed run: their outcomes are not ingested again).
    """

    def __init__(
        self,
        *,
        store: LocalMemoryStore,
        author: CardAuthor,
        judge: EquivalenceJudge,
        ledger: WriteLedger,
        tombstones: Tombstones,
        writer: WriterSettings,
        exemplars: ExemplarSettings,
        task_key: str,
        task_description: str,
        run_id: str,
        seed: int,
        notes: NoteWriter | None = None,
        done: set[tuple[int, str]] | None = None,
    ) -> None:
        self.store = store
        self.author = author
        self.judge = judge
        self.ledger = ledger
        self.tombstones = tombstones
        self.writer = writer
        self.exemplars = exemplars
        self.task_key = task_key
        self.task_context = bounded_context(task_description)
        self.run_id = run_id
        self.seed = seed
        self.notes = notes
        self.counters = WriterCounters()
        self._queue: deque[_Item] = deque()
        self._best: float | None = None  # oriented best fitness seen (exemplar trigger)
        self._done: set[tuple[int, str]] = set(done or ())

    @property
    def pending(self) -> int:
        return len(self._queue)

    def submit(self, outcome: WriterOutcome) -> None:
        """Queue the insight of a strictly valid outcome (and an exemplar for a new best child).

        An item already ingested or queued (an outcome observed again on resume) is skipped.
        """
        if self._fresh(outcome.attempt, "insight"):
            self._queue.append(_Item(outcome, "insight"))
            self.counters.queued_insights += 1
        sign = 1.0 if outcome.higher_is_better else -1.0
        parent, child = sign * outcome.parent_fitness, sign * outcome.child_fitness
        self._best = parent if self._best is None else max(self._best, parent)
        if self.exemplars.enabled and outcome.accepted and child > self._best:
            self._best = child
            if self._fresh(outcome.attempt, "program"):
                self._queue.append(_Item(outcome, "program"))
                self.counters.queued_exemplars += 1

    def _fresh(self, attempt: int, stage: Stage) -> bool:
        """True unless the item has its row already or waits in the queue."""
        if (attempt, stage) in self._done:
            return False
        return all((i.outcome.attempt, i.stage) != (attempt, stage) for i in self._queue)

    def state(self) -> dict[str, Any]:
        """What a restart must carry over: the exemplar trigger and the items awaiting a retry."""
        return {
            "best": self._best,
            "queue": [
                {
                    "outcome": to_json(i.outcome),
                    "stage": i.stage,
                    "attempts": i.attempts,
                    "last_error": i.last_error,
                }
                for i in self._queue
            ],
        }

    def restore(self, state: dict[str, Any], where: str) -> None:
        """Take over ``state`` (from ``state``) at start-up.

        Raises:
            CardFormatError: an item is malformed (``where`` names the file).
        """
        best = state.get("best")
        self._best = None if best is None else float(best)
        for n, raw in enumerate(state.get("queue", [])):
            outcome = from_json(WriterOutcome, raw["outcome"], f"{where}: queue[{n}]")
            stage: Stage = "program" if raw["stage"] == "program" else "insight"
            if self._fresh(outcome.attempt, stage):
                self._queue.append(_Item(outcome, stage, int(raw["attempts"]), raw["last_error"]))

    def drain(self, *, final: bool = False) -> None:
        """One attempt at each queued item; with ``final``, until the queue is empty.

        Raises:
            CorruptBankError: the bank stopped parsing (the run must stop).
            LLMAuthenticationError: the memory LLM refused the credentials.
        """
        while self._queue:
            retry: list[_Item] = []
            try:
                while self._queue:
                    item = self._queue[0]  # stays queued if processing is interrupted
                    finished = self._process(item)
                    self._queue.popleft()
                    if not finished:
                        retry.append(item)
            finally:
                self._queue.extend(retry)
            if not final:
                return

    def retire(
        self,
        card_ids: list[str],
        reason: str,
        *,
        still_retirable: Callable[[Card], bool] | None = None,
    ) -> list[str]:
        """Remove cards for good (causal retirement), tombstone them, ledger ``retired`` rows.

        ``still_retirable`` is checked on the newest revision of each card
        inside the bank transaction (the admission gate: verdict revision,
        leases); a card it refuses is kept. Returns the ids actually removed.
        """

        return retire_cards(
            self.store,
            self.ledger,
            self.tombstones,
            card_ids,
            reason,
            run_id=self.run_id,
            still_retirable=still_retirable,
        )

    # -- one item ------------------------------------------------------------
    def _process(self, item: _Item) -> bool:
        """One attempt; True when the item is finished (its row is written)."""
        item.attempts += 1
        started = time.perf_counter()
        try:
            rows = self._attempt(item, started)
        except _ATTEMPT_ERRORS as exc:
            self.counters.failed_attempts += 1
            item.last_error = f"{type(exc).__name__}: {exc}"
            if item.attempts < self.writer.max_ingest_attempts:
                return False
            self.counters.exhausted += 1
            reason = f"attempts_exhausted: {item.last_error}"
            rows = [self._row(item, "discarded", reason, started)]
        self.counters.ingest_seconds += time.perf_counter() - started
        self.ledger.commit(rows)
        self._done.add((item.outcome.attempt, item.stage))
        row = rows[-1]  # side rows (an eviction) come before the item's own
        if row.outcome == "added" and row.card_id:
            self._note_added(row.card_id)
        if item.stage == "insight":
            self.counters.ingested_insights += 1
        else:
            self.counters.ingested_exemplars += 1
        return True

    def _note_added(self, card_id: str) -> None:
        """Stage the scratchpad's Hypothesis for a card this run admitted."""
        if self.notes is None:
            return
        card = self.store.get(card_id)
        text = card.description if card is not None else "(card no longer in the bank)"
        self.notes.add_hypothesis(f"card.{card_id}", text[:300], source=card_id)

    def restage_notes(self, added: list[str]) -> int:
        """Stage again the Hypotheses of cards this run admitted that its scratchpad lacks.

        The scratchpad writes staged notes at its next checkpoint, so a kill between a
        card's admission and that checkpoint loses the note while the card stays in the
        bank (and is never admitted again). A resumed session stages it at start-up, in
        admission order, and the next checkpoint writes it as the uninterrupted run's
        did. ``added``: the card ids of this run's ``added`` rows, in ledger order.
        Returns how many were staged.
        """
        if self.notes is None:
            return 0
        missing = [c for c in added if f"card.{c}" not in self.notes.state]
        for card_id in missing:
            self._note_added(card_id)
        return len(missing)

    def _attempt(self, item: _Item, started: float) -> list[LedgerRow]:
        deadline = Deadline(self.writer.ingest_call_timeout_s)
        kind: CardKind = "insight" if item.stage == "insight" else "program"
        seed = derive_seed(self.seed, f"memory.author.{item.stage}", item.outcome.attempt)
        seed = derive_seed(seed, "try", item.attempts)
        write = self.author.insight if kind == "insight" else self.author.program
        answer = call_before(deadline, lambda: write(item.outcome, seed), f"{kind}-author")
        if answer.card is None:
            return [self._row(item, "discarded", f"author_drop: {answer.reason}", started)]
        cand = _Candidate(
            new_card_id(kind, self.run_id, item.outcome.attempt, item.stage),
            kind,
            answer.card,
            answer.model,
        )
        text = cand.text
        if self.tombstones.is_retired_id(cand.id) or self.tombstones.is_retired_payload(
            kind, text.description, text.explanation_summary
        ):
            return [self._row(item, "rejected_retired", "payload of a retired card", started, cand)]
        wait = min(self.store.authoring_lock_timeout_s, deadline.remaining())
        with self.store.authoring(timeout_s=wait):
            self.store.refresh()
            neighbours, fail_open = self._neighbours(cand)
            verdict = Verdict(None, "no neighbours")
            if neighbours:
                verdict, fail_open = self._judge(cand, neighbours, item, deadline)

            def rows(edit: Edit) -> list[LedgerRow]:
                side = [] if edit.evicted is None else [self._evicted_row(edit.evicted, cand)]
                return [
                    *side,
                    self._row(
                        item,
                        edit.outcome,
                        edit.reason,
                        started,
                        cand,
                        card_id=edit.card_id,
                        revision=edit.revision,
                        neighbour_ids=tuple(c.id for c in neighbours),
                        judge=None if not neighbours or fail_open else _verdict_word(verdict),
                        fail_open=fail_open,
                    ),
                ]

            return self._write(item, cand, verdict, rows)

    def _neighbours(self, cand: _Candidate) -> tuple[list[Card], FailOpen]:
        scope = self.task_key if self.writer.scope == "task" else None
        query = card_brief(cand.text.description, cand.text.explanation_summary)
        try:
            hits = self.store.search(
                query, kind=cand.kind, task_key=scope, k=self.writer.neighbours_k
            )
        except Exception as exc:  # retrieval boundary: fail open to NEW, counted and ledgered
            self.counters.fail_open_retrieval += 1
            log.warning("memory: retrieval failed (%s: %s); NEW assumed", type(exc).__name__, exc)
            return [], "retrieval"
        return [card for card, _ in hits], None

    def _judge(
        self, cand: _Candidate, neighbours: list[Card], item: _Item, deadline: Deadline
    ) -> tuple[Verdict, FailOpen]:
        self.counters.judge_calls += 1
        seed = derive_seed(self.seed, f"memory.judge.{item.stage}", item.outcome.attempt)
        try:
            verdict = call_before(
                deadline,
                lambda: self.judge.judge(cand.kind, cand.text, neighbours, seed),
                "equivalence-judge",
            )
        except (AgentAnswerError, IngestTimeout) as exc:
            self.counters.fail_open_judge += 1
            log.warning("memory: equivalence judge failed (%s); NEW assumed", exc)
            return Verdict(None, f"judge failed, NEW assumed: {exc}"), "judge"
        return verdict, None

    def _write(
        self,
        item: _Item,
        cand: _Candidate,
        verdict: Verdict,
        rows_of: Callable[[Edit], list[LedgerRow]],
    ) -> list[LedgerRow]:
        """Admit or pool inside one bank transaction; the rows it makes (side rows first).

        The rows are saved as the ledger's intent before ``cards.json`` is replaced.
        """
        o, now = item.outcome, time.time()
        evidence = evidence_of(o, self.task_key, self.run_id, cand.id, now)
        rep = None
        if cand.kind == "program":
            code = o.child_code if self.exemplars.store_code else None
            rep = Representative(
                self.task_key, self.run_id, o.child_id, o.child_fitness, o.higher_is_better, code
            )
        provenance = (o.parent_id, o.child_id)
        card = founding_card(
            card_id=cand.id,
            kind=cand.kind,
            task_key=self.task_key,
            task_context=self.task_context,
            text=(cand.text.description, cand.text.explanation_summary),
            evidence=evidence,
            provenance=provenance,
            representative=rep,
            lineage=o.cited_card_ids if cand.kind == "insight" else (),
            author_model=cand.model,
            run_id=self.run_id,
        )
        limit = (
            self.exemplars.max_per_task
            if cand.kind == "program"
            else self.writer.max_cards_per_task
        )

        def edit_of(cards: dict[str, Card]) -> Edit:
            if verdict.equivalent_id is not None:
                edit = pool(cards, verdict.equivalent_id, evidence, provenance, rep=rep, now=now)
                if edit is not None:
                    return edit
                edit = admit(cards, card, max_cards=limit, rep=rep)
                return Edit(edit.outcome, edit.card_id, edit.revision, "equivalent card gone; NEW")
            return admit(cards, card, max_cards=limit, rep=rep)

        def apply(cards: dict[str, Card]) -> list[LedgerRow]:
            edit = edit_of(cards)
            rows = rows_of(edit)
            witness = _witness(edit, cand.id)
            if witness is not None:  # the bank changes: rows and write are one unit
                self.ledger.intend(rows, witness)
            return rows

        return self.store.transaction(apply)

    # -- rows ----------------------------------------------------------------
    def _row(
        self,
        item: _Item,
        outcome: str,
        reason: str,
        started: float,
        cand: _Candidate | None = None,
        **fields: object,
    ) -> LedgerRow:
        ts, when = stamp()
        o = item.outcome
        return LedgerRow(
            ts=ts,
            time=when,
            run_id=self.run_id,
            task_key=self.task_key,
            item=item.stage,
            outcome=outcome,  # type: ignore[arg-type]
            reason=reason,
            attempt=o.attempt,
            parent_id=o.parent_id,
            child_id=o.child_id,
            normalised_gain=o.normalised_gain,
            candidate_id=None if cand is None else cand.id,
            candidate=None
            if cand is None
            else CandidateText(cand.text.description, cand.text.explanation_summary),
            ingest_attempts=item.attempts,
            latency_s=round(time.perf_counter() - started, 6),
            **fields,  # type: ignore[arg-type]
        )

    def _evicted_row(self, card: Card, cand: _Candidate) -> LedgerRow:
        return card_row(card, "evicted", f"capacity: weaker than {cand.id}", self.run_id)


def _witness(edit: Edit, candidate_id: str) -> Witness | None:
    """What ``cards.json`` shows once ``edit`` is written (None: it writes nothing)."""
    gone = () if edit.evicted is None else (edit.evicted.id,)
    if edit.outcome == "added" and edit.card_id is not None:
        return Witness(present=(edit.card_id,), absent=gone)
    if edit.outcome == "updated" and edit.card_id is not None:
        return Witness(pooled=(Pooled(edit.card_id, candidate_id),), absent=gone)
    return None


def _verdict_word(verdict: Verdict) -> Literal["NEW", "EQUIVALENT"]:
    return "NEW" if verdict.equivalent_id is None else "EQUIVALENT"
