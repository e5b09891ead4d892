"""Ground truth 12 (memory-model.md "Ground-truth tests" (12)) and the worked example step 8
(memory-model.md "Worked example")."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from gigaevo.memory.v2.causal import (
    DesignError,
    gate_value,
    itt_scores,
    itt_summary,
    offer_gate_report,
)

Z = [1, 0, 1, 0]
Y = [0.03, -0.02, -0.80, 0.01]
Q1 = [0.01] * 4
Q0 = [0.0] * 4
E = [0.7] * 4


def test_worked_example_step_8() -> None:
    psi = itt_scores(Z, Y, Q1, Q0, E)
    np.testing.assert_allclose(psi, [0.038571, 0.076667, -1.147143, -0.023333], atol=1e-6)
    summary = itt_summary(Z, Y, Q1, Q0, E)
    assert summary.dr == pytest.approx(-0.263810, abs=1e-6)
    assert summary.ips == pytest.approx(-0.266667, abs=1e-6)
    assert summary.low_power and not summary.insufficient_data
    treat = gate_value(1.0, Z, Y, Q1, Q0, E)
    control = gate_value(0.0, Z, Y, Q1, Q0, E)
    assert treat.value == pytest.approx(-0.272143, abs=1e-6)
    assert control.value == pytest.approx(-0.008333, abs=1e-6)
    assert treat.value - control.value == pytest.approx(summary.dr, abs=1e-12)
    assert treat.ess == pytest.approx(2.0) and treat.max_weight == pytest.approx(1.428571, abs=1e-6)
    assert treat.se is None  # one run
    assert treat.min_overlap == pytest.approx(0.3)


def test_insufficient_data_and_flags() -> None:
    assert itt_summary([1, 1], [0.1, 0.2], [0, 0], [0, 0], [0.7, 0.7]).insufficient_data
    rng = np.random.default_rng(0)
    z = (rng.uniform(size=400) < 0.5).astype(float)  # logged e = 0.7 but realised ~0.5
    s = itt_summary(z, rng.normal(size=400), np.zeros(400), np.zeros(400), np.full(400, 0.7))
    assert s.propensity_warning and not s.low_power


def test_clustered_se_matches_formula() -> None:
    rng = np.random.default_rng(1)
    n = 60
    z = (rng.uniform(size=n) < 0.7).astype(float)
    y = rng.normal(size=n)
    runs = [f"r{i % 3}" for i in range(n)]
    out = gate_value(0.4, z, y, np.zeros(n), np.zeros(n), np.full(n, 0.7), runs)
    w = np.where(z == 1, 0.4 / 0.7, 0.6 / 0.3)
    psi = w * y
    sums = [np.sum(psi[[i % 3 == k for i in range(n)]] - psi.mean()) for k in range(3)]
    assert out.se == pytest.approx(np.sqrt(1.5 * np.sum(np.square(sums))) / n)
    assert out.n_runs == 3


def _replications(reps: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Z ~ Bernoulli(0.7), heterogeneous true effect with mean tau = 0.05, wrong q-hat."""
    rng = np.random.default_rng(seed)
    dr, ips, se = np.empty(reps), np.empty(reps), np.empty(reps)
    for r in range(reps):
        x = rng.uniform(-1, 1, size=n)
        y0 = 0.1 * x + 0.05 * rng.standard_normal(n)
        y1 = y0 + 0.05 + 0.04 * x
        z = (rng.uniform(size=n) < 0.7).astype(float)
        y = np.where(z == 1, y1, y0)
        q1, q0 = 0.3 - 0.2 * x, np.full(n, -0.1)  # deliberately wrong nuisances
        s = itt_summary(z, y, q1, q0, np.full(n, 0.7))
        dr[r], ips[r], se[r] = s.dr, s.ips, s.se
    return dr, ips, se


def test_dr_unbiased_coverage_and_shrinking_error() -> None:
    dr, ips, se = _replications(2000, 100, seed=3)
    for est in (dr, ips):
        assert abs(est.mean() - 0.05) <= 3 * est.std(ddof=1) / np.sqrt(len(est))
    coverage = np.mean(np.abs(dr - 0.05) <= 1.96 * se)
    assert coverage == pytest.approx(0.95, abs=0.02)
    dr_big, _, _ = _replications(500, 400, seed=4)
    assert dr_big.std() / dr.std() == pytest.approx(0.5, abs=0.08)


def test_dr_with_good_nuisances_beats_ips_and_naive_is_unbiased_too() -> None:
    rng = np.random.default_rng(5)
    dr, ips, naive = np.empty(1000), np.empty(1000), np.empty(1000)
    for r in range(1000):
        x = rng.uniform(-1, 1, size=100)
        y0 = 0.1 * x + 0.05 * rng.standard_normal(100)
        z = (rng.uniform(size=100) < 0.7).astype(float)
        y = np.where(z == 1, y0 + 0.05 + 0.04 * x, y0)
        s = itt_summary(z, y, 0.1 * x + 0.05 + 0.04 * x, 0.1 * x, np.full(100, 0.7))
        assert s.dr is not None and s.ips is not None
        dr[r], ips[r] = s.dr, s.ips
        naive[r] = y[z == 1].mean() - y[z == 0].mean()
    for est in (dr, ips, naive):
        assert abs(est.mean() - 0.05) <= 3 * est.std(ddof=1) / np.sqrt(len(est))
    assert dr.std() < 0.8 * ips.std()  # ~0.011 vs ~0.018


