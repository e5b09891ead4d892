"""One decision's parts that the end-to-end tests leave loose: the abstention reasons, the
delayed-lineage head's lift in the proposal, the RAG label in the proposed card's summary,
and the summary's own random stream.

The heads are fitted on rows made for the purpose (a lineage that lifts later gains by
0.8, a RAG label worth +-0.3), so the right answer is known in sign and size.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gigaevo.memory.v2.causal import (
    BayesianLinearHead,
    CandidateCard,
    DesignSpace,
    LogisticLaplaceHead,
    select,
)
from gigaevo.memory.v2.causal.selection import SelectionConfig

X = np.array([1.0, 0.2, 0.5])
BOUNDS = (-1.0, 1.0)


def _contexts(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack([np.ones(n), rng.uniform(-1, 1, n), rng.uniform(0, 1, n)])


def _cold_invalidity(space: DesignSpace) -> LogisticLaplaceHead:
    mu, v = space.invalidity_prior()
    return LogisticLaplaceHead(mu, v).fit(np.zeros((0, space.size)), np.zeros(0))


def _cold_immediate(space: DesignSpace) -> BayesianLinearHead:
    return BayesianLinearHead(space.utility_prior_variance()).fit(
        np.zeros((0, space.size)), np.zeros(0)
    )


def test_each_abstention_names_its_reason() -> None:
    space = DesignSpace(3, lineages=("a",), kind_contrast=False)
    cards = [CandidateCard("a", "a")]
    ok, inv = _cold_immediate(space), _cold_invalidity(space)
    xs = _contexts(60, 1)
    z = np.array([space.row(x, 0) for x in xs])
    boundary = BayesianLinearHead(space.utility_prior_variance(), residual_sd_bounds=(0.01, 0.02))
    boundary.fit(z, 0.3 * np.random.default_rng(2).standard_normal(60))
    sel = select("k", space, X, BOUNDS, 1.0, cards, boundary, inv)
    assert sel.abstain_reason == "immediate head not OK or at boundary"
    assert sel.proposal.rho0 == 1.0 and sel.draw.proposed is None
    mu, v = space.invalidity_prior()
    failed_v = np.full(len(v), 1e-8)
    failed_v[space.lineage_slice("a")] = 1e8  # a block without rows: cond(F) = 1e16
    failed = LogisticLaplaceHead(mu, failed_v).fit(z, np.zeros(60))
    assert not failed.ok_
    sel = select("k", space, X, BOUNDS, 1.0, cards, ok, failed)
    assert sel.abstain_reason == f"invalidity head failed: {failed.failure_}"
    assert select("k", space, X, BOUNDS, 1.0, [], ok, inv).abstain_reason == "no candidates"
    # a card whose invalid rate is known to be far above the control's: nothing is safe
    treated = np.array([space.row(x, 1, lineage="a") for x in xs])
    d = np.r_[np.zeros(60), np.ones(60)]
    harmful = LogisticLaplaceHead(mu, v).fit(np.vstack([z, treated]), d)
    sel = select("k", space, X, BOUNDS, 1.0, cards, ok, harmful)
    assert sel.abstain_reason == "no safe card" and not sel.acceptance["a"].admitted()


def test_the_delayed_lineage_head_lifts_its_card() -> None:
    """Cold immediate and invalidity heads, the two cards symmetric under them; the lineage
    head has seen card 'lifted' followed by a lineage gain of 0.8 and card 'flat' by 0:
    in nearly every world 'lifted' wins."""
    space = DesignSpace(3, lineages=("flat", "lifted"), kind_contrast=False)
    rng = np.random.default_rng(3)
    xs = _contexts(90, 4)
    rows, ys = [], []
    for i, x in enumerate(xs):
        card = (None, "flat", "lifted")[i % 3]
        rows.append(space.row(x, 0) if card is None else space.row(x, 1, lineage=card))
        ys.append((0.8 if card == "lifted" else 0.0) + 0.05 * rng.standard_normal())
    lineage = BayesianLinearHead(space.utility_prior_variance()).fit(np.array(rows), np.array(ys))
    cards = [CandidateCard("flat", "flat"), CandidateCard("lifted", "lifted")]
    imm, inv = _cold_immediate(space), _cold_invalidity(space)
    sel = select("d", space, X, BOUNDS, 1.0, cards, imm, inv, lineage=lineage)
    rho = dict(zip(sel.proposal.card_ids, sel.proposal.rho, strict=True))
    assert rho["lifted"] > 0.7
    assert rho["flat"] < 0.2
    without = select("d", space, X, BOUNDS, 1.0, cards, imm, inv)
    rho = dict(zip(without.proposal.card_ids, without.proposal.rho, strict=True))
    assert rho["lifted"] < 0.5 and rho["flat"] > 0.2  # without it the two are alike


@pytest.fixture(scope="module")
def rag_world():
    """One lineage, RAG contrast on: treated rows labelled applicable gained 0.3, those
    labelled not applicable lost 0.3, controls 0."""
    space = DesignSpace(3, lineages=("c",), kind_contrast=False, rag_contrast=True)
    rng = np.random.default_rng(5)
    rows, ys = [], []
    for i, x in enumerate(_contexts(120, 6)):
        if i % 3 == 0:
            rows.append(space.row(x, 0))
            ys.append(0.0)
        else:
            rag = ("applicable", "not_applicable")[i % 3 - 1]
            rows.append(space.row(x, 1, lineage="c", rag=rag))
            ys.append(0.3 if rag == "applicable" else -0.3)
    y = np.array(ys) + 0.03 * rng.standard_normal(len(ys))
    imm = BayesianLinearHead(space.utility_prior_variance()).fit(np.array(rows), y)
    return space, imm, _cold_invalidity(space)


@pytest.mark.parametrize(("rag", "sign"), [("applicable", 1.0), ("not_applicable", -1.0)])
def test_the_summary_uses_the_cards_rag_label(rag_world, rag: str, sign: float) -> None:
    space, imm, inv = rag_world
    cfg = SelectionConfig(epsilon=1.0, summary_draws=2048, world_draws=64)  # always proposes
    sel = select("s", space, X, BOUNDS, 1.0, [CandidateCard("c", "c", rag=rag)], imm, inv, cfg)
    assert sel.draw.proposed == "c" and sel.summary is not None
    # effect = (1 - p1) v1 - (1 - p0) v0 with v1 - v0 = +-0.3 and p about 5 %
    assert sign * sel.summary.effect_mean == pytest.approx(0.285, abs=0.05)


def test_each_decision_draws_its_own_summary(rag_world) -> None:
    space, imm, inv = rag_world
    cfg = SelectionConfig(epsilon=1.0, summary_draws=256, world_draws=64)
    card = [CandidateCard("c", "c", rag="applicable")]
    one = select("first", space, X, BOUNDS, 1.0, card, imm, inv, cfg).summary
    again = select("first", space, X, BOUNDS, 1.0, card, imm, inv, cfg).summary
    other = select("second", space, X, BOUNDS, 1.0, card, imm, inv, cfg).summary
    assert one is not None and other is not None
    assert one == again  # the same decision key reproduces its summary
    assert one.effect_mean != other.effect_mean  # another decision, other random numbers
    assert one.effect_mean == pytest.approx(other.effect_mean, abs=0.05)  # the same law


def _five_lineages():
    """Five lineages with rows: e helps, b and d are neutral, a lost, c is unsafe (its rows
    all invalid against valid controls)."""
    names = ("a", "b", "c", "d", "e")
    space = DesignSpace(3, lineages=names, kind_contrast=False)
    rng = np.random.default_rng(9)
    xs = _contexts(300, 10)
    rows, ys, ds = [], [], []
    effect = {"a": -0.2, "b": 0.0, "c": 0.0, "d": 0.0, "e": 0.25}
    for i, x in enumerate(xs):
        lin = None if i % 6 == 0 else names[i % 5]
        rows.append(space.row(x, 0) if lin is None else space.row(x, 1, lineage=lin))
        ys.append(0.0 if lin is None else effect[lin])
        ds.append(1.0 if lin == "c" else 0.0)
    z, d = np.array(rows), np.array(ds)
    y = np.array(ys) + 0.05 * rng.standard_normal(len(ys))
    imm = BayesianLinearHead(space.utility_prior_variance()).fit(z[d == 0], y[d == 0])
    mu, v = space.invalidity_prior()
    return space, imm, LogisticLaplaceHead(mu, v).fit(z, d), names


def _same(a: object, b: object) -> None:
    """Dataclasses equal field by field (floats to 1e-12: batched products may round the
    last bit differently in another order)."""
    assert type(a) is type(b)
    if a is None:
        return
    for f in dataclasses.fields(a):  # type: ignore[arg-type]
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-15)
        elif isinstance(x, float):
            assert x == pytest.approx(y, rel=1e-12, abs=1e-15), f.name
        else:
            assert x == y, f.name


def test_a_decision_does_not_depend_on_the_order_of_its_candidates() -> None:
    """Candidates handed over in any order give the decision of the ascending order: the
    same proposal, draw, acceptance and summary, and the same logged candidate columns."""
    space, imm, inv, names = _five_lineages()
    cfg = SelectionConfig(epsilon=0.3, world_draws=256, summary_draws=64)
    ascending = [CandidateCard(n, n) for n in names]
    want = select("order", space, X, BOUNDS, 1.0, ascending, imm, inv, cfg)
    assert "c" in want.acceptance and not want.acceptance["c"].admitted()
    assert want.proposal.card_ids == ("a", "b", "d", "e")
    ids, at = want.candidate_columns()
    assert ids == list(names) and at.tolist() == [0, 1, -1, 2, 3]
    for order in ((4, 2, 0, 3, 1), (1, 0, 4, 3, 2), (2, 4, 1, 0, 3)):
        got = select("order", space, X, BOUNDS, 1.0, [ascending[i] for i in order], imm, inv, cfg)
        for part in ("proposal", "draw", "summary"):
            _same(getattr(got, part), getattr(want, part))
        assert sorted(got.acceptance) == sorted(want.acceptance) == sorted(names)
        for k in names:
            _same(got.acceptance[k], want.acceptance[k])
        cols = got.candidate_columns()
        assert cols[0] == ids and cols[1].tolist() == at.tolist()


def test_an_abstention_logs_every_candidate_as_not_proposable() -> None:
    space, imm, _, names = _five_lineages()
    mu, v = space.invalidity_prior()
    z = np.array([space.row(x, 1, lineage=n) for x in _contexts(40, 3) for n in names])
    unsafe = LogisticLaplaceHead(mu, v).fit(
        np.vstack([np.array([space.row(x, 0) for x in _contexts(40, 4)]), z]),
        np.r_[np.zeros(40), np.ones(len(z))],
    )
    cards = [CandidateCard(n, n) for n in reversed(names)]
    sel = select("none", space, X, BOUNDS, 1.0, cards, imm, unsafe)
    assert sel.abstain_reason == "no safe card" and sel.proposal.card_ids == ()
    ids, at = sel.candidate_columns()
    assert ids == sorted(names) and at.tolist() == [-1] * len(names)
    assert at.dtype == np.intp


def _equal(a: object, b: object) -> None:
    if isinstance(a, (list, tuple)):
        assert isinstance(b, type(a)) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _equal(x, y)
    else:
        np.testing.assert_array_equal(a, b)


def test_threaded_world_draws_are_the_serial_ones() -> None:
    """``draw_threads`` (2 by default) draws the heads at once on a thread pool above
    THREADED_DRAWS latents per head: the same numbers as one head after another."""
    from gigaevo.memory.v2.causal.selection import (
        THREADED_DRAWS,
        card_rows,
        world_draws,
        world_latents,
    )
    from tests.memory.causal.test_world_fast_paths import _heads

    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    imm, inv, _ = _heads(space, 2)
    heads = (imm, inv)
    ctx = np.r_[1.0, 0.2, -0.4, 0.1]
    names = [f"k{i}" for i in range(70)]
    cards = [CandidateCard(n, space.lineages[i % 20], "insight") for i, n in enumerate(names)]
    z1 = card_rows(space, ctx, cards)
    z0 = space.row(ctx, 0)
    n = 512
    assert len(names) * n >= THREADED_DRAWS
    for draw in (world_draws, world_latents):
        serial = draw("threads", heads, z0, z1, n, 1)
        _equal(draw("threads", heads, z0, z1, n, 2), serial)
        _equal(draw("threads", heads, z0, z1, n), serial)
