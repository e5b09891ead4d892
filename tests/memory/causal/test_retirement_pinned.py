"""Retirement's evaluations pinned to values computed another way (issue 19, session 10).

Every ``Evaluation`` a verdict reports must carry its own numbers: the Wilson bound of its
count at the configured z, n = the configured draws, the verdict's side of the bound, the
certified error of the safety integral (of both shift levels when both are weighed) at the
configured delta and tolerance, and the other level's weight. Checked on configurations
away from the defaults, so that an argument left at a default is seen.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy.special import logit

from gigaevo.memory.v2.causal import acceptance_probability
from gigaevo.memory.v2.causal.retirement import (
    RAG_STATES,
    RetirementConfig,
    RetirementHeads,
    SupportContext,
    _useful_worlds,
    heads_gate,
    judge_card,
    practical_threshold,
    sorted_threshold,
    wilson_upper,
)
from tests.memory.causal.simulate import card_world
from tests.memory.causal.test_retirement import _two_level_world, fit_heads, support

CFG = RetirementConfig(wilson_z=2.2, delta=0.12, safety_tolerance=2e-8, retirement_draws=3000)
V = "evidence-version-pinned"


def _check(heads: RetirementHeads, card, theta: float, n_controls: int) -> set[str]:
    """Judge ``card`` under CFG and check every evaluation; the branches seen."""
    out = judge_card(heads, card, n_controls=n_controls, theta=theta, evidence_version=V, cfg=CFG)
    contexts = card.sorted_contexts()
    seen = set()
    other = heads.other_level(card.lineage)
    for i, e in enumerate(out.evaluations):
        index, state = divmod(i, len(RAG_STATES))
        assert (e.context_index, e.state) == (index, RAG_STATES[state])
        assert e.n == CFG.retirement_draws and 0 <= e.k <= e.n
        assert e.upper == wilson_upper(e.k, e.n, CFG.wilson_z)
        assert e.non_viable == (e.upper <= CFG.max_viability_probability)
        if not e.non_viable:
            assert math.isnan(e.safety_error)
            seen.add("viable, other level" if e.other_level > 0 else "viable")
            continue
        x = np.asarray(contexts[index].features, dtype=float)
        z0 = heads.space.row(x, 0)
        z1 = heads.space.row(x, 1, card.lineage, card.kind, e.state)
        want = []
        for head in (None, None if other is None else other[1]):
            if head is None and want:
                continue
            moments = heads.safety_moments(card.lineage, z0, z1, head)
            acc = acceptance_probability(*moments, delta=CFG.delta, tolerance=CFG.safety_tolerance)
            want.append(acc.error)
        assert e.safety_error == max(want) <= CFG.safety_tolerance
        seen.add("non-viable, other level" if e.other_level > 0 else "non-viable")
    if other is not None:
        assert all(e.other_level in (0.0, other[0]) for e in out.evaluations)
    else:
        assert all(e.other_level == 0.0 for e in out.evaluations)
    return seen


def test_every_evaluation_carries_its_own_numbers() -> None:
    """The four ways an evaluation ends: viable at the chosen level, non-viable with one
    level, viable once the other level's worlds are mixed in, non-viable at both."""
    seen = set()
    harmful = fit_heads(card_world(220, 90, np.random.default_rng(3), effect=-0.05, p_cited=0.35))
    seen |= _check(harmful, support(), 0.0, 86)
    useful = fit_heads(card_world(200, 86, np.random.default_rng(11), effect=0.05))
    seen |= _check(useful, support(), 0.0064, 86)
    for n_cited, n_invalid in ((2, 2), (24, 12)):
        heads, card, theta = _two_level_world(0, n_cited, n_invalid)
        seen |= _check(heads, card, theta, 150)
    assert seen == {"viable", "non-viable", "viable, other level", "non-viable, other level"}


def _p(*probabilities: float) -> np.ndarray:
    return logit(np.array(probabilities))


def test_a_world_counts_when_safe_and_its_hurdle_gain_clears_theta() -> None:
    """The count of useful worlds (docs/memory-model.md "Viability"): p_1 - p_0 <= delta and
    q_1 - q_0 > theta with q = (1 - p) v + p G-, worked by hand. The function is private;
    the worlds ``evaluate`` feeds it are random draws, so only a direct call pins the
    formula exactly."""
    lo, theta, delta = -0.5, 0.1, 0.1
    eta = np.array([_p(0.1, 0.15), _p(0.1, 0.3), _p(0.1, 0.1), _p(0.5, 0.55)])
    v = np.array([[0.0, 0.3], [0.0, 0.3], [0.0, 0.05], [0.1, 0.35]])
    # q_1 - q_0: 0.23 (useful), unsafe (p_1 - p_0 = 0.2), 0.045, 0.0825 (below theta)
    assert _useful_worlds(v, eta, lo, theta, delta) == 1
    assert _useful_worlds(v, eta, lo, 0.04, delta) == 3
    assert _useful_worlds(v, eta, lo, theta, 0.25) == 2
    bad_v = v.copy()
    bad_v[2, 1] = np.nan
    assert _useful_worlds(bad_v, eta, lo, theta, delta) is None
    bad_eta = eta.copy()
    bad_eta[0, 0] = np.nan
    assert _useful_worlds(v, bad_eta, lo, theta, delta) is None


def test_sorted_threshold_has_practical_thresholds_defaults() -> None:
    for gains in ([0.1, -0.3], [0.1, -0.3, 0.2, 0.0, math.nan, 0.05, -0.4]):
        mags = sorted(abs(g) for g in gains if math.isfinite(g) and g != 0.0)
        assert sorted_threshold(mags) == practical_threshold(gains) > 0.0
    assert practical_threshold([0.1, -0.3]) == pytest.approx(0.1 + 0.1 * 0.2)


def test_the_gate_message_adds_both_masses() -> None:
    rng = np.random.default_rng(4)
    tight = fit_heads(card_world(150, 80, rng, sigma=0.2), bounds=(0.01, 0.02))
    h = tight.immediate.health_
    message = heads_gate(tight, 0.10)
    assert h.mass_upper > 0.01 and "boundary" in message
    assert f"(M- + M+ = {h.mass_lower + h.mass_upper:.3g};" in message


def test_gains_above_the_feasible_interval_clip_to_its_top() -> None:
    """Near the metric's upper bound (G+ = 0.05) both arms' predictions clip to G+: a card
    that is only 'better than a good no-card' gains less than theta there (the mirror of
    test_retirement's clipping at G- = 0)."""
    top = tuple(
        SupportContext(i % 2, (i, 0), (1.0, 1.0, 0.7, 0.2 * i - 0.2, 0.1), (-1.0, 0.05))
        for i in range(3)
    )
    world = card_world(200, 86, np.random.default_rng(700), effect=0.05)
    heads = fit_heads(dataclasses.replace(world, y=world.y + 0.3))  # every gain far above 0
    out = judge_card(
        heads, support(contexts=top), n_controls=86, theta=0.04, evidence_version=V,
        cfg=RetirementConfig(),
    )  # fmt: skip
    assert out.retire and all(e.k <= 0.01 * e.n for e in out.evaluations), out.reason
