"""Ground truth 1 (memory-model.md "Ground-truth tests" (1)): gains, feasible intervals, context
features, design rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gigaevo.memory.v2.causal import (
    DesignError,
    DesignSpace,
    GainOutOfBoundsError,
    RewardDefinition,
    behaviour_transform,
    context_features,
    measurement_sd,
    progress_feature,
)

EXAMPLE_X = np.array([1.0, 0.6, 0.78366, -0.5, 0.0])


def test_worked_example_context() -> None:
    reward = RewardDefinition(0.0, 1.0, higher_is_better=True)
    x = context_features(reward, parent=0.80, iteration=50, behaviour=[0.25, 0.50])
    np.testing.assert_allclose(x, EXAMPLE_X, atol=5e-6)
    assert float(x @ x) == pytest.approx(2.22412, abs=1e-5)
    assert reward.feasible_interval(0.80) == pytest.approx((-0.80, 0.20))


def test_progress_feature_formula() -> None:
    assert progress_feature(0) == 0.0
    assert progress_feature(50) == pytest.approx(math.log(51) / math.log(151))


def test_higher_is_better_gain_and_interval() -> None:
    reward = RewardDefinition(2.0, 6.0, higher_is_better=True)  # R = 4
    assert reward.raw_gain(3.0, 4.0) == 1.0
    assert reward.feasible_interval(3.0) == pytest.approx((-0.25, 0.75))
    assert reward.normalise_gain(3.0, 1.0) == pytest.approx(0.25)
    assert reward.normalise_gain(3.0, 3.0) == pytest.approx(0.75)  # child at the upper bound
    with pytest.raises(GainOutOfBoundsError):
        reward.normalise_gain(3.0, 3.01)
    with pytest.raises(GainOutOfBoundsError):
        reward.normalise_gain(3.0, -1.01)


def test_lower_is_better_gain_and_interval() -> None:
    reward = RewardDefinition(2.0, 6.0, higher_is_better=False)
    assert reward.raw_gain(5.0, 4.0) == 1.0
    # G- = (f_p - u)/R, G+ = (f_p - l)/R
    assert reward.feasible_interval(5.0) == pytest.approx((-0.25, 0.75))
    assert reward.normalise_gain(5.0, 3.0) == pytest.approx(0.75)
    with pytest.raises(GainOutOfBoundsError):
        reward.normalise_gain(5.0, 3.1)
    with pytest.raises(GainOutOfBoundsError):
        reward.normalise_gain(5.0, -1.5)
    # the normalised parent feature flips for lower-is-better metrics
    assert reward.normalised_parent(3.0) == pytest.approx(0.75)


def test_gain_tolerance_clamps() -> None:
    reward = RewardDefinition(0.0, 1.0)
    assert reward.normalise_gain(0.8, 0.2 + 5e-10) == reward.feasible_interval(0.8)[1]
    with pytest.raises(GainOutOfBoundsError):
        reward.normalise_gain(0.8, 0.2 + 1e-8)
    with pytest.raises(GainOutOfBoundsError):
        reward.normalise_gain(0.8, float("nan"))


def test_invalid_bounds_rejected() -> None:
    with pytest.raises(ValueError):
        RewardDefinition(1.0, 1.0)


def test_measurement_sd() -> None:
    assert measurement_sd(4.0, se=0.2) == pytest.approx(0.05)
    assert measurement_sd(4.0, deterministic=True) == 0.0
    assert measurement_sd(4.0) == 0.15


def test_behaviour_uses_declared_domain_only() -> None:
    # rebinning the archive cannot move x: the transform reads declared bounds only
    assert behaviour_transform(5.0, 0.0, 10.0) == 0.5
    assert behaviour_transform(20.0, 0.0, 10.0) == 1.0
    assert behaviour_transform(10.0, 1.0, 100.0, scale="log") == pytest.approx(0.5)


def test_design_rows_layout() -> None:
    space = DesignSpace(5, lineages=("A", "B"), kind_contrast=True, rag_contrast=True)
    assert space.shared_size == 12 and space.size == 22
    z0 = space.row(EXAMPLE_X, 0)
    z1 = space.row(EXAMPLE_X, 1, lineage="B", kind="program", rag="applicable")
    np.testing.assert_array_equal(z0[:5], EXAMPLE_X)
    assert not np.any(z0[5:])
    np.testing.assert_array_equal(z1[:5], EXAMPLE_X)
    np.testing.assert_array_equal(z1[5:10], EXAMPLE_X)
    assert z1[10] == 0.5 and z1[11] == 0.5
    assert not np.any(z1[12:17])  # lineage A untouched
    np.testing.assert_allclose(z1[17:22], EXAMPLE_X / math.sqrt(5))
    insight = space.row(EXAMPLE_X, 1, lineage="A", kind="insight")
    assert insight[10] == -0.5 and insight[11] == 0.0


def test_design_without_contrasts_and_unknown_lineage() -> None:
    space = DesignSpace(5, lineages=("A",), kind_contrast=False)
    assert space.size == 15
    with pytest.raises(DesignError):
        space.row(EXAMPLE_X, 1, lineage="Z")
    with pytest.raises(DesignError):
        space.row(EXAMPLE_X[:4], 0)


def test_prior_blocks() -> None:
    space = DesignSpace(5, lineages=("A",), kind_contrast=True)
    v = space.utility_prior_variance()
    assert np.all(v[:5] == 0.75**2) and np.all(v[5:11] == 0.35**2) and np.all(v[11:] == 0.25**2)
    mu, vg = space.invalidity_prior()
    assert mu[0] == pytest.approx(-2.944439, abs=1e-6) and not np.any(mu[1:])
    assert np.all(vg[:5] == 0.15**2) and np.all(vg[5:11] == 0.2**2) and np.all(vg[11:] == 0.36)
