"""The ``memory.*`` settings of memory=v2 and their startup validation.

Hydra hands the provider plain dicts (``memory.write``, ``memory.writer``,
``memory.program_exemplars``, ``memory.store``); ``MemorySettings.parse``
turns them into frozen records, refusing unknown keys, wrong types, values
out of range and combinations that contradict each other, each with a
one-line ``MemoryConfigError`` naming the key. ``ReadSideSettings.parse``
does the same for the read side's groups (``memory.posterior_config``,
``memory/context``, ``memory/excluder``, ``memory/no_card_evidence``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gigaevo.memory.v2.causal.selection import SelectionConfig
from gigaevo.memory.v2.errors import CardFormatError, MemoryConfigError
from gigaevo.memory.v2.records import from_json

Cadence = Literal["live", "end_of_run", "none"]


def _at_least(name: str, value: float | None, minimum: float) -> None:
    if value is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class WriteSettings:
    """``memory/write``: when outcomes reach the librarian.

    ``live`` ingests each strictly valid outcome as it is committed,
    ``end_of_run`` queues them and ingests at close, ``none`` writes nothing.
    """

    cadence: Cadence = "live"


@dataclass(frozen=True)
class WriterSettings:
    """``memory.writer``: the librarian.

    Attributes:
        authoring_enabled: author new cards (false: a fixed shared card set).
        max_ingest_attempts: chain attempts per outcome or exemplar before it is dropped.
        ingest_call_timeout_s: bound on one author -> retrieve -> judge chain.
        neighbours_k: same-kind neighbours shown to the equivalence judge.
        scope: ``task`` (this task's cards) or ``bank`` (whole bank; multitask).
        max_cards_per_task: insight cards a task may hold (None: unbounded).
        max_program_chars, max_diff_lines, max_note_chars: bounds on what the
            author is shown (each program, the unified diff, report and explanation).
        llm_max_attempts: structured-output attempts per agent call.
        audit_duplicates: at close, judge each card of the task against its
            neighbours and report the residual duplicate rate (skipped when
            authoring is off: a fixed card set builds no judge).
        audit_max_cards: cards the audit checks at most (the newest).
    """

    authoring_enabled: bool = True
    max_ingest_attempts: int = 3
    ingest_call_timeout_s: float = 120.0
    neighbours_k: int = 5
    scope: Literal["task", "bank"] = "task"
    max_cards_per_task: int | None = None
    max_program_chars: int = 8000
    max_diff_lines: int = 200
    max_note_chars: int = 2000
    llm_max_attempts: int = 2
    audit_duplicates: bool = True
    audit_max_cards: int = 300

    def __post_init__(self) -> None:
        _at_least("max_ingest_attempts", self.max_ingest_attempts, 1)
        if self.ingest_call_timeout_s <= 0:
            raise ValueError(f"ingest_call_timeout_s must be > 0, got {self.ingest_call_timeout_s}")
        _at_least("neighbours_k", self.neighbours_k, 1)
        _at_least("max_cards_per_task", self.max_cards_per_task, 1)
        _at_least("max_program_chars", self.max_program_chars, 200)
        _at_least("max_diff_lines", self.max_diff_lines, 10)
        _at_least("max_note_chars", self.max_note_chars, 100)
        _at_least("llm_max_attempts", self.llm_max_attempts, 1)
        _at_least("audit_max_cards", self.audit_max_cards, 1)


@dataclass(frozen=True)
class ExemplarSettings:
    """``memory.program_exemplars``: program cards authored from strong programs.

    Attributes:
        enabled: author a program card when a child is the run's new best.
        max_per_task: program families a task may hold; a better newcomer evicts
            the weakest (fitness compared within the task only).
        store_code: keep the representative's source on the card.
    """

    enabled: bool = True
    max_per_task: int = 8
    store_code: bool = False

    def __post_init__(self) -> None:
        _at_least("max_per_task", self.max_per_task, 1)


@dataclass(frozen=True)
class StoreSettings:
    """``memory.store``: the bank's locks.

    Attributes:
        lock: ``os`` (kernel file locks) or ``soft`` (marker files; use on NFS).
        lock_timeout_s: wait for ``cards.json.lock``.
        authoring_lock_timeout_s: wait for ``cards.json.authoring.lock``.
        soft_lock_lifetime_s: with ``lock=soft``, age after which a bank-lock
            marker is broken (frees a marker left empty by a killed holder).
    """

    lock: Literal["os", "soft"] = "os"
    lock_timeout_s: float = 30.0
    authoring_lock_timeout_s: float = 300.0
    soft_lock_lifetime_s: float = 5.0

    def __post_init__(self) -> None:
        if self.lock_timeout_s <= 0 or self.authoring_lock_timeout_s <= 0:
            raise ValueError("lock_timeout_s and authoring_lock_timeout_s must be > 0")
        if self.soft_lock_lifetime_s <= 0:
            raise ValueError("soft_lock_lifetime_s must be > 0")


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")


FIT_ROWS = ("every", "grid")  # ``PosteriorSettings.fit_rows``


@dataclass(frozen=True)
class PosteriorSettings:
    """``memory.posterior_config``: priors and measurement model of the heads (memory-model.md
    "Immediate head" and "Invalidity head and chance constraint").

    Attributes:
        baseline_prior_sd, shared_effect_prior_sd, lineage_block_prior_sd: prior sds of the
            baseline block, the shared effect block (and contrasts) and every card-lineage
            block of the immediate and delayed-lineage heads (with the next key, the
            lineage blocks' context slopes).
        lineage_intercept_prior_sd: prior sd of a card's own average shift of the gain in
            those heads (None: the lineage block's sd on its 1/sqrt(C) column, as
            memory-model.md "Immediate head").
        residual_sd_median, residual_log_sd: log-normal prior of the residual sd sigma.
        reward_residual_sd_bounds: truncation [low, high] of sigma, 0 < low < high. The
            low end is 1e-4 (not the reference 0.01): normalised gains of a problem with
            a wide declared range (rastrigin: R = 250) spread by less than 0.01, and a
            head whose sigma is pressed against the bound disables retirement.
        unknown_measurement_sd: omega of a row whose standard error is unknown.
        lineage_measurement_sd: omega of every delayed-lineage row (None: the root row's
            own omega, i.e. 0 for a deterministic problem, se/R for a declared standard
            error, ``unknown_measurement_sd`` when nothing is known).
        kind_contrast: include the card-kind contrast column kappa (insight -0.5 / program +0.5).
        invalidity_base_rate: p0, the prior invalid probability of the baseline intercept.
        invalidity_baseline_prior_sd, invalidity_shared_prior_sd, invalidity_lineage_prior_sd:
            prior sds of the invalidity head's baseline, shared and lineage blocks
            (memory-model.md "Invalidity head and chance constraint"; with the two below,
            the sds of the context slopes). The shared and lineage defaults, 0.10 and 0.15,
            are tighter than the reference 0.20 and 0.60: the hurdle value multiplies a
            card's invalid rise by v - G- (about f), so the noise of a card's own context
            slopes kept a drag card viable in some high-fitness context (retired in 74 % of
            200 seeds) and spread every card's Delta; a card's average shift keeps its two
            levels (the narrow one is this block's sd), so a harmful card is still excluded
            after about 10 cited rows.
        invalidity_baseline_intercept_prior_sd: prior sd of the problem's own invalid logit
            around logit(p0) (None: the baseline block's sd, as that page).
        invalidity_lineage_intercept_prior_sd: the wide level of a card's own shift of the
            invalid logit (None: the lineage block's sd on its 1/sqrt(C) column, as that
            page, and one level).
        invalidity_shift_wide_weight: prior probability of that wide level; the narrow
            level is the lineage block's sd (memory-model.md "Card shift levels"). A card
            whose own rows favour the wide level gets it, so its observed invalidity, not
            the prior, decides the chance constraint after a few cited rows, while a card
            that leaves the invalid rate alone is not treated as if it might double it.
            1: the wide level for every card (one Gaussian level, issue 20's first fix).
            0.3, not 0.1: the level is chosen, not averaged, and the hurdle value uses the
            chosen one, so at 0.1 a card with 4 of 15 cited rows invalid against 8 % was
            valued as if it left the rate alone (p_1 - p_0 = +0.008; a flat Beta-binomial
            says +0.21) and kept being delivered (memory-model.md "Card shift levels").
        invalidity_fit: ``laplace_prefix``, the default (the rows before the near anchor
            enter as their loss's third-order expansion at its MAP under the fit's levels: a
            fit passes over the rows since and the rows of small wide cards, memory-model.md
            "The prefix in Laplace form"; an approximation, within 1.2e-4 posterior sd,
            0.073 % of a variance, 3.6e-6 of P_acc of the exact fit where measured), or
            ``exact`` (every fit passes over all the invalidity head's rows).
        invalidity_prefix_min_rows: with ``laplace_prefix``, the fits on fewer rows are
            exact (>= 256, the first anchor): below ~1,000 rows the problem's own invalid
            logit still moves enough between near anchors to put the variances off by
            several per cent (3.9 % at 1,106 rows), and the exact fit is cheap there.
        invalidity_prefix_rows_per_lineage: with ``laplace_prefix``, the fits with fewer
            rows than this many per lineage holding rows are exact (>= 0): the third-order
            term costs O(lineages) per Newton point, the exact fit O(rows) per pass, and
            below about 256 rows a lineage the exact fit is the cheaper (1,000 cards, 2,876
            rows on 385 lineages: 5.4 against 16.6 ms CPU).
        fit_rows: which rows the heads fit on (memory-model.md "The fit grid"). ``every``,
            this class's default: each fit takes every eligible row and every lineage move
            so far. ``grid``, the default of ``memory=v2``'s configuration: the first n rows
            while there are fewer than 256, then the first ``near_size(n)`` (a point of the
            near-anchor grid: every 16th row up to 4,580 rows, every ⌊k/256⌋th past the
            anchor k after), and likewise for the lineage moves; the rows past the grid
            point wait for the next one, like outcomes still in flight. A function of the
            rows only, so a resumed run fits what the uninterrupted one did; the fits
            between two grid points are the same heads, reused.
    """

    baseline_prior_sd: float = 0.75
    shared_effect_prior_sd: float = 0.35
    lineage_block_prior_sd: float = 0.25
    lineage_intercept_prior_sd: float | None = None
    residual_sd_median: float = 0.20
    residual_log_sd: float = 0.75
    reward_residual_sd_bounds: tuple[float, ...] = (1e-4, 5.0)
    unknown_measurement_sd: float = 0.15
    lineage_measurement_sd: float | None = None
    kind_contrast: bool = True
    invalidity_base_rate: float = 0.05
    invalidity_baseline_prior_sd: float = 0.15
    invalidity_shared_prior_sd: float = 0.10
    invalidity_lineage_prior_sd: float = 0.15
    invalidity_baseline_intercept_prior_sd: float | None = 1.5
    invalidity_lineage_intercept_prior_sd: float | None = 2.0
    invalidity_shift_wide_weight: float = 0.3
    invalidity_fit: Literal["exact", "laplace_prefix"] = "laplace_prefix"
    invalidity_prefix_min_rows: int = 1024
    invalidity_prefix_rows_per_lineage: int = 256
    fit_rows: Literal["every", "grid"] = "every"

    def __post_init__(self) -> None:
        for name in (
            "baseline_prior_sd",
            "shared_effect_prior_sd",
            "lineage_block_prior_sd",
            "residual_sd_median",
            "residual_log_sd",
            "invalidity_baseline_prior_sd",
            "invalidity_shared_prior_sd",
            "invalidity_lineage_prior_sd",
        ):
            _positive(name, getattr(self, name))
        for name in (
            "lineage_intercept_prior_sd",
            "invalidity_baseline_intercept_prior_sd",
            "invalidity_lineage_intercept_prior_sd",
        ):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))
        bounds = self.reward_residual_sd_bounds
        if len(bounds) != 2 or not 0 < bounds[0] < bounds[1]:
            raise ValueError(
                f"reward_residual_sd_bounds must be [low, high] with 0 < low < high, "
                f"got {list(bounds)}"
            )
        if not 0.0 < self.invalidity_shift_wide_weight <= 1.0:
            raise ValueError(
                "invalidity_shift_wide_weight must lie in (0, 1], got "
                f"{self.invalidity_shift_wide_weight}"
            )
        for name in ("unknown_measurement_sd", "lineage_measurement_sd"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.invalidity_prefix_min_rows < 256:
            raise ValueError(
                "invalidity_prefix_min_rows must be >= 256 (the first anchor), got "
                f"{self.invalidity_prefix_min_rows}"
            )
        if self.invalidity_prefix_rows_per_lineage < 0:
            raise ValueError(
                "invalidity_prefix_rows_per_lineage must be >= 0, got "
                f"{self.invalidity_prefix_rows_per_lineage}"
            )
        if self.fit_rows not in FIT_ROWS:
            raise ValueError(f"fit_rows must be one of {list(FIT_ROWS)}, got {self.fit_rows!r}")
        if not 0 < self.invalidity_base_rate < 1:
            raise ValueError(
                f"invalidity_base_rate must lie in (0, 1), got {self.invalidity_base_rate}"
            )

    @property
    def residual_sd_bounds(self) -> tuple[float, float]:
        """(low, high) of the residual sd."""
        low, high = self.reward_residual_sd_bounds
        return low, high


@dataclass(frozen=True)
class ContextSettings:
    """``memory/context``: how the decision context x is built (memory-model.md "Context features").

    Attributes:
        kind: ``global`` (the only option): task-level fitness, progress and the
            MAP-Elites behaviour axes of the parent.
        progress_log_scale: the constant of pi(t) = ln(1 + t) / ln(1 + t + scale).
        behaviour_transform: ``declared`` uses each axis's declared-domain unit
            coordinate (the archive's fixed linear or log transform, never live bounds);
            ``none`` leaves the behaviour axes out of x (K = 0).
    """

    kind: Literal["global"] = "global"
    progress_log_scale: float = 100.0
    behaviour_transform: Literal["declared", "none"] = "declared"

    def __post_init__(self) -> None:
        _positive("progress_log_scale", self.progress_log_scale)


@dataclass(frozen=True)
class ExcluderSettings:
    """``memory/excluder``: which cards a decision never proposes.

    ``lineage`` drops every card (with its absorbed aliases) cited on the parent
    or its recent ancestors, read from the causal ledger's mutation edges and
    terminals; ``none`` drops nothing (the ablation).

    Attributes:
        max_depth: with ``lineage``, how many of the most recent mutations of the
            parent's ancestry are read (1: the one that produced the parent; 2: also
            the grandparent's; ...); None reads the whole ancestry. The default is
            the lineage-credit depth H (3), as in ``config/memory/excluder/lineage.yaml``.
        release_matured: with ``lineage``, a use whose lineage window has matured (the
            delayed head has its root's row: the credit it protects is final) no longer
            excludes its card (the default, as in ``config/memory/excluder/lineage.yaml``;
            False: every citation of the last ``max_depth`` mutations excludes).
    """

    kind: Literal["lineage", "none"] = "lineage"
    max_depth: int | None = 3
    release_matured: bool = True

    def __post_init__(self) -> None:
        _at_least("max_depth", self.max_depth, 1)


@dataclass(frozen=True)
class NoCardEvidenceSettings:
    """``memory/no_card_evidence``: ``none`` states that no heuristic no-card evidence is used.

    Control (no-card) outcomes come only from randomised withheld decisions; any
    other value is refused at startup.
    """

    kind: Literal["none"] = "none"


@dataclass(frozen=True)
class ReadSideSettings:
    """The read-side groups: ``memory.posterior_config``, ``memory/context``,
    ``memory/excluder`` and ``memory/no_card_evidence``."""

    posterior: PosteriorSettings = field(default_factory=PosteriorSettings)
    context: ContextSettings = field(default_factory=ContextSettings)
    excluder: ExcluderSettings = field(default_factory=ExcluderSettings)
    no_card_evidence: NoCardEvidenceSettings = field(default_factory=NoCardEvidenceSettings)

    @classmethod
    def parse(
        cls,
        *,
        posterior_config: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
        excluder: Mapping[str, Any] | None = None,
        no_card_evidence: Mapping[str, Any] | None = None,
    ) -> ReadSideSettings:
        """Validate the four dicts (missing keys take the defaults).

        Raises:
            MemoryConfigError: an unknown key or a bad value, naming the key.
        """
        try:
            return cls(
                posterior=from_json(
                    PosteriorSettings, _mapping(posterior_config), "memory.posterior_config"
                ),
                context=from_json(ContextSettings, _mapping(context), "memory.context"),
                excluder=from_json(ExcluderSettings, _mapping(excluder), "memory.excluder"),
                no_card_evidence=from_json(
                    NoCardEvidenceSettings,
                    _mapping(no_card_evidence),
                    "memory.no_card_evidence",
                ),
            )
        except CardFormatError as exc:
            raise MemoryConfigError(str(exc)) from exc


def _mapping(raw: Mapping[str, Any] | None) -> Any:
    """A copy of a settings dict; anything else is passed through for ``from_json`` to refuse."""
    if raw is None:
        return {}
    return dict(raw) if isinstance(raw, Mapping) else raw


@dataclass(frozen=True)
class MemorySettings:
    """Every validated knob of memory=v2."""

    write: WriteSettings
    writer: WriterSettings
    exemplars: ExemplarSettings
    store: StoreSettings

    @classmethod
    def parse(
        cls,
        *,
        write: Mapping[str, Any] | None = None,
        writer: Mapping[str, Any] | None = None,
        program_exemplars: Mapping[str, Any] | None = None,
        store: Mapping[str, Any] | None = None,
    ) -> MemorySettings:
        """Validate the four ``memory.*`` dicts (missing keys take the defaults).

        Raises:
            MemoryConfigError: an unknown key, a bad value, or an inconsistent combination.
        """
        try:
            settings = cls(
                write=from_json(WriteSettings, dict(write or {}), "memory.write"),
                writer=from_json(WriterSettings, dict(writer or {}), "memory.writer"),
                exemplars=from_json(
                    ExemplarSettings, dict(program_exemplars or {}), "memory.program_exemplars"
                ),
                store=from_json(StoreSettings, dict(store or {}), "memory.store"),
            )
        except CardFormatError as exc:
            raise MemoryConfigError(str(exc)) from exc
        settings.check_consistency()
        return settings

    def check_consistency(self) -> None:
        """Refuse combinations of valid values that contradict each other.

        Raises:
            MemoryConfigError: naming both keys.
        """
        if self.store.authoring_lock_timeout_s < self.writer.ingest_call_timeout_s:
            raise MemoryConfigError(
                f"memory.store.authoring_lock_timeout_s={self.store.authoring_lock_timeout_s} is "
                f"shorter than memory.writer.ingest_call_timeout_s="
                f"{self.writer.ingest_call_timeout_s}: a waiting process would give up before "
                "the lock holder's chain may finish"
            )
        if self.exemplars.store_code and not self.exemplars.enabled:
            raise MemoryConfigError(
                "memory.program_exemplars.store_code=true has no effect with "
                "memory.program_exemplars.enabled=false"
            )


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
        if s.policy.draw_threads < 1:
            raise ValueError("memory.causal.draw_threads must be >= 1")
        return s
