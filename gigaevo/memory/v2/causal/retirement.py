"""Causal retirement (memory-model.md "Retirement"): practical threshold, eligibility, viability,
verdict.

Pure and I/O-free. The caller (``gigaevo.memory.v2.read.evictor``) gathers, per card, the
support of its lineage from the ledger (``CardSupport``) and hands over the fitted heads
(``RetirementHeads``); ``judge_card`` returns either a keep reason (the first failing
check, in the order of memory-model.md "Eligibility") or "retire" with every (context, RAG state)
evaluation.

Viability's worlds, their count and its Wilson bound are ``gigaevo.memory.v2.causal.viability``'s
(imported here under their old names too). The RNG of one evaluation is keyed by the evidence
version V, the card id as domain and the counter 2 * context index + state index.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gigaevo.memory.v2.causal.invalidity import acceptance_probability
from gigaevo.memory.v2.causal.policy import rng_stream
from gigaevo.memory.v2.causal.viability import (
    RetirementHeads,
    invalid_logits,
    useful_worlds,
    wilson_upper,
)

RAG_STATES = ("unassessed", "applicable")  # r = 0 and r = +0.5 (memory-model.md "Eligibility")
RESIDUAL_KNOB = "memory.posterior_config.reward_residual_sd_bounds"
_useful_worlds = useful_worlds  # its name before the viability module (tests import it)


@dataclass(frozen=True)
class RetirementConfig:
    """Retirement constants (``memory.evictor.*``; defaults of memory-model.md "Symbols and
    defaults").

    ``delta`` and ``alpha`` are the safety constraint's (``memory.causal``); the evictor's
    ``max_viability_probability`` is tied to ``alpha`` by config interpolation.
    """

    min_treated: int = 2
    min_global_control: int = 2
    min_contexts: int = 2
    min_assessable: int = 2
    practical_effect_quantile: float = 0.10
    retirement_draws: int = 4096
    wilson_z: float = 1.96
    safety_tolerance: float = 1e-8
    max_viability_probability: float = 0.10
    delta: float = 0.10
    alpha: float = 0.10

    def __post_init__(self) -> None:
        for key in ("min_treated", "min_global_control", "min_contexts", "min_assessable"):
            if int(getattr(self, key)) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if not 0.0 < self.practical_effect_quantile < 1.0:
            raise ValueError("practical_effect_quantile must lie in (0, 1)")
        if self.retirement_draws < 100:
            raise ValueError(f"retirement_draws must be >= 100, got {self.retirement_draws}")
        if not self.wilson_z > 0:
            raise ValueError(f"wilson_z must be > 0, got {self.wilson_z}")
        if not 0.0 < self.safety_tolerance < 1e-3:
            raise ValueError("safety_tolerance must lie in (0, 1e-3)")
        if not 0.0 < self.max_viability_probability < 1.0:
            raise ValueError("max_viability_probability must lie in (0, 1)")


# -- 8.1: threshold -------------------------------------------------------------------


def practical_threshold(
    control_gains: Sequence[float], min_global_control: int = 2, quantile: float = 0.10
) -> float:
    """theta: linear-interpolated ``quantile`` of the non-zero |y| of valid controls
    (memory-model.md "Practical threshold").

    Fewer than ``min_global_control`` non-zero magnitudes, or a non-finite / non-positive
    quantile, give 0 (harm-only retirement).
    """
    omega = np.sort([abs(float(y)) for y in control_gains if math.isfinite(y) and y != 0.0])
    return sorted_threshold(omega.tolist(), min_global_control, quantile)


def sorted_threshold(
    magnitudes: Sequence[float], min_global_control: int = 2, quantile: float = 0.10
) -> float:
    """``practical_threshold`` from the non-zero finite |y| of the controls, ascending (a
    caller that keeps them sorted as rows arrive costs O(1) per threshold)."""
    omega = magnitudes
    if len(omega) < min_global_control:
        return 0.0
    rank = (len(omega) - 1) * quantile
    lo = math.floor(rank)
    hi = min(lo + 1, len(omega) - 1)
    theta = float(omega[lo] + (rank - lo) * (omega[hi] - omega[lo]))
    return theta if math.isfinite(theta) and theta > 0.0 else 0.0


# -- inputs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SupportContext:
    """One distinct (island, parent cell) context among a card's cited treated rows.

    ``features`` and ``gain_bounds`` (G-, G+) are those of the context's latest cited row.
    """

    island: int
    cell: tuple[int, ...]
    features: tuple[float, ...]
    gain_bounds: tuple[float, float]


@dataclass(frozen=True)
class CardSupport:
    """The ledger support of one card lineage (memory-model.md "Eligibility", checks 1-6).

    Attributes:
        card_id: the live card (domain of its RNG streams).
        lineage: its lineage column id in the fitted design space.
        kind: ``insight`` or ``program`` (the kind contrast).
        pending: pending immediate plus lineage outcomes on any id of the lineage.
        treated: cited treated rows (valid or invalid, not censored) of the lineage.
        contexts: distinct contexts of those rows.
    """

    card_id: str
    lineage: str
    kind: str
    pending: int
    treated: int
    contexts: tuple[SupportContext, ...]

    def sorted_contexts(self) -> tuple[SupportContext, ...]:
        """Contexts in (island, cell) order: the order of the RNG counters."""
        return tuple(sorted(self.contexts, key=lambda c: (c.island, c.cell)))


def heads_gate(heads: RetirementHeads, alpha: float, declared: bool = False) -> str:
    """The sweep's gate of memory-model.md "Eligibility" (heads healthy, invalidity fitted): ""
    when retirement may run, else why not.

    ``declared``: every reward row's measurement sd omega is the problem's own (deterministic
    or a declared standard error), none the ``unknown_measurement_sd`` stand-in. Then the
    residual-scale mass at the *lower* bound (M-) does not count: it says the rows need no
    spread beyond their declared noise (on a deterministic problem: lineage residuals that
    are exactly 0), and truncating sigma there only adds sigma_min^2 to each row's variance,
    which widens every conditional posterior. Mass at the upper bound always counts.
    """
    reward = [("immediate", heads.immediate)]
    if heads.lineage is not None:
        reward.append(("lineage", heads.lineage))
    for name, head in reward:
        h = head.health_
        if not h.ok:
            return f"{name} head not healthy ({RESIDUAL_KNOB})"
        mass = h.mass_upper + (0.0 if declared else h.mass_lower)
        if h.at_boundary or mass > alpha:
            return (
                f"{name} head residual scale at its boundary (M- + M+ = "
                f"{h.mass_lower + h.mass_upper:.3g}; see {RESIDUAL_KNOB})"
            )
    if not heads.invalidity.ok_:
        return f"invalidity head failed: {heads.invalidity.failure_}"
    return ""


def support_gate(card: CardSupport, n_controls: int, theta: float, cfg: RetirementConfig) -> str:
    """The checks of memory-model.md "Eligibility", in order: "" when the card is supported, else
    the keep reason."""
    if card.pending > 0:
        return f"pending outcomes ({card.pending})"
    if card.treated < cfg.min_treated:
        return f"cited treated rows {card.treated} < min_treated {cfg.min_treated}"
    if n_controls < cfg.min_global_control:
        return f"valid controls {n_controls} < min_global_control {cfg.min_global_control}"
    if len(card.contexts) < cfg.min_contexts:
        return f"contexts {len(card.contexts)} < min_contexts {cfg.min_contexts}"
    for ctx in card.contexts:
        lo, hi = ctx.gain_bounds
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            return f"invalid gain bounds in context ({ctx.island}, {ctx.cell})"
    assessable = sum(1 for c in card.contexts if c.gain_bounds[1] > theta)
    if assessable < cfg.min_assessable:
        return f"assessable contexts {assessable} < min_assessable {cfg.min_assessable}"
    return ""


# -- 8.3: viability per (context, RAG state) -------------------------------------------


@dataclass(frozen=True)
class Evaluation:
    """One (context, RAG state) viability evaluation: k of n worlds safe and useful.

    ``safety_error`` is the certified integration error (NaN for a viable pair: not needed).
    ``other_level``: the posterior probability of the card's other invalidity shift level,
    whose worlds are mixed into k (0: not mixed in; see ``evaluate``).
    """

    context_index: int
    state: str
    k: int
    n: int
    upper: float
    non_viable: bool
    safety_error: float
    other_level: float = 0.0


@dataclass(frozen=True)
class Judgement:
    """The outcome for one card: ``retire`` or the reason it is kept."""

    card_id: str
    retire: bool
    reason: str
    evaluations: tuple[Evaluation, ...] = ()


def evaluate(
    heads: RetirementHeads,
    card: CardSupport,
    index: int,
    ctx: SupportContext,
    state: str,
    *,
    theta: float,
    evidence_version: str,
    cfg: RetirementConfig,
) -> Evaluation | str:
    """Count worlds with p_1 - p_0 <= delta and Delta > theta (memory-model.md "Viability"); a str
    on failure.

    The pair certifies deletion only if the prediction is finite, the deterministic
    safety integral is certified (error <= ``safety_tolerance``) and the Wilson bound is
    at most ``max_viability_probability``; any failure keeps the card. The integral is
    computed only for a non-viable pair (a viable one keeps the card whatever it says), and
    with two levels only for a pair non-viable in both counts (a pair the other level keeps
    viable is reported viable even where the chosen level's integral would not certify).

    With two invalidity shift levels (memory-model.md "Card shift levels") the head's
    posterior is that of the level its odds favour; a pair non-viable there is counted
    again with each world's invalidity drawn from the other level with its posterior
    probability (an own RNG stream), and certifies deletion only if non-viable in both
    counts. Without it, two invalid rows out of two gave a helpful card the wide level at
    odds just above 1 and deleted it at its first sweep, although about half the posterior
    (the narrow level) called it viable.
    """
    space = heads.space
    x = np.asarray(ctx.features, dtype=float)
    z0 = space.row(x, 0)
    z1 = space.row(x, 1, card.lineage, card.kind, state)
    eta_mean, eta_cov = heads.safety_moments(card.lineage, z0, z1)
    n = cfg.retirement_draws
    counter = 2 * index + RAG_STATES.index(state)
    rng = rng_stream(evidence_version, card.card_id, counter)
    v = heads.world_values(card.lineage, z0, z1, ctx.gain_bounds, n, rng)
    eta = invalid_logits(eta_mean, eta_cov, n, rng)
    lo = ctx.gain_bounds[0]
    k = useful_worlds(v, eta, lo, theta, cfg.delta)
    if k is None:
        return f"prediction not finite in context {index} ({state})"
    upper = wilson_upper(k, n, cfg.wilson_z)
    if upper > cfg.max_viability_probability:
        return Evaluation(index, state, k, n, upper, False, math.nan)
    other = heads.other_level(card.lineage)
    if other is not None and other[0] > 0.0 and other[1].ok_:
        # the other level's count first: a pair it keeps viable is viable whatever the chosen
        # level's safety integral says, so that integral is computed only for a pair
        # non-viable in both counts (most pairs that reach the other level are kept by it)
        weight, head = other
        mean_o, cov_o = heads.safety_moments(card.lineage, z0, z1, head)
        rng = rng_stream(evidence_version, f"{card.card_id}\x1flevel", counter)
        eta_o = invalid_logits(mean_o, cov_o, n, rng)
        eta = np.where((rng.uniform(size=n) < weight)[:, None], eta_o, eta)
        k_o = useful_worlds(v, eta, lo, theta, cfg.delta)
        upper_o = math.nan if k_o is None else wilson_upper(k_o, n, cfg.wilson_z)
        if k_o is not None and upper_o > cfg.max_viability_probability:
            return Evaluation(index, state, k_o, n, upper_o, False, math.nan, weight)
    acc = acceptance_probability(eta_mean, eta_cov, delta=cfg.delta, tolerance=cfg.safety_tolerance)
    if acc.failed or not acc.error <= cfg.safety_tolerance:
        return f"safety integration not certified in context {index} ({state})"
    error = acc.error
    if other is None or not other[0] > 0.0:
        return Evaluation(index, state, k, n, upper, True, error)
    weight, head = other
    if not head.ok_:
        return f"invalidity head at the other shift level failed: {head.failure_}"
    if k_o is None:
        return f"prediction not finite in context {index} ({state})"
    acc = acceptance_probability(mean_o, cov_o, delta=cfg.delta, tolerance=cfg.safety_tolerance)
    if acc.failed or not acc.error <= cfg.safety_tolerance:
        return f"safety integration not certified in context {index} ({state})"
    return Evaluation(index, state, k_o, n, upper_o, True, max(error, acc.error), weight)


def judge_card(
    heads: RetirementHeads,
    card: CardSupport,
    *,
    n_controls: int,
    theta: float,
    evidence_version: str,
    cfg: RetirementConfig,
) -> Judgement:
    """memory-model.md "Eligibility" and "Viability" for one card (the sweep's own gate is
    ``heads_gate``): ``support_gate``, then ``judge_supported``."""
    reason = support_gate(card, n_controls, theta, cfg)
    if reason:
        return Judgement(card.card_id, False, reason)
    return judge_supported(heads, card, theta=theta, evidence_version=evidence_version, cfg=cfg)


def judge_supported(
    heads: RetirementHeads,
    card: CardSupport,
    *,
    theta: float,
    evidence_version: str,
    cfg: RetirementConfig,
) -> Judgement:
    """memory-model.md "Viability" for a card that passed ``support_gate``: each (context,
    RAG state) in order until one is viable or cannot be evaluated."""
    evaluations: list[Evaluation] = []
    for index, ctx in enumerate(card.sorted_contexts()):
        for state in RAG_STATES:
            try:
                out = evaluate(
                    heads, card, index, ctx, state,
                    theta=theta, evidence_version=evidence_version, cfg=cfg,
                )  # fmt: skip
            except (ValueError, np.linalg.LinAlgError) as exc:  # DesignError is a ValueError
                out = f"prediction failed in context {index} ({state}): {exc}"
            if isinstance(out, str):
                return Judgement(card.card_id, False, out, tuple(evaluations))
            evaluations.append(out)
            if not out.non_viable:
                return Judgement(
                    card.card_id,
                    False,
                    f"viable in context {index} ({state}): W = {out.upper:.6f}",
                    tuple(evaluations),
                )
    return Judgement(
        card.card_id, True, "non-viable in every context and state", tuple(evaluations)
    )
