"""``invalidity_fit: laplace_prefix`` (memory-model.md "The prefix in Laplace form"): the rows
before the near anchor enter the invalidity fit as their loss's second-order expansion at the
near anchor's MAP under the fit's levels.

Ground truth is the exact fit on the same rows (``invalidity_fit: exact``), on ledgers not
shaped like the model: the invalid rate is a step and a square in correlated contexts, not
a logistic-linear function; a harmful card (the wide shift level), a protective one, a rare
one, one arriving at mid-run and one arriving late. Every fit is made where the expansion is
oldest (one row short of the next near anchor).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from gigaevo.memory.v2.causal import DesignSpace, LogisticLaplaceHead
from gigaevo.memory.v2.causal.chance import acceptance_probabilities
from gigaevo.memory.v2.causal.invalidity import ShiftLevels, card_shift_levels
from gigaevo.memory.v2.causal.suffstats import RowTerms
from gigaevo.memory.v2.read.headrows import (
    ANCHOR_STEP,
    EXPANSION_ERROR,
    NEAR_MIN,
    NEAR_STEP,
    WIDE_EXACT_ROWS,
    InvalidityFitter,
    RowTable,
    anchor_size,
    near_size,
)
from gigaevo.memory.v2.read.heads import HeadFitter

C = 4
UNIT = DesignSpace(C, ("",), kind_contrast=True)
PS = UNIT.shared_size
HARMFUL, PROTECTIVE, RARE, MID, LATE = "c0-harm", "c1-prot", "c2-rare", "c3-mid", "c4-late"
CARDS = (HARMFUL, PROTECTIVE, RARE, MID, LATE, "c5", "c6", "c7", "c8", "c9")
SPACE = DesignSpace(C, CARDS, kind_contrast=True)  # P = 49: the dense path
# many lineages: P = 9 + 4 * 40 = 169, the block-arrowhead path (the real run's designs)
WIDE = CARDS + tuple(f"w{i:02d}" for i in range(30))
WIDE_SPACE = DesignSpace(C, WIDE, kind_contrast=True)
ALIAS = {c: c for c in WIDE}
KIND = {c: ("program" if i % 3 == 2 else "insight") for i, c in enumerate(WIDE)}


def _prior(space: DesignSpace) -> tuple[np.ndarray, np.ndarray]:
    """The production priors (config/memory/v2.yaml)."""
    return space.invalidity_prior(0.05, 0.15, 0.10, 0.15, baseline_intercept_sd=1.5)


def _levels(space: DesignSpace) -> ShiftLevels | None:
    return card_shift_levels(space.shared_size, space.size, C, 2.0, 0.3)


def _context(rng: np.random.Generator) -> np.ndarray:
    """Correlated contexts: two features driven by one latent, one heavy-tailed."""
    u = rng.standard_normal()
    return np.r_[
        1.0,
        np.tanh(u + 0.3 * rng.standard_normal()),
        np.clip(0.7 * u + 0.5 * rng.standard_normal(), -1.0, 1.0),
        np.clip(0.3 * rng.standard_t(2), -1.0, 1.0),
    ]


def _rate(x: np.ndarray, card: str | None) -> float:
    """A step and a square in the context (no logistic-linear form), cards additive."""
    p = 0.03 + 0.08 * (x[1] > 0.6) + 0.04 * x[2] ** 2
    if card == HARMFUL:
        p += 0.30
    elif card == PROTECTIVE:
        p *= 0.2
    return p


def _space(cards: tuple[str, ...]) -> DesignSpace:
    return WIDE_SPACE if cards == WIDE else SPACE


def _ledger(n: int, seed: int, cards: tuple[str, ...] = CARDS, many_from: float = 0.0) -> RowTable:
    """``n`` rows; the cards past the first ten (``WIDE``) arrive from row ``many_from * n``."""
    rng = np.random.default_rng(seed)
    table = RowTable(PS, C)
    for i in range(n):
        x = _context(rng)
        card: str | None = None
        if rng.random() < 0.65:
            pool = [c for c in cards[: len(CARDS)] if c not in (RARE, MID, LATE)]
            pool += list(cards[len(CARDS) :]) * (i >= int(many_from * n))
            pool += [MID] * (i >= n // 2) + [LATE] * (i >= int(0.96 * n))
            card = RARE if rng.random() < 0.01 else pool[int(rng.integers(len(pool)))]
        if card is None:
            row = RowTerms(UNIT.row(x, 0)[:PS], None, None, 0.0, 0.0)
        else:
            z = UNIT.row(x, 1, "", KIND[card])
            row = RowTerms(z[:PS], z[PS:], card, 0.0, 0.0)
        table.append(row, bool(rng.random() < _rate(x, card)))
    return table


def _oldest(target: int) -> int:
    """The row count one short of the near anchor (or anchor) after ``near_size(target)``."""
    k = anchor_size(target)
    step = max(NEAR_MIN, k // NEAR_STEP)
    return min(near_size(target) + step, k + max(1, k // ANCHOR_STEP)) - 1


def _fits(
    table: RowTable, levels: bool = True, cards: tuple[str, ...] = CARDS
) -> tuple[LogisticLaplaceHead, LogisticLaplaceHead, InvalidityFitter]:
    shift = _levels if levels else None
    space = _space(cards)
    exact = InvalidityFitter(True, False, shift_levels=shift).fit(table, space, ALIAS, _prior)
    fitter = InvalidityFitter(True, False, shift_levels=shift, method="laplace_prefix")
    prefix = fitter.fit(table, space, ALIAS, _prior)
    assert exact.ok_ and prefix.ok_
    return exact, prefix, fitter


def _arms(seed: int, cards: tuple[str, ...]) -> tuple[list[np.ndarray], np.ndarray]:
    """Control rows and every card's treated rows at three contexts."""
    rng = np.random.default_rng(10_000 + seed)
    space = _space(cards)
    z0s, z1s = [], []
    for _ in range(3):
        x = _context(rng)
        z0s.append(np.r_[UNIT.row(x, 0)[:PS], np.zeros(space.size - PS)])
        z1s.append(np.array([space.row(x, 1, c, KIND[c]) for c in cards]))
    return z0s, np.array(z1s)


