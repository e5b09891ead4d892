"""Context features and design rows at their edges: clipping, rejection of bad input with
a message that names the culprit, and the row layout against vectors written by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gigaevo.memory.v2.causal.errors import DesignError
from gigaevo.memory.v2.causal.features import (
    DesignSpace,
    RewardDefinition,
    behaviour_features,
    context_features,
    measurement_sd,
)


def test_declared_behaviour_is_clipped_into_the_unit_interval() -> None:
    assert behaviour_features([-0.2, 0.0, 0.3, 1.0, 1.7], "declared") == [
        0.0,
        0.0,
        0.3,
        1.0,
        1.0,
    ]
    assert behaviour_features([0.25, 0.75], "none") == []


def test_an_unknown_behaviour_transform_is_named() -> None:
    with pytest.raises(ValueError, match=r"^unknown behaviour transform 'Declared'$"):
        behaviour_features([0.5], "Declared")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^unknown behaviour transform 'None'$"):
        behaviour_features([0.5], "None")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "behaviour", [[-0.01, 0.5], [0.5, 1.01], [0.5, float("nan")], [[0.5, 0.5]]]
)
def test_context_rejects_behaviour_outside_the_unit_interval(behaviour: list) -> None:
    reward = RewardDefinition(0.0, 1.0)
    with pytest.raises(DesignError, match=r"^behaviour values must be a 1-D sequence in \[0, 1\]$"):
        context_features(reward, 0.5, 0.0, behaviour)


def test_context_at_the_edges_of_the_unit_interval() -> None:
    """b = 0 and b = 1 are legal and map to -1 and +1; f~ clips at both ends."""
    reward = RewardDefinition(0.0, 2.0)
    x = context_features(reward, 3.0, 0.0, [0.0, 1.0])  # parent above the upper bound
    np.testing.assert_array_equal(x, [1.0, 1.0, 0.0, -1.0, 1.0])
    x = context_features(reward, -1.0, 0.0, [])  # parent below the lower bound
    np.testing.assert_array_equal(x, [1.0, -1.0, 0.0])


def test_normalised_parent_clips_to_one_in_both_directions() -> None:
    up = RewardDefinition(0.0, 2.0)
    down = RewardDefinition(0.0, 2.0, higher_is_better=False)
    assert up.normalised_parent(5.0) == 1.0
    assert up.normalised_parent(-5.0) == 0.0
    assert down.normalised_parent(5.0) == 0.0
    assert down.normalised_parent(-5.0) == 1.0
    assert down.normalised_parent(0.5) == 0.75


@pytest.mark.parametrize("se", [-0.1, float("nan"), float("inf")])
def test_a_bad_standard_error_is_named(se: float) -> None:
    with pytest.raises(ValueError, match=r"^standard error must be finite and >= 0, got"):
        measurement_sd(2.0, se)


def test_measurement_sd_in_normalised_units() -> None:
    assert measurement_sd(4.0, 0.0) == 0.0
    assert measurement_sd(4.0, 1.0) == 0.25
    assert measurement_sd(4.0, None, unknown=0.3) == 0.3
    assert measurement_sd(4.0, 1.0, deterministic=True) == 0.0


def test_duplicate_lineages_are_named() -> None:
    with pytest.raises(DesignError, match=r"^lineage ids must be unique$"):
        DesignSpace(2, lineages=("a", "b", "a"))
    with pytest.raises(DesignError, match=r"^context width must be >= 1$"):
        DesignSpace(0)


def test_treated_row_with_both_contrasts_by_hand() -> None:
    """C = 2, lineages (a, b), both contrasts: z_1 = [x ; x ; kappa ; r ; 0 0 ; x / sqrt 2]."""
    space = DesignSpace(2, lineages=("a", "b"), kind_contrast=True, rag_contrast=True)
    assert space.size == 2 * 2 + 1 + 1 + 2 * 2
    x = np.array([1.0, -0.4])
    s = 1 / math.sqrt(2)
    z = space.row(x, 1, lineage="b", kind="program", rag="not_applicable")
    np.testing.assert_allclose(z, [1.0, -0.4, 1.0, -0.4, 0.5, -0.5, 0, 0, s, -0.4 * s])
    z = space.row(x, 1, lineage="a", kind="insight")  # no RAG label: unassessed, 0
    np.testing.assert_allclose(z, [1.0, -0.4, 1.0, -0.4, -0.5, 0.0, s, -0.4 * s, 0, 0])
    np.testing.assert_array_equal(space.row(x, 0), [1.0, -0.4, 0, 0, 0, 0, 0, 0, 0, 0])


def test_invalidity_prior_with_loosened_levels_by_hand() -> None:
    """C = 2, one lineage, kind contrast: mu = [logit 0.1, 0, ...]; the baseline intercept
    and the lineage intercept (variance C sd^2) take their own sds, the slopes keep theirs."""
    space = DesignSpace(2, lineages=("a",))
    mean, var = space.invalidity_prior(
        base_rate=0.1,
        baseline_sd=0.15,
        shared_sd=0.2,
        lineage_sd=0.6,
        baseline_intercept_sd=1.0,
        lineage_intercept_sd=0.5,
    )
    np.testing.assert_allclose(mean, [math.log(0.1 / 0.9), 0, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(var, [1.0, 0.0225, 0.04, 0.04, 0.04, 2 * 0.25, 0.36])
    with pytest.raises(ValueError, match=r"^invalid base rate must lie in"):
        space.invalidity_prior(base_rate=1.0)


def test_a_log_domain_starting_at_zero_is_refused_word_for_word() -> None:
    from gigaevo.memory.v2.causal.features import behaviour_transform

    with pytest.raises(ValueError, match=r"^log behaviour transform needs low > 0$"):
        behaviour_transform(1.0, 0.0, 10.0, "log")
    with pytest.raises(ValueError, match=r"^behaviour domain must have high > low$"):
        behaviour_transform(1.0, 2.0, 2.0, "log")
    assert behaviour_transform(10.0, 1.0, 100.0, "log") == pytest.approx(0.5)
