"""The read side's posterior heads, fitted on the causal ledger (memory-model.md
"Immediate head", "Delayed-lineage head" and "Multitask transfer").

``HeadFitter`` fits the immediate-utility and invalidity heads on the committed,
usefulness-eligible ledger rows, and the delayed-lineage head on the latest matured
lineage row of each eligible root once there is one. The rows are kept as they arrive
(``headrows.HeadRows``): the Gaussian heads fit on exact sufficient statistics updated
per row, the invalidity head on its growing row arrays, so a refit never rebuilds a
design over the ledger. Fits are cached by the evidence version V, the card lineages and
the context width; a decision whose inputs did not move (same V, the very same card
objects) skips even the key. With the multitask transfer prior on, the digest of other
runs' use trials joins V.

``design``, ``design_row`` and ``targets`` build the batch design of given observations,
the reference the kept statistics are tested against.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np

from gigaevo.memory.v2.bank.cards import Card
from gigaevo.memory.v2.causal import (
    BayesianLinearHead,
    BlockDesign,
    DesignSpace,
    LogisticLaplaceHead,
    measurement_sd,
)
from gigaevo.memory.v2.causal import RewardDefinition as CausalReward
from gigaevo.memory.v2.causal.arrowhead import DENSE_MAX_SIZE
from gigaevo.memory.v2.causal.errors import DesignError
from gigaevo.memory.v2.causal.invalidity import ShiftLevels, card_shift_levels
from gigaevo.memory.v2.causal.quadrature import QuadratureNodes
from gigaevo.memory.v2.causal.spectral import BlockTerms
from gigaevo.memory.v2.causal.suffstats import GaussianStatistics
from gigaevo.memory.v2.causal.transfer import (
    TransferConfig,
    TransferFit,
    fit_transfer,
    intercept_prior_mean,
    trial_digest,
)
from gigaevo.memory.v2.evidence import Diagnostic, Observation, RowIdSet, SelectionEvidence
from gigaevo.memory.v2.read.headrows import HeadRows, InvalidityFitter, WidthRows
from gigaevo.memory.v2.read.trials import transfer_trials
from gigaevo.memory.v2.settings import PosteriorSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

# (V + trial digest, card lineages, context width, ())
FitKey = tuple[str, tuple[str, ...], int, tuple[str, ...]]


@dataclass
class HeadFit:
    """Heads fitted on one evidence version V and one lineage layout."""

    space: DesignSpace
    immediate: BayesianLinearHead | None
    invalidity: LogisticLaplaceHead | None
    diagnostics: tuple[Diagnostic, ...]
    row_ids: Sequence[str]  # a fit-set link (``RowIdSet``), or () for none
    failure: str = ""
    lineage: BayesianLinearHead | None = None  # delayed-lineage head, None while inactive


class HeadFitter:
    """Fits and caches the heads of one run's reader.

    Args:
        evidence: the run's causal ledger.
        reward: the causal reward (gain normalisation and range).
        posterior: ``memory.posterior_config`` (priors, residual scale, contrasts).
        run_id: this run (its own use trials never feed the transfer prior).
        task_key: this run's task.
        transfer: the multitask transfer prior (memory-model.md "Multitask transfer").
        rag_contrast: whether RAG labels enter the design (memory/applicability=agentic).
    """

    def __init__(
        self,
        evidence: SelectionEvidence,
        reward: CausalReward,
        posterior: PosteriorSettings,
        *,
        run_id: str,
        task_key: str,
        transfer: TransferConfig | None = None,
        rag_contrast: bool = False,
    ) -> None:
        self.evidence = evidence
        self.causal_reward = reward
        self.posterior = posterior
        self.run_id = run_id
        self.task_key = task_key
        self.transfer = transfer or TransferConfig()
        self.rag_contrast = rag_contrast
        self.transfer_fit = TransferFit()
        self._transfer_digest = ""
        self._transfer_cache: dict[str, tuple[str, tuple[float, str]]] = {}  # card -> fit
        self.rows = HeadRows(evidence, reward, posterior, rag_contrast=rag_contrast)
        self.invalidity = InvalidityFitter(
            posterior.kind_contrast,
            rag_contrast,
            shift_levels=self._shift_levels,
            method=posterior.invalidity_fit,
            prefix_min_rows=posterior.invalidity_prefix_min_rows,
            prefix_rows_per_lineage=posterior.invalidity_prefix_rows_per_lineage,
        )
        self.current: tuple[FitKey, HeadFit] | None = None  # (cache key, fit)
        # per head: (the inputs it was fitted on, the fitted head); see ``_head``
        self._heads: dict[str, tuple[tuple[object, ...], Any]] = {}
        self._space: DesignSpace | None = None
        # (cards, alias, their ids, (treated keys that are no card, the lineages)): ``_lineages``
        self._lineage_cache: (
            tuple[
                tuple[Card, ...],
                dict[str, str],
                frozenset[str],
                tuple[frozenset[str], tuple[str, ...]] | None,
            ]
            | None
        ) = None
        # per Gaussian head: its block sums kept between fits (the same fit, fewer sums)
        self._terms = {"immediate": BlockTerms(), "lineage": BlockTerms()}
        self.head_fits = 0  # heads actually fitted (a head whose inputs stand is reused)
        # per head: (the plan's inputs, its residual-scale plan); see ``_plan``
        self._planned: dict[str, tuple[tuple[object, ...], QuadratureNodes | None]] = {}
        self.plans = 0  # the immediate head's residual-scale plans made (``_plan``)
        self.lineage_plans = 0  # the delayed-lineage head's
        # (V, head rows, context width, cards) the cached fit was last checked against
        self._inputs: tuple[str, tuple[Observation, ...], int, tuple[Card, ...]] | None = None
        self.version = ""  # V of the last call
        self.fits = 0

    def fitted(self, n_context: int, cards: Sequence[Card]) -> HeadFit:
        """The heads on the current evidence for ``cards`` (cached by V, lineages, layout)."""
        self.version = self.evidence.evidence_version()
        self.rows.sync()
        # nothing moved since the last call (same V, the very same card objects: a stamp,
        # edit or reload makes new ones): the cached fit stands
        last = self._inputs
        if (
            self.current is not None
            and last is not None
            and last[0] == self.version
            and last[2] == n_context
            and len(last[3]) == len(cards)
            and (last[3] is cards or all(a is b for a, b in zip(last[3], cards, strict=True)))
        ):
            return self.current[1]
        self._inputs = (self.version, (), n_context, tuple(cards))
        alias, lineages = self._lineages(self._inputs[3])
        version = self.version + self._transfer_key(cards)  # the trial digest joins V
        key = (version, lineages, n_context, ())
        if self.current is not None and self.current[0] == key:
            return self.current[1]
        fit = self._fit_heads(n_context, lineages, alias)
        self.current = (key, fit)
        self.fits += 1
        return fit

    def _lineages(self, cards: tuple[Card, ...]) -> tuple[dict[str, str], tuple[str, ...]]:
        """(card id or absorbed id -> card id, the lineages of a fit: every card and every
        treated key), kept while the cards (the same objects) and the treated keys stand,
        so a refit over 10,000 cards does not rebuild them."""
        kept = self._lineage_cache
        if kept is None or kept[0] is not cards:
            alias = {a: c.id for c in cards for a in (c.id, *c.aliases)}
            kept = self._lineage_cache = (cards, alias, frozenset(alias.values()), None)
        _, alias, ids, last = kept
        keys = self.rows.lineage_keys.union(self.rows.treated_keys)
        treated = frozenset(alias.get(k, k) for k in keys)
        extra = treated - ids
        if last is None or last[0] != extra:
            last = (extra, tuple(sorted(ids | extra)))
            self._lineage_cache = (cards, alias, ids, last)
        return alias, last[1]

    def for_evictor(self, cards: Sequence[Card]) -> tuple[str, HeadFit] | None:
        """(V, heads) on the current evidence for ``cards``: the evictor's view.

        Cached with the decisions' fits. None while the ledger has no
        usefulness-eligible row (no context width to fit on).
        """
        self.rows.sync()
        if not self.rows.last_width:
            return None
        fit = self.fitted(self.rows.last_width, cards)
        return self.version, fit

    def _fit_heads(
        self, n_context: int, lineages: tuple[str, ...], alias: dict[str, str]
    ) -> HeadFit:
        """Fit the three heads on the kept rows of width ``n_context`` (``HeadRows``)."""
        space = self._space_of(n_context, lineages)
        rows = self.rows.rows(n_context)
        try:
            if self.rows.failure:
                raise DesignError(self.rows.failure)
            block_of = {k: space.lineage_position(alias.get(k, k)) for k in _keys(rows)}
            n_lin = len(space.lineages)
            # each head is a function of its own rows and the layout: V moves with any
            # head's rows, and a head whose rows and layout stand is reused as fitted
            layout = (space, tuple(sorted(block_of.items())))

            def fit_immediate() -> BayesianLinearHead:
                head = self._utility_head(space)
                # memory-model.md "Multitask transfer"; None: zero mean
                head.prior_mean = self._transfer_prior(space)
                plan = self._plan("immediate", rows.plan_rows, n_context, alias)
                stats = rows.immediate.fit_view(block_of, n_lin)
                return head.fit_statistics(stats, plan, self._terms["immediate"])

            def fit_lineage() -> BayesianLinearHead:
                head = self._utility_head(space)  # "Delayed-lineage head": mu_0 = 0
                plan = self._plan("lineage", rows.lineage_plan_rows, n_context, alias)
                stats = rows.lineage.fit_view(block_of, n_lin)
                return head.fit_statistics(stats, plan, self._terms["lineage"])

            def fit_invalidity() -> LogisticLaplaceHead:
                prior = self._invalidity_prior
                return self.invalidity.fit(rows.invalidity, space, alias, prior)

            key = (*layout, rows.immediate.version, self._transfer_digest)
            immediate = self._head("immediate", key, fit_immediate)
            invalidity = self._head("invalidity", (*layout, rows.invalidity.n), fit_invalidity)
            lineage = None
            if rows.lineage.n:  # "Delayed-lineage head": active from one matured row
                lineage = self._head("lineage", (*layout, rows.lineage.version), fit_lineage)
        except Exception as exc:  # fail closed: abstain until the evidence changes
            log.warning("memory v2 head fit failed, abstaining: %s", exc)
            return HeadFit(space, None, None, (Diagnostic("fit.failed", 1.0),), (), str(exc))
        h = immediate.health_
        diagnostics = (
            Diagnostic("immediate.rows", float(rows.immediate.n)),
            Diagnostic("immediate.sigma", math.sqrt(immediate.residual_variance_)),
            Diagnostic("immediate.ok", float(h.ok)),
            Diagnostic("immediate.at_boundary", float(h.at_boundary)),
            Diagnostic("invalidity.rows", float(rows.invalidity.n)),
            Diagnostic("invalidity.ok", float(invalidity.ok_)),
            Diagnostic("lineages", float(len(lineages))),
            *_lineage_diagnostics(lineage, rows.lineage.n),
        )
        base = rows.link if isinstance(rows.link, RowIdSet) else None
        ids = self.evidence.fitted_row_link(base, rows.ids, rows.take_changes())
        rows.link = ids
        return HeadFit(space, immediate, invalidity, diagnostics, ids, lineage=lineage)

    def _plan(
        self,
        name: str,
        plan_rows: tuple[int, GaussianStatistics] | None,
        n_context: int,
        alias: dict[str, str],
    ) -> QuadratureNodes | None:
        """The residual-scale plan of head ``name`` (memory-model.md "Incremental fits"): the
        accepted pieces of the adaptive integration on its statistics at its latest plan
        point (``WidthRows.plan_rows`` for the immediate head, ``lineage_plan_rows`` for the
        delayed-lineage head), fitted in the space of those rows' own lineages (the cards
        they were decided under, through the bank's aliases) with the configured prior (the
        immediate head's transfer mean of those lineages). Lineages without rows add nothing
        to the log evidence the pieces are placed on, so the plan is a function of the
        plan's rows and their aliases only: a resumed run plans what the uninterrupted one
        did, and a card that gains its first row elsewhere does not re-plan. None below
        the first plan point."""
        if plan_rows is None:
            return None
        n0, stats = plan_rows
        mapping = tuple((k, alias.get(k, k)) for k in sorted(stats.keys()))
        digest = self._transfer_digest if name == "immediate" else ""  # mu_0 of the immediate
        key = (n0, n_context, mapping, digest)
        kept = self._planned.get(name)
        if kept is not None and kept[0] == key:
            return kept[1]
        plan: QuadratureNodes | None = None
        try:
            own = DesignSpace(
                n_context,
                tuple(sorted({lin for _, lin in mapping})),
                kind_contrast=self.posterior.kind_contrast,
                rag_contrast=self.rag_contrast,
            )
            head = self._utility_head(own)
            head.prior_mean = self._transfer_prior(own) if name == "immediate" else None
            block_of = {k: own.lineage_position(lin) for k, lin in mapping}
            plan = head.fit_statistics(stats.fit_view(block_of, len(own.lineages))).quadrature_
        except DesignError as exc:  # no plan: this head's fits integrate adaptively
            log.debug("memory v2 %s head: no residual-scale plan (%s)", name, exc)
        self.plans += name == "immediate"
        self.lineage_plans += name == "lineage"
        self._planned[name] = (key, plan)
        return plan

    def _space_of(self, n_context: int, lineages: tuple[str, ...]) -> DesignSpace:
        """The design space of a fit; the very same object while the layout stands (the
        per-fit caches of the draws are keyed by it)."""
        last = self._space
        if (
            last is not None
            and last.lineages is lineages
            and last.n_context == n_context
            and last.kind_contrast == self.posterior.kind_contrast
            and last.rag_contrast == self.rag_contrast
        ):
            return last  # the same layout (the very lineages tuple ``_lineages`` kept)
        space = DesignSpace(
            n_context,
            lineages,
            kind_contrast=self.posterior.kind_contrast,
            rag_contrast=self.rag_contrast,
        )
        if self._space != space:
            self._space = space
        assert self._space is not None
        return self._space

    def _head(self, name: str, inputs: tuple[object, ...], fit: Callable[[], T]) -> T:
        """The head ``name`` fitted on ``inputs`` (its rows' version and the layout): the
        kept one when they are the inputs it was fitted on, else ``fit()``. Exact: the
        kept statistics, and so the fit, are a function of those inputs."""
        kept = self._heads.get(name)
        if kept is not None and kept[0] == inputs:
            return cast(T, kept[1])
        head = fit()
        self._heads[name] = (inputs, head)
        self.head_fits += 1
        return head

    def _invalidity_prior(self, space: DesignSpace) -> tuple[np.ndarray, np.ndarray]:
        return invalidity_prior(self.posterior, space)

    def _shift_levels(self, space: DesignSpace) -> ShiftLevels | None:
        return shift_levels(self.posterior, space)

    def _utility_head(self, space: DesignSpace) -> BayesianLinearHead:
        """An unfitted Gaussian head with the configured priors (immediate or delayed-lineage)."""
        post = self.posterior
        return BayesianLinearHead(
            space.utility_prior_variance(
                post.baseline_prior_sd,
                post.shared_effect_prior_sd,
                post.lineage_block_prior_sd,
                lineage_intercept_sd=post.lineage_intercept_prior_sd,
            ),
            residual_sd_bounds=post.residual_sd_bounds,
            residual_sd_median=post.residual_sd_median,
            residual_log_sd=post.residual_log_sd,
            block_layout=(space.shared_size, space.n_context),
        )

    def design(
        self, space: DesignSpace, rows: Sequence[Observation], alias: dict[str, str]
    ) -> np.ndarray | BlockDesign:
        """The design of ``rows``: dense (n, P) up to ``DENSE_MAX_SIZE`` columns (the reference
        path), else built in block form directly, O(n (P_s + C)) with no dense n x P temporary.

        Each block row comes from a one-lineage space with the same contrasts (so it equals
        ``space.row``), its block index from ``space.lineage_slice``; as in
        ``BlockDesign.from_dense`` a row whose lineage part is all zero touches no block.
        """
        if space.size <= DENSE_MAX_SIZE:
            dense = [self.design_row(space, o, alias) for o in rows]
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
            block[i] = space.lineage_position(lineage)
        block[~np.any(part != 0.0, axis=1)] = -1
        return BlockDesign(shared, block, part, len(space.lineages))

    def design_row(self, space: DesignSpace, obs: Observation, alias: dict[str, str]) -> np.ndarray:
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
        cand = obs.decision.candidate(pid)
        rag = cand.rag if cand is not None else None
        return x, alias.get(pid, pid), kind, rag

    def targets(self, rows: Sequence[Observation]) -> tuple[np.ndarray, np.ndarray]:
        r = self.causal_reward
        y = [
            r.normalise_gain(o.decision.context.parent_fitness, float(o.terminal.gain or 0.0))
            for o in rows
        ]
        unknown = self.posterior.unknown_measurement_sd
        omega = [
            measurement_sd(
                r.range, o.terminal.se, o.terminal.measurement == "deterministic", unknown
            )
            for o in rows
        ]
        return np.asarray(y, dtype=float), np.asarray(omega, dtype=float)

    # -- multitask transfer (memory-model.md "Multitask transfer") -------------
    def _transfer_key(self, cards: Sequence[Card]) -> str:
        """Digest of other runs' trials on ``cards`` ("" when off); refits P_help when it moves."""
        if not self.transfer.enabled:
            return ""
        trials = [t for t in transfer_trials(cards) if t.run != self.run_id]
        digest = trial_digest(trials)
        if digest != self._transfer_digest:
            self.transfer_fit = fit_transfer(
                trials,
                self.task_key,
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
        sd = self.posterior.lineage_block_prior_sd
        return intercept_prior_mean(space, self.transfer_fit, self.transfer, lineage_sd=sd)


def _keys(rows: WidthRows) -> set[str]:
    """Block keys (proposed card ids) of the rows of one width, every head."""
    return rows.immediate.keys() | rows.lineage.keys() | set(rows.invalidity.keys)


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


def invalidity_prior(post: PosteriorSettings, space: DesignSpace) -> tuple[np.ndarray, np.ndarray]:
    """(mu_gamma, v_gamma) of the invalidity head in ``space`` (memory-model.md "Invalidity head
    and chance constraint"); with two shift levels, v_gamma holds the narrow one."""
    two_levels = post.invalidity_shift_wide_weight < 1.0
    return space.invalidity_prior(
        post.invalidity_base_rate,
        post.invalidity_baseline_prior_sd,
        post.invalidity_shared_prior_sd,
        post.invalidity_lineage_prior_sd,
        baseline_intercept_sd=post.invalidity_baseline_intercept_prior_sd,
        lineage_intercept_sd=None if two_levels else post.invalidity_lineage_intercept_prior_sd,
    )


def shift_levels(post: PosteriorSettings, space: DesignSpace) -> ShiftLevels | None:
    """The two-level prior on each card's own invalid-logit shift (memory-model.md "Card shift
    levels"); None: one level."""
    return card_shift_levels(
        space.shared_size,
        space.size,
        space.n_context,
        post.invalidity_lineage_intercept_prior_sd,
        post.invalidity_shift_wide_weight,
    )
