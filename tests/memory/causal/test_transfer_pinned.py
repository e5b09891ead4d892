"""The multitask transfer prior's strata and failure paths pinned (memory-model.md
"Multitask transfer"; issue 19: the survivors of a whole-module mutation run)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from gigaevo.memory.v2.causal import transfer
from gigaevo.memory.v2.causal.transfer import TransferTrial, fit_transfer, supported_strata


def _t(did: str, run: str, z: int, ok: bool, card: str = "A") -> TransferTrial:
    return TransferTrial(did, "x", run, card, z, ok)


def _stratum(run: str, treated: int, control: int, card: str = "A") -> list[TransferTrial]:
    return [_t(f"{run}{card}t{i}", run, 1, i % 2 == 0, card) for i in range(treated)] + [
        _t(f"{run}{card}c{i}", run, 0, i % 2 == 1, card) for i in range(control)
    ]


def test_a_stratum_needs_enough_controls_not_only_enough_trials() -> None:
    # five treated and one control: six trials, but one control is short of the two needed
    assert supported_strata(_stratum("r1", 5, 1), exclude_run="me") == {}
    assert list(supported_strata(_stratum("r1", 5, 2), exclude_run="me")) == [("x", "r1", "A")]
    assert supported_strata(_stratum("r1", 1, 5), exclude_run="me") == {}


def test_trials_after_an_excluded_or_repeated_one_still_count() -> None:
    mine = _t("m0", "me", 1, True)
    kept = _stratum("r1", 2, 2)
    assert list(supported_strata([mine, *kept], exclude_run="me")) == [("x", "r1", "A")]
    assert list(supported_strata([kept[0], *kept], exclude_run="me")) == [("x", "r1", "A")]


def _with_head(monkeypatch: pytest.MonkeyPatch, coef: float, var: float | None) -> None:
    """A logistic head that reports success with the given lam1 estimate and variance (None:
    no covariance): the degenerate answers fit_transfer must survive."""

    class Degenerate(transfer.LogisticLaplaceHead):
        def fit(self, x: np.ndarray, d: np.ndarray) -> Degenerate:
            super().fit(x, d)
            self.coef_ = np.full_like(self.coef_, coef)
            self.coef_cov_ = None if var is None else np.diag(np.full(len(self.coef_), var))
            return self

    monkeypatch.setattr(transfer, "LogisticLaplaceHead", Degenerate)


@pytest.mark.parametrize(("coef", "var"), [(np.nan, 1.0), (0.3, np.inf), (0.3, 0.0)])
def test_a_non_finite_or_zero_variance_answer_keeps_no_shift_and_says_why(
    monkeypatch: pytest.MonkeyPatch, coef: float, var: float
) -> None:
    _with_head(monkeypatch, coef, var)
    for target in ("x", "unseen"):  # lam1 + lam2 of a seen task, lam1 alone of an unseen one
        fit = fit_transfer(_stratum("r1", 3, 3), target, exclude_run="me")
        if var == 0.0 and target == "unseen":  # s^2 = 0 + tau^2 = 1: a finite answer
            assert fit.failure == "" and fit.p_help == {"A": pytest.approx(norm.cdf(0.3))}
            continue
        assert fit.failure == "A: non-finite P_help", target
        assert fit.help_probability("A") == 0.5 and fit.p_help == {}


def test_every_failed_card_is_named_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    _with_head(monkeypatch, 0.0, None)
    trials = _stratum("r1", 2, 2, "B") + _stratum("r1", 2, 2, "A")
    fit = fit_transfer(trials, "x", exclude_run="me")
    assert fit.failure == "A: no covariance; B: no covariance"
    assert fit.strata == 2 and fit.p_help == {}
