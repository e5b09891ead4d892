"""Ground truth 6 (memory-model.md "Ground-truth tests" (6)) and the worked example steps 2-3
(memory-model.md "Worked example")."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal import (
    BayesianLinearHead,
    DesignSpace,
    LogisticLaplaceHead,
    RewardDefinition,
    WorldVotes,
    arm_values,
    candidate_rows,
    context_features,
    decide,
    draw_decision,
    eligible_candidates,
    is_normalised,
    match_worlds,
    proposal_distribution,
    rng_stream,
    summarise_card,
)


def _example_votes() -> WorldVotes:
    winners = np.r_[np.zeros(134, int), np.ones(136, int), -np.ones(242, int)]
    challengers = np.r_[np.zeros(257, int), np.ones(255, int)]
    return WorldVotes(("A", "B"), winners, challengers)


def test_worked_example_proposal_and_draws() -> None:
    prop = proposal_distribution(_example_votes(), pending={}, epsilon=0.05)
    np.testing.assert_allclose(prop.chi, [0.50195, 0.49805], atol=5e-6)
    np.testing.assert_allclose(prop.rho, [0.27373, 0.27725], atol=5e-6)
    assert prop.rho0 == pytest.approx(0.44902, abs=5e-6)
    assert is_normalised(prop)
    delivered = draw_decision(prop, 0.7, u1=0.52, u2=0.41)
    assert delivered.proposed == "A" and delivered.offered == 1
    assert delivered.joint_propensity == pytest.approx(0.19161, abs=5e-6)
    withheld = draw_decision(prop, 0.7, u1=0.52, u2=0.95)
    assert withheld.offered == 0 and withheld.joint_propensity == pytest.approx(0.08212, abs=5e-6)
    abstain = draw_decision(prop, 0.7, u1=0.3, u2=0.1)
    assert abstain.proposed is None and abstain.offered is None
    assert abstain.joint_propensity == pytest.approx(prop.rho0)


def test_pending_lowers_exploration_mass() -> None:
    prop = proposal_distribution(_example_votes(), pending={"A": 3}, epsilon=0.05)
    assert prop.chi[0] == pytest.approx((258 / 2) / (258 / 2 + 256))
    assert is_normalised(prop)


def test_matching_ties_and_abstention() -> None:
    effect = np.array([[0.1, 0.1, 0.0], [-0.1, -0.2, -0.3], [0.0, 0.2, 0.2], [0.3, 0.0, -1.0]])
    votes = match_worlds(["c", "a", "b"], effect)  # columns are c, a, b
    assert votes.card_ids == ("a", "b", "c")
    # world 0: tie a/c -> larger id c, challenger a; world 1: max -0.1 <= 0 abstains, top c
    # world 2: tie a/b -> b, challenger a; world 3: c wins, challenger a
    np.testing.assert_array_equal(votes.winners, [2, -1, 1, 2])
    np.testing.assert_array_equal(votes.challengers, [0, 2, 0, 0])
    single = match_worlds(["a"], np.array([[0.1], [-0.1]]))
    np.testing.assert_array_equal(single.challengers, [0, 0])


def test_invariants_random_effects() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        j = int(rng.integers(1, 6))
        ids = [f"card-{i}" for i in rng.permutation(j)]
        effect = rng.normal(size=(512, j)) * 0.1 - 0.02
        prop, draw = decide("key", ids, effect, pending={ids[0]: 1})
        assert abs(prop.rho.sum() + prop.rho0 - 1.0) <= 1e-9
        assert np.all(prop.rho > 0)  # exploration mass reaches every safe card
        if draw.proposed is not None:
            e = 0.7 if draw.offered else 0.3
            assert draw.joint_propensity == pytest.approx(draw.proposal_probability * e)


def test_no_safe_card_abstains_and_unsafe_rows_are_null() -> None:
    prop, draw = decide("k", [], np.zeros((512, 0)))
    assert prop.rho0 == 1.0 and draw.proposed is None
    prop, _ = decide("k", ["b"], np.full((512, 1), 0.1))
    rows = candidate_rows(["a", "b"], prop, 0.7)
    assert rows[0].card_id == "a" and not rows[0].safe and rows[0].rho == 0.0
    assert rows[0].offer_probability is None
    assert rows[1].safe and rows[1].joint_offered == pytest.approx(rows[1].rho * 0.7)
    assert rows[1].joint_withheld == pytest.approx(rows[1].rho * 0.3)


def test_cards_at_two_pending_are_absent() -> None:
    assert eligible_candidates(["a", "b", "c"], {"a": 2, "b": 1}) == ["b", "c"]


def test_same_key_same_draws_and_independent_domains() -> None:
    a = rng_stream("decision-1", "worlds").random(4)
    b = rng_stream("decision-1", "worlds").random(4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, rng_stream("decision-1", "offer").random(4))
    assert not np.array_equal(a, rng_stream("decision-2", "worlds").random(4))
    assert not np.array_equal(a, rng_stream("decision-1", "worlds", 1).random(4))


def _cold_worlds(n: int, key: str) -> np.ndarray:
    """World effects (n, 2) of two exchangeable cold cards at the memory-model.md "Worked example"
    context."""
    x = context_features(RewardDefinition(0.0, 1.0), 0.80, 50, [0.25, 0.50])
    space = DesignSpace(5, lineages=("A", "B"), kind_contrast=False)
    empty = np.zeros((0, space.size))
    blr = BayesianLinearHead(space.utility_prior_variance()).fit(empty, np.zeros(0))
    mu, v = space.invalidity_prior()
    logit_head = LogisticLaplaceHead(mu, v).fit(empty, np.zeros(0))
    rng = rng_stream(key, "worlds")
    beta, gamma = blr.sample(n, rng), logit_head.sample(n, rng)
    z1 = np.array([space.row(x, 1, "A"), space.row(x, 1, "B")])
    return arm_values(beta, gamma, space.row(x, 0), z1, (-0.8, 0.2)).effect


def test_cold_start_prior_monte_carlo_matches_example() -> None:
    effect = _cold_worlds(20000, "cold")
    assert float(np.mean(effect[:, 0] > 0)) == pytest.approx(0.42, abs=0.02)
    votes = match_worlds(["A", "B"], effect)
    assert votes.abstentions / 20000 == pytest.approx(0.46, abs=0.02)


def test_exchangeable_cold_cards_within_three_mc_se() -> None:
    prop, _ = decide("exch", ["A", "B"], _cold_worlds(512, "exch"))
    se = float(np.hypot(*prop.mc_se))
    assert abs(prop.rho[0] - prop.rho[1]) <= 3 * se


def test_empirical_proposal_and_offer_rates_match_logged_propensities() -> None:
    effect = np.random.default_rng(1).normal(size=(512, 3)) * 0.1
    n = 4000
    picks: dict[str | None, int] = {}
    offered = 0
    proposed = 0
    for i in range(n):
        prop, draw = decide(f"decision-{i}", ["a", "b", "c"], effect)
        picks[draw.proposed] = picks.get(draw.proposed, 0) + 1
        if draw.proposed is not None:
            proposed += 1
            offered += int(draw.offered == 1)
    for card, rho in [(None, prop.rho0), *zip(prop.card_ids, prop.rho, strict=True)]:
        assert abs(picks.get(card, 0) / n - rho) <= 4 * np.sqrt(rho * (1 - rho) / n)
    assert abs(offered / proposed - 0.7) <= 4 * np.sqrt(0.21 / proposed)


def test_arm_values_and_nuisances_by_hand() -> None:
    # two worlds, one card, P = 2: z0 = (1, 0), z1 = (1, 1)
    beta = np.array([[0.1, 0.05], [0.0, -0.3]])
    gamma = np.array([[-2.0, 0.0], [-2.0, 1.0]])
    z0, z1 = np.array([1.0, 0.0]), np.array([[1.0, 1.0]])
    vals = arm_values(beta, gamma, z0, z1, (-0.8, 0.12))
    p0 = 1 / (1 + np.exp(2.0))
    p1 = np.array([p0, 1 / (1 + np.exp(1.0))])
    v1 = np.array([0.12, -0.3])  # world 0 clipped at G+
    np.testing.assert_allclose(vals.q0, (1 - p0) * np.array([0.1, 0.0]) + p0 * -0.8)
    np.testing.assert_allclose(vals.q1[:, 0], (1 - p1) * v1 + p1 * -0.8)
    summary = summarise_card(vals, 0, metric_range=2.0)
    assert summary.q1_hat == pytest.approx(2.0 * vals.q1[:, 0].mean())
    assert summary.r1_hat == pytest.approx(p1.mean())
    assert summary.p_positive == 0.5
    # lineage head adds max(0, z'beta_L) per draw and arm before clipping
    beta_l = np.array([[0.5, 0.0], [-0.5, 0.0]])
    with_l = arm_values(beta, gamma, z0, z1, (-0.8, 0.12), beta_lineage=beta_l)
    np.testing.assert_allclose(with_l.q0[1], vals.q0[1])
    assert with_l.q0[0] > vals.q0[0]
