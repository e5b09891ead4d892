"""The chance constraint bites in time with the production invalidity priors (issue 20).

The reference priors of memory-model.md "Invalidity head and chance constraint" (sd 0.15
on the baseline block, 0.60 on a card's lineage block, whose intercept column carries
1/sqrt(C)) give a card's own invalid logit a prior
sd of about 0.3: a card observed at 35 % invalid against 5 % controls stays in the safe set
for 30-60 cited rows (tests in ``test_invalidity.py`` pin the page's reference numbers). The
production defaults loosen only the two levels (the problem's invalid logit, sd 1.5, and a
card's own shift of it, sd 2.0) and keep its slopes; here, on data not shaped like the
model (exact invalid counts at random contexts), they exclude such a card after about as
many cited rows as a flat Beta-binomial, never exclude a card under delta, admit cold
cards, and stop excluding neutral cards on problems whose base rate is far from 5 %.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from gigaevo.memory.v2.causal import (
    DesignSpace,
    LogisticLaplaceHead,
    RewardDefinition,
    acceptance_probability,
    context_features,
)
from gigaevo.memory.v2.read.heads import invalidity_prior, shift_levels
from gigaevo.memory.v2.settings import PosteriorSettings
from tests.memory.causal.simulate import CARD, random_contexts

PROD = PosteriorSettings()
N_CONTROL = 129


def _head(space: DesignSpace, model: bool = False, post: PosteriorSettings = PROD
          ) -> LogisticLaplaceHead:  # fmt: skip
    """An unfitted invalidity head with the page's priors or the production ones."""
    if model:
        return LogisticLaplaceHead(*space.invalidity_prior())
    return LogisticLaplaceHead(*invalidity_prior(post, space), None, shift_levels(post, space))


def _excluded_share(
    seed: int, n_cited: int, rate: float, *, base: float = 0.05, n_control: int = N_CONTROL,
    model: bool = False, post: PosteriorSettings = PROD,
) -> float:  # fmt: skip
    """Share of the card's contexts where it is excluded, with exactly round(rate * n)
    invalid cited rows and round(base * n_control) invalid controls at random contexts."""
    rng = np.random.default_rng(seed)
    space = DesignSpace(5, (CARD,), kind_contrast=False)
    x = random_contexts(n_cited + n_control, rng)
    arm = np.r_[np.ones(n_cited, dtype=int), np.zeros(n_control, dtype=int)]
    d = np.zeros(len(arm))
    d[rng.permutation(n_cited)[: round(rate * n_cited)]] = 1.0
    d[n_cited + rng.permutation(n_control)[: round(base * n_control)]] = 1.0
    design = np.array([space.row(xi, int(a), CARD) for xi, a in zip(x, arm, strict=True)])
    head = _head(space, model, post).fit(design, d)
    assert head.ok_
    out = []
    for xi in x[: min(n_cited, 8)]:
        eta, cov = head.linear_predictor(space.row(xi, 0), space.row(xi, 1, CARD))
        out.append(not acceptance_probability(eta, cov).admitted(0.10))
    return float(np.mean(out))


def _flat_excludes(n_cited: int, rate: float, base: float = 0.05) -> bool:
    """A flat Beta-binomial on each arm: exclude iff P(p_1 - p_0 > delta) >= 1 - alpha."""
    k1, k0 = round(rate * n_cited), round(base * N_CONTROL)
    rng = np.random.default_rng(0)
    p1 = stats.beta(1 + k1, 1 + n_cited - k1).rvs(200_000, random_state=rng)
    p0 = stats.beta(1 + k0, 1 + N_CONTROL - k0).rvs(200_000, random_state=rng)
    return float(np.mean(p1 - p0 > 0.10)) >= 0.90


def test_a_card_at_35_percent_leaves_the_safe_set_about_when_a_flat_beta_binomial_does() -> None:
    assert _flat_excludes(10, 0.35) and _flat_excludes(20, 0.35)  # the yardstick of issue 20
    shares = {n: np.mean([_excluded_share(s, n, 0.35) for s in range(6)]) for n in (10, 20)}
    assert shares[10] >= 0.75 and shares[20] >= 0.75, shares
    # the page's reference priors keep it in the safe set at 20 cited rows
    assert np.mean([_excluded_share(s, 20, 0.35, model=True) for s in range(6)]) == 0.0


