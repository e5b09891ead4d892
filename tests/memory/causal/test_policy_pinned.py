"""The policy's per-card summary pinned at its edges (memory-model.md "Policy"; issue 19: the
survivors of a whole-module mutation run): two draws have a sample sd, and each frozen
nuisance is clipped to [-R, R] on both sides."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal.policy import (
    ArmValues,
    Draw,
    abstain_proposal,
    decide,
    draw_decision,
    match_worlds,
    proposal_distribution,
    rng_stream,
    summarise_card,
)


def test_two_draws_have_a_sample_sd() -> None:
    vals = ArmValues(np.array([0.0, 0.0]), np.array([[0.1], [0.3]]), np.zeros(2), np.zeros((2, 1)))
    s = summarise_card(vals, 0, metric_range=1.0)
    # Delta = (0.1, 0.3): mean 0.2, sd with ddof 1 = sqrt(0.02) = 0.1414...
    assert s.effect_mean == pytest.approx(0.2) and s.effect_sd == pytest.approx(np.sqrt(0.02))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_both_nuisances_are_clipped_on_both_sides(sign: float) -> None:
    # mean hurdle values beyond +-1 (in range units): R q is clipped to +-R = +-2
    q0, q1 = np.array([1.5 * sign]), np.array([[-1.5 * sign]])
    s = summarise_card(ArmValues(q0, q1, np.zeros(1), np.zeros((1, 1))), 0, metric_range=2.0)
    assert (s.q0_hat, s.q1_hat) == (2.0 * sign, -2.0 * sign)
    assert (s.q0_mean, s.q1_mean) == (1.5 * sign, -1.5 * sign)  # the means are not clipped


def test_the_abstention_proposal_is_empty_and_its_draw_carries_rho0() -> None:
    prop = abstain_proposal()
    assert prop.card_ids == () and prop.rho0 == 1.0
    for column in (prop.rho, prop.chi, prop.mc_se):
        assert isinstance(column, np.ndarray) and column.shape == (0,)
    assert draw_decision(prop, 0.7, 0.99, 0.1) == Draw(None, None, 1.0, 1.0)
    with pytest.raises(ValueError, match=r"^offer probability e must lie in \(0, 1\)$"):
        draw_decision(prop, 1.0, 0.5, 0.5)


def test_decide_passes_its_exploration_share_and_offers_from_the_offer_stream() -> None:
    """memory-model.md "Policy": u_2 comes from the decision's ``offer`` stream."""
    ids = ["a", "b", "c"]
    effect = np.random.default_rng(4).normal(0.5, 0.2, size=(64, 3))  # abstention is rare
    prop, _ = decide("key-e", ids, effect, epsilon=0.4)
    want = proposal_distribution(match_worlds(ids, effect), None, 0.4)
    np.testing.assert_array_equal(prop.rho, want.rho)
    np.testing.assert_array_equal(prop.chi, want.chi)
    offered = 0
    for i in range(40):
        _, draw = decide(f"key-{i}", ids, effect, offer_probability=0.5)
        if draw.proposed is not None:
            u2 = float(rng_stream(f"key-{i}", "offer").random())
            assert draw.offered == int(u2 < 0.5), i
            offered += 1
    assert offered >= 30
