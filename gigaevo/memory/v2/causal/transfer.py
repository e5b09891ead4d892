"""Multitask transfer prior (memory-model.md "Multitask transfer"): other runs' trials shift a
card's prior.

From the compact trials stamped on shared cards by *other* runs, keep the
strata (task, run, card) with at least ``min_trials_per_arm`` treated and as
many control trials, and fit the section-5 logistic solver (MAP + Laplace)
with zero prior means on a dense design::

    logit P(success) = lam0[task, run, card] + Z (lam1[card] + lam2[task, card])
    prior sds: lam0 1.5, lam1 0.75, lam2 1.0

For the target task T, ``P_help(j) = Phi(m / s)`` with ``m = lam1_j + lam2_Tj`` and
``s^2 = Var lam1_j + Var lam2_Tj + 2 Cov``; a task never seen with j uses
``m = lam1_j`` and ``s^2 = Var lam1_j + 1.0^2``. The immediate head's prior mean
on the intercept of j's lineage block is ``0.5 * 0.25 * (2 P_help - 1)``, in
[-0.125, 0.125]. No strata for j, or a failed fit, give ``P_help = 0.5`` (no
shift). Only success indicators cross tasks: gains, behaviour coordinates,
invalidity and lineage value never do.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from gigaevo.memory.v2.causal.features import DesignSpace
from gigaevo.memory.v2.causal.invalidity import LogisticLaplaceHead


@dataclass(frozen=True)
class TransferConfig:
    """``memory.transfer.*``: the multitask read side (defaults of memory-model.md "Multitask
    transfer").

    Attributes:
        enabled: shift the immediate head's lineage prior by other runs' trials
            (on in memory=v2_multitask, off in memory=v2).
        cross_task_candidates: a decision's universe is the whole bank, not only
            the cards authored for this task.
        baseline_sd: prior sd of the stratum intercepts lam0.
        card_sd: prior sd of the shared card effects lam1.
        task_card_sd: prior sd of the task-by-card effects lam2 (also the extra
            variance of a task never seen with the card).
        min_trials_per_arm: treated and control trials a stratum needs.
        shift_scale: the shift in lineage-prior sds at P_help = 1 (0.5).
        lineage_sd: prior sd of the immediate head's lineage block (0.25).
    """

    enabled: bool = False
    cross_task_candidates: bool = False
    baseline_sd: float = 1.5
    card_sd: float = 0.75
    task_card_sd: float = 1.0
    min_trials_per_arm: int = 2
    shift_scale: float = 0.5
    lineage_sd: float = 0.25

    def __post_init__(self) -> None:
        for name in ("baseline_sd", "card_sd", "task_card_sd", "lineage_sd"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.min_trials_per_arm < 1:
            raise ValueError(f"min_trials_per_arm must be >= 1, got {self.min_trials_per_arm}")
        if not 0 <= self.shift_scale <= 1:
            raise ValueError(f"shift_scale must lie in [0, 1], got {self.shift_scale}")


@dataclass(frozen=True)
class TransferTrial:
    """One stamped trial: stratum (task, run, card), arm z and success (valid and g > 0)."""

    decision_id: str
    task: str
    run: str
    card: str
    z: int
    success: bool


@dataclass(frozen=True)
class TransferFit:
    """P_help per card for one target task; cards absent from ``p_help`` take 0.5.

    Attributes:
        p_help: P(card helps in the target task) for every card with supported strata.
        strata: number of supported (task, run, card) strata in the fit.
        failure: why the fit was discarded ("" when it was used or not needed).
    """

    p_help: dict[str, float] = field(default_factory=dict)
    strata: int = 0
    failure: str = ""

    def help_probability(self, card: str) -> float:
        return self.p_help.get(card, 0.5)


def prior_shift(p_help: float, config: TransferConfig | None = None) -> float:
    """mu_0 on a lineage-block intercept: shift_scale * lineage_sd * (2 P_help - 1)."""
    c = config or TransferConfig()
    return c.shift_scale * c.lineage_sd * (2.0 * p_help - 1.0)


def trial_digest(trials: Iterable[TransferTrial]) -> str:
    """SHA-256 over the trials (order-free); joins the reader's fit cache key."""
    h = hashlib.sha256(b"gigaevo.memory.v2.transfer-trials.1\n")
    for did, task, run, card, z, ok in sorted(
        (t.decision_id, t.task, t.run, t.card, t.z, t.success) for t in trials
    ):
        h.update(f"{did} {task} {run} {card} {z} {int(ok)}\n".encode())
    return h.hexdigest()


def supported_strata(
    trials: Iterable[TransferTrial], *, exclude_run: str, min_per_arm: int = 2
) -> dict[tuple[str, str, str], list[TransferTrial]]:
    """Trials of other runs grouped by (task, run, card), kept when both arms have enough."""
    groups: dict[tuple[str, str, str], list[TransferTrial]] = {}
    seen: set[str] = set()
    for t in trials:
        if t.run == exclude_run or t.decision_id in seen:
            continue
        seen.add(t.decision_id)
        groups.setdefault((t.task, t.run, t.card), []).append(t)
    return {
        key: rows
        for key, rows in sorted(groups.items())
        if sum(r.z for r in rows) >= min_per_arm and sum(1 - r.z for r in rows) >= min_per_arm
    }


def fit_transfer(
    trials: Iterable[TransferTrial],
    target_task: str,
    *,
    exclude_run: str,
    config: TransferConfig | None = None,
    cache: dict[str, tuple[str, tuple[float, str]]] | None = None,
) -> TransferFit:
    """P_help of every card with supported strata, for ``target_task`` (see the module docstring).

    No coefficient is shared between cards (lam0 is per (task, run, card), lam1 per
    card, lam2 per (task, card)) and the priors are independent, so the posterior
    factorises by card: each card is fitted alone on a small dense design, which
    is exact and keeps memory at O(trials of one card x its strata).

    Never raises on data: a card whose fit fails (MAP not converged, Fisher
    information singular or ill-conditioned) keeps P_help = 0.5 and is named in
    ``failure``.

    ``cache`` (card -> (digest of its strata and the target task, result)), kept
    by the caller between calls, refits only the cards whose trials changed.
    """
    c = config or TransferConfig()
    strata = supported_strata(trials, exclude_run=exclude_run, min_per_arm=c.min_trials_per_arm)
    by_card: dict[str, dict[tuple[str, str, str], list[TransferTrial]]] = {}
    for key, group in strata.items():
        by_card.setdefault(key[2], {})[key] = group
    p_help: dict[str, float] = {}
    failures = []
    for card, card_strata in sorted(by_card.items()):
        digest = trial_digest(t for rows in card_strata.values() for t in rows) + target_task
        hit = cache.get(card) if cache is not None else None
        if hit is not None and hit[0] == digest:
            p, failure = hit[1]
        else:
            p, failure = _card_help(card_strata, target_task, c)
            if cache is not None:
                cache[card] = (digest, (p, failure))
        if failure:
            failures.append(f"{card}: {failure}")
        else:
            p_help[card] = p
    return TransferFit(p_help, len(strata), "; ".join(failures))


def _card_help(
    strata: dict[tuple[str, str, str], list[TransferTrial]], target_task: str, c: TransferConfig
) -> tuple[float, str]:
    """(P_help, "") of one card from its supported strata, or (0.5, why the fit failed).

    Columns: one lam0 per stratum, then lam1, then one lam2 per task.
    """
    from scipy.special import ndtr

    tasks = sorted({task for task, _, _ in strata})
    n_s = len(strata)
    t_col = {task: n_s + 1 + i for i, task in enumerate(tasks)}
    rows = [(i, key[0], t) for i, (key, group) in enumerate(strata.items()) for t in group]
    x = np.zeros((len(rows), n_s + 1 + len(tasks)))
    y = np.zeros(len(rows))
    for r, (i, task, t) in enumerate(rows):
        x[r, i] = 1.0
        if t.z:
            x[r, n_s] = 1.0
            x[r, t_col[task]] = 1.0
        y[r] = 1.0 if t.success else 0.0
    var = np.concatenate(
        [np.full(n_s, c.baseline_sd**2), [c.card_sd**2], np.full(len(tasks), c.task_card_sd**2)]
    )
    head = LogisticLaplaceHead(np.zeros(len(var)), var).fit(x, y)
    if not head.ok_ or head.coef_cov_ is None:
        return 0.5, head.failure_ or "no covariance"
    coef, cov = head.coef_, head.coef_cov_
    j, k = n_s, t_col.get(target_task)
    if k is None:  # the target task was never seen with this card
        m, s2 = coef[j], cov[j, j] + c.task_card_sd**2
    else:
        m, s2 = coef[j] + coef[k], cov[j, j] + cov[k, k] + 2.0 * cov[j, k]
    if not (math.isfinite(m) and math.isfinite(s2) and s2 > 0):
        return 0.5, "non-finite P_help"
    return float(ndtr(m / math.sqrt(s2))), ""


def intercept_prior_mean(
    space: DesignSpace,
    fit: TransferFit,
    config: TransferConfig | None = None,
    *,
    lineage_sd: float | None = None,
) -> np.ndarray | None:
    """mu_0 (P,) of the immediate head: the shift on each lineage-block intercept.

    ``lineage_sd`` overrides ``config.lineage_sd`` (the head's configured lineage
    prior sd). None when no lineage of ``space`` moves (the zero prior mean).
    """
    c = config or TransferConfig()
    if lineage_sd is not None:
        c = replace(c, lineage_sd=lineage_sd)
    shifts: Sequence[tuple[str, float]] = [
        (lin, prior_shift(fit.help_probability(lin), c)) for lin in space.lineages
    ]
    if not any(s != 0.0 for _, s in shifts):
        return None
    mu = np.zeros(space.size)
    for lineage, s in shifts:
        mu[space.lineage_slice(lineage).start] = s
    return mu
