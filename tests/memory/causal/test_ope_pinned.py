"""The OPE gate values' refusals pinned word for word (memory-model.md "Off-policy
evaluation"; issue 19: the survivors of a whole-module mutation run)."""

from __future__ import annotations

import pytest

from gigaevo.memory.v2.causal import DesignError
from gigaevo.memory.v2.causal.ope import gate_value


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