def _variance(head: LogisticLaplaceHead) -> np.ndarray:
    """The coefficients' posterior variances (dense covariance, or the block factor's)."""
    if head.coef_cov_ is not None:
        return np.diag(head.coef_cov_)
    factor = head.block_factor
    assert factor is not None
    return factor.marginal_variance()


def _corr(s: np.ndarray) -> np.ndarray:
    return s[:, 0, 1] / np.sqrt(s[:, 0, 0] * s[:, 1, 1])


def _errors(
    exact: LogisticLaplaceHead,
    prefix: LogisticLaplaceHead,
    seed: int,
    cards: tuple[str, ...] = CARDS,
) -> tuple[float, float, float, float]:
    """(max |mean difference| / posterior sd over the coefficients and the arm predictors,
    max relative difference of their variances, max |P_acc difference| over the cards,
    max |difference| of the two arms' correlation)."""
    v_exact = _variance(exact)
    mean = float(np.max(np.abs(prefix.coef_ - exact.coef_) / np.sqrt(v_exact)))
    var = float(np.max(np.abs(_variance(prefix) / v_exact - 1.0)))
    acc = corr = 0.0
    z0s, z1s = _arms(seed, cards)
    for z0, z1 in zip(z0s, z1s, strict=True):
        m_e, s_e = exact.linear_predictors(z0, z1)
        m_p, s_p = prefix.linear_predictors(z0, z1)
        v_e = np.stack([s_e[:, 0, 0], s_e[:, 1, 1]], axis=1)
        v_p = np.stack([s_p[:, 0, 0], s_p[:, 1, 1]], axis=1)
        mean = max(mean, float(np.max(np.abs(m_p - m_e) / np.sqrt(v_e))))
        var = max(var, float(np.max(np.abs(v_p / v_e - 1.0))))
        # the correlation of the two arms (their covariance can be near 0: no ratio)
        corr = max(corr, float(np.max(np.abs(_corr(s_p) - _corr(s_e)))))
        a_e = [a.probability for a in acceptance_probabilities(m_e, s_e)]
        a_p = [a.probability for a in acceptance_probabilities(m_p, s_p)]
        acc = max(acc, float(np.max(np.abs(np.subtract(a_p, a_e)))))
    return mean, var, acc, corr


