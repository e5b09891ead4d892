"""The policy's per-card summary pinned at its edges (memory-model.md "Policy"; issue 19: the
survivors of a whole-module mutation run): two draws have a sample sd, and each frozen
nuisance is clipped to [-R, R] on both sides."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal.policy import ArmValues, summarise_card


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
