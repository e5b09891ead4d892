"""One decision end to end (memory-model.md "Policy") and a simulated three-card world (issue 6
judging)."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal import (
    BayesianLinearHead,
    CandidateCard,
    DesignSpace,
    LogisticLaplaceHead,
    RewardDefinition,
    context_features,
    is_normalised,
    select,
)
from tests.memory.causal.simulate import random_contexts

CARDS = (
    CandidateCard("good", "good"),
    CandidateCard("harm", "harm"),
    CandidateCard("neutral", "neutral"),
)
SPACE = DesignSpace(5, lineages=("good", "harm", "neutral"), kind_contrast=False)
EFFECT = {"good": 0.05, "harm": 0.0, "neutral": 0.0}
P_INVALID = {"good": 0.05, "harm": 0.35, "neutral": 0.05}


def _fit(
    rows: list[tuple[np.ndarray, float, float]],
) -> tuple[BayesianLinearHead, LogisticLaplaceHead]:
    z = np.array([r[0] for r in rows]).reshape(-1, SPACE.size)
    y = np.array([r[1] for r in rows])
    d = np.array([r[2] for r in rows])
    valid = d == 0
    immediate = BayesianLinearHead(SPACE.utility_prior_variance()).fit(z[valid], y[valid])
    mu, v = SPACE.invalidity_prior()
    return immediate, LogisticLaplaceHead(mu, v).fit(z, d)


def test_cold_start_selection() -> None:
    x = context_features(RewardDefinition(0.0, 1.0), 0.80, 50, [0.25, 0.50])
    immediate, invalidity = _fit([])
    sel = select("cold", SPACE, x, (-0.8, 0.2), 1.0, CARDS, immediate, invalidity)
    assert set(sel.acceptance) == {"good", "harm", "neutral"}
    assert all(acc.admitted() for acc in sel.acceptance.values())
    assert sel.proposal.card_ids == ("good", "harm", "neutral")
    assert is_normalised(sel.proposal) and sel.abstain_reason == ""
    again = select("cold", SPACE, x, (-0.8, 0.2), 1.0, CARDS, immediate, invalidity)
    assert again.draw == sel.draw  # same decision key, same draws
    np.testing.assert_array_equal(again.proposal.rho, sel.proposal.rho)
    if sel.summary is not None:
        assert -1.0 <= sel.summary.q1_hat <= 1.0 and 0.0 < sel.summary.r1_hat < 1.0


def test_unhealthy_head_abstains() -> None:
    rng = np.random.default_rng(0)
    x = random_contexts(80, rng)
    z = np.array([SPACE.row(xi, 0) for xi in x])
    head = BayesianLinearHead(SPACE.utility_prior_variance(), residual_sd_bounds=(0.01, 0.02))
    head.fit(z, 0.2 * rng.standard_normal(80))
    mu, v = SPACE.invalidity_prior()
    logit = LogisticLaplaceHead(mu, v).fit(z, np.zeros(80))
    sel = select("k", SPACE, x[0], (-0.5, 0.5), 1.0, CARDS, head, logit)
    assert sel.proposal.rho0 == 1.0 and sel.draw.proposed is None
    assert "boundary" in sel.abstain_reason


@pytest.mark.slow
def test_simulated_world_learns_good_card_and_avoids_harmful_one() -> None:
    rng = np.random.default_rng(2024)
    rows: list[tuple[np.ndarray, float, float]] = []
    shares: dict[str, list[float]] = {"good": [], "harm": []}
    surprise, variance = 0.0, 0.0
    for batch in range(12):
        immediate, invalidity = _fit(rows)
        counts = {"good": 0, "harm": 0}
        for i in range(50):
            x = random_contexts(1, rng)[0]
            sel = select(f"b{batch}-{i}", SPACE, x, (-0.5, 0.5), 1.0, CARDS, immediate, invalidity)
            rho = dict(zip(sel.proposal.card_ids, sel.proposal.rho, strict=True))
            surprise += float(sel.draw.proposed == "good") - rho.get("good", 0.0)
            variance += rho.get("good", 0.0) * (1 - rho.get("good", 0.0))
            card = sel.draw.proposed
            if card is None:
                continue
            counts[card] = counts.get(card, 0) + 1
            z_arm = int(sel.draw.offered == 1)
            invalid = float(rng.uniform() < (P_INVALID[card] if z_arm else 0.05))
            y = 0.01 * x[1] + EFFECT[card] * z_arm + 0.05 * rng.standard_normal()
            rows.append((SPACE.row(x, z_arm, card if z_arm else None), y, invalid))
        for name in shares:
            shares[name].append(counts[name] / 50)
    good, harm = np.array(shares["good"]), np.array(shares["harm"])
    assert good[-4:].mean() > good[:2].mean() + 0.15  # offer share of the good card rises
    assert harm[-4:].mean() < 0.1  # the harmful card is rarely proposed once evidence exists
    assert abs(surprise) <= 4 * np.sqrt(variance)  # logged rho match the empirical proposals
    immediate, _ = _fit(rows)
    assert immediate.coef_cov_ is not None
    contexts = random_contexts(2000, np.random.default_rng(1))
    c = np.mean([SPACE.row(x, 1, "good") - SPACE.row(x, 0) for x in contexts], axis=0)
    mean, sd = float(c @ immediate.coef_mean_), float(np.sqrt(c @ immediate.coef_cov_ @ c))
    assert abs(mean - 0.05) <= 3 * sd