# -- the summary's statistics, flags and weights on hand-made rows (issue 19) ----------


def test_standard_error_interval_and_p_value_of_the_worked_example() -> None:
    psi = np.array([0.038571428571, 0.076666666667, -1.147142857143, -0.023333333333])
    s = itt_summary(Z, Y, Q1, Q0, E)
    se = float(np.std(psi, ddof=1) / 2.0)
    assert s.se == pytest.approx(se, rel=1e-9)
    assert (s.ci_low, s.ci_high) == pytest.approx((s.dr - 1.96 * se, s.dr + 1.96 * se))
    assert s.z == pytest.approx(s.dr / se)
    assert s.p_value == pytest.approx(2.0 * norm.sf(abs(s.dr / se)))
    assert (s.n, s.n_treated, s.n_control) == (4, 2, 2)
    assert not s.ips_outside_ci  # -0.2667 lies inside [-0.84, 0.31]


@pytest.mark.parametrize(("n_treated", "n_control", "low"), [(30, 30, False), (29, 30, True),
                                                            (30, 29, True)])  # fmt: skip
def test_low_power_needs_thirty_rows_in_each_arm(n_treated: int, n_control: int, low: bool) -> None:
    n = n_treated + n_control
    z = np.r_[np.ones(n_treated), np.zeros(n_control)]
    y = np.linspace(-0.1, 0.1, n)
    e = np.full(n, n_treated / n)  # no propensity warning
    s = itt_summary(z, y, np.zeros(n), np.zeros(n), e)
    assert s.low_power is low and not s.propensity_warning


def test_propensity_warning_beyond_five_points() -> None:
    z = np.r_[np.ones(60), np.zeros(40)]  # 60 % shown
    y = np.linspace(-0.1, 0.1, 100)
    zeros = np.zeros(100)
    assert not itt_summary(z, y, zeros, zeros, np.full(100, 0.64)).propensity_warning
    assert itt_summary(z, y, zeros, zeros, np.full(100, 0.66)).propensity_warning
    assert itt_summary(z, y, zeros, zeros, np.full(100, 0.54)).propensity_warning


def test_ips_outside_the_interval_is_flagged() -> None:
    """Good nuisances give a tight DR interval; a large common shift of Y moves IPS only."""
    n = 200
    z = np.r_[np.ones(148), np.zeros(52)]  # 74 % shown against e = 0.7
    y = 5.0 + 0.01 * np.sin(np.arange(n))
    s = itt_summary(z, y, np.full(n, 5.0), np.full(n, 5.0), np.full(n, 0.7))
    assert s.dr == pytest.approx(0.0, abs=0.01) and s.ips is not None
    assert s.ips_outside_ci and abs(s.ips) > 0.5


def test_propensities_are_clipped_not_divided_by_zero() -> None:
    psi = itt_scores([1.0], [1.0], [0.0], [0.0], [0.0])
    assert psi[0] == pytest.approx(1.0 / 1e-6)
    psi = itt_scores([0.0], [1.0], [0.0], [0.0], [1.0])
    assert psi[0] == pytest.approx(-1.0 / 1e-6)
    with pytest.raises(DesignError):
        itt_scores([1.0, 0.0], [1.0], [0.0], [0.0], [0.5])


def test_gate_weights_ess_and_overlap() -> None:
    e = [0.7, 0.7, 0.6, 0.6]
    logged = gate_value(e, Z, Y, Q1, Q0, e)  # pi = e: every weight is 1
    assert logged.ess == pytest.approx(4.0) and logged.max_weight == pytest.approx(1.0)
    never = gate_value(0.0, Z, Y, Q1, Q0, e)  # weights 0, 1/0.3, 0, 1/0.4
    assert never.max_weight == pytest.approx(1 / 0.3)
    w = np.array([0.0, 1 / 0.3, 0.0, 1 / 0.4])
    assert never.ess == pytest.approx(w.sum() ** 2 / (w**2).sum())
    assert never.min_overlap == pytest.approx(0.3) and never.n == 4 and never.n_runs == 1
    half = gate_value(0.5, Z, Y, Q1, Q0, E)
    w = np.where(np.array(Z) == 1, 0.5 / 0.7, 0.5 / 0.3)
    psi = 0.5 * np.array(Q1) + 0.5 * np.array(Q0) + w * (np.array(Y) - np.where(Z, Q1, Q0))
    assert half.value == pytest.approx(psi.mean())
    for bad in ((1.5, E), (0.5, [0.7, 0.7, 0.7, 1.0]), (-0.1, E)):
        with pytest.raises(DesignError):
            gate_value(bad[0], Z, Y, Q1, Q0, bad[1])
    with pytest.raises(DesignError):
        gate_value(0.5, [], [], [], [], [])
    with pytest.raises(DesignError):
        gate_value(0.5, Z, Y, Q1, Q0, E, runs=["a", "b"])


