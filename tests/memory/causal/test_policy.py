"""Ground truth 6 (memory-model.md "Ground-truth tests" (6)) and the worked example steps 2-3
(memory-model.md "Worked example")."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal import (
    ArmValues,
    BayesianLinearHead,
    DesignError,
    DesignSpace,
    FitHealth,
    LogisticLaplaceHead,
    Proposal,
    RewardDefinition,
    WorldVotes,
    arm_values,
    candidate_rows,
    context_features,
    decide,
    draw_decision,
    eligible_candidates,
    head_allows_selection,
    hurdle_values,
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


# Each rule of memory-model.md "Policy" on its own, with values worked by hand.


def test_world_votes_count_wins_abstentions_and_challengers() -> None:
    votes = WorldVotes(("a", "b", "c"), np.array([0, -1, 2, 0, -1]), np.array([1, 0, 0, 2, 1]))
    np.testing.assert_array_equal(votes.counts, [2, 0, 1])
    assert votes.abstentions == 2
    np.testing.assert_array_equal(votes.challenger_counts, [2, 2, 1])


def test_a_world_whose_best_effect_is_at_the_threshold_abstains() -> None:
    effect = np.array([[0.0, -1.0], [0.04, 0.0], [0.06, 0.0]])
    votes = match_worlds(["a", "b"], effect)
    # world 0: the largest Delta is exactly 0 -> abstain, the top card is the challenger
    np.testing.assert_array_equal(votes.winners, [-1, 0, 0])
    np.testing.assert_array_equal(votes.challengers, [0, 1, 1])
    raised = match_worlds(["a", "b"], effect, threshold=0.05)
    np.testing.assert_array_equal(raised.winners, [-1, -1, 0])
    np.testing.assert_array_equal(raised.challengers, [0, 0, 1])


@pytest.mark.parametrize(
    ("ids", "effect"),
    [([], np.zeros((3, 0))), (["a", "b"], np.zeros((3, 3))), (["a"], np.zeros(3))],
)
def test_match_worlds_rejects_an_effect_that_does_not_fit_the_cards(ids, effect) -> None:
    with pytest.raises(DesignError, match="effect must be"):
        match_worlds(ids, effect)


def _votes_abc() -> WorldVotes:
    # S = 4: a wins twice, b once, one abstention; challengers b, c, a, a
    return WorldVotes(("a", "b", "c"), np.array([0, 0, 1, -1]), np.array([1, 2, 0, 0]))


def test_proposal_with_pending_leases_by_hand() -> None:
    # c = (2, 1, 1); nu_b = 3 -> 1/sqrt(4) = 0.5; a = (3, 1, 2) -> chi = (1/2, 1/6, 1/3)
    prop = proposal_distribution(_votes_abc(), pending={"b": 3})  # default epsilon 0.05
    np.testing.assert_allclose(prop.chi, [0.5, 1 / 6, 1 / 3], rtol=1e-12)
    np.testing.assert_allclose(
        prop.rho, [0.95 * 2 / 4 + 0.05 / 2, 0.95 / 4 + 0.05 / 6, 0.05 / 3], rtol=1e-12
    )
    assert prop.rho0 == pytest.approx(0.95 / 4, rel=1e-12)
    assert is_normalised(prop)


def test_uniform_exploration_by_hand() -> None:
    prop = proposal_distribution(_votes_abc(), pending={"b": 3}, uniform_exploration=True)
    np.testing.assert_allclose(prop.chi, [1 / 3] * 3, rtol=1e-12)
    np.testing.assert_allclose(
        prop.rho, [0.95 / 2 + 0.05 / 3, 0.95 / 4 + 0.05 / 3, 0.05 / 3], rtol=1e-12
    )
    # psi_js = 0.95 V_js: sd over the 4 worlds / sqrt(4)
    np.testing.assert_allclose(
        prop.mc_se, [0.95 * 0.5 / 2, 0.95 * np.sqrt(0.1875) / 2, 0.0], rtol=1e-12, atol=1e-15
    )


def _proposal(rho: list[float], rho0: float, ids: tuple[str, ...] = ("a", "b")) -> Proposal:
    r = np.array(rho)
    return Proposal(ids, r, rho0, np.full(len(r), 1.0 / max(len(r), 1)), np.zeros(len(r)))


def test_draw_walks_abstention_then_ascending_ids_at_the_boundaries() -> None:
    prop = _proposal([0.3, 0.2], 0.5)
    assert draw_decision(prop, 0.7, u1=0.4999, u2=0.0).proposed is None
    at_rho0 = draw_decision(prop, 0.7, u1=0.5, u2=0.0)  # cumulative mass must exceed u1
    assert at_rho0.proposed == "a" and at_rho0.proposal_probability == 0.3
    assert draw_decision(prop, 0.7, u1=0.8, u2=0.0).proposed == "b"
    # Z = 1{u2 < e}: u2 = e withholds
    withheld = draw_decision(prop, 0.7, u1=0.6, u2=0.7)
    assert withheld.offered == 0 and withheld.joint_propensity == pytest.approx(0.3 * 0.3)
    shown = draw_decision(prop, 0.7, u1=0.6, u2=0.6999)
    assert shown.offered == 1 and shown.joint_propensity == pytest.approx(0.3 * 0.7)


@pytest.mark.parametrize(("u2", "offered", "e"), [(0.1, 1, 0.7), (0.9, 0, 0.3)])
def test_draw_in_the_rounding_remainder_takes_the_last_card_with_mass(u2, offered, e) -> None:
    # the masses sum to 1 - 1e-12; u1 above that lands after the walk; c has no mass
    prop = _proposal([0.3, 0.2 - 1e-12, 0.0], 0.5, ("a", "b", "c"))
    draw = draw_decision(prop, 0.7, u1=1.0 - 1e-13, u2=u2)
    assert draw.proposed == "b" and draw.offered == offered
    assert draw.proposal_probability == pytest.approx(0.2)
    assert draw.joint_propensity == pytest.approx(0.2 * e)


def test_draw_without_cards_abstains_and_rejects_a_degenerate_offer() -> None:
    empty = _proposal([], 0.25, ())
    draw = draw_decision(empty, 0.7, u1=0.9, u2=0.1)
    assert draw.proposed is None and draw.offered is None and draw.joint_propensity == 0.25
    for e in (0.0, 1.0, -0.2, 1.5):
        with pytest.raises(ValueError, match="offer probability"):
            draw_decision(_proposal([0.5, 0.5], 0.0), e, 0.5, 0.5)


def test_decide_uses_the_documented_defaults_and_streams() -> None:
    ids = ["b", "a", "c"]
    effect = np.random.default_rng(8).normal(size=(64, 3)) * 0.1
    prop, draw = decide("key-9", ids, effect)
    want = proposal_distribution(match_worlds(ids, effect), None, 0.05)
    np.testing.assert_array_equal(prop.rho, want.rho)
    assert prop.rho0 == want.rho0
    u1 = float(rng_stream("key-9", "proposal", 0).random())
    u2 = float(rng_stream("key-9", "offer", 0).random())
    assert draw == draw_decision(want, 0.7, u1, u2)
    # a card whose lineage holds leases gets less exploration mass through decide too
    leased, _ = decide("key-9", ids, effect, pending={"a": 1})
    assert leased.chi[0] < prop.chi[0]


def test_rng_stream_needs_a_domain() -> None:
    with pytest.raises(ValueError, match="domain"):
        rng_stream("key", "")


def test_is_normalised_checks_the_total_and_the_sign() -> None:
    assert not is_normalised(_proposal([0.5, 0.5 + 1e-8], 0.0))
    assert is_normalised(_proposal([0.5, 0.5 + 1e-8], 0.0), tol=1e-7)
    assert is_normalised(_proposal([0.5, 0.5 - 1e-10], 0.0))
    assert not is_normalised(_proposal([1.2, -0.2], 0.0))
    assert is_normalised(_proposal([0.0, 0.6], 0.4))


def test_candidate_rows_in_ascending_id_order_with_their_propensities() -> None:
    prop = _proposal([0.25, 0.15], 0.6, ("b", "d"))
    rows = candidate_rows(["d", "c", "b", "a"], prop, 0.6)
    assert [r.card_id for r in rows] == ["a", "b", "c", "d"]
    assert [r.safe for r in rows] == [False, True, False, True]
    b, d = rows[1], rows[3]
    assert (b.rho, b.offer_probability) == (0.25, 0.6)
    assert b.joint_offered == pytest.approx(0.15) and b.joint_withheld == pytest.approx(0.10)
    assert d.joint_offered == pytest.approx(0.09) and d.joint_withheld == pytest.approx(0.06)
    for unsafe in (rows[0], rows[2]):
        assert (unsafe.rho, unsafe.joint_offered, unsafe.joint_withheld) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("ok", "at_boundary", "allowed"),
    [(True, False, True), (True, True, False), (False, False, False), (False, True, False)],
)
def test_selection_needs_a_healthy_head_off_the_boundary(ok, at_boundary, allowed) -> None:
    health = FitHealth(ok, at_boundary, 0.0, 0.0, True, False, 0.0, 0.0, 0.0)
    assert head_allows_selection(health) is allowed


def test_eligibility_counts_missing_leases_as_zero_and_honours_the_limit() -> None:
    assert eligible_candidates(["a", "b"], {}) == ["a", "b"]
    assert eligible_candidates(["a", "b"], {"a": 2, "b": 3}, limit=3) == ["a"]
    assert eligible_candidates(["a", "b"], {"a": 1}, limit=1) == ["b"]


def test_hurdle_values_lift_both_arms_by_the_positive_lineage_part_only() -> None:
    # p = expit(0) = 1/2 everywhere; G- = -0.8, G+ = 1.0
    vals = hurdle_values(
        (np.array([0.0]), np.array([[0.0, 0.0, -2.0]])),
        (np.array([0.0]), np.array([[0.0, 0.0, 0.0]])),
        (-0.8, 1.0),
        (np.array([-0.5]), np.array([[0.3, -0.2, 0.0]])),
    )
    assert vals.q0[0] == pytest.approx(0.5 * 0.0 + 0.5 * -0.8)  # negative lineage: no lift
    # card 0 lifted by 0.3; card 1 not lowered; card 2 clipped at G- (worth G- either way)
    np.testing.assert_allclose(vals.q1[0], [0.5 * 0.3 - 0.4, -0.4, -0.8], rtol=1e-12)
    np.testing.assert_allclose(vals.p0, [0.5])
    np.testing.assert_allclose(vals.p1, 0.5)


def test_summaries_by_hand() -> None:
    q0 = np.array([0.1, 0.2, 0.3])
    q1 = np.array([[0.2, 1.5], [0.2, 1.5], [0.5, 1.5]])
    p0 = np.array([0.1, 0.2, 0.3])
    p1 = np.array([[0.3, 0.0], [0.3, 0.0], [0.6, 0.0]])
    vals = ArmValues(q0, q1, p0, p1)
    s = summarise_card(vals, 0, metric_range=2.0)
    # Delta = (0.1, 0.0, 0.2): sd with ddof 1 = 0.1; a zero effect is not positive
    assert s.effect_mean == pytest.approx(0.1) and s.effect_sd == pytest.approx(0.1)
    assert s.p_positive == pytest.approx(2 / 3)
    assert (s.q0_mean, s.q1_mean) == (pytest.approx(0.2), pytest.approx(0.3))
    assert (s.p0_mean, s.p1_mean) == (pytest.approx(0.2), pytest.approx(0.4))
    assert (s.q0_hat, s.q1_hat) == (pytest.approx(0.4), pytest.approx(0.6))
    assert (s.r0_hat, s.r1_hat) == (pytest.approx(0.2), pytest.approx(0.4))
    clipped = summarise_card(ArmValues(-q1[:, 1], q1, p0, p1), 1, metric_range=2.0)
    assert (clipped.q0_hat, clipped.q1_hat) == (-2.0, 2.0)  # clip(R mean q, -R, R)
    one = summarise_card(ArmValues(q0[:1], q1[:1], p0[:1], p1[:1]), 0, metric_range=1.0)
    assert one.effect_sd == 0.0 and one.effect_mean == pytest.approx(0.1)