@pytest.mark.parametrize(
    ("target", "seeds", "cards"),
    [
        (1100, range(10), CARDS),
        (2000, range(10), CARDS),
        (5000, range(6), CARDS),
        (20_000, (0,), CARDS),
        # the block-arrowhead form: 40 lineages, P = 169
        (1100, range(10), WIDE),
        (2000, range(10), WIDE),
        (5000, range(4), WIDE),
        (20_000, (0,), WIDE),
    ],
    ids=lambda v: f"{len(v)}-cards" if isinstance(v, tuple) and len(v) > 1 else None,
)
def test_the_prefix_fit_matches_the_exact_fit_within_a_small_share_of_a_posterior_sd(
    target: int, seeds: range | tuple[int, ...], cards: tuple[str, ...]
) -> None:
    worst = [0.0, 0.0, 0.0, 0.0]
    widened = flipped = 0
    for seed in seeds:
        n = _oldest(target)
        table = _ledger(n, seed=1000 * target + seed + 77 * (cards == WIDE), cards=cards)
        exact, prefix, fitter = _fits(table, cards=cards)
        assert fitter.prefix_fits == 1  # the prefix form, not the exact fallback
        assert (exact.block_factor is None) == (cards == CARDS)  # dense / block path
        widened += len(exact.wide_columns_) > 0
        errors = _errors(exact, prefix, seed, cards)
        if not np.array_equal(prefix.wide_columns_, exact.wide_columns_):
            # a card whose level odds sit at 0 may take the other level (the odds use the
            # rows' precision 1/s^2 - 1/v_n: a small variance error, amplified): its own
            # posterior then differs by design; the chance constraint must still agree
            flipped += 1
            worst[2] = max(worst[2], errors[2])
            continue
        for i, err in enumerate(errors):
            worst[i] = max(worst[i], err)
    print(
        f"n={_oldest(target)}: max |dmean|/sd {worst[0]:.2g}, var {worst[1]:.2g}, "
        f"P_acc {worst[2]:.2g}, corr {worst[3]:.2g}, level flips {flipped}/{len(seeds)}"
    )
    assert widened  # the harmful card's wide level is exercised
    assert flipped <= max(1, len(seeds) // 5)
    # measured (session 14, near anchors, with the third-order term): at 1,106 rows 1.2e-4
    # sd, 0.073 %, 3.6e-6; from 2,011 rows 1.5e-5 sd, 0.024 %, 5.5e-7 (second order alone:
    # 0.0091 sd, 3.9 %, 3.0e-4 and 0.0021 sd, 2.4 %, 7.1e-5)
    early = target < 2000
    assert worst[0] <= (5e-4 if early else 1e-4), worst
    assert worst[1] <= (3e-3 if early else 1e-3), worst
    assert worst[2] <= (2e-5 if early else 3e-6), worst


@pytest.mark.parametrize("many_from", [0.0, 0.99])
def test_the_block_form_is_the_dense_form_of_the_same_expansion(
    many_from: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a wide design (P = 169) the prefix's Hessian is kept, mapped and merged in block
    form; with the dense path forced (``DENSE_MAX_SIZE`` raised) the same objective is
    built densely: the same MAP, variances and evidence to rounding. ``many_from`` 0.99:
    the near anchor's design is dense (10 cards) and the fit's wide (the 30 others arrive
    after the near anchor: the dense expansion split into blocks)."""
    from gigaevo.memory.v2.causal import arrowhead
    from gigaevo.memory.v2.read import headrows

    sizes = (arrowhead.DENSE_MAX_SIZE, 10**6)
    for seed in range(3):
        table = _ledger(_oldest(1100), seed=40 + seed, cards=WIDE, many_from=many_from)
        heads, odds = [], []
        column = WIDE_SPACE.lineage_slice("w03").start  # retirement's other level
        for dense_max in sizes:
            monkeypatch.setattr(arrowhead, "DENSE_MAX_SIZE", dense_max)
            monkeypatch.setattr(headrows, "DENSE_MAX_SIZE", dense_max)
            fitter = InvalidityFitter(True, False, shift_levels=_levels, method="laplace_prefix")
            heads.append(fitter.fit(table, WIDE_SPACE, ALIAS, _prior))
            assert fitter.prefix_fits == 1
            near = fitter._near
            assert near is not None and (near.own.size <= 64) == (many_from > 0.0)
            # the other level's expansion is made on demand, in the form of its setting
            odds.append(heads[-1].with_level(column, True).log_evidence())
        block, dense = heads
        assert block.block_factor is not None and dense.coef_cov_ is not None
        assert len(block.wide_columns_)  # the wide-level refit (block minus a card's own)
        assert np.array_equal(block.wide_columns_, dense.wide_columns_)
        np.testing.assert_allclose(block.coef_, dense.coef_, rtol=0, atol=1e-12)
        np.testing.assert_allclose(_variance(block), _variance(dense), rtol=1e-10)
        assert abs(block.log_evidence() - dense.log_evidence()) < 1e-8
        assert abs(odds[0] - odds[1]) < 1e-8


def _rare_event_ledger(n: int, seed: int) -> RowTable:
    """``_ledger``'s cards, but the protective card's rows are invalid at 0.15 % only (many
    rows, little information: its shift is far below the others, at the wide level), and
    its first row after the near anchor is invalid: one rare event that moves the card's
    shift by several tenths of a logit."""
    rng = np.random.default_rng(seed)
    table = RowTable(PS, C)
    m, moved = near_size(n), False
    for i in range(n):
        x = _context(rng)
        card = CARDS[int(rng.integers(len(CARDS)))] if rng.random() < 0.65 else None
        invalid = bool(rng.random() < (0.0015 if card == PROTECTIVE else _rate(x, card)))
        if i >= m and card == PROTECTIVE and not moved:
            invalid = moved = True
        if card is None:
            row = RowTerms(UNIT.row(x, 0)[:PS], None, None, 0.0, 0.0)
        else:
            z = UNIT.row(x, 1, "", KIND[card])
            row = RowTerms(z[:PS], z[PS:], card, 0.0, 0.0)
        table.append(row, invalid)
    assert moved
    return table


@pytest.mark.parametrize("seed", [0, 1])
def test_a_rare_event_that_moves_a_card_far_refits_its_rows_exactly(seed: int) -> None:
    """A wide card with ~350 near-anchor rows but ~0.5 invalid ones: one invalid row after
    the near anchor moves its shift ~0.4 (a row's logit ~0.2) from the expansion point,
    where the third-order expansion's curvature is off by ~(x'r)^2 / 2 (the start tree:
    5.7 % and 3.3 % in a variance, 0.015 sd in a mean; a real run's late states: 0.99 %,
    and 11 % at 3,938 rows). The fit then takes that card's near-anchor rows exactly
    (``EXPANSION_ERROR``) and stays within the prefix's usual accuracy."""
    table = _rare_event_ledger(_oldest(5000), seed=seed)
    exact, prefix, fitter = _fits(table)
    assert fitter.prefix_fits == 1  # the prefix form, with that card's rows exact
    column = SPACE.lineage_slice(PROTECTIVE).start
    assert column in exact.wide_columns_
    assert np.array_equal(prefix.wide_columns_, exact.wide_columns_)
    _, lineages, error = prefix.expansion_error()
    assert SPACE.lineages.index(PROTECTIVE) not in lineages  # its rows are not expanded
    assert np.all(error <= EXPANSION_ERROR)
    mean, var, acc, _ = _errors(exact, prefix, seed)
    assert mean <= 1e-4 and var <= 1e-3 and acc <= 3e-6, (mean, var, acc)


def test_below_the_prefix_minimum_the_fit_is_exact() -> None:
    table = _ledger(1023, seed=8)  # invalidity_prefix_min_rows: 1024
    exact, prefix, fitter = _fits(table)
    assert fitter.anchors == 1 and fitter.prefix_fits == 0
    assert np.array_equal(prefix.coef_, exact.coef_)


def test_with_no_row_past_the_anchor_the_prefix_fit_is_the_exact_fit() -> None:
    n = anchor_size(1500)
    table = _ledger(n, seed=7)
    exact, prefix, fitter = _fits(table, levels=False)
    assert fitter.prefix_fits == 1
    assert exact.coef_cov_ is not None and prefix.coef_cov_ is not None
    np.testing.assert_allclose(prefix.coef_, exact.coef_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(prefix.coef_cov_, exact.coef_cov_, rtol=1e-9, atol=1e-15)
    assert abs(prefix.log_evidence() - exact.log_evidence()) < 1e-8


def test_the_other_level_and_its_evidence_follow_the_exact_fit() -> None:
    """``with_level`` (retirement weighs both levels of a card) on the same objective: the
    log odds of the two levels of each card within 0.05 of the exact fit's."""
    for seed in range(4):
        table = _ledger(_oldest(1100), seed=500 + seed)
        exact, prefix, _ = _fits(table)
        for card in (HARMFUL, PROTECTIVE, "c5", MID):
            column = SPACE.lineage_slice(card).start
            wide = bool(np.isin(column, exact.wide_columns_))
            odds = [
                head.with_level(column, not wide).log_evidence() - head.log_evidence()
                for head in (exact, prefix)
            ]
            assert abs(odds[1] - odds[0]) < 0.05, (seed, card, odds)


def _feed(
    rows: RowTable, fits_every: int, fitter: InvalidityFitter, space: DesignSpace = SPACE
) -> LogisticLaplaceHead:
    """The rows of ``rows`` appended one by one, with a fit every ``fits_every`` rows."""
    grown = RowTable(PS, C)
    head = None
    for i in range(rows.n):
        key = rows.keys[rows.key[i]] if rows.key[i] >= 0 else None
        part = rows.part[i] if key is not None else None
        grown.append(RowTerms(rows.shared[i], part, key, 0.0, 0.0), bool(rows.invalid[i]))
        if i % fits_every == 0 or i == rows.n - 1:
            head = fitter.fit(grown, space, ALIAS, _prior)
    assert head is not None
    return head


@pytest.mark.parametrize("cards", [CARDS, WIDE], ids=["dense", "block"])
def test_a_fresh_fitter_gives_the_same_bits_as_one_that_fitted_all_along(
    cards: tuple[str, ...],
) -> None:
    """A resumed reader fits the whole ledger at once; the live one fitted along the way,
    through several anchors: the same head, bit for bit (dense, and in block form)."""
    space = _space(cards)
    table = _ledger(1400, seed=3, cards=cards)
    along = InvalidityFitter(True, False, shift_levels=_levels, method="laplace_prefix")
    last = _feed(table, 53, along, space)
    fresh_fitter = InvalidityFitter(True, False, shift_levels=_levels, method="laplace_prefix")
    fresh = fresh_fitter.fit(table, space, ALIAS, _prior)
    assert along.anchors > 3 and along.prefix_fits >= 6 and fresh_fitter.prefix_fits == 1
    assert len(fresh.wide_columns_)  # the wide-level refit is in the replay
    assert (fresh.block_factor is None) == (cards == CARDS)
    assert np.array_equal(last.coef_, fresh.coef_)
    assert np.array_equal(_variance(last), _variance(fresh))
    if cards == CARDS:
        assert last.coef_cov_ is not None and fresh.coef_cov_ is not None
        assert np.array_equal(last.coef_cov_, fresh.coef_cov_)
    assert np.array_equal(last.wide_columns_, fresh.wide_columns_)
    assert last.log_evidence() == fresh.log_evidence()


def _first(rows: RowTable, n: int) -> RowTable:
    """A new table of the first ``n`` rows of ``rows``."""
    out = RowTable(PS, C)
    for i in range(n):
        key = rows.keys[rows.key[i]] if rows.key[i] >= 0 else None
        part = rows.part[i] if key is not None else None
        out.append(RowTerms(rows.shared[i], part, key, 0.0, 0.0), bool(rows.invalid[i]))
    return out


def test_a_prefix_fit_passes_over_the_rows_since_the_near_anchor_and_small_wide_cards() -> None:
    """The rows fitted exactly are the rows since the near anchor and the near-anchor rows of
    the wide cards with fewer than ``WIDE_EXACT_ROWS`` of them: a wide card with more (the
    harmful one) enters through the expansion at the near anchor's MAP with it wide."""
    n = _oldest(4000)
    m = near_size(n)
    table = _ledger(n, seed=21)
    exact, prefix, _ = _fits(table)
    wide = {CARDS[(c - PS) // C] for c in prefix.wide_columns_.tolist()}
    assert HARMFUL in wide and np.array_equal(prefix.wide_columns_, exact.wide_columns_)
    near_rows = {c: int(np.sum(table.key[:m] == table.keys.index(c))) for c in wide}
    assert near_rows[HARMFUL] >= WIDE_EXACT_ROWS
    small = sum(k for k in near_rows.values() if k < WIDE_EXACT_ROWS)
    assert len(prefix._d) == n - m + small < n - m + near_rows[HARMFUL]


def test_an_earlier_head_takes_its_other_level_at_its_own_near_anchor() -> None:
    """Retirement may ask a head for a card's other level after the fitter has fitted again
    on more rows of the same growing table (another near anchor): the answer is the one a
    fresh fitter on the head's own rows gives, bit for bit."""
    n = _oldest(1100)
    table = _ledger(n + 40, seed=9)
    grown = _first(table, n)
    fitter = InvalidityFitter(True, False, shift_levels=_levels, method="laplace_prefix")
    head = fitter.fit(grown, SPACE, ALIAS, _prior)
    for i in range(n, table.n):  # the same table grows on
        key = table.keys[table.key[i]] if table.key[i] >= 0 else None
        part = table.part[i] if key is not None else None
        grown.append(RowTerms(table.shared[i], part, key, 0.0, 0.0), bool(table.invalid[i]))
    fitter.fit(grown, SPACE, ALIAS, _prior)  # a later near anchor
    fresh = InvalidityFitter(True, False, shift_levels=_levels, method="laplace_prefix")
    again = fresh.fit(_first(table, n), SPACE, ALIAS, _prior)
    assert fitter.prefix_fits == 2 and fresh.prefix_fits == 1
    for card in (PROTECTIVE, "c5", MID):
        column = SPACE.lineage_slice(card).start
        wide = bool(np.isin(column, head.wide_columns_))
        late, fresh_level = head.with_level(column, not wide), again.with_level(column, not wide)
        assert np.array_equal(late.coef_, fresh_level.coef_)
        assert late.log_evidence() == fresh_level.log_evidence()


def test_with_few_rows_per_lineage_the_prefix_method_fits_the_exact_methods_bits() -> None:
    """``prefix_rows_per_lineage``: a fit with fewer rows per lineage holding rows takes the
    exact fit, the exact method's bits (its near anchor and wide refits included); at the
    limit the prefix fit is taken."""
    table = _ledger(_oldest(1400), seed=12)  # rows past the near anchor: other bits
    space = _space(CARDS)
    exact = InvalidityFitter(True, False, shift_levels=_levels).fit(table, space, ALIAS, _prior)
    lineages = len({space.lineage_position(ALIAS.get(k, k)) for k in table.keys})
    assert lineages > 1 and exact.ok_
    per = table.n // lineages  # the largest limit this fit reaches

    def fitted(limit: int) -> tuple[LogisticLaplaceHead, InvalidityFitter]:
        fitter = InvalidityFitter(
            True, False, shift_levels=_levels, method="laplace_prefix",
            prefix_rows_per_lineage=limit,
        )  # fmt: skip
        return fitter.fit(table, space, ALIAS, _prior), fitter

    gated, fitter = fitted(per + 1)
    assert fitter.prefix_fits == 0 and fitter.near_anchors == 1
    assert np.array_equal(gated.coef_, exact.coef_)
    assert np.array_equal(_variance(gated), _variance(exact))
    taken, fitter = fitted(per)
    assert fitter.prefix_fits == 1 and taken.ok_
    assert not np.array_equal(taken.coef_, exact.coef_)  # the prefix fit: other bits


def test_a_wide_design_below_the_prefix_minimum_takes_the_exact_fit() -> None:
    table = _ledger(1023, seed=11, cards=WIDE)  # P = 169: the block path
    exact, prefix, fitter = _fits(table, cards=WIDE)
    assert fitter.prefix_fits == 0 and fitter.anchors == 1
    assert exact.block_factor is not None
    assert np.array_equal(prefix.coef_, exact.coef_)
    assert np.array_equal(_variance(prefix), _variance(exact))


def test_an_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="invalidity_fit"):
        InvalidityFitter(True, False, method="laplace")


# -- through the reader: the option's plumbing and a resumed reader -------------------------


def test_a_resumed_reader_fits_the_prefix_head_the_live_reader_fitted(tmp_path: Path) -> None:
    """The reader's fits with the option on, through a few anchors past 256 rows
    (``invalidity_prefix_min_rows: 256``: the same code on a shorter ledger)."""
    from tests.memory.ledger_rows import fast_dir
    from tests.memory.test_evictor import build_run

    def fitter(heads: HeadFitter) -> HeadFitter:
        post = dataclasses.replace(
            heads.posterior,
            invalidity_fit="laplace_prefix",
            invalidity_prefix_min_rows=256,
            invalidity_prefix_rows_per_lineage=0,  # every fit past 256 rows on the prefix
        )
        return HeadFitter(
            heads.evidence,
            heads.causal_reward,
            post,
            run_id=heads.run_id,
            task_key=heads.task_key,
            transfer=heads.transfer,
            rag_contrast=heads.rag_contrast,
        )

    with fast_dir(tmp_path) as base:
        run = build_run(base, effect=-0.02, p_invalid=0.3, seed=5)  # 290 rows
        cards = run.store.cards()
        live = fitter(run.reader.heads)
        rng = np.random.default_rng(5)
        for i in range(60):
            parent = float(rng.uniform(3.0, 7.0))
            row = run.row(z=i % 2, parent=parent, island=i % 2, cell=i % 3)
            invalid = rng.uniform() < 0.1
            run.commit(row, y=None if invalid else 0.01 + 0.05 * float(rng.standard_normal()))
            if i % 7 == 0:
                live.rows.sync()
                assert live.fitted(live.rows.last_width, cards).invalidity is not None
        live.rows.sync()
        along = live.fitted(live.rows.last_width, cards).invalidity
        resumed = fitter(run.reader.heads)
        resumed.rows.sync()
        again = resumed.fitted(resumed.rows.last_width, cards).invalidity
        assert along is not None and again is not None and along.ok_
        assert live.invalidity.prefix_fits >= 5 and resumed.invalidity.prefix_fits == 1
        assert np.array_equal(along.coef_, again.coef_)
        assert np.array_equal(along.wide_columns_, again.wide_columns_)
        run.reader.evidence.close()


# -- a seeded run with the option: the same history twice, and after a kill -9 ---------------

RUN_MUTANTS = 1200  # ~380 eligible rows: anchors 256 ... 367


def _run_args() -> list[str]:
    from tests.memory.test_reader_crash_resume import ARGS

    kept = [a for a in ARGS if not a.startswith("max_mutants=")]
    return [
        *kept,
        f"max_mutants={RUN_MUTANTS}",
        "memory.posterior_config.invalidity_fit=laplace_prefix",
        "memory.posterior_config.invalidity_prefix_min_rows=256",  # prefix fits from row 256
        "memory.posterior_config.invalidity_prefix_rows_per_lineage=0",  # however many cards
    ]


def _eligible(ckpt: Path) -> int:
    from gigaevo.memory.v2.evidence import SelectionEvidence
    from gigaevo.memory.v2.evidence.queries import usefulness_eligible

    with SelectionEvidence(ckpt).open(censor_orphans=False) as ev:
        return sum(usefulness_eligible(o) for o in ev.observations())


@pytest.mark.slow
def test_a_seeded_run_with_the_prefix_fit_repeats_and_resumes_after_a_kill(
    tmp_path: Path,
) -> None:
    from tests.conftest import kill_9_when, program_ids, run_py
    from tests.memory.test_reader_crash_resume import _edges, _ledger_view

    args = _run_args()
    views = {}
    for name in ("whole", "again"):
        code, _, err = run_py(*args, f"checkpoint_dir={tmp_path / name}", cwd=tmp_path)
        assert code == 0, err
        views[name] = _ledger_view(tmp_path / name)
    assert _eligible(tmp_path / "whole") > 300  # past several anchors: prefix fits ran
    assert views["whole"] == views["again"]
    assert program_ids(tmp_path / "whole") == program_ids(tmp_path / "again")

    ckpt = tmp_path / "killed"
    at = int(0.7 * RUN_MUTANTS)
    kill_9_when(args, ckpt, tmp_path, lambda: _edges(ckpt) >= at, timeout=600, poll=0.01)
    killed_at = _edges(ckpt)
    assert int(0.7 * RUN_MUTANTS) <= killed_at < RUN_MUTANTS, killed_at
    code, _, err = run_py(*args, f"checkpoint_dir={ckpt}", "resume=true", cwd=tmp_path)
    assert code == 0, err
    assert program_ids(ckpt) == program_ids(tmp_path / "whole")
    assert _ledger_view(ckpt) == views["whole"]


# -- the option through the real config --------------------------------------------------------


def test_the_option_reaches_the_fitter_and_a_bad_value_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    from gigaevo.pipeline.build import ConfigError
    from tests.memory.test_posterior_config import _build, _reader

    built = _build(tmp_path / "default")
    try:  # the default (session 14, with the third-order term)
        assert _reader(built).heads.invalidity.method == "laplace_prefix"
    finally:
        built.close()
    built = _build(tmp_path / "off", "memory.posterior_config.invalidity_fit=exact")
    try:
        assert _reader(built).heads.invalidity.method == "exact"
    finally:
        built.close()
    built = _build(
        tmp_path / "gate", "memory.posterior_config.invalidity_prefix_rows_per_lineage=64"
    )
    try:
        assert _reader(built).heads.invalidity.prefix_rows_per_lineage == 64
    finally:
        built.close()
    with pytest.raises(ConfigError) as info:
        _build(tmp_path / "neg", "memory.posterior_config.invalidity_prefix_rows_per_lineage=-1")
    assert "invalidity_prefix_rows_per_lineage" in str(info.value)
    with pytest.raises(ConfigError) as info:
        _build(tmp_path / "bad", "memory.posterior_config.invalidity_fit=laplace")
    message = str(info.value)
    assert "invalidity_fit" in message and "\n" not in message, message
