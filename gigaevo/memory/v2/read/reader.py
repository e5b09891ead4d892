"""``CausalReader``: the read side of memory=v2 (memory-model.md "Rows and eligibility" and
"Immediate head" and "Invalidity head and chance constraint" and "Policy").

One decision per mutation attempt, on the engine's main thread, before the
LLM call:

1. refresh the bank; the universe is every card of this task;
2. fit the immediate and invalidity heads on the committed, usefulness-eligible
   ledger rows, and the delayed-lineage head on the latest matured lineage row
   of each eligible root once there is one (memory-model.md "Delayed-lineage head"); fits are
   cached by the
   evidence version V, the lineage rows and the lineage layout, so a decision
   refits only when V or the bank changed;
3. lineage exclusion (``memory/excluder=lineage``): every card cited on the
   parent or an ancestor, read from the ledger's edges and terminals, leaves the
   candidates (``DecisionRow.excluded_ids``); then ``causal.select`` (gate, safe
   set, probability matching, proposal and offer draws from RNG streams keyed by
   the decision id);
4. lease the proposed card (whether it is delivered, Z = 1, or withheld, Z = 0;
   a lineage another process filled meanwhile means a fresh draft), commit the
   ``DecisionRow`` to the ledger, emit the ``assignment`` event;
5. render the slate only when Z = 1.

A head that fails or sits at its boundary makes the decision abstain
(rho_0 = 1), as memory-model.md "Policy" says. Outcomes are handled by ``outcomes.OutcomeRecorder``.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from gigaevo.memory.base import Decision, MemoryRuntime, MutationContext
from gigaevo.memory.v2.bank.cards import Card
from gigaevo.memory.v2.bank.store import LocalMemoryStore
from gigaevo.memory.v2.causal import (
    CandidateCard,
    CandidateSet,
    Selection,
    context_features,
    select,
)
from gigaevo.memory.v2.causal import RewardDefinition as CausalReward
from gigaevo.memory.v2.causal.features import behaviour_features
from gigaevo.memory.v2.causal.policy import PENDING_LIMIT, Draw, abstain_proposal
from gigaevo.memory.v2.causal.transfer import TransferConfig, TransferFit
from gigaevo.memory.v2.evidence import (
    CandidateTable,
    CardSnapshot,
    DecisionRow,
    Diagnostic,
    LeaseCapReachedError,
    PendingCount,
    SelectionEvidence,
    decision_key_id,
    frozen_context,
    reward_definition,
)
from gigaevo.memory.v2.read.applicability import ApplicabilityAssessor, Assessment, RagLabel
from gigaevo.memory.v2.read.events import MemoryEvents, applicability_fields
from gigaevo.memory.v2.read.heads import HeadFit, HeadFitter
from gigaevo.memory.v2.read.leases import Lease, SelectionLeases
from gigaevo.memory.v2.read.snapshots import SnapshotCache, lineage_owners, pending_counts
from gigaevo.memory.v2.settings import (
    ReaderSettings,
)

log = logging.getLogger(__name__)

SELECTION_MODES = ("causal", "none")
LEASE_REDRAFTS = 3  # drafts tried when another process takes a lease slot first
CANDIDATES_KEPT = 1 << 16  # candidate views kept before the cache starts over


class CausalReader:
    """The causal selector of one run (see the module docstring).

    Args:
        runtime: the run (task, metrics, directories, seed, budget).
        store: the card bank (shared with the write side).
        run_id: the run identity (decision ids are digests of (run id, attempt)).
        settings: policy constants.
        assessor: labels the eligible cards applicable / not applicable for the parent
            (memory/applicability=agentic; the labels only enter the design as r).
    """

    def __init__(
        self,
        runtime: MemoryRuntime,
        store: LocalMemoryStore,
        *,
        run_id: str,
        settings: ReaderSettings | None = None,
        transfer: TransferConfig | None = None,
        assessor: ApplicabilityAssessor | None = None,
    ) -> None:
        self.runtime = runtime
        self.transfer = transfer or TransferConfig()
        self.store = store
        self.run_id = run_id
        self.settings = settings or ReaderSettings()
        self.config = self.settings.policy
        m = runtime.metrics
        self.reward = reward_definition(
            m, depth=self.settings.lineage_depth, budget=self.settings.lineage_budget
        )
        self.causal_reward = CausalReward(m.lower_bound, m.upper_bound, m.higher_is_better)
        self.evidence = SelectionEvidence(runtime.checkpoint_dir).open(resume_run=run_id)
        self.leases = SelectionLeases(runtime.bank_dir, run_id=run_id)
        self.events = MemoryEvents(runtime.checkpoint_dir, run_id=run_id)
        # the events a kill lost after their commit (a retirement's: checked against the bank)
        self.events.recover(self.evidence, card=_newest_card(store))
        self.heads = HeadFitter(
            self.evidence,
            self.causal_reward,
            self.settings.posterior,
            run_id=run_id,
            task_key=runtime.task_key,
            transfer=self.transfer,
            rag_contrast=assessor is not None,
        )
        self._version = ""
        self.held: dict[int, str] = {}  # attempt -> lease id
        self.counts = {"decisions": 0, "abstain": 0, "offered": 0, "withheld": 0}
        # a resumed run continues its event ordinals instead of restarting at 0
        self._ordinal_base = sum(1 for d in self.evidence.decisions() if d.run_id == run_id)
        self.lease_errors = 0
        self.lease_redrafts = 0
        self.assessor = assessor  # memory/applicability=agentic; None: no RAG labels
        self.assessment: Assessment | None = None  # labels of the decision being drafted
        self.snapshots = SnapshotCache()  # the universe, rendered once per card revision
        self._candidates: dict[tuple[str, str, RagLabel | None], CandidateCard] = {}
        self._bank: BankView | None = None  # the cards of the last decision, with columns
        self._bank_key: tuple[int, str | None] | None = None  # (store cards version, task)

    # -- decide ----------------------------------------------------------------
    def decide(self, context: MutationContext) -> Decision:
        """Commit this attempt's decision and return what the mutator sees."""
        decision_id = decision_key_id(self.run_id, context.attempt)
        existing = self.evidence.decision(decision_id)
        if existing is not None:  # a resumed attempt: the committed decision stands
            return self._as_decision(existing)
        row = self.draft(context)
        # lease before commit: when another process sharing the bank took the
        # lineage's last slot since the draft read the leases, draft again (the
        # card is then at its cap and left out) instead of a third pending outcome
        for _ in range(LEASE_REDRAFTS):
            if row.proposed_id is None or self._lease(row, context.attempt, final=False):
                break
            self.lease_redrafts += 1
            row = self.draft(context)
        else:
            if row.proposed_id is not None:
                self._lease(row, context.attempt)
        labels = self._applicability_intent(row)  # saved before the commit it witnesses
        try:
            self.evidence.append_decision(row)
        except BaseException:
            if labels is not None:
                self.events.drop_intent(labels)
            self.release(context.attempt)
            raise
        self._count(row)
        self.events.assignment(row)
        if labels is not None:
            self.events.emit_intent(labels)
        return self._as_decision(row)

    def draft(self, context: MutationContext) -> DecisionRow:
        """The decision row of ``context`` as ``decide`` would commit it (nothing is written)."""
        decision_id = decision_key_id(self.run_id, context.attempt)
        bank = self._cards(context.task_key)
        cards, universe = bank.cards, bank.universe
        x = self._features(context)
        active = self.leases.active() if cards else ()
        # the cards with any (the owners index is built only once a lease needs it)
        pending = pending_counts(universe, active, bank.owners) if active else {}
        excluded = self.excluded(context.parent_id, universe)
        # every card but those at the pending limit and those the excluder removed
        left_out = excluded.union(c for c, n in pending.items() if n >= PENDING_LIMIT)
        keep = np.ones(len(cards), dtype=bool)
        keep[[bank.position[c] for c in left_out if c in bank.position]] = False
        eligible = np.flatnonzero(keep)
        if self.assessor is not None:
            self.assessment = self._assess(context, [cards[i] for i in eligible])
        else:
            self.assessment = None
        fit = self._fitted(len(x), cards)
        selection = self._select(decision_id, fit, x, context, bank, eligible, pending)
        return self._row(decision_id, context, x, universe, pending, fit, selection, excluded)

    def _cards(self, task_key: str) -> BankView:
        """The cards a decision chooses among (every card of the task, or of every task with
        ``cross_task_candidates``) in id order, with their universe and candidate columns:
        built again only when the bank's cards changed."""
        self.store.refresh()
        task = None if self.transfer.cross_task_candidates else task_key
        key = (self.store.cards_version, task)
        bank = self._bank
        if bank is not None and self._bank_key == key:  # the store's cards did not move
            return bank
        raw = self.store.cards(task_key=task)
        self._bank_key = key
        if bank is None or bank.raw != raw:  # element by element: the same objects, or equal
            cards = tuple(sorted(raw, key=lambda c: c.id))
            universe = self.snapshots.universe(cards)
            candidates = CandidateSet([self._candidate(c, None) for c in cards])
            bank = self._bank = BankView(raw, cards, universe, candidates)
        return bank

    def excluded(self, parent_id: str, universe: Sequence[CardSnapshot]) -> frozenset[str]:
        """Cards of ``universe`` the excluder removes for a child of ``parent_id``.

        ``lineage``: every card whose lineage (id or an absorbed alias) was cited on the
        parent or one of its ancestors (the ledger's edges and terminals, which survive a
        resume; ``max_depth`` bounds how far back; with ``release_matured`` a use whose
        lineage window has matured no longer counts); ``none``: nothing.
        """
        if self.settings.excluder.kind == "none" or not universe:
            return frozenset()
        ex = self.settings.excluder
        applied = self.evidence.applied_cards(parent_id, ex.max_depth, open_only=ex.release_matured)
        if not applied:
            return frozenset()
        bank = self._bank
        owners = bank.owners if bank is not None and bank.universe is universe else None
        if owners is None:
            owners = lineage_owners(universe)
        return frozenset(universe[i].card_id for lid in applied for i in owners.get(lid, ()))

    # -- applicability labels (memory/applicability) ----------------------------
    def _assess(self, context: MutationContext, eligible: Sequence[Card]) -> Assessment | None:
        """The RAG labels of ``eligible`` for this parent (None: agentic labels are off)."""
        return None if self.assessor is None else self.assessor.assess(context, eligible)

    def _candidate(self, card: Card, rag: RagLabel | None) -> CandidateCard:
        """The selection's view of ``card`` under RAG label ``rag`` (kept per (id, kind,
        label): 1,000 cards made 1,000 new objects per decision)."""
        key = (card.id, card.kind, rag)
        found = self._candidates.get(key)
        if found is None:
            if len(self._candidates) >= CANDIDATES_KEPT:  # retired cards, old labels
                self._candidates.clear()
            found = self._candidates[key] = CandidateCard(card.id, card.id, key[1], key[2])
        return found

    def _rag(self, card_id: str) -> RagLabel | None:
        """The label ``card_id`` is decided under (None when labels are off)."""
        return None if self.assessment is None else self.assessment.label(card_id)

    def _applicability_intent(self, row: DecisionRow) -> dict[str, Any] | None:
        """The applicability event of ``row``, saved as an intent (None: nothing assessed)."""
        a = self.assessment
        if a is None or not a.candidates:
            return None
        fields = applicability_fields(
            row.attempt,
            a.labels,
            decision_id=row.decision_id,
            candidates=a.candidates,
            asked=a.asked,
            cache_hits=a.cache_hits,
            calls=a.calls,
            failures=a.failures,
            error=a.error,
        )
        return self.events.intend("applicability", fields, {"decision_id": row.decision_id})

    def _features(self, context: MutationContext) -> np.ndarray:
        ctx = self.settings.context
        coords = behaviour_features(context.coordinates, ctx.behaviour_transform)
        return context_features(
            self.causal_reward,
            context.parent_fitness,
            float(context.attempt),
            coords,
            progress_scale=ctx.progress_log_scale,
        )

    def _select(
        self,
        decision_id: str,
        fit: HeadFit,
        x: np.ndarray,
        context: MutationContext,
        bank: BankView,
        eligible: np.ndarray,
        pending: dict[str, int],
    ) -> Selection:
        if fit.immediate is None or fit.invalidity is None or x.shape[0] != fit.space.n_context:
            return _abstain(fit.failure or "heads not fitted")
        cands: CandidateSet
        if self.assessment is None and len(eligible) == len(bank.cards):
            cands = bank.candidates
        elif self.assessment is None:  # the bank's candidates, the eligible ones taken out
            cands = bank.candidates.take(eligible)
        else:  # under this decision's RAG labels
            cands = CandidateSet(
                [self._candidate(bank.cards[i], self._rag(bank.cards[i].id)) for i in eligible]
            )
        bounds = self.causal_reward.feasible_interval(context.parent_fitness)
        try:
            return select(
                decision_id,
                fit.space,
                x,
                bounds,
                self.causal_reward.range,
                cands,
                fit.immediate,
                fit.invalidity,
                self.config,
                pending,
                lineage=fit.lineage,
            )
        except Exception as exc:  # a numerical failure: abstain (rho_0 = 1)
            log.warning("memory v2 selection failed, abstaining: %s", exc)
            return _abstain(f"selection failed: {exc}")

    def _row(
        self,
        decision_id: str,
        context: MutationContext,
        x: np.ndarray,
        universe: tuple[CardSnapshot, ...],
        pending: dict[str, int],
        fit: HeadFit,
        sel: Selection,
        excluded: frozenset[str] = frozenset(),
    ) -> DecisionRow:
        e = self.config.offer_probability
        prop = sel.proposal
        ids, where = sel.candidate_columns()  # one candidate per card, as columns
        # an unsafe card (-1) reads the appended 0.0; + 0.0 turns -0.0 into 0.0, as before
        rho = np.append(np.asarray(prop.rho, dtype=float), 0.0)[where] + 0.0
        proposed, summ = sel.draw.proposed, sel.summary
        extra = {}
        if summ is not None and proposed is not None:
            i = bisect.bisect_left(ids, proposed)  # ids ascending: not two scans of J ids
            if i < len(ids) and ids[i] == proposed:
                extra = {
                    "mean_effect": {i: summ.effect_mean},
                    "sd_effect": {i: summ.effect_sd},
                    "p_positive": {i: summ.p_positive},
                }
        rags = [self._rag(cid) for cid in ids] if self.assessment is not None else None
        candidates = CandidateTable.from_columns(ids, rho, where >= 0, e, rag=rags, extra=extra)
        d = sel.draw
        treated = d.proposed is not None
        summary = sel.summary
        diagnostics = fit.diagnostics
        if sel.abstain_reason:
            diagnostics = (*diagnostics, Diagnostic("abstain.forced", 1.0))
        return DecisionRow(
            decision_id=decision_id,
            run_id=self.run_id,
            seed=self.runtime.seed,
            attempt=context.attempt,
            event_ordinal=self._ordinal_base + self.counts["decisions"],
            owner=self.evidence.owner,
            context=frozen_context(context, x.tolist()),
            reward=self.reward,
            universe=universe,
            pending=tuple(PendingCount(k, v) for k, v in sorted(pending.items()) if v),
            candidates=candidates,
            fit=diagnostics,
            fitted_row_ids=fit.row_ids,
            evidence_version=self._version,
            abstain=not treated,
            rho0=float(sel.proposal.rho0),
            proposed_id=d.proposed,
            z=d.offered,
            offer=e if treated else None,
            rho=d.proposal_probability if treated else None,
            joint=d.joint_propensity if treated else None,
            q0=summary.q0_hat if treated and summary else None,
            q1=summary.q1_hat if treated and summary else None,
            r0=summary.r0_hat if treated and summary else None,
            r1=summary.r1_hat if treated and summary else None,
            rag_record=sel.abstain_reason,
            created_at=0.0,
            excluded_ids=tuple(sorted(excluded)),
        )

    def _lease(self, row: DecisionRow, attempt: int, *, final: bool = True) -> bool:
        """Lease the proposed card's lineage for ``attempt``; whether it was taken."""
        snap = row.snapshot(row.proposed_id or "")
        ids = snap.lineage_ids if snap is not None else {row.proposed_id or ""}
        try:
            lease: Lease = self.leases.acquire(row.proposed_id or "", ids, attempt)
        except LeaseCapReachedError:
            if final:
                self.lease_errors += 1
                log.warning("memory v2 lease for attempt %d not taken: cap reached", attempt)
            return False
        except Exception as exc:  # lock trouble: the decision stands
            self.lease_errors += 1
            log.warning("memory v2 lease for attempt %d not taken: %s", attempt, exc)
            return False
        self.held[attempt] = lease.lease_id
        return True

    def release(self, attempt: int) -> None:
        """Drop this attempt's lease (its terminal is committed): owed, written with the
        next lease change (``SelectionLeases.release_attempt(later=True)``)."""
        if self.held.pop(attempt, None) is None:
            return
        self.leases.release_attempt(attempt, later=True)

    def release_all(self) -> None:
        for attempt in sorted(self.held):
            self.release(attempt)
        self.flush_releases()

    def flush_releases(self) -> None:
        """Write the releases this process owes on the lease file."""
        try:
            self.leases.flush()
        except Exception as exc:
            self.lease_errors += 1
            log.warning("memory v2 leases not released: %s", exc)

    def _count(self, row: DecisionRow) -> None:
        self.counts["decisions"] += 1
        key = "abstain" if row.abstain else ("offered" if row.z == 1 else "withheld")
        self.counts[key] += 1

    def _as_decision(self, row: DecisionRow) -> Decision:
        record: dict[str, object] = {
            "memory": "v2",
            "action": "abstain" if row.abstain else ("offer" if row.z == 1 else "withhold"),
            "decision_id": row.decision_id,
            "proposed_id": row.proposed_id,
            "z": row.z,
        }
        if row.abstain or row.z != 1 or row.proposed_id is None:
            return Decision(attempt=row.attempt, record=record)
        snap = row.snapshot(row.proposed_id)
        slate = snap.text if snap is not None else ""
        return Decision(row.attempt, slate=slate, card_ids=(row.proposed_id,), record=record)

    # -- heads -----------------------------------------------------------------
    def heads_for(self, context: MutationContext) -> HeadFit:
        """The heads a decision at ``context`` would use (fitted, or cached by V)."""
        self.store.refresh()
        task = None if self.transfer.cross_task_candidates else context.task_key
        cards = sorted(self.store.cards(task_key=task), key=lambda c: c.id)
        return self._fitted(len(self._features(context)), cards)

    def _fitted(self, n_context: int, cards: Sequence[Card]) -> HeadFit:
        fit = self.heads.fitted(n_context, cards)
        self._version = self.heads.version
        return fit

    def fitted_heads(self, cards: Sequence[Card]) -> tuple[str, HeadFit] | None:
        """(V, heads) on the current evidence for ``cards``: the evictor's view (cached)."""
        return self.heads.for_evictor(cards)

    @property
    def fits(self) -> int:
        """Head fits so far (a cached fit does not count)."""
        return self.heads.fits

    @property
    def transfer_fit(self) -> TransferFit:
        return self.heads.transfer_fit

    def stats(self) -> dict[str, Any]:
        return {
            "selection": "causal",
            **self.counts,
            "head_fits": self.fits,
            "lease_errors": self.lease_errors,
            "lease_redrafts": self.lease_redrafts,
            "leases_held": len(self.held),
        }


@dataclass(frozen=True, eq=False)
class BankView:
    """The cards of a decision in id order (``raw``: as the store listed them, to see a
    change), their universe, candidates and positions, and which snapshots hold each lineage
    id: kept while the bank's cards stand, so a decision does not rebuild them card by card."""

    raw: list[Card]
    cards: tuple[Card, ...]
    universe: tuple[CardSnapshot, ...]
    candidates: CandidateSet

    @cached_property
    def position(self) -> dict[str, int]:
        return {c.id: i for i, c in enumerate(self.cards)}

    @cached_property
    def owners(self) -> dict[str, tuple[int, ...]]:
        return lineage_owners(self.universe)


def _abstain(reason: str) -> Selection:
    """rho_0 = 1: no card proposed (memory-model.md "Policy")."""
    return Selection(abstain_proposal(), Draw(None, None, 1.0, 1.0), {}, None, reason)


def _newest_card(store: LocalMemoryStore) -> Callable[[str], Card | None]:
    """Card lookup in the newest bank (refreshed on the first lookup only)."""
    fresh: list[bool] = []

    def card(card_id: str) -> Card | None:
        if not fresh:
            store.refresh()
            fresh.append(True)
        return store.get(card_id)

    return card