def test_a_card_under_delta_is_never_excluded() -> None:
    for n in (10, 30, 60):
        assert max(_excluded_share(s, n, 0.13) for s in range(4)) == 0.0, n  # +8 points


def test_a_neutral_card_stays_safe_when_the_base_rate_is_far_from_five_percent() -> None:
    """A 40 % base rate (LLM-written programs often fail that often): the page's tight
    baseline level drags p_0 towards 5 % and blames the cards; the loose level does not."""
    args = {"base": 0.40, "n_control": 300}
    shares = [_excluded_share(s, 300, 0.40, **args) for s in range(6)]  # type: ignore[arg-type]
    assert max(shares) == 0.0, shares
    model = [_excluded_share(s, 300, 0.40, model=True, **args) for s in range(6)]  # type: ignore[arg-type]
    assert max(model) > 0.0, model  # the failure the loose level removes


def test_cold_cards_are_admitted() -> None:
    x = context_features(RewardDefinition(0.0, 1.0), 0.80, 50, [0.25, 0.50])
    space = DesignSpace(5, ("A",), kind_contrast=True)
    head = _head(space).fit(np.zeros((0, space.size)), np.zeros(0))
    eta, cov = head.linear_predictor(space.row(x, 0), space.row(x, 1, "A", "insight"))
    acc = acceptance_probability(eta, cov)
    assert 0.5 < acc.probability < 0.9999 and acc.admitted(0.10)


def test_level_sds_set_only_the_intercept_columns() -> None:
    space = DesignSpace(4, ("a", "b"), kind_contrast=True)
    mu, model = space.invalidity_prior()
    _, loose = space.invalidity_prior(baseline_intercept_sd=1.5, lineage_intercept_sd=2.0)
    changed = np.flatnonzero(loose != model)
    starts = [space.lineage_slice(k).start for k in ("a", "b")]
    assert changed.tolist() == [0, *starts]
    assert loose[0] == pytest.approx(2.25)
    assert loose[starts] == pytest.approx(4 * 4.0)  # C * sd^2: the column carries 1/sqrt(C)
    _, none = space.invalidity_prior(baseline_intercept_sd=None, lineage_intercept_sd=None)
    assert np.array_equal(none, model) and mu[0] == pytest.approx(np.log(0.05 / 0.95))


def test_gain_lineage_intercept_sd_sets_only_the_lineage_intercepts() -> None:
    space = DesignSpace(4, ("a", "b"), kind_contrast=True)
    model = space.utility_prior_variance()
    loose = space.utility_prior_variance(lineage_intercept_sd=0.1)
    starts = [space.lineage_slice(k).start for k in ("a", "b")]
    assert np.flatnonzero(loose != model).tolist() == starts
    assert loose[starts] == pytest.approx(4 * 0.01)  # C * sd^2 on the 1/sqrt(C) column
    assert np.array_equal(space.utility_prior_variance(lineage_intercept_sd=None), model)


def _two_card_rows(seed: int, n: int, space: DesignSpace) -> tuple[np.ndarray, np.ndarray]:
    """n cited rows of a harmful card (35 % invalid), n of a neutral one and n controls
    (both 5 %), exact counts at random contexts."""
    rng = np.random.default_rng(seed)
    rows, d = [], []
    for card, rate in (("harm", 0.35), ("calm", 0.05), (None, 0.05)):
        x = random_contexts(n, rng)
        rows += [space.row(xi, int(card is not None), card) for xi in x]
        flags = np.zeros(n)
        flags[rng.permutation(n)[: round(rate * n)]] = 1.0
        d.append(flags)
    return np.array(rows), np.concatenate(d)


