"""World values, probability matching, challenger exploration and draws (memory-model.md
"Policy")."""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gigaevo.memory.v2.causal.arrowhead import BlockDesign
from gigaevo.memory.v2.causal.blr import FitHealth
from gigaevo.memory.v2.causal.errors import DesignError

PENDING_LIMIT = 2
RNG_DOMAINS = ("summary", "worlds", "proposal", "offer")


def rng_stream(decision_key: str, domain: str, counter: int = 0) -> np.random.Generator:
    """Independent generator seeded by SHA-256(decision key | domain | counter) (memory-model.md
    "Policy")."""
    if not domain:
        raise ValueError("RNG domain must be non-empty")
    digest = hashlib.sha256(f"{decision_key}\x1f{domain}\x1f{counter}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest, "big"))


def eligible_candidates(
    card_ids: Sequence[str], pending: Mapping[str, int], limit: int = PENDING_LIMIT
) -> list[str]:
    """Cards whose lineage has fewer than ``limit`` pending immediate outcomes (memory-model.md
    "Policy")."""
    return [j for j in card_ids if pending.get(j, 0) < limit]


@dataclass(frozen=True)
class ArmValues:
    """Per-world hurdle values (memory-model.md "Policy"); S worlds, J cards.

    Attributes:
        q0: (S,) control value; q1: (S, J) card values; p0: (S,); p1: (S, J) invalid probabilities.
    """

    q0: np.ndarray
    q1: np.ndarray
    p0: np.ndarray
    p1: np.ndarray

    @property
    def effect(self) -> np.ndarray:
        """Delta_j = q_1 - q_0, shape (S, J)."""
        return self.q1 - self.q0[:, None]


def _rows_dot(z: np.ndarray | BlockDesign, coef: np.ndarray) -> np.ndarray:
    """coef @ z' for draws coef (S, P) and rows z (J, P): shape (S, J)."""
    return z.dot_draws(coef) if isinstance(z, BlockDesign) else coef @ z.T


def arm_values(
    beta: np.ndarray,
    gamma: np.ndarray,
    z0: np.ndarray,
    z1: np.ndarray | BlockDesign,
    gain_bounds: tuple[float, float],
    beta_lineage: np.ndarray | None = None,
) -> ArmValues:
    """q_a = (1 - p_a) v_a + p_a G- in every world (memory-model.md "Delayed-lineage head" and
    "Policy"), from coefficient draws.

    Args:
        beta, gamma: (S, P) coherent draws of the immediate and invalidity heads.
        z0: (P,) control row; z1: (J, P) treated rows of the cards (dense, or a
            ``BlockDesign`` for wide designs: O(S J (P_s + C)) instead of O(S J P)).
        gain_bounds: (G-, G+) of the decision context.
        beta_lineage: (S, P) draws of an active delayed-lineage head, or None.
    """
    if not isinstance(z1, BlockDesign):
        z1 = np.atleast_2d(z1)
    row0 = z0[None, :]
    lineage = None
    if beta_lineage is not None:
        lineage = (_rows_dot(row0, beta_lineage)[:, 0], _rows_dot(z1, beta_lineage))
    immediate = (_rows_dot(row0, beta)[:, 0], _rows_dot(z1, beta))
    return hurdle_values(immediate, (gamma @ z0, _rows_dot(z1, gamma)), gain_bounds, lineage)


Latents = tuple[np.ndarray, np.ndarray]


def hurdle_values(
    immediate: Latents,
    invalidity: Latents,
    gain_bounds: tuple[float, float],
    lineage: Latents | None = None,
) -> ArmValues:
    """q_a = (1 - p_a) v_a + p_a G- from per-world linear predictors (memory-model.md
    "Delayed-lineage head" and "Policy").

    Each head gives (z_0'theta (S,), z_1j'theta (S, J)) drawn in the same S worlds; the
    utility is v_a = clip(z_a'beta + max(0, z_a'beta^L), G-, G+) and p_a = expit(z_a'gamma).
    """
    from scipy.special import expit

    lo, hi = gain_bounds
    u0, u1 = immediate[0], np.asarray(immediate[1]).reshape(len(immediate[0]), -1)
    if lineage is not None:
        u0 = u0 + np.maximum(0.0, lineage[0])
        u1 = u1 + np.maximum(0.0, np.asarray(lineage[1]).reshape(u1.shape))
    v0, v1 = np.clip(u0, lo, hi), np.clip(u1, lo, hi)
    p0 = expit(invalidity[0])
    p1 = expit(np.asarray(invalidity[1]).reshape(u1.shape))
    return ArmValues((1 - p0) * v0 + p0 * lo, (1 - p1) * v1 + p1 * lo, p0, p1)


def control_values(
    immediate: np.ndarray,
    invalidity: np.ndarray,
    gain_bounds: tuple[float, float],
    lineage: np.ndarray | None = None,
) -> np.ndarray:
    """q_0 per world, shape (S,), from the control arm's latents z_0'theta (S,) of each head."""
    none = np.zeros((len(immediate), 0))
    return hurdle_values(
        (immediate, none),
        (invalidity, none),
        gain_bounds,
        None if lineage is None else (lineage, none),
    ).q0


def world_effects(
    immediate: Latents,
    invalidity: Latents,
    gain_bounds: tuple[float, float],
    lineage: Latents | None = None,
) -> np.ndarray:
    """Delta_j = q_1j - q_0 per world, shape (S, J): ``hurdle_values(...).effect`` in place.

    The (S, J) latent arrays are overwritten (they are the caller's scratch space: the
    world draws of one decision), which saves the temporaries of ``hurdle_values`` on the
    decision's hot path. q = G- + (1 - p)(v - G-).
    """
    lo, hi = gain_bounds
    q0 = control_values(
        immediate[0], invalidity[0], gain_bounds, None if lineage is None else lineage[0]
    )
    u1 = immediate[1]
    if lineage is not None:
        lifted = lineage[1]
        np.maximum(lifted, 0.0, out=lifted)
        u1 += lifted
    np.clip(u1, lo, hi, out=u1)
    u1 -= lo
    # 1 - p = expit(-eta) = (1 - tanh(eta / 2)) / 2: the same value to rounding (absolute
    # error ~1e-16), and tanh is several times faster than expit on these arrays
    keep = invalidity[1]
    keep *= 0.5
    np.tanh(keep, out=keep)
    keep *= -0.5
    keep += 0.5
    u1 *= keep
    u1 += (lo - q0)[:, None]
    return u1


@dataclass(frozen=True)
class WorldVotes:
    """Probability-matching outcome over S worlds (memory-model.md "Policy").

    Attributes:
        card_ids: the safe cards in ascending id order (J,).
        winners: (S,) index of the world's winner, -1 for an abstaining world.
        challengers: (S,) index of the world's challenger.
    """

    card_ids: tuple[str, ...]
    winners: np.ndarray
    challengers: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        """n_j, shape (J,)."""
        return np.bincount(self.winners[self.winners >= 0], minlength=len(self.card_ids))

    @property
    def abstentions(self) -> int:
        """n_0."""
        return int(np.sum(self.winners < 0))

    @property
    def challenger_counts(self) -> np.ndarray:
        """c_j, shape (J,)."""
        return np.bincount(self.challengers, minlength=len(self.card_ids))


def match_worlds(card_ids: Sequence[str], effect: np.ndarray, threshold: float = 0.0) -> WorldVotes:
    """Winner = argmax Delta (ties to the larger id), abstain if Delta <= threshold.

    Args:
        card_ids: safe card ids (J,), any order.
        effect: (S, J) world effects Delta_j^s in the order of ``card_ids``.
    """
    ids = tuple(card_ids)
    delta = np.asarray(effect, dtype=float)
    if any(a > b for a, b in itertools.pairwise(ids)):  # not yet in ascending id order
        order = np.argsort(np.asarray(card_ids, dtype=object), kind="stable")
        ids = tuple(card_ids[i] for i in order)
        delta = delta[:, order]
    if delta.ndim != 2 or delta.shape[1] != len(ids) or not ids:
        raise DesignError("effect must be (S, J) with J >= 1 safe cards")
    (top, second), (top_delta, _) = top_two(delta, restore=delta is effect)
    winners = np.where(top_delta > threshold, top, -1)
    if len(ids) == 1:
        return WorldVotes(ids, winners, top)
    challengers = np.where(winners >= 0, second, top)
    return WorldVotes(ids, winners, challengers)


def top_two(
    delta: np.ndarray, restore: bool = True
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The two largest columns of each row, ties to the larger column (a stable descending
    sort's first two): ((first, second) columns (S,) each, (their values)); with one column
    the second is -1 with value -inf.

    ``delta`` is masked in place for the second rank (restored when ``restore``).
    """
    # argmax (first maximum) over reversed columns; the first rank masked for the second
    j = delta.shape[1]
    rev = delta[:, ::-1]
    world = np.arange(len(delta))
    top = (j - 1) - np.argmax(rev, axis=1)
    top_delta = delta[world, top]
    if j == 1:
        return (top, np.full(len(delta), -1)), (top_delta, np.full(len(delta), -np.inf))
    delta[world, top] = -np.inf
    second = (j - 1) - np.argmax(rev, axis=1)
    second_delta = delta[world, second]
    if restore:
        delta[world, top] = top_delta
    return (top, second), (top_delta, second_delta)


@dataclass(frozen=True)
class Proposal:
    """Proposal distribution over the safe set (memory-model.md "Policy").

    Attributes:
        card_ids: safe card ids in ascending order (J,).
        rho: (J,) proposal probabilities; rho0: abstention probability.
        chi: (J,) challenger distribution; mc_se: (J,) delta-method MC SE of rho.
    """

    card_ids: tuple[str, ...]
    rho: np.ndarray
    rho0: float
    chi: np.ndarray
    mc_se: np.ndarray


def proposal_distribution(
    votes: WorldVotes,
    pending: Mapping[str, int] | None = None,
    epsilon: float = 0.05,
    uniform_exploration: bool = False,
) -> Proposal:
    """rho_j = (1 - eps) n_j / S_w + eps chi_j, rho_0 = (1 - eps) n_0 / S_w."""
    s = len(votes.winners)
    nu = np.zeros(len(votes.card_ids))
    for card, count in (pending or {}).items():  # the few cards with pending outcomes
        start = 0
        while count:  # each position of ``card`` (found by a scan in C, not a dict of J)
            try:
                start = votes.card_ids.index(card, start)
            except ValueError:
                break
            nu[start] = count
            start += 1
    scale = 1.0 / np.sqrt(1.0 + nu)
    a = np.ones(len(nu)) if uniform_exploration else (1.0 + votes.challenger_counts) * scale
    chi = a / a.sum()
    rho = (1.0 - epsilon) * votes.counts / s + epsilon * chi
    rho0 = (1.0 - epsilon) * votes.abstentions / s
    mc_se = _proposal_se(votes, scale, a.sum(), chi, epsilon, uniform_exploration)
    return Proposal(votes.card_ids, rho, rho0, chi, mc_se)


def _proposal_se(
    votes: WorldVotes,
    scale: np.ndarray,
    total: float,
    chi: np.ndarray,
    epsilon: float,
    uniform: bool,
) -> np.ndarray:
    """Delta method on per-world influence psi_js = (1-eps) V_js + eps dchi_j/dcbar . C_s.

    With V_js = 1{winner_s = j}, C_js = 1{challenger_s = j}, w_s = scale of the world's
    challenger, b = eps S / sum(a): psi_js = (1-eps) V_js + b (scale_j C_js - chi_j w_s).
    Its mean and mean square over the S worlds follow from per-card counts and weighted
    counts (bincounts), O(S + J) instead of O(S J); the SE is sqrt(var / S), var with ddof 0.
    """
    s, j = len(votes.winners), len(votes.card_ids)
    a = 1.0 - epsilon
    won = votes.winners >= 0
    n = np.bincount(votes.winners[won], minlength=j).astype(float)
    if uniform:
        mean, square = a * n / s, a * a * n / s
    else:
        b = epsilon * s / total
        chal = votes.challengers
        c = np.bincount(chal, minlength=j).astype(float)
        w = scale[chal]
        both = np.bincount(votes.winners[won & (votes.winners == chal)], minlength=j)
        vw = np.bincount(votes.winners[won], weights=w[won], minlength=j)  # sum_s V_js w_s
        mean = (a * n + b * (scale * c - chi * w.sum())) / s
        square = (
            a * a * n
            + b * b * (scale**2 * c + chi**2 * float(w @ w) - 2.0 * scale * chi * scale * c)
            + 2.0 * a * b * (scale * both - chi * vw)
        ) / s
    return np.sqrt(np.clip(square - mean * mean, 0.0, None) / s)


@dataclass(frozen=True)
class Draw:
    """Proposal and offer draws of one decision (memory-model.md "Policy").

    Attributes:
        proposed: card id or None (abstain).
        offered: Z (1 = delivered, 0 = withheld control), None when abstaining.
        proposal_probability: rho_j of the proposed card, or rho_0 when abstaining.
        joint_propensity: rho_j e (Z = 1), rho_j (1 - e) (Z = 0), rho_0 for abstention.
    """

    proposed: str | None
    offered: int | None
    proposal_probability: float
    joint_propensity: float


def draw_decision(proposal: Proposal, offer_probability: float, u1: float, u2: float) -> Draw:
    """Walk abstain first then ascending ids with u1; Z = 1{u2 < e}."""
    if not 0.0 < offer_probability < 1.0:
        raise ValueError("offer probability e must lie in (0, 1)")
    if u1 < proposal.rho0 or not proposal.card_ids:
        return Draw(None, None, proposal.rho0, proposal.rho0)
    # rho_0 + rho_1 + ... + rho_j added left to right (cumsum adds in order, as a walk would)
    rho = np.asarray(proposal.rho, dtype=float)
    if len(rho) != len(proposal.card_ids):
        raise ValueError("proposal masses and card ids differ in length")
    cumulative = np.cumsum(np.r_[float(proposal.rho0), rho])[1:]
    past = np.flatnonzero(u1 < cumulative)
    if len(past):
        j = int(past[0])
        z = int(u2 < offer_probability)
        e = offer_probability if z else 1.0 - offer_probability
        return Draw(proposal.card_ids[j], z, float(rho[j]), float(rho[j]) * e)
    # u1 fell in the floating-point remainder: the last card with positive mass
    idx = int(np.flatnonzero(proposal.rho > 0)[-1])
    z = int(u2 < offer_probability)
    e = offer_probability if z else 1.0 - offer_probability
    return Draw(proposal.card_ids[idx], z, float(proposal.rho[idx]), float(proposal.rho[idx]) * e)


def abstain_proposal() -> Proposal:
    """rho_0 = 1 (empty safe set or an unhealthy / at-boundary immediate head)."""
    empty = np.zeros(0)
    return Proposal((), empty, 1.0, empty, empty)


def decide(
    decision_key: str,
    card_ids: Sequence[str],
    effect: np.ndarray,
    offer_probability: float = 0.7,
    epsilon: float = 0.05,
    pending: Mapping[str, int] | None = None,
) -> tuple[Proposal, Draw]:
    """Probability matching over the safe cards, then proposal and offer draws.

    Args:
        card_ids: the safe set A (may be empty: abstain).
        effect: (S_w, |A|) world effects drawn from the ``worlds`` stream of this key.
    """
    proposal = abstain_proposal()
    if len(card_ids):
        votes = match_worlds(card_ids, effect)
        proposal = proposal_distribution(votes, pending, epsilon)
    u1 = float(rng_stream(decision_key, "proposal").random())
    u2 = float(rng_stream(decision_key, "offer").random())
    return proposal, draw_decision(proposal, offer_probability, u1, u2)


def is_normalised(proposal: Proposal, tol: float = 1e-9) -> bool:
    """Sum rho + rho_0 = 1 within tol and every mass in [0, 1]."""
    total = float(proposal.rho.sum()) + proposal.rho0
    return math.isclose(total, 1.0, abs_tol=tol) and bool(np.all(proposal.rho >= 0))


@dataclass(frozen=True)
class CandidateRow:
    """Per-candidate propensities logged on the decision row (memory-model.md "Rows and
    eligibility" and "Policy").

    Unsafe candidates carry rho = 0 and a null offer probability.
    """

    card_id: str
    safe: bool
    rho: float
    offer_probability: float | None
    joint_offered: float
    joint_withheld: float


def candidate_rows(
    candidate_ids: Sequence[str], proposal: Proposal, offer_probability: float
) -> list[CandidateRow]:
    """One row per candidate in ascending id order: rho_j, e (None if unsafe), rho e, rho (1-e)."""
    rho = dict(zip(proposal.card_ids, proposal.rho.tolist(), strict=True))
    rows = []
    for card in sorted(candidate_ids):
        if card in rho:
            r = rho[card]
            rows.append(
                CandidateRow(
                    card, True, r, offer_probability, r * offer_probability,
                    r * (1.0 - offer_probability),
                )
            )  # fmt: skip
        else:
            rows.append(CandidateRow(card, False, 0.0, None, 0.0, 0.0))
    return rows


def head_allows_selection(health: FitHealth) -> bool:
    """Selection proceeds only if the immediate head is OK and not at boundary (memory-model.md
    "Policy")."""
    return health.ok and not health.at_boundary


@dataclass(frozen=True)
class CardSummary:
    """Summary of one card over the S_p summary draws (memory-model.md "Policy").

    Attributes:
        effect_mean, effect_sd: mean and sd of Delta_j; p_positive: P(Delta_j > 0).
        q0_mean, q1_mean: mean hurdle values (normalised); p0_mean, p1_mean: mean invalid probs.
        q0_hat, q1_hat: logged nuisances clip(R mean q_a, -R, R) in raw units;
        r0_hat, r1_hat: logged invalidity nuisances mean p_a.
    """

    effect_mean: float
    effect_sd: float
    p_positive: float
    q0_mean: float
    q1_mean: float
    p0_mean: float
    p1_mean: float
    q0_hat: float
    q1_hat: float
    r0_hat: float
    r1_hat: float


def summarise_card(values: ArmValues, index: int, metric_range: float) -> CardSummary:
    """Summaries and frozen nuisances of card column ``index`` of ``values`` (S_p draws)."""
    delta = values.q1[:, index] - values.q0
    q0, q1 = float(values.q0.mean()), float(values.q1[:, index].mean())
    r = metric_range
    return CardSummary(
        effect_mean=float(delta.mean()),
        effect_sd=float(delta.std(ddof=1)) if len(delta) > 1 else 0.0,
        p_positive=float(np.mean(delta > 0)),
        q0_mean=q0,
        q1_mean=q1,
        p0_mean=float(values.p0.mean()),
        p1_mean=float(values.p1[:, index].mean()),
        q0_hat=float(np.clip(r * q0, -r, r)),
        q1_hat=float(np.clip(r * q1, -r, r)),
        r0_hat=float(values.p0.mean()),
        r1_hat=float(values.p1[:, index].mean()),
    )
