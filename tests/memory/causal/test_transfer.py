"""The multitask transfer prior rule by rule (memory-model.md "Multitask transfer"): settings
checked at their boundaries, strata, the digest, and P_help against an independent
Newton-Laplace solution of the documented posterior when the target task has evidence."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from gigaevo.memory.v2.causal import DesignSpace
from gigaevo.memory.v2.causal.transfer import (
    TransferConfig,
    TransferFit,
    TransferTrial,
    fit_transfer,
    intercept_prior_mean,
    prior_shift,
    supported_strata,
    trial_digest,
)


@pytest.mark.parametrize(
    ("field", "bad", "good"),
    [
        ("baseline_sd", 0.0, 1e-9),
        ("card_sd", 0.0, 1e-9),
        ("task_card_sd", -1.0, 1e-9),
        ("lineage_sd", 0.0, 1e-9),
        ("min_trials_per_arm", 0, 1),
        ("shift_scale", -1e-9, 0.0),
        ("shift_scale", 1.0 + 1e-9, 1.0),
    ],
)
def test_settings_are_checked_at_their_boundaries(field: str, bad: float, good: float) -> None:
    with pytest.raises(ValueError, match=field):
        TransferConfig(**{field: bad})  # type: ignore[arg-type]
    assert getattr(TransferConfig(**{field: good}), field) == good  # type: ignore[arg-type]


def test_prior_shift_is_linear_in_p_help_within_the_configured_range() -> None:
    c = TransferConfig(shift_scale=0.4, lineage_sd=0.5)
    assert prior_shift(0.75, c) == pytest.approx(0.4 * 0.5 * 0.5)
    assert prior_shift(0.25, c) == pytest.approx(-0.1)
    assert prior_shift(0.75) == pytest.approx(0.5 * 0.25 * 0.5)  # the defaults
    assert TransferFit().help_probability("never-seen") == 0.5


def _t(did: str, run: str, z: int, ok: bool, task: str = "x", card: str = "A") -> TransferTrial:
    return TransferTrial(did, task, run, card, z, ok)


def test_a_decision_counts_once_and_the_limit_is_configurable() -> None:
    # r1 has two treated and two control trials only if the duplicate decision counted twice
    dup = [_t("a", "r1", 1, True), _t("a", "r1", 1, True), _t("c", "r1", 0, True),
           _t("d", "r1", 0, False)]  # fmt: skip
    assert supported_strata(dup, exclude_run="me") == {}
    three = [_t(f"t{i}", "r1", 1, i < 2) for i in range(3)]
    three += [_t(f"c{i}", "r1", 0, i < 1) for i in range(3)]
    assert list(supported_strata(three, exclude_run="me", min_per_arm=3)) == [("x", "r1", "A")]
    assert supported_strata(three[1:], exclude_run="me", min_per_arm=3) == {}
    strict = fit_transfer(
        three[1:], "x", exclude_run="me", config=TransferConfig(min_trials_per_arm=3)
    )
    assert strict.strata == 0 and strict.p_help == {}
    assert fit_transfer(three[1:], "x", exclude_run="me").strata == 1  # default: 2 per arm


def test_the_digest_sees_every_field_of_a_trial() -> None:
    base = _t("a", "r1", 1, True)
    changed = [
        _t("b", "r1", 1, True),
        _t("a", "r2", 1, True),
        _t("a", "r1", 0, True),
        _t("a", "r1", 1, False),
        _t("a", "r1", 1, True, task="y"),
        _t("a", "r1", 1, True, card="B"),
    ]
    digests = {trial_digest([base])} | {trial_digest([c]) for c in changed}
    assert len(digests) == 1 + len(changed)


def _newton_laplace(x: np.ndarray, y: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MAP and Laplace covariance of a logistic regression with N(0, diag(var)) priors."""
    g = np.zeros(x.shape[1])
    for _ in range(60):
        p = 1.0 / (1.0 + np.exp(-x @ g))
        grad = x.T @ (p - y) + g / var
        hess = x.T @ (x * (p * (1 - p))[:, None]) + np.diag(1.0 / var)
        g = g - np.linalg.solve(hess, grad)
    return g, np.linalg.inv(hess)


