"""The OPE gate values' refusals pinned word for word (memory-model.md "Off-policy
evaluation"; issue 19: the survivors of a whole-module mutation run)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gigaevo.memory.v2.causal import DesignError
from gigaevo.memory.v2.causal.ope import (
    PROPENSITY_WARNING_GAP,
    gate_value,
    itt_summary,
    offer_gate_report,
)


def test_a_gate_value_of_no_rows_is_refused_by_name() -> None:
    with pytest.raises(DesignError, match=r"^gate value needs at least one row$"):
        gate_value(1.0, [], [], [], [], [])


def test_a_gate_value_of_one_row_is_its_doubly_robust_score() -> None:
    # treated row, pi = 1, e = 0.8: psi = q1 + (1 / 0.8) (y - q1) = 0.1 + 1.25 * 0.4 = 0.6
    gv = gate_value(1.0, [1], [0.5], [0.1], [0.3], [0.8])
    assert gv.value == pytest.approx(0.6) and gv.n == 1 and gv.n_runs == 1 and gv.se is None
    assert gv.max_weight == pytest.approx(1.25) and gv.ess == pytest.approx(1.0)
    assert gv.min_overlap == pytest.approx(0.2)


@pytest.mark.parametrize(("pi", "e"), [(1.5, 0.5), (-0.1, 0.5), (0.5, 1.0), (0.5, 0.0)])
def test_a_gate_outside_zero_one_or_an_offer_at_zero_or_one_is_refused(pi: float, e: float) -> None:
    with pytest.raises(DesignError, match=r"^pi must lie in \[0, 1\] and e in \(0, 1\)$"):
        gate_value(pi, [1], [0.5], [0.1], [0.3], [e])
    gate_value(min(max(pi, 0.0), 1.0), [1], [0.5], [0.1], [0.3], [0.5])  # the edges of pi are fine


def test_mismatched_columns_and_run_ids_are_refused_by_name() -> None:
    with pytest.raises(DesignError, match=r"^OPE columns must have equal length$"):
        gate_value(1.0, [1, 0], [0.5], [0.1], [0.3], [0.8])
    with pytest.raises(DesignError, match=r"^runs must have one id per row$"):
        gate_value(1.0, [1], [0.5], [0.1], [0.3], [0.8], runs=["a", "b"])


def test_a_single_small_weight_still_has_an_effective_sample_of_one() -> None:
    # pi = 0.5 on a treated row offered at e = 0.8: w = 0.625, ESS = w^2 / w^2 = 1
    gv = gate_value(0.5, [1], [0.5], [0.1], [0.3], [0.8])
    assert gv.max_weight == pytest.approx(0.625) and gv.ess == pytest.approx(1.0)


@pytest.mark.parametrize(("beyond", "at"), [(1e-9, 1e-6), (1 - 1e-9, 1 - 1e-6)])
def test_the_ips_cross_check_clips_offer_probabilities_on_both_sides(
    beyond: float, at: float
) -> None:
    rows = ([1, 0], [1.0, 0.5], [0.0, 0.0], [0.0, 0.0])
    clipped = itt_summary(*rows, [beyond, beyond])
    assert clipped.ips == pytest.approx(itt_summary(*rows, [at, at]).ips, rel=1e-12)


def test_a_summary_with_both_arms_says_false_not_null_for_insufficient_data() -> None:
    # ope_summary.json is read in notebooks: a summary with data writes "false", never null
    rows = ([1, 0, 1, 0], [0.4, 0.1, 0.3, 0.0], [0.3] * 4, [0.1] * 4, [0.7] * 4)
    assert itt_summary(*rows).insufficient_data is False
    report = offer_gate_report(*rows)
    assert json.loads(json.dumps(report))["insufficient_data"] is False
    empty = itt_summary([1, 1], [0.4, 0.3], [0.3] * 2, [0.1] * 2, [0.7] * 2)
    assert empty.insufficient_data is True and empty.dr is None


def test_column_vectors_give_the_same_report_as_flat_columns() -> None:
    # a notebook's df[["z"]].to_numpy() is (n, 1): every column is read flat
    rng = np.random.default_rng(0)
    n = 40
    z = (rng.random(n) < 0.7).astype(float)
    y, q1, q0 = rng.normal(size=n), 0.1 * rng.normal(size=n), 0.1 * rng.normal(size=n)
    e = np.full(n, 0.7)
    runs = [f"r{i % 3}" for i in range(n)]
    flat = offer_gate_report(z, y, q1, q0, e, runs)
    assert flat["gates"] is not None
    columns = [c.reshape(-1, 1) for c in (z, y, q1, q0, e)]
    assert offer_gate_report(*columns, runs) == flat


def test_the_propensity_warning_needs_a_gap_of_more_than_its_threshold() -> None:
    # 1 shown row of 16 against e = 1/16 - 0.05, exact in floating point: a gap of exactly
    # PROPENSITY_WARNING_GAP is not "more than" it (memory-model.md "Off-policy evaluation")
    n, at = 16, 1 / 16 - PROPENSITY_WARNING_GAP
    z, y, q = [1] + [0] * (n - 1), [0.5] + [0.1] * (n - 1), [0.0] * n
    assert abs(1 / n - at) == PROPENSITY_WARNING_GAP
    assert itt_summary(z, y, q, q, [at] * n).propensity_warning is False
    beyond = at - 1e-12  # a gap just above the threshold
    assert itt_summary(z, y, q, q, [beyond] * n).propensity_warning is True