def test_report_keeps_itt_fields_flat_and_under_itt() -> None:
    report = offer_gate_report(Z, Y, Q1, Q0, E, runs=["a", "a", "b", "b"])
    assert report["dr"] == report["itt"]["dr"] == pytest.approx(-0.263810, abs=1e-6)  # type: ignore[index]
    assert report["gate_difference"] == pytest.approx(report["dr"])
    gates = report["gates"]
    assert set(gates) == {"always_offer", "never_offer", "logged"}  # type: ignore[arg-type]
    assert gates["always_offer"]["se"] is not None and "se_note" not in gates["always_offer"]  # type: ignore[index]
    one_run = offer_gate_report(Z, Y, Q1, Q0, E)
    assert one_run["gates"]["logged"]["se"] is None  # type: ignore[index]
    assert "2 runs" in one_run["gates"]["logged"]["se_note"]  # type: ignore[index]
    empty = offer_gate_report([1, 1], [0.1, 0.2], [0, 0], [0, 0], [0.7, 0.7])
    assert empty["insufficient_data"] and empty["gates"] is None
    assert str(empty["reason"]).startswith("insufficient_data")


def test_two_rows_give_a_standard_error_and_a_flat_score_gives_no_z() -> None:
    # one row per arm, q = 0, e = 1/2: psi = 2 Y1 = 0.2 and -2 Y0 = 0.2 -> equal scores
    flat = itt_summary([1, 0], [0.1, -0.1], [0, 0], [0, 0], [0.5, 0.5])
    assert flat.dr == pytest.approx(0.2) and flat.se == 0.0
    assert flat.z is not None and np.isnan(flat.z) and np.isnan(flat.p_value)  # type: ignore[arg-type]
    # psi = 0.2 and -0.4: sd (ddof 1) = 0.6 / sqrt(2), SE = sd / sqrt(2) = 0.3
    two = itt_summary([1, 0], [0.1, 0.2], [0, 0], [0, 0], [0.5, 0.5])
    assert two.dr == pytest.approx(-0.1) and two.se == pytest.approx(0.3)
    assert two.z == pytest.approx(-0.1 / 0.3)


def test_gate_value_rejects_a_propensity_of_zero_and_accepts_the_pi_bounds() -> None:
    with pytest.raises(DesignError, match="e in"):
        gate_value(0.5, Z, Y, Q1, Q0, [0.7, 0.0, 0.7, 0.7])
    for pi in (0.0, 1.0):
        assert gate_value(pi, Z, Y, Q1, Q0, E).n == 4
    with pytest.raises(DesignError, match="pi must lie"):
        gate_value([0.5, 0.5, 0.5, 1.0 + 1e-9], Z, Y, Q1, Q0, E)


def test_zero_weights_have_zero_effective_sample_size() -> None:
    # pi = 0 on rows that were all shown: every weight pi / e is 0
    gv = gate_value(0.0, [1, 1], [0.2, 0.4], [0.1, 0.1], [0.05, 0.05], [0.7, 0.7])
    assert gv.ess == 0.0 and gv.max_weight == 0.0
    assert gv.value == pytest.approx(0.05)  # psi = q0 on every row


def test_report_intervals_labels_and_an_empty_ledger() -> None:
    report = offer_gate_report(Z, Y, Q1, Q0, E, runs=["a", "a", "b", "b"])
    gates = report["gates"]
    for name, pi in (("always_offer", "pi = 1"), ("never_offer", "pi = 0"), ("logged", "pi = e")):
        entry = gates[name]  # type: ignore[index]
        assert entry["gate"] == name and entry["pi"].startswith(pi)
        assert entry["ci_low"] == pytest.approx(entry["value"] - 1.96 * entry["se"])
        assert entry["ci_high"] == pytest.approx(entry["value"] + 1.96 * entry["se"])
        assert (entry["n"], entry["n_runs"]) == (4, 2)
    assert report["mean_offer_probability"] == pytest.approx(0.7)
    # 2 of 4 shown against e = 0.7: a 20-point gap warns
    assert report["flags"] == {"low_power": True, "propensity_warning": True,  # type: ignore[comparison-overlap]
                               "ips_outside_ci": False}  # fmt: skip
    assert report["low_power"] is True and report["n_treated"] == report["n_control"] == 2
    one_run = offer_gate_report(Z, Y, Q1, Q0, E)["gates"]["never_offer"]  # type: ignore[index]
    assert one_run["ci_low"] is None and one_run["ci_high"] is None
    assert one_run["se_note"].startswith("one run")
    empty = offer_gate_report([], [], [], [], [])
    assert empty["insufficient_data"] and empty["mean_offer_probability"] is None
    assert empty["n"] == 0 and empty["gate_difference"] is None
    one_arm = offer_gate_report([1, 1], [0.1, 0.2], [0, 0], [0, 0], [0.7, 0.7])
    assert (one_arm["n"], one_arm["n_treated"], one_arm["n_control"]) == (2, 2, 0)
    assert one_arm["dr"] is None and one_arm["mean_offer_probability"] == pytest.approx(0.7)