def test_p_help_of_a_task_seen_with_the_card_adds_both_effects_and_their_covariance() -> None:
    """Two strata in two tasks; P_help for each seen task and for an unseen one."""
    trials, rows, y = [], [], []
    # columns: lam0[other/r1], lam0[toy/r2], lam1, lam2[other], lam2[toy]
    for task, run, stratum, col, (nt, st, nc, sc) in [
        ("other", "r1", 0, 3, (20, 15, 20, 5)),
        ("toy", "r2", 1, 4, (10, 3, 10, 6)),
    ]:
        for arm, n, s in ((1, nt, st), (0, nc, sc)):
            for i in range(n):
                trials.append(TransferTrial(f"{run}-{arm}-{i}", task, run, "A", arm, i < s))
                row = np.zeros(5)
                row[stratum] = 1.0
                if arm:
                    row[2] = row[col] = 1.0
                rows.append(row)
                y.append(float(i < s))
    var = np.array([1.5**2, 1.5**2, 0.75**2, 1.0**2, 1.0**2])
    g, cov = _newton_laplace(np.array(rows), np.array(y), var)
    for target, k in (("other", 3), ("toy", 4)):
        m, s2 = g[2] + g[k], cov[2, 2] + cov[k, k] + 2.0 * cov[2, k]
        got = fit_transfer(trials, target, exclude_run="me").help_probability("A")
        assert got == pytest.approx(norm.cdf(m / math.sqrt(s2)), abs=1e-6)
    # the card helps in "other" and hurts in "toy": the two targets fall on either side
    unseen = fit_transfer(trials, "third", exclude_run="me").help_probability("A")
    assert unseen == pytest.approx(norm.cdf(g[2] / math.sqrt(cov[2, 2] + 1.0)), abs=1e-6)
    assert fit_transfer(trials, "toy", exclude_run="me").help_probability("A") < 0.5 < unseen
    # a task-by-card sd other than 1 enters the prior and the unseen task's extra variance
    c = TransferConfig(task_card_sd=0.5)
    g, cov = _newton_laplace(np.array(rows), np.array(y), np.r_[var[:3], 0.25, 0.25])
    got = fit_transfer(trials, "third", exclude_run="me", config=c).help_probability("A")
    assert got == pytest.approx(norm.cdf(g[2] / math.sqrt(cov[2, 2] + 0.25)), abs=1e-6)


def test_intercept_prior_mean_takes_the_heads_lineage_sd() -> None:
    fit = TransferFit({"A": 0.9, "B": 0.5}, strata=2)
    space = DesignSpace(3, ("A", "B"))
    mu = intercept_prior_mean(space, fit, lineage_sd=0.5)
    assert mu is not None and mu.shape == (space.size,)
    assert mu[space.lineage_slice("A").start] == pytest.approx(0.5 * 0.5 * 0.8)
    assert np.count_nonzero(mu) == 1
    default = intercept_prior_mean(space, fit)
    assert default is not None
    assert default[space.lineage_slice("A").start] == pytest.approx(0.5 * 0.25 * 0.8)
    assert intercept_prior_mean(space, fit, TransferConfig(shift_scale=0.0)) is None


def test_a_fit_without_a_covariance_keeps_no_shift_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gigaevo.memory.v2.causal import transfer

    class NoCovariance(transfer.LogisticLaplaceHead):
        def fit(self, x: np.ndarray, d: np.ndarray) -> NoCovariance:
            super().fit(x, d)
            self.coef_cov_ = None
            return self

    monkeypatch.setattr(transfer, "LogisticLaplaceHead", NoCovariance)
    trials = [_t(f"t{i}", "r1", 1, i < 3) for i in range(4)]
    trials += [_t(f"c{i}", "r1", 0, i < 1) for i in range(4)]
    fit = fit_transfer(trials, "x", exclude_run="me")
    assert fit.failure == "A: no covariance" and fit.help_probability("A") == 0.5
