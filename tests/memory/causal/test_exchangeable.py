"""Exchangeable cards drawn by their two best (memory-model.md "Policy", "Exchangeable cards").

The cheap draw must have the full draw's law: the same distribution of each world's winner
and challenger. Checked against plain full draws (every card's latents, ``world_effects``,
then a sort) by chi-square tests on many worlds, in regimes where the gain is clipped at
G+, where most cards sit at the floor G- (ties to the larger id), with and without the
delayed-lineage head, and through ``select``'s world votes on fitted heads. Each test also
shows that its statistic rejects a draw with a slightly wrong law (a check that can fail).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from gigaevo.memory.v2.causal import (
    BayesianLinearHead,
    CandidateCard,
    DesignSpace,
    LogisticLaplaceHead,
    hurdle_values,
)
from gigaevo.memory.v2.causal import selection as selection_module
from gigaevo.memory.v2.causal.exchangeable import ExchangeableCards, exchangeable_top_two
from gigaevo.memory.v2.causal.policy import rng_stream, top_two, world_effects
from gigaevo.memory.v2.causal.projection import _STACKS
from gigaevo.memory.v2.causal.selection import (
    SelectionConfig,
    card_rows,
    exchangeable_blocks,
    world_votes,
)

ALPHA = 1e-3  # fixed seeds: a test passes at p > ALPHA, and its power check needs p < POWER
POWER = 1e-5


def _block(s: int, n: int, regime: str, rng: np.random.Generator):
    """A block of n members in s worlds, the control latents, and G-/G+ for ``regime``."""
    centre = {"clipped": 0.3, "floor": -0.7}.get(regime, 0.0)
    lift = {"lineage-high": 0.3}.get(regime, -0.1)
    bounds = {"clipped": (-0.5, 0.05), "floor": (-0.45, 0.5)}.get(regime, (-0.5, 0.6))
    centres = [centre + 0.05 * rng.standard_normal(s), -2.9 + 0.3 * rng.standard_normal(s)]
    control = [0.05 * rng.standard_normal(s), -2.9 + 0.1 * rng.standard_normal(s)]
    sds = [0.16, 0.38]
    if regime != "no-lineage":
        centres.append(lift + 0.05 * rng.standard_normal(s))
        control.append(-0.1 + 0.05 * rng.standard_normal(s))
        sds.append(0.16)
    cards = ExchangeableCards(3 * np.arange(n) + 1, tuple(centres), tuple(sds))
    return cards, control, bounds


def _q0(control: list[np.ndarray], bounds: tuple[float, float]) -> np.ndarray:
    none = np.zeros((len(control[0]), 0))
    lineage = (control[2], none) if len(control) > 2 else None
    return hurdle_values((control[0], none), (control[1], none), bounds, lineage).q0


def _full_top_two(cards: ExchangeableCards, control, bounds, rng: np.random.Generator):
    """Every member's latents drawn, effects by ``world_effects``, the two best by a sort."""
    s, n = len(control[0]), len(cards.members)
    latents = [
        c[:, None] + sd * rng.standard_normal((s, n))
        for c, sd in zip(cards.centres, cards.sds, strict=True)
    ]
    lineage = (control[2], latents[2]) if len(latents) > 2 else None
    effect = world_effects((control[0], latents[0]), (control[1], latents[1]), bounds, lineage)
    (first, second), (v1, v2) = top_two(effect)
    return np.column_stack([v1, v2]), cards.members[np.column_stack([first, second])]


def _chi2(a: np.ndarray, b: np.ndarray) -> float:
    """p-value that two samples of categories have one distribution (empty ones dropped)."""
    cats = np.union1d(a, b)
    table = np.array([[np.sum(x == c) for c in cats] for x in (a, b)])
    table = table[:, table.sum(axis=0) > 0]
    return float(chi2_contingency(table)[1]) if table.shape[1] > 1 else 1.0