@pytest.mark.parametrize("extra", [0, 12])  # 12 idle cards: P > 64, the block-arrowhead path
def test_only_the_card_whose_rows_favour_it_gets_the_wide_level(extra: int) -> None:
    cards = ("calm", "harm", *(f"idle-{i:02d}" for i in range(extra)))
    space = DesignSpace(5, cards, kind_contrast=False)
    x, d = _two_card_rows(3, 40, space)
    head = _head(space).fit(x, d)
    assert head.ok_
    harm, calm = space.lineage_slice("harm").start, space.lineage_slice("calm").start
    assert head.wide_columns_.tolist() == [harm]
    levels = head.shift_levels
    narrow = PROD.invalidity_lineage_prior_sd**2
    assert levels is not None and levels.wide_variance == pytest.approx(5 * 2.0**2)
    assert head.prior_variance[calm] == pytest.approx(narrow)  # the narrow level stays
    # the refit's Laplace posterior is the MAP under the chosen levels: the same head fitted
    # with those levels as a single Gaussian prior finds the same coefficients
    var = np.array(head.prior_variance, dtype=float)
    var[head.wide_columns_] = levels.wide_variance
    again = LogisticLaplaceHead(head.prior_mean, var, (space.shared_size, 5)).fit(x, d)
    assert np.allclose(again.coef_, head.coef_, atol=1e-5)


def test_the_two_levels_keep_an_unproven_card_from_looking_harmful() -> None:
    """A card without rows next to a harmful and a neutral one: with one loose level its
    expected invalid rise is 8 points (expit is convex: E[p_1] ~ 0.14 at 5 %), which the
    hurdle value charges to it; with two levels it is under 2 points."""
    space = DesignSpace(5, ("calm", "harm", "new"), kind_contrast=False)
    x, d = _two_card_rows(4, 20, space)
    xi = np.array([1.0, 0.6, 0.8, 0.0, 0.0])
    rng = np.random.default_rng(0)
    rise = {}
    for weight in (1.0, PROD.invalidity_shift_wide_weight):
        post = PosteriorSettings(invalidity_shift_wide_weight=weight)
        head = _head(space, post=post).fit(x, d)
        eta, cov = head.linear_predictor(space.row(xi, 0), space.row(xi, 1, "new"))
        p = 1.0 / (1.0 + np.exp(-rng.multivariate_normal(eta, cov, 20_000)))
        rise[weight] = float(np.mean(p[:, 1] - p[:, 0]))
    assert rise[1.0] > 0.06 and abs(rise[PROD.invalidity_shift_wide_weight]) < 0.02, rise


def test_the_shift_variances_are_the_inverse_fishers_diagonal_there() -> None:
    """``shift_variance`` (the level choice's variances) against diag(F^-1) of the dense F:
    blocks with rows, blocks without (their prior), and no block with rows."""
    from gigaevo.memory.v2.causal.arrowhead import factor_blocks
    from gigaevo.memory.v2.causal.invalidity import shift_variance

    rng = np.random.default_rng(11)
    ps, c, b = 7, 4, 9
    for k in (0, 1, 5, b):
        active = np.sort(rng.choice(b, k, replace=False))
        a = rng.normal(size=(ps, ps))
        a = a @ a.T + ps * np.eye(ps)
        d = rng.normal(size=(k, c, c))
        d = d @ d.transpose(0, 2, 1) + c * np.eye(c)
        g = 0.4 * rng.normal(size=(k, c, ps))
        v = rng.uniform(0.3, 3.0, ps + b * c)
        dense = np.diag(1.0 / v)
        dense[:ps, :ps] += a
        for j, lin in enumerate(active):
            cols = ps + lin * c + np.arange(c)
            dense[np.ix_(cols, cols)] += d[j]
            dense[cols, :ps] += g[j]
            dense[:ps, cols] += g[j].T
        shift = np.arange(ps, ps + b * c, c)
        want = np.diag(np.linalg.inv(dense))[shift]
        got = shift_variance(factor_blocks(a, d, g, v, active, c), shift)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        inactive = np.setdiff1d(np.arange(b), active)
        np.testing.assert_allclose(got[inactive], v[shift[inactive]], rtol=1e-15)  # prior
