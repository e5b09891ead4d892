"""``CausalReader``: the read side of memory=v2 (MODEL sections 1, 3, 5 and 6).

One decision per mutation attempt, on the engine's main thread, before the
LLM call:

1. refresh the bank; the universe is every card of this task;
2. fit the immediate and invalidity heads on the committed, usefulness-eligible
   ledger rows, and the delayed-lineage head on the latest matured lineage row
   of each eligible root once there is one (MODEL 4.2); fits are cached by the
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
(rho_0 = 1), as MODEL 6.3 says. Outcomes are handled by ``outcomes.OutcomeRecorder``.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gigaevo.memory.base import Decision, MemoryRuntime, MutationContext
from gigaevo.memory.v2.applicability import ApplicabilityAssessor, Assessment, RagLabel
from gigaevo.memory.v2.cards import Card, render_card
from gigaevo.memory.v2.causal import (
    BayesianLinearHead,
    BlockDesign,
    CandidateCard,
    DesignSpace,
    LogisticLaplaceHead,
    Selection,
    SelectionConfig,
    context_features,
    measurement_sd,
    select,
)
from gigaevo.memory.v2.causal import RewardDefinition as CausalReward
from gigaevo.memory.v2.causal.arrowhead import DENSE_MAX_SIZE
from gigaevo.memory.v2.causal.features import behaviour_features
from gigaevo.memory.v2.causal.policy import PENDING_LIMIT, Draw, abstain_proposal
from gigaevo.memory.v2.causal.transfer import (
    TransferConfig,
    TransferFit,
    fit_transfer,
    intercept_prior_mean,
    trial_digest,
)
from gigaevo.memory.v2.events import MemoryEvents
from gigaevo.memory.v2.evidence import (
    Candidate,
    CardSnapshot,
    DecisionRow,
    Diagnostic,
    LeaseCapReachedError,
    LineageRow,
    Observation,
    PendingCount,
    SelectionEvidence,
    decision_key_id,
    frozen_context,
    lineage_rows,
    reward_definition,
)
from gigaevo.memory.v2.leases import Lease, SelectionLeases
from gigaevo.memory.v2.settings import (
    ContextSettings,
    ExcluderSettings,
    PosteriorSettings,
)
from gigaevo.memory.v2.store import LocalMemoryStore
from gigaevo.memory.v2.trials import transfer_trials

log = logging.getLogger(__name__)

SELECTION_MODES = ("causal", "none")
LEASE_REDRAFTS = 3  # drafts tried when another process takes a lease slot first


@dataclass(frozen=True)
class ReaderSettings:
    """``memory.causal.*``: the policy constants, the OPE summary cadence, the lineage window.

    The config keeps every key flat under ``memory.causal``; the policy keys
    (``SelectionConfig``'s fields, with its defaults) are gathered into ``policy``.
    ``posterior``, ``context`` and ``excluder`` come from their own groups
    (``memory.posterior_config``, ``memory/context``, ``memory/excluder``), parsed
    by ``settings.ReadSideSettings``; ``parse`` leaves them at their defaults.
    """

    policy: SelectionConfig = field(default_factory=SelectionConfig)
    ope_every: int = 20
    lineage_depth: int = 3
    lineage_budget: int = 32
    posterior: PosteriorSettings = field(default_factory=PosteriorSettings)
    context: ContextSettings = field(default_factory=ContextSettings)
    excluder: ExcluderSettings = field(default_factory=ExcluderSettings)

    _GROUPS = frozenset({"policy", "posterior", "context", "excluder"})

    @classmethod
    def parse(cls, raw: dict[str, Any] | None) -> ReaderSettings:
        """Settings from a plain dict (unknown keys raise ``ValueError``)."""
        raw = dict(raw or {})
        policy_keys = set(SelectionConfig.__dataclass_fields__)
        own_keys = set(cls.__dataclass_fields__) - cls._GROUPS
        unknown = sorted(set(raw) - policy_keys - own_keys)
        if unknown:
            raise ValueError(f"unknown memory.causal setting(s) {unknown}")
        policy = SelectionConfig(**{k: v for k, v in raw.items() if k in policy_keys})
        s = cls(policy=policy, **{k: v for k, v in raw.items() if k in own_keys})
        if not 0.0 < s.policy.offer_probability < 1.0:
            raise ValueError("memory.causal.offer_probability must lie in (0, 1)")
        if s.ope_every < 1:
            raise ValueError("memory.causal.ope_every must be >= 1")
        return s


@dataclass
class _Fit:
    """Heads fitted on one evidence version V and one lineage layout."""

    space: DesignSpace
    immediate: BayesianLinearHead | None
    invalidity: LogisticLaplaceHead | None
    diagnostics: tuple[Diagnostic, ...]
    row_ids: tuple[str, ...]
    failure: str = ""
    lineage: BayesianLinearHead | None = None  # delayed-lineage head, None while inactive


def card_snapshot(card: Card) -> CardSnapshot:
    text = render_card(card)
    return CardSnapshot(
        card_id=card.id,
        absorbed_ids=tuple(card.aliases),
        kind=card.kind,
        text=text,
        text_digest=hashlib.sha256(text.encode()).hexdigest(),
    )


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
        self.transfer_fit = TransferFit()
        self._transfer_digest = ""
        self._transfer_cache: dict[str, tuple[str, tuple[float, str]]] = {}  # card -> fit
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
        self._fit: tuple[tuple[str, tuple[str, ...], int, tuple[str, ...]], _Fit] | None = None
        self._version = ""
        self.held: dict[int, str] = {}  # attempt -> lease id
        self.counts = {"decisions": 0, "abstain": 0, "offered": 0, "withheld": 0}
        # a resumed run continues its event ordinals instead of restarting at 0
        self._ordinal_base = sum(1 for d in self.evidence.decisions() if d.run_id == run_id)
        self.fits = 0
        self.lease_errors = 0
        self.lease_redrafts = 0
        self.assessor = assessor  # memory/applicability=agentic; None: no RAG labels
        self.assessment: Assessment | None = None  # labels of the decision being drafted

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
        try:
            self.evidence.append_decision(row)
        except BaseException:
            self.release(context.attempt)
            raise
        self._count(row)
        self.events.assignment(row)
        self._applicability_event(row)
        return self._as_decision(row)

    def draft(self, context: MutationContext) -> DecisionRow:
        """The decision row of ``context`` as ``decide`` would commit it (nothing is written)."""
        decision_id = decision_key_id(self.run_id, context.attempt)
        self.store.refresh()
        task = None if self.transfer.cross_task_candidates else context.task_key
        cards = sorted(self.store.cards(task_key=task), key=lambda c: c.id)
        universe = tuple(card_snapshot(c) for c in cards)
        x = self._features(context)
        active = self.leases.active() if cards else ()
        pending = {s.card_id: _lease_count(s, active) for s in universe}
        excluded = self.excluded(context.parent_id, universe)
        eligible = [c for c in cards if pending[c.id] < PENDING_LIMIT and c.id not in excluded]
        self.assessment = self._assess(context, eligible)
        fit = self._fitted(len(x), cards)
        selection = self._select(decision_id, fit, x, context, eligible, pending)
        return self._row(decision_id, context, x, universe, pending, fit, selection, excluded)

    def excluded(self, parent_id: str, universe: Sequence[CardSnapshot]) -> frozenset[str]:
        """Cards of ``universe`` the excluder removes for a child of ``parent_id``.

        ``lineage``: every card whose lineage (id or an absorbed alias) was cited on the
        parent or one of its ancestors (the ledger's edges and terminals, which survive a
        resume; ``max_depth`` bounds how far back); ``none``: nothing.
        """
        if self.settings.excluder.kind == "none" or not universe:
            return frozenset()
        applied = self.evidence.applied_cards(parent_id, self.settings.excluder.max_depth)
        if not applied:
            return frozenset()
        return frozenset(s.card_id for s in universe if s.lineage_ids & applied)

    # -- applicability labels (memory/applicability) ----------------------------
    def _assess(self, context: MutationContext, eligible: Sequence[Card]) -> Assessment | None:
        """The RAG labels of ``eligible`` for this parent (None: agentic labels are off)."""
        return None if self.assessor is None else self.assessor.assess(context, eligible)

    def _rag(self, card_id: str) -> RagLabel | None:
        """The label ``card_id`` is decided under (None when labels are off)."""
        return None if self.assessment is None else self.assessment.label(card_id)

    def _applicability_event(self, row: DecisionRow) -> None:
        a = self.assessment
        if a is None or not a.candidates:
            return
        self.events.applicability(
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
        fit: _Fit,
        x: np.ndarray,
        context: MutationContext,
        eligible: Sequence[Card],
        pending: dict[str, int],
    ) -> Selection:
        if fit.immediate is None or fit.invalidity is None or x.shape[0] != fit.space.n_context:
            return _abstain(fit.failure or "heads not fitted")
        cands = [CandidateCard(c.id, c.id, c.kind, self._rag(c.id)) for c in eligible]
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
        fit: _Fit,
        sel: Selection,
        excluded: frozenset[str] = frozenset(),
    ) -> DecisionRow:
        e = self.config.offer_probability
        rho = dict(zip(sel.proposal.card_ids, sel.proposal.rho.tolist(), strict=True))
        candidates = []
        for cid in sorted(sel.acceptance or rho):
            r = float(rho.get(cid, 0.0))
            safe = cid in rho
            summ = sel.summary if cid == sel.draw.proposed else None
            candidates.append(
                Candidate(
                    card_id=cid,
                    rho=r,
                    offer=e if safe else None,
                    offer_joint=r * e,
                    control_joint=r * (1.0 - e),
                    safe=safe,
                    mean_effect=None if summ is None else summ.effect_mean,
                    sd_effect=None if summ is None else summ.effect_sd,
                    p_positive=None if summ is None else summ.p_positive,
                    rag=self._rag(cid),
                )
            )
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
            candidates=tuple(candidates),
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
        """Drop this attempt's lease (its terminal is committed)."""
        if self.held.pop(attempt, None) is None:
            return
        try:
            self.leases.release_attempt(attempt)
        except Exception as exc:
            self.lease_errors += 1
            log.warning("memory v2 lease of attempt %d not released: %s", attempt, exc)

    def release_all(self) -> None:
        for attempt in sorted(self.held):
            self.release(attempt)

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
    def heads_for(self, context: MutationContext) -> _Fit:
        """The heads a decision at ``context`` would use (fitted, or cached by V)."""
        self.store.refresh()
        task = None if self.transfer.cross_task_candidates else context.task_key
        cards = sorted(self.store.cards(task_key=task), key=lambda c: c.id)
        return self._fitted(len(self._features(context)), cards)

    def _fitted(self, n_context: int, cards: Sequence[Card]) -> _Fit:
        self._version = self.evidence.evidence_version()
        alias = {a: c.id for c in cards for a in (c.id, *c.aliases)}
        rows = self.evidence.head_rows("invalidity")
        delayed = lineage_rows(rows, self.evidence.lineage())
        lineages = sorted({c.id for c in cards} | {self._lineage(o, alias) for o in rows if o.z})
        version = self._version + self._transfer_key(cards)  # the trial digest joins V
        key = (version, tuple(lineages), n_context, _lineage_row_ids(delayed))
        if self._fit is not None and self._fit[0] == key:
            return self._fit[1]
        fit = self._fit_heads(n_context, tuple(lineages), rows, alias, delayed)
        self._fit = (key, fit)
        self.fits += 1
        return fit

    def fitted_heads(self, cards: Sequence[Card]) -> tuple[str, _Fit] | None:
        """(V, heads) on the current evidence for ``cards``: the evictor's view.

        Cached with the decisions' fits. None while the ledger has no
        usefulness-eligible row (no context width to fit on).
        """
        rows = self.evidence.head_rows("invalidity")
        if not rows:
            return None
        fit = self._fitted(len(rows[-1].decision.context.features), cards)
        return self._version, fit

    @staticmethod
    def _lineage(obs: Observation, alias: dict[str, str]) -> str:
        pid = obs.decision.proposed_id or ""
        return alias.get(pid, pid)

    def _fit_heads(
        self,
        n_context: int,
        lineages: tuple[str, ...],
        rows: Sequence[Observation],
        alias: dict[str, str],
        delayed: Sequence[tuple[Observation, LineageRow]] = (),
    ) -> _Fit:
        post = self.settings.posterior
        space = DesignSpace(
            n_context,
            lineages,
            kind_contrast=post.kind_contrast,
            rag_contrast=self.assessor is not None,
        )
        rows = [o for o in rows if len(o.decision.context.features) == n_context]
        delayed = [(o, r) for o, r in delayed if len(o.decision.context.features) == n_context]
        try:
            design = self._design(space, rows, alias)
            invalid = np.array([1.0 if o.invalid else 0.0 for o in rows])
            valid = np.array([o.valid for o in rows], dtype=bool)
            y, omega = self._targets([o for o in rows if o.valid])
            immediate = self._utility_head(space)
            immediate.prior_mean = self._transfer_prior(space)  # MODEL 9; None: zero mean
            immediate.fit(_take_rows(design, np.flatnonzero(valid)), y, omega)
            mu, var = space.invalidity_prior(
                post.invalidity_base_rate,
                post.invalidity_baseline_prior_sd,
                post.invalidity_shared_prior_sd,
                post.invalidity_lineage_prior_sd,
            )
            layout = (space.shared_size, space.n_context)  # block-arrowhead when large
            invalidity = LogisticLaplaceHead(mu, var, layout).fit(design, invalid)
            lineage = self._lineage_head(space, delayed, alias)
        except Exception as exc:  # fail closed: abstain until the evidence changes
            log.warning("memory v2 head fit failed, abstaining: %s", exc)
            return _Fit(space, None, None, (Diagnostic("fit.failed", 1.0),), (), str(exc))
        h = immediate.health_
        diagnostics = (
            Diagnostic("immediate.rows", float(valid.sum())),
            Diagnostic("immediate.sigma", math.sqrt(immediate.residual_variance_)),
            Diagnostic("immediate.ok", float(h.ok)),
            Diagnostic("immediate.at_boundary", float(h.at_boundary)),
            Diagnostic("invalidity.rows", float(len(rows))),
            Diagnostic("invalidity.ok", float(invalidity.ok_)),
            Diagnostic("lineages", float(len(lineages))),
            *_lineage_diagnostics(lineage, len(delayed)),
        )
        ids = tuple(sorted(o.decision.decision_id for o in rows)) + _lineage_row_ids(delayed)
        return _Fit(space, immediate, invalidity, diagnostics, ids, lineage=lineage)

    def _utility_head(self, space: DesignSpace) -> BayesianLinearHead:
        """An unfitted Gaussian head with the configured priors (immediate or delayed-lineage)."""
        post = self.settings.posterior
        return BayesianLinearHead(
            space.utility_prior_variance(
                post.baseline_prior_sd, post.shared_effect_prior_sd, post.lineage_block_prior_sd
            ),
            residual_sd_bounds=post.residual_sd_bounds,
            residual_sd_median=post.residual_sd_median,
            residual_log_sd=post.residual_log_sd,
            block_layout=(space.shared_size, space.n_context),
        )

    def _lineage_head(
        self,
        space: DesignSpace,
        delayed: Sequence[tuple[Observation, LineageRow]],
        alias: dict[str, str],
    ) -> BayesianLinearHead | None:
        """The delayed-lineage head (MODEL 4.2), active once it has >= 1 matured row.

        Each root keeps its own design row z (same arm, context and card) and trains on
        y^L = g^L / R (not clipped) with the known measurement sd omega^L; mu_0 = 0.
        """
        if not delayed:
            return None
        design = self._design(space, [o for o, _ in delayed], alias)
        y = np.array([float(r.residual or 0.0) / self.causal_reward.range for _, r in delayed])
        omega = np.full(len(delayed), self.settings.posterior.lineage_measurement_sd)
        return self._utility_head(space).fit(design, y, omega)

    def _design(
        self, space: DesignSpace, rows: Sequence[Observation], alias: dict[str, str]
    ) -> np.ndarray | BlockDesign:
        """The design of ``rows``: dense (n, P) up to ``DENSE_MAX_SIZE`` columns (the reference
        path), else built in block form directly, O(n (P_s + C)) with no dense n x P temporary.

        Each block row comes from a one-lineage space with the same contrasts (so it equals
        ``space.row``), its block index from ``space.lineage_slice``; as in
        ``BlockDesign.from_dense`` a row whose lineage part is all zero touches no block.
        """
        if space.size <= DENSE_MAX_SIZE:
            dense = [self._design_row(space, o, alias) for o in rows]
            return np.array(dense).reshape(len(rows), space.size)
        unit = DesignSpace(
            space.n_context,
            ("",),
            kind_contrast=space.kind_contrast,
            rag_contrast=space.rag_contrast,
        )
        ps, width = space.shared_size, space.n_context
        shared = np.empty((len(rows), ps))
        part = np.zeros((len(rows), width))
        block = np.full(len(rows), -1)
        for i, obs in enumerate(rows):
            x, lineage, kind, rag = self._row_spec(obs, alias)
            if lineage is None:
                shared[i] = unit.row(x, 0)[:ps]
                continue
            row = unit.row(x, 1, "", kind, rag)
            shared[i], part[i] = row[:ps], row[ps:]
            block[i] = (space.lineage_slice(lineage).start - ps) // width
        block[~np.any(part != 0.0, axis=1)] = -1
        return BlockDesign(shared, block, part, len(space.lineages))

    def _design_row(
        self, space: DesignSpace, obs: Observation, alias: dict[str, str]
    ) -> np.ndarray:
        x, lineage, kind, rag = self._row_spec(obs, alias)
        return space.row(x, 0) if lineage is None else space.row(x, 1, lineage, kind, rag)

    @staticmethod
    def _row_spec(
        obs: Observation, alias: dict[str, str]
    ) -> tuple[np.ndarray, str | None, str | None, str | None]:
        """(context, lineage, kind, RAG label) of an observation's row; lineage None: control."""
        x = np.asarray(obs.decision.context.features, dtype=float)
        if obs.z != 1:
            return x, None, None, None
        pid = obs.decision.proposed_id or ""
        snap = obs.decision.snapshot(pid)
        kind = snap.kind if snap is not None else "insight"
        # the RAG label the card was decided under, frozen in the decision row
        rag = next((c.rag for c in obs.decision.candidates if c.card_id == pid), None)
        return x, alias.get(pid, pid), kind, rag

    def _targets(self, rows: Sequence[Observation]) -> tuple[np.ndarray, np.ndarray]:
        r = self.causal_reward
        y = [
            r.normalise_gain(o.decision.context.parent_fitness, float(o.terminal.gain or 0.0))
            for o in rows
        ]
        unknown = self.settings.posterior.unknown_measurement_sd
        omega = [
            measurement_sd(
                r.range, o.terminal.se, o.terminal.measurement == "deterministic", unknown
            )
            for o in rows
        ]
        return np.asarray(y, dtype=float), np.asarray(omega, dtype=float)

    # -- multitask transfer (MODEL 9) --------------------------------------------
    def _transfer_key(self, cards: Sequence[Card]) -> str:
        """Digest of other runs' trials on ``cards`` ("" when off); refits P_help when it moves."""
        if not self.transfer.enabled:
            return ""
        trials = [t for t in transfer_trials(cards) if t.run != self.run_id]
        digest = trial_digest(trials)
        if digest != self._transfer_digest:
            self.transfer_fit = fit_transfer(
                trials,
                self.runtime.task_key,
                exclude_run=self.run_id,
                config=self.transfer,
                cache=self._transfer_cache,
            )
            self._transfer_digest = digest
            if self.transfer_fit.failure:
                log.warning("memory v2 transfer prior not used: %s", self.transfer_fit.failure)
        return digest

    def _transfer_prior(self, space: DesignSpace) -> np.ndarray | None:
        """mu_0 of the immediate head: lineage-intercept shifts from P_help (None: zero)."""
        if not self.transfer.enabled:
            return None
        sd = self.settings.posterior.lineage_block_prior_sd
        return intercept_prior_mean(space, self.transfer_fit, self.transfer, lineage_sd=sd)

    def stats(self) -> dict[str, Any]:
        return {
            "selection": "causal",
            **self.counts,
            "head_fits": self.fits,
            "lease_errors": self.lease_errors,
            "lease_redrafts": self.lease_redrafts,
            "leases_held": len(self.held),
        }


def _abstain(reason: str) -> Selection:
    """rho_0 = 1: no card proposed (MODEL 6.3)."""
    return Selection(abstain_proposal(), Draw(None, None, 1.0, 1.0), {}, None, reason)


def _lineage_row_ids(delayed: Sequence[tuple[Observation, LineageRow]]) -> tuple[str, ...]:
    """Ids of the fitted lineage rows: ``lineage:<root decision id>:v<version>``, sorted."""
    return tuple(sorted(f"lineage:{r.root_decision_id}:v{r.version}" for _, r in delayed))


def _lineage_diagnostics(head: BayesianLinearHead | None, n_rows: int) -> tuple[Diagnostic, ...]:
    """Fit diagnostics of the delayed-lineage head (rows only while it is inactive)."""
    if head is None:
        return (Diagnostic("lineage.rows", float(n_rows)),)
    h = head.health_
    return (
        Diagnostic("lineage.rows", float(n_rows)),
        Diagnostic("lineage.sigma", math.sqrt(head.residual_variance_)),
        Diagnostic("lineage.ok", float(h.ok)),
        Diagnostic("lineage.at_boundary", float(h.at_boundary)),
    )


def _lease_count(snap: CardSnapshot, leases: Sequence[Lease]) -> int:
    ids = snap.lineage_ids
    return sum(1 for lease in leases if lease.touches(ids))


def _take_rows(design: np.ndarray | BlockDesign, idx: np.ndarray) -> np.ndarray | BlockDesign:
    return design.take(idx) if isinstance(design, BlockDesign) else design[idx]
