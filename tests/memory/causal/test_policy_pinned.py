"""The policy's per-card summary pinned at its edges (memory-model.md "Policy"; issue 19: the
survivors of a whole-module mutation run): two draws have a sample sd, and each frozen
nuisance is clipped to [-R, R] on both sides."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal import BlockDesign, DesignError, DesignSpace
from gigaevo.memory.v2.causal.policy import (
    ArmValues,
    Draw,
    Proposal,
    abstain_proposal,
    arm_values,
    decide,
    draw_decision,
    hurdle_values,
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


def test_wide_rows_give_the_same_arm_values_as_dense_rows() -> None:
    """memory-model.md "Policy": a ``BlockDesign`` of the treated rows is the same rows."""
    c = 3
    space = DesignSpace(c, ("A", "B", "C"))
    rng = np.random.default_rng(5)
    x = np.r_[1.0, rng.uniform(-1, 1, c - 1)]
    dense = np.array([space.row(x, 1, lin, "insight") for lin in ("A", "B", "C")])
    wide = BlockDesign.from_dense(dense, space.shared_size, c)
    beta, gamma, lineage = (rng.normal(0, 0.3, size=(16, space.size)) for _ in range(3))
    z0 = space.row(x, 0)
    for lin in (None, lineage):
        want = arm_values(beta, gamma, z0, dense, (-0.5, 1.0), lin)
        got = arm_values(beta, gamma, z0, wide, (-0.5, 1.0), lin)
        for name in ("q0", "q1", "p0", "p1"):
            np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-12)
    plain = arm_values(beta, gamma, z0, dense, (-0.5, 1.0))
    one = arm_values(beta, gamma, z0, dense[0], (-0.5, 1.0))  # a single card as a flat row
    np.testing.assert_allclose(one.q1, plain.q1[:, :1], rtol=1e-12)
    assert one.q1.shape == (16, 1)


def test_the_floating_point_remainder_goes_to_the_last_card_with_mass() -> None:
    rho = np.array([0.3, 0.3, 0.0, 0.3999999])
    prop = Proposal(("a", "b", "c", "d"), rho, 0.0, rho, np.zeros(4))
    draw = draw_decision(prop, 0.5, 0.99999995, 0.5)
    assert (draw.proposed, draw.offered) == ("d", 0)  # and Z = 1{u_2 < e} there too
    assert draw_decision(prop, 0.5, 0.99999995, 0.25).offered == 1


def test_an_offer_draw_equal_to_e_withholds() -> None:
    """Z = 1{u_2 < e}: u_2 = e exactly is a withheld control."""
    prop = Proposal(("a",), np.array([1.0]), 0.0, np.array([1.0]), np.zeros(1))
    assert draw_decision(prop, 0.5, 0.5, 0.5).offered == 0
    assert draw_decision(prop, 0.5, 0.5, np.nextafter(0.5, 0.0)).offered == 1


def test_refusals_name_their_cause_word_for_word() -> None:
    with pytest.raises(DesignError, match=r"^effect must be \(S, J\) with J >= 1 safe cards$"):
        match_worlds(["a"], np.zeros((4, 0)))
    with pytest.raises(ValueError, match=r"^RNG domain must be non-empty$"):
        rng_stream("key", "")


def test_one_cards_latents_may_come_flat() -> None:
    """A single card's (S,) latents are its (S, 1) column, for every head."""
    rng = np.random.default_rng(6)
    heads = [(rng.normal(size=5), rng.normal(size=5)) for _ in range(3)]
    flat = hurdle_values(heads[0], heads[1], (-0.5, 1.0), heads[2])
    cols = [(u0, u1[:, None]) for u0, u1 in heads]
    want = hurdle_values(cols[0], cols[1], (-0.5, 1.0), cols[2])
    for name in ("q0", "q1", "p0", "p1"):
        got = getattr(flat, name)
        assert got.shape == getattr(want, name).shape
        np.testing.assert_allclose(got, getattr(want, name), rtol=1e-12)


def test_a_proposal_with_more_masses_than_cards_is_refused_word_for_word() -> None:
    bad = Proposal(("a", "b"), np.array([0.3, 0.3, 0.4]), 0.0, np.ones(3) / 3, np.zeros(3))
    with pytest.raises(ValueError, match=r"^proposal masses and card ids differ in length$"):
        draw_decision(bad, 0.5, 0.5, 0.5)