def _binned(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    return np.searchsorted(edges, values)


def _compare(fast, full, n: int) -> dict[str, float]:
    """p-values of the top and second values (decile bins of the full draw's) and of the
    top and second cards (the two largest positions, then ten equal bins of the rest)."""
    (fv, fp), (sv, sp) = fast, full
    out = {}
    for k, name in ((0, "best"), (1, "second")):
        edges = np.unique(np.quantile(sv[:, k], np.linspace(0.1, 0.9, 9)))
        out[name] = _chi2(_binned(fv[:, k], edges), _binned(sv[:, k], edges))

    def card_bin(p: np.ndarray) -> np.ndarray:
        rank = (p - 1) // 3  # member position
        return np.where(rank >= n - 2, rank - n + 12, rank * 10 // n)

    out["best card"] = _chi2(card_bin(fp[:, 0]), card_bin(sp[:, 0]))
    out["second card"] = _chi2(card_bin(fp[:, 1]), card_bin(sp[:, 1]))
    return out


def _samples(cards, control, bounds, reps: int):
    q0 = _q0(control, bounds)
    fast = [exchangeable_top_two(cards, q0, bounds, np.random.default_rng(r)) for r in range(reps)]
    full = [
        _full_top_two(cards, control, bounds, np.random.default_rng(10_000 + r))
        for r in range(reps)
    ]
    cat = [tuple(np.concatenate([x[i] for x in xs]) for i in range(2)) for xs in (fast, full)]
    return cat[0], cat[1]


@pytest.mark.parametrize("regime", ["typical", "no-lineage", "clipped", "floor", "lineage-high"])
@pytest.mark.parametrize("n", [40, 3000])
def test_two_best_have_the_full_draws_law(regime: str, n: int) -> None:
    rng = np.random.default_rng(7)
    cards, control, bounds = _block(256, n, regime, rng)
    fast, full = _samples(cards, control, bounds, 24 if n > 100 else 200)
    p = _compare(fast, full, n)
    assert min(p.values()) > ALPHA, p
    if regime == "floor" and n < 100:  # many worlds rank members at the floor by id
        floor = np.tile(bounds[0] - _q0(control, bounds), len(full[0]) // len(control[0]))
        assert np.mean(full[0][:, 1] == floor) > 0.1
        assert np.mean(fast[0][:, 1] == floor) > 0.1


@pytest.mark.parametrize(
    ("regime", "head", "scale"), [("typical", 0, 1.1), ("clipped", 1, 0.8), ("floor", 0, 1.1)]
)
def test_the_statistics_reject_a_slightly_wrong_law(regime: str, head: int, scale: float) -> None:
    """The same check fails for a block whose member sd in one head is off by 10-20 %."""
    rng = np.random.default_rng(7)
    cards, control, bounds = _block(256, 3000, regime, rng)
    _, full = _samples(cards, control, bounds, 24)
    sds = list(cards.sds)
    sds[head] *= scale
    wrong = ExchangeableCards(cards.members, cards.centres, tuple(sds))
    bad, _ = _samples(wrong, control, bounds, 24)
    assert min(_compare(bad, full, 3000).values()) < POWER


def test_draws_are_seeded_and_use_few_members() -> None:
    rng = np.random.default_rng(9)
    cards, control, bounds = _block(512, 20_000, "typical", rng)
    q0 = _q0(control, bounds)
    a = exchangeable_top_two(cards, q0, bounds, np.random.default_rng(1))
    b = exchangeable_top_two(cards, q0, bounds, np.random.default_rng(1))
    c = exchangeable_top_two(cards, q0, bounds, np.random.default_rng(2))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])
    assert np.all(a[0][:, 0] >= a[0][:, 1]) and np.all(a[1][:, 0] != a[1][:, 1])
    assert set(np.unique(a[1])) <= set(cards.members)


def test_gain_law_and_draws() -> None:
    """P(W > w) against scipy's bivariate normal (signed zeros included: -0.0 once flipped
    a sign case of the Owen's T formula), and draws given lo < W <= hi against plain draws
    of W kept when they fall in the interval."""
    from scipy.stats import kstest, multivariate_normal

    from gigaevo.memory.v2.causal.exchangeable import _draw_gains, _Gain

    s_i, s_l, c = 0.16, 0.12, -0.1
    law = _Gain(s_i, s_l, np.full(1, c))
    sigma, rho = np.hypot(s_i, s_l), s_i / np.hypot(s_i, s_l)
    for w in (-0.3, -0.0, 0.0, c, 0.05, 0.4, 0.9):
        cdf = multivariate_normal.cdf(
            [w / s_i, (w - c) / sigma], cov=[[1, rho], [rho, 1]], abseps=1e-12, releps=1e-12
        )
        assert abs(float(law.sf(np.array([w]))[0]) - (1.0 - cdf)) < 1e-9, w
    cards = ExchangeableCards(
        np.arange(2), (np.zeros(1), np.zeros(1), np.full(1, c)), (s_i, 0.3, s_l)
    )
    plain = cards.gain(
        np.zeros(400_000, int), *np.random.default_rng(1).standard_normal((2, 400_000))
    )
    for lo, hi in ((-np.inf, 0.1), (0.0, 0.05), (0.2, 0.35), (0.3, np.inf)):
        m = 4000
        got = _draw_gains(
            cards, np.zeros(m, int), np.full(m, lo), np.full(m, hi), np.random.default_rng(2)
        )
        assert np.all((got > lo) & (got <= hi))
        ref = np.sort(plain[(plain > lo) & (plain <= hi)])
        assert (
            kstest(got, lambda v, r=ref: np.searchsorted(r, v, side="right") / len(r)).pvalue
            > ALPHA
        )


# -- through the selection: fitted heads on a synthetic bank --------------------------------

C = 5
HOT = 12  # lineages with rows; the other cards have none (exchangeable)


def _heads(n_cards: int, seed: int):
    rng = np.random.default_rng(seed)
    space = DesignSpace(C, tuple(f"L{i:04d}" for i in range(n_cards)))
    layout = (space.shared_size, C)
    rows, d, y, lin_rows, lin_y = [], [], [], [], []
    effect = np.r_[0.45, 0.35, np.zeros(HOT - 2)] - 0.5  # two good cards, the rest bad
    for _ in range(600):
        x = np.r_[1.0, rng.uniform(-1, 1, C - 1)]
        j = int(rng.integers(HOT))
        treated = rng.random() < 0.6
        rows.append(space.row(x, 1, space.lineages[j], "insight") if treated else space.row(x, 0))
        d.append(float(rng.random() < (0.15 if treated and j < 2 else 0.05)))
        y.append(rng.normal(effect[j] * treated, 0.1))
        if rng.random() < 0.3:
            lin_rows.append(rows[-1])
            lin_y.append(max(0.0, rng.normal(0.02 * treated, 0.05)))
    x, pv = np.array(rows), space.utility_prior_variance()
    immediate = BayesianLinearHead(pv, block_layout=layout).fit(x, np.array(y), np.zeros(len(y)))
    mu, v = space.invalidity_prior()
    invalidity = LogisticLaplaceHead(mu, v, layout).fit(x, np.array(d))
    lineage = BayesianLinearHead(pv, block_layout=layout).fit(
        np.array(lin_rows), np.array(lin_y), np.full(len(lin_y), 0.15)
    )
    cards = [CandidateCard(f"c{i:04d}", lin, "insight") for i, lin in enumerate(space.lineages)]
    return space, cards, (immediate, invalidity, lineage)


X = np.r_[1.0, 0.2, 0.5, -0.3, 0.1]


def _votes(space, cards, heads, key: str, bounds=(-0.5, 0.5), threads: int = 1):
    z1 = card_rows(space, X, cards)
    blocks, hot = exchangeable_blocks(heads, z1)
    ids = [c.card_id for c in cards]
    cfg = SelectionConfig(draw_threads=threads)
    return world_votes(key, heads, space.row(X, 0), z1, ids, blocks, hot, bounds, cfg)


def _categories(votes) -> tuple[np.ndarray, np.ndarray]:
    """Winner and challenger as categories: -1 abstain, a hot card's index, HOT = cold."""
    w, c = votes.winners, votes.challengers
    return np.where(w >= HOT, HOT, w), np.where(c >= HOT, HOT, c)


def test_selection_votes_match_the_full_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    space, cards, heads = _heads(60, 3)
    blocks, hot = exchangeable_blocks(heads, card_rows(space, np.ones(C), cards))
    assert len(blocks) == 1 and len(blocks[0]) == 60 - HOT and list(hot) == list(range(HOT))
    keys = [f"decision-{i}" for i in range(60)]
    fast = [_categories(_votes(space, cards, heads, k)) for k in keys]
    monkeypatch.setattr(selection_module, "EXCHANGEABLE_MIN", 10**9)  # every card drawn
    full = [_categories(_votes(space, cards, heads, k + "-full")) for k in keys]
    for i, name in enumerate(("winner", "challenger")):
        a = np.concatenate([f[i] for f in fast])
        b = np.concatenate([f[i] for f in full])
        assert len(np.unique(b)) >= 3 + (i == 0), name  # abstentions, hot and cold cards
        assert _chi2(a, b) > ALPHA, name
    # the statistic can fail: blocks drawn with a member's immediate sd 15 % too large
    law = selection_module.block_law

    def wider(*args, **kwargs):
        got = law(*args, **kwargs)
        return ExchangeableCards(got.members, got.centres, (1.15 * got.sds[0], *got.sds[1:]))

    monkeypatch.setattr(selection_module, "EXCHANGEABLE_MIN", 32)
    monkeypatch.setattr(selection_module, "block_law", wider)
    wrong = [_categories(_votes(space, cards, heads, k)) for k in keys]
    for i in range(2):
        a = np.concatenate([f[i] for f in wrong])
        b = np.concatenate([f[i] for f in full])
        assert _chi2(a, b) < POWER


def test_selection_is_the_same_whatever_is_cached() -> None:
    space, cards, heads = _heads(100, 4)
    first = _votes(space, cards, heads, "k")
    _STACKS.clear()  # a resumed process: no stack, nothing kept from earlier decisions
    for head in heads:
        head.__dict__.pop("_cache", None)
    again = _votes(space, cards, heads, "k")
    np.testing.assert_array_equal(first.winners, again.winners)
    np.testing.assert_array_equal(first.challengers, again.challengers)
    threaded = _votes(space, cards, heads, "k", threads=2)
    np.testing.assert_array_equal(first.winners, threaded.winners)
    stream = rng_stream("k", "worlds", selection_module.EXCHANGEABLE_STREAM)
    assert stream.random() != rng_stream("k", "worlds", 2).random()


def test_blocks_grouped_by_codes_equal_the_rows_grouped_row_by_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``exchangeable_blocks`` with each row's (kind, RAG label) code compares one row per
    distinct code: the same blocks, in the same order, as comparing every row; codes that
    differ but give equal rows (a RAG label without its contrast column), and more distinct
    rows than ``row_groups`` compares one by one (its sorting branch), included."""
    from gigaevo.memory.v2.causal import BlockDesign
    from gigaevo.memory.v2.causal.selection import CandidateSet

    space, _, heads = _heads(120, 5)
    rng = np.random.default_rng(8)
    kinds, rags = ("insight", "program"), (None, "applicable", "not_applicable", "unassessed")
    cards = CandidateSet.of([
        CandidateCard(f"c{i:04d}", lin, kinds[int(rng.integers(2))], rags[int(rng.integers(4))])
        for i, lin in enumerate(space.lineages)
    ])  # fmt: skip
    z1 = card_rows(space, X, cards)
    assert isinstance(z1, BlockDesign)
    codes = cards.codes()[0]
    assert len(np.unique(codes)) > len(np.unique(z1.lineage_part, axis=0))  # equal rows
    want = exchangeable_blocks(heads, z1)
    got = exchangeable_blocks(heads, z1, codes)
    assert len(want[0]) == 2 and len(got[0]) == len(want[0])  # one block per kind
    for a, b in zip(got[0], want[0], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[1], want[1])
    # 12 codes, 10 distinct rows (codes 10 and 11 repeat rows 3 and 7), in a shuffled order
    many = rng.integers(0, 12, size=len(codes))
    table = rng.normal(size=(12, z1.shared.shape[1] + z1.lineage_part.shape[1]))
    table[10], table[11] = table[3], table[7]
    ps = z1.shared.shape[1]
    wide = BlockDesign(table[many, :ps].copy(), z1.lineage, table[many, ps:].copy(), z1.n_lineages)
    monkeypatch.setattr(selection_module, "EXCHANGEABLE_MIN", 4)  # the 10 rows' groups
    want = exchangeable_blocks(heads, wide)
    got = exchangeable_blocks(heads, wide, many)
    assert len(want[0]) == 10
    for a, b in zip(got[0], want[0], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[1], want[1])


def test_truncated_law_kept_for_subsets_draws_the_per_member_values() -> None:
    """``_TruncatedLaw`` evaluates the CDF at each interval once and draws any subset of the
    intervals from it (the shells and rejection passes): bit for bit the per-member inverse
    CDF of ``_truncated``'s formula on those intervals (both tails, unbounded ends)."""
    from scipy.special import ndtr, ndtri

    from gigaevo.memory.v2.causal.exchangeable import _TruncatedLaw

    rng = np.random.default_rng(5)
    a = rng.normal(0.0, 2.0, 400)
    lo = np.r_[np.minimum(a, a + rng.exponential(1.0, 400)), -np.inf, -np.inf, 3.0, -9.0]
    hi = np.r_[a + rng.exponential(1.0, 400), 0.5, np.inf, np.inf, -8.5]
    rows = rng.integers(0, len(lo), 1000)
    u = 1.0 - rng.random(len(rows))

    lo_m, h = lo[rows], hi[rows]  # the former per-member evaluation
    upper = (lo_m >= 0.0) | np.isposinf(h)
    want = np.empty(len(rows))
    qa = ndtr(-h[upper])
    want[upper] = -ndtri(qa + u[upper] * (ndtr(-lo_m[upper]) - qa))
    qa = ndtr(lo_m[~upper])
    want[~upper] = ndtri(qa + u[~upper] * (ndtr(h[~upper]) - qa))

    law = _TruncatedLaw(lo, hi)
    assert np.array_equal(law.draw(u, rows), want)
    assert np.array_equal(_TruncatedLaw(lo_m, h).draw(u), want)
    assert np.all((want > lo_m) & (want <= h))


def test_level_and_tail_are_the_former_per_step_formulas_bit_for_bit() -> None:
    """``_level``'s bisection takes what does not move with the level once and sets the
    tails of infinite heights directly; ``_tail`` evaluates each interval's form only where
    it is taken (reading the cdfs when given): the same floats as the former
    ``_region_mass(grid, _heights(...))`` steps and the two-sided ``np.where`` (cells
    without room, levels below and above every cell, unbounded heights and tails
    included)."""
    from scipy.special import ndtr

    from gigaevo.memory.v2.causal.exchangeable import (
        LEVEL_STEPS,
        _Grid,
        _heights,
        _law,
        _level,
        _region_mass,
        _tail,
    )

    rng = np.random.default_rng(11)
    for regime, n in (("typical", 900), ("floor", 300), ("clipped", 5000), ("no-lineage", 64)):
        cards, control, bounds = _block(512, n, regime, rng)
        q0 = _q0(control, bounds)
        full = _Grid.build(cards, _law(cards, np.arange(512)), bounds)
        active = np.sort(rng.choice(512, 300, replace=False))
        grid = full.take(active)
        room = grid.room.copy()
        room[::7, -3:] = 0.0  # cells without room (a valid value clipped at G-)
        room[5, 0] = np.nan  # not a cell with room either (as ``room > 0`` reads it)
        grid = _Grid(grid.edges, grid.mass, room)
        for target in (24.0 / n, 0.3, 1.0):
            lo, hi = bounds
            low, high = lo - q0[active], hi - q0[active]
            for _ in range(LEVEL_STEPS):  # the former bisection, step by step
                mid = 0.5 * (low + high)
                big = _region_mass(grid, _heights(cards, grid, active, mid, q0, lo)) > target
                low, high = np.where(big, mid, low), np.where(big, high, mid)
            assert np.array_equal(_level(cards, grid, active, target, q0, bounds), high)
            heights = _heights(cards, grid, active, high, q0, lo)
            tp = np.maximum(heights, rng.normal(0.5, 1.0, heights.shape))
            tp[::5, ::2] = np.inf
            for a, b in ((heights, tp), (np.full_like(tp, -np.inf), tp)):
                want = np.where(a >= 0.0, ndtr(-a) - ndtr(-b), ndtr(b) - ndtr(a))
                assert np.array_equal(_tail(a, b), want, equal_nan=True)
                assert np.array_equal(_tail(a, b, (ndtr(a), ndtr(b))), want, equal_nan=True)


def test_truncated_law_of_one_form_is_the_masked_law() -> None:
    """``_TruncatedLaw`` of intervals all in the upper form, all in the lower form, or mixed
    gives each interval the draw it has alone (its one form taken without masks), for
    every interval and for a subset of rows in any order."""
    from gigaevo.memory.v2.causal.exchangeable import _TruncatedLaw

    rng = np.random.default_rng(21)
    lo = np.r_[-np.inf, -np.inf, -2.0, -0.5, 0.0, 0.3, 1.5, 4.0, -1.0]
    hi = np.r_[-1.0, 0.4, -1.0, 2.0, 0.7, np.inf, 3.0, np.inf, np.inf]
    u = 1.0 - rng.random(len(lo))
    alone = np.array([_TruncatedLaw(lo[i : i + 1], hi[i : i + 1]).draw(u[i : i + 1])[0]
                      for i in range(len(lo))])  # fmt: skip
    mixed = _TruncatedLaw(lo, hi)
    assert 0 < np.count_nonzero(mixed.upper) < len(lo)
    np.testing.assert_array_equal(mixed.draw(u), alone)
    rows = np.array([7, 0, 3, 3, 8])
    np.testing.assert_array_equal(mixed.draw(u[rows], rows), alone[rows])
    for part in (mixed.upper, ~mixed.upper):  # one form each
        law = _TruncatedLaw(lo[part], hi[part])
        np.testing.assert_array_equal(law.draw(u[part]), alone[part])
        assert np.all((law.draw(u[part]) > lo[part]) & (law.draw(u[part]) <= hi[part]))
